/* locks2.c — POSIX record locks, OFD locks, flock and lockf across
 * processes: range splitting and merging, whence and negative lengths,
 * F_GETLK's holder, upgrades and flock conversions, what fork and exec do
 * to each kind, release when the last descriptor of a description closes
 * anywhere, EDEADLK, and EINTR versus SA_RESTART in blocking waits.
 *
 * Usage: locks2 DIR.  Output must be the same on tmpfs and under kura: no
 * pids are printed, processes are named.  Processes synchronise through
 * pipes only; alarm() bounds every process in case a wait never ends. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *base;
static pid_t main_pid; /* the process the peers and children came from */
static char *self_exe;

static const char *P(const char *name)
{
	static char buf[4][4096];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", base, name);
	return buf[k];
}

static const char *res(long r, int e)
{
	static char buf[4][64];
	static int k;
	k = (k + 1) % 4;
	if (r < 0)
		snprintf(buf[k], sizeof buf[k], "-1 %s", strerrorname_np(e));
	else
		snprintf(buf[k], sizeof buf[k], "%ld", r);
	return buf[k];
}

#define SHOW(label, call)                                        \
	do {                                                     \
		errno = 0;                                       \
		long r_ = (long)(call);                          \
		printf("%s: %s\n", label, res(r_, errno));       \
	} while (0)

static void xwrite(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		_exit(90);
}

static char xread(int fd)
{
	char c = 0;
	if (read(fd, &c, 1) != 1)
		return 0;
	return c;
}

static void readline(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	while (n + 1 < cap) {
		char c;
		if (read(fd, &c, 1) != 1)
			break;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = 0;
}

/* ---- names for pids ---------------------------------------------------- */

static struct {
	pid_t pid;
	const char *name;
} names[16];
static int nnames;

static void name_pid(pid_t pid, const char *name)
{
	names[nnames].pid = pid;
	names[nnames++].name = name;
}

static const char *pid_name(pid_t pid)
{
	if (pid == -1)
		return "-1";
	if (pid == 0)
		return "0";
	if (pid == getpid())
		return "self";
	if (pid == main_pid)
		return "main";
	for (int i = nnames - 1; i >= 0; i--)
		if (names[i].pid == pid)
			return names[i].name;
	return "unknown";
}

static const char *fl_str(const struct flock *f)
{
	static char buf[4][128];
	static int k;
	k = (k + 1) % 4;
	if (f->l_type == F_UNLCK)
		snprintf(buf[k], sizeof buf[k], "unlocked");
	else
		snprintf(buf[k], sizeof buf[k], "%s start %ld len %ld pid %s", f->l_type == F_WRLCK ? "write" : "read",
			 (long)f->l_start, (long)f->l_len, pid_name(f->l_pid));
	return buf[k];
}

static int lk(int fd, int cmd, int type, int whence, long start, long len)
{
	struct flock f = { .l_type = (short)type, .l_whence = (short)whence, .l_start = start, .l_len = len };
	return fcntl(fd, cmd, &f);
}

static const char *getlk(int fd, int cmd, int type, long start, long len)
{
	struct flock f = { .l_type = (short)type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	if (fcntl(fd, cmd, &f) < 0)
		return res(-1, errno);
	return fl_str(&f);
}

/* ---- peers: processes that run lock commands sent over a pipe ----------- */

struct peer {
	pid_t pid;
	int to, from;
	const char *name;
};

static int type_of(char c)
{
	return c == 'r' ? F_RDLCK : c == 'w' ? F_WRLCK : F_UNLCK;
}

static int cmd_of(char c)
{
	switch (c) {
	case 'G': return F_GETLK;
	case 'S': return F_SETLK;
	case 'W': return F_SETLKW;
	case 'g': return F_OFD_GETLK;
	case 's': return F_OFD_SETLK;
	default: return F_OFD_SETLKW;
	}
}

/* Commands, one a line, one reply line each:
 *   o I NAME      open DIR/NAME read-write as descriptor slot I
 *   c I           close slot I
 *   l I C T S L   fcntl C (G S W, g s w for OFD) of type T (r w u), SEEK_SET
 *   n NAME PID    name a pid in replies
 *   q             exit */
static void peer_loop(int in, int out)
{
	int fds[8] = { -1, -1, -1, -1, -1, -1, -1, -1 };
	char line[512], reply[512];
	for (;;) {
		readline(in, line, sizeof line);
		int i;
		char c, t, name[256];
		long s, l, pid;
		if (line[0] == 'q' || !line[0])
			_exit(0);
		if (sscanf(line, "o %d %255s", &i, name) == 2) {
			fds[i] = open(P(name), O_RDWR | O_CREAT, 0644);
			snprintf(reply, sizeof reply, "%s", res(fds[i] < 0 ? -1 : 0, errno));
		} else if (sscanf(line, "c %d", &i) == 1) {
			errno = 0;
			int r = close(fds[i]);
			snprintf(reply, sizeof reply, "%s", res(r, errno));
		} else if (sscanf(line, "n %255s %ld", name, &pid) == 2) {
			name_pid((pid_t)pid, strdup(name));
			snprintf(reply, sizeof reply, "0");
		} else if (sscanf(line, "l %d %c %c %ld %ld", &i, &c, &t, &s, &l) == 5) {
			int cmd = cmd_of(c);
			if (cmd == F_GETLK || cmd == F_OFD_GETLK) {
				snprintf(reply, sizeof reply, "%s", getlk(fds[i], cmd, type_of(t), s, l));
			} else {
				errno = 0;
				int r = lk(fds[i], cmd, type_of(t), SEEK_SET, s, l);
				snprintf(reply, sizeof reply, "%s", res(r, errno));
			}
		} else {
			snprintf(reply, sizeof reply, "bad command");
		}
		strcat(reply, "\n");
		xwrite(out, reply, strlen(reply));
	}
}

static struct peer peer_start(const char *name)
{
	int a[2], b[2];
	if (pipe(a) || pipe(b))
		exit(2);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(60);
		close(a[1]);
		close(b[0]);
		peer_loop(a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	name_pid(pid, name);
	return (struct peer){ pid, a[1], b[0], name };
}

static void send_cmd(struct peer *p, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	xwrite(p->to, line, strlen(line));
}

static const char *get_reply(struct peer *p)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	readline(p->from, buf[k], sizeof buf[k]);
	return buf[k];
}

/* Sends one command and prints its reply. */
static void ask(struct peer *p, const char *label, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	send_cmd(p, "%s", line);
	printf("%s %s: %s\n", p->name, label, get_reply(p));
}

static struct peer A, B;

/* ---- 1. ranges ----------------------------------------------------------- */

static void ranges(void)
{
	printf("== ranges\n");
	int fd = open(P("r"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	char buf[100];
	memset(buf, 'x', sizeof buf);
	if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
		printf("write failed\n");
	ask(&A, "open", "o 0 r");
	SHOW("lock 0+10", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10));
	SHOW("lock 10+10", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 10, 10));
	ask(&A, "getlk 0+100 (merged)", "l 0 G w 0 100");
	SHOW("unlock middle 5+10", lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 5, 10));
	ask(&A, "getlk 0+10", "l 0 G w 0 10");
	ask(&A, "getlk 5+10", "l 0 G w 5 10");
	ask(&A, "getlk 10+90", "l 0 G w 10 90");
	ask(&A, "setlk 5+10", "l 0 S w 5 10");
	ask(&A, "unlock own 5+10", "l 0 S u 5 10");
	SHOW("read lock 50 to eof (len 0)", lk(fd, F_SETLK, F_RDLCK, SEEK_SET, 50, 0));
	ask(&A, "getlk 1000+1", "l 0 G w 1000 1");
	ask(&A, "read lock 2000+1 shares", "l 0 S r 2000 1");
	ask(&A, "unlock", "l 0 S u 0 0");
	SHOW("negative len: 40-10", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 40, -10));
	ask(&A, "getlk 30+1", "l 0 G w 30 1");
	ask(&A, "getlk 40+1", "l 0 G r 40 1");
	lseek(fd, 25, SEEK_SET);
	SHOW("SEEK_CUR -2+2", lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -2, 2));
	ask(&A, "getlk 21+3", "l 0 G r 21 3");
	SHOW("SEEK_END -5+3", lk(fd, F_SETLK, F_WRLCK, SEEK_END, -5, 3));
	ask(&A, "getlk 90+10", "l 0 G w 90 10");
	ask(&A, "getlk read 96+1", "l 0 G r 96 1");
	ask(&A, "getlk read 98+1", "l 0 G r 98 1");
	SHOW("start before 0", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, -1, 1));
	SHOW("negative len before 0", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 5, -10));
	SHOW("SEEK_END before 0", lk(fd, F_SETLK, F_WRLCK, SEEK_END, -101, 1));
	SHOW("bad whence", lk(fd, F_SETLK, F_WRLCK, 7, 0, 1));
	SHOW("bad type", lk(fd, F_SETLK, 9, SEEK_SET, 0, 1));
	struct flock o = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1, .l_pid = 1 };
	SHOW("ofd with l_pid", fcntl(fd, F_OFD_SETLK, &o));
	int ro = open(P("r"), O_RDONLY);
	SHOW("write lock on O_RDONLY", lk(ro, F_SETLK, F_WRLCK, SEEK_SET, 500, 1));
	SHOW("read lock on O_RDONLY", lk(ro, F_SETLK, F_RDLCK, SEEK_SET, 500, 1));
	int wo = open(P("r"), O_WRONLY);
	SHOW("read lock on O_WRONLY", lk(wo, F_SETLK, F_RDLCK, SEEK_SET, 500, 1));
	printf("own getlk: %s\n", getlk(fd, F_GETLK, F_WRLCK, 0, 0));

	/* Upgrade read -> write: refused while another reader holds it. */
	ask(&A, "read 200+10", "l 0 S r 200 10");
	SHOW("read 200+10", lk(fd, F_SETLK, F_RDLCK, SEEK_SET, 200, 10));
	SHOW("upgrade to write", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 200, 10));
	printf("getlk 200+1: %s\n", getlk(wo, F_GETLK, F_WRLCK, 200, 1) /* own: not a conflict */);
	ask(&A, "unlock 200+10", "l 0 S u 200 10");
	SHOW("upgrade to write", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 200, 10));
	ask(&A, "getlk read 205+1", "l 0 G r 205 1");
	SHOW("downgrade 202+2", lk(fd, F_SETLK, F_RDLCK, SEEK_SET, 202, 2));
	ask(&A, "getlk read 200+10", "l 0 G r 200 10");
	ask(&A, "getlk write 202+2", "l 0 G w 202 2");
	ask(&A, "getlk read 204+6", "l 0 G r 204 6");

	/* Unlocking a range another process holds changes nothing. */
	ask(&A, "lock 300+10", "l 0 S w 300 10");
	SHOW("unlock what A holds", lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 300, 10));
	printf("getlk 300+1: %s\n", getlk(fd, F_GETLK, F_RDLCK, 300, 1));
	ask(&A, "unlock", "l 0 S u 0 0");

	/* Closing any descriptor of the file drops all the process's locks. */
	close(ro);
	ask(&A, "getlk 0+0 after closing another fd", "l 0 G w 0 0");
	SHOW("lock again", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 1));
	ask(&A, "getlk", "l 0 G w 0 0");
	close(wo);
	ask(&A, "getlk", "l 0 G w 0 0");
	ask(&A, "close", "c 0");
	close(fd);
}

/* ---- 2. lockf ------------------------------------------------------------- */

static void lockf_section(void)
{
	printf("== lockf\n");
	int fd = open(P("lf"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	ask(&A, "open", "o 0 lf");
	lseek(fd, 10, SEEK_SET);
	SHOW("F_LOCK 5 at 10", lockf(fd, F_LOCK, 5));
	ask(&A, "getlk", "l 0 G w 0 100");
	lseek(fd, 12, SEEK_SET);
	SHOW("F_ULOCK 0 at 12", lockf(fd, F_ULOCK, 0));
	ask(&A, "getlk", "l 0 G w 0 100");
	SHOW("F_TLOCK -5 at 12", lockf(fd, F_TLOCK, -5));
	ask(&A, "getlk", "l 0 G w 0 100");
	ask(&A, "setlk 11+1", "l 0 S w 11 1");
	ask(&A, "lock 50+1", "l 0 S w 50 1");
	lseek(fd, 50, SEEK_SET);
	SHOW("F_TEST at 50", lockf(fd, F_TEST, 1));
	SHOW("F_TLOCK at 50", lockf(fd, F_TLOCK, 1));
	SHOW("F_TEST at 10 (own)", (lseek(fd, 10, SEEK_SET), lockf(fd, F_TEST, 1)));
	ask(&A, "close", "c 0");
	close(fd);
}

/* ---- 3. flock and OFD ------------------------------------------------------ */

static void flock_section(void)
{
	printf("== flock\n");
	int a = open(P("conv"), O_RDWR | O_CREAT, 0644), b = open(P("conv"), O_RDWR);
	SHOW("a ex", flock(a, LOCK_EX | LOCK_NB));
	SHOW("b sh", flock(b, LOCK_SH | LOCK_NB));
	SHOW("a to sh", flock(a, LOCK_SH | LOCK_NB));
	SHOW("b sh", flock(b, LOCK_SH | LOCK_NB));
	SHOW("a to ex (b holds sh)", flock(a, LOCK_EX | LOCK_NB));
	/* Linux drops the old lock before trying the new one. */
	SHOW("b to ex (a lost its lock)", flock(b, LOCK_EX | LOCK_NB));
	SHOW("a sh", flock(a, LOCK_SH | LOCK_NB));
	SHOW("b relock ex", flock(b, LOCK_EX | LOCK_NB));
	SHOW("fcntl lock beside flock", lk(a, F_SETLK, F_WRLCK, SEEK_SET, 0, 0));
	SHOW("ofd lock beside flock", lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0));
	SHOW("b unlock", flock(b, LOCK_UN));
	SHOW("b unlock again", flock(b, LOCK_UN));
	SHOW("bad op", flock(b, LOCK_SH | LOCK_EX));
	close(a);
	close(b);

	printf("== ofd\n");
	a = open(P("mix"), O_RDWR | O_CREAT, 0644);
	b = open(P("mix"), O_RDWR);
	SHOW("a ofd 0+10", lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 10));
	SHOW("a ofd 10+10 (merges)", lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 10, 10));
	SHOW("b posix 5+1", lk(b, F_SETLK, F_WRLCK, SEEK_SET, 5, 1));
	printf("b getlk: %s\n", getlk(b, F_GETLK, F_WRLCK, 5, 1));
	printf("b ofd getlk: %s\n", getlk(b, F_OFD_GETLK, F_RDLCK, 0, 0));
	SHOW("b ofd 19+1", lk(b, F_OFD_SETLK, F_RDLCK, SEEK_SET, 19, 1));
	SHOW("b posix 20+1", lk(b, F_SETLK, F_WRLCK, SEEK_SET, 20, 1));
	printf("a ofd getlk: %s\n", getlk(a, F_OFD_GETLK, F_WRLCK, 0, 0));
	ask(&A, "open", "o 0 mix");
	ask(&A, "getlk", "l 0 G r 0 0");
	ask(&A, "ofd getlk 20+1", "l 0 g r 20 5");
	SHOW("a ofd unlock 0+5", lk(a, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 5));
	ask(&A, "ofd getlk 0+5", "l 0 g w 0 5");
	ask(&A, "ofd lock 0+5", "l 0 s w 0 5");
	ask(&A, "close", "c 0");
	/* Closing another descriptor of the file keeps OFD locks. */
	close(b);
	printf("a ofd lock after close of b: %s\n", getlk(open(P("mix"), O_RDWR), F_OFD_GETLK, F_WRLCK, 0, 0));
	close(a);
}

/* ---- 4. fork ------------------------------------------------------------------ */

static void fork_section(void)
{
	printf("== fork\n");
	int fd = open(P("inh"), O_RDWR | O_CREAT, 0644);
	SHOW("posix 0+1", lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 1));
	SHOW("ofd 10+1", lk(fd, F_OFD_SETLK, F_WRLCK, SEEK_SET, 10, 1));
	SHOW("flock ex", flock(fd, LOCK_EX | LOCK_NB));
	int up[2];
	if (pipe(up))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		char msg[1024];
		int n = 0, r;
		errno = 0;
		r = lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 1);
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child posix 0+1 on inherited fd: %s\n", res(r, errno));
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child getlk: %s\n", getlk(fd, F_GETLK, F_RDLCK, 0, 1));
		errno = 0;
		r = lk(fd, F_OFD_SETLK, F_WRLCK, SEEK_SET, 10, 1);
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child ofd 10+1 (same description): %s\n", res(r, errno));
		errno = 0;
		r = flock(fd, LOCK_EX | LOCK_NB);
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child flock ex (same description): %s\n", res(r, errno));
		int own = open(P("inh"), O_RDWR);
		errno = 0;
		r = flock(own, LOCK_EX | LOCK_NB);
		n += snprintf(msg + n, sizeof msg - (size_t)n, "child flock on own open: %s\n", res(r, errno));
		xwrite(up[1], msg, (size_t)n);
		_exit(0);
	}
	close(up[1]);
	char buf[1024];
	ssize_t n;
	while ((n = read(up[0], buf, sizeof buf)) > 0)
		fwrite(buf, 1, (size_t)n, stdout);
	close(up[0]);
	waitpid(c, NULL, 0);
	close(fd);
}

/* ---- 5. description lifetime ------------------------------------------------- */

/* The parent closes its descriptor of a locked description while a child
 * still holds one: the lock stays until the child closes. */
static void shared_close(int ofd)
{
	const char *name = ofd ? "d-ofd" : "d-flock";
	int a = open(P(name), O_RDWR | O_CREAT, 0644);
	if (ofd)
		SHOW("ofd lock", lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0));
	else
		SHOW("flock ex", flock(a, LOCK_EX | LOCK_NB));
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		xread(down[0]);
		close(a);
		xwrite(up[1], "y", 1);
		xread(down[0]);
		_exit(0);
	}
	close(a);
	int b = open(P(name), O_RDWR);
	if (ofd) {
		SHOW("other open after parent's close", lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1));
		printf("ofd getlk: %s\n", getlk(b, F_OFD_GETLK, F_RDLCK, 0, 0));
	} else {
		SHOW("other open after parent's close", flock(b, LOCK_EX | LOCK_NB));
	}
	xwrite(down[1], "x", 1);
	xread(up[0]);
	if (ofd)
		SHOW("after the child's close too", lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1));
	else
		SHOW("after the child's close too", flock(b, LOCK_EX | LOCK_NB));
	xwrite(down[1], "z", 1);
	waitpid(c, NULL, 0);
	close(b);
	close(down[0]);
	close(down[1]);
	close(up[0]);
	close(up[1]);
}

/* A child locks the shared description and exits (as flock(1) does): the
 * lock belongs to the description, which the parent still holds. */
static void locker_exits(int ofd)
{
	const char *name = ofd ? "e-ofd" : "e-flock";
	int a = open(P(name), O_RDWR | O_CREAT, 0644);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		int r = ofd ? lk(a, F_OFD_SETLKW, F_WRLCK, SEEK_SET, 0, 0) : flock(a, LOCK_EX);
		_exit(r == 0 ? 0 : 1);
	}
	int st;
	waitpid(c, &st, 0);
	printf("child locked and exited: %d\n", WEXITSTATUS(st));
	int b = open(P(name), O_RDWR);
	if (ofd)
		SHOW("other open", lk(b, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 1));
	else
		SHOW("other open", flock(b, LOCK_SH | LOCK_NB));
	SHOW("parent's descriptor unlocks", ofd ? lk(a, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0) : flock(a, LOCK_UN));
	if (ofd)
		SHOW("other open", lk(b, F_OFD_SETLK, F_RDLCK, SEEK_SET, 0, 1));
	else
		SHOW("other open", flock(b, LOCK_SH | LOCK_NB));
	close(a);
	close(b);
}

/* The description crosses exec in a child; the parent's close leaves it
 * locked until the new image closes it. */
static void across_exec(void)
{
	int a = open(P("x-ofd"), O_RDWR | O_CREAT, 0644);
	SHOW("ofd lock", lk(a, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 0));
	SHOW("flock", flock(a, LOCK_SH | LOCK_NB));
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		char fa[16], fi[16], fo[16];
		snprintf(fa, sizeof fa, "%d", a);
		snprintf(fi, sizeof fi, "%d", down[0]);
		snprintf(fo, sizeof fo, "%d", up[1]);
		execl(self_exe, self_exe, base, "exec-holder", fa, fi, fo, (char *)NULL);
		_exit(127);
	}
	printf("exec'd child: %c\n", xread(up[0]));
	close(a);
	int b = open(P("x-ofd"), O_RDWR);
	SHOW("other open, ofd", lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1));
	SHOW("other open, flock ex", flock(b, LOCK_EX | LOCK_NB));
	xwrite(down[1], "x", 1);
	printf("exec'd child: %c\n", xread(up[0]));
	SHOW("other open, ofd", lk(b, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1));
	SHOW("other open, flock ex", flock(b, LOCK_EX | LOCK_NB));
	xwrite(down[1], "z", 1);
	waitpid(c, NULL, 0);
	close(b);
}

static int exec_holder(char **argv)
{
	int a = atoi(argv[3]), in = atoi(argv[4]), out = atoi(argv[5]);
	alarm(60);
	xwrite(out, "r", 1);
	xread(in);
	char c = close(a) == 0 ? 'y' : 'n';
	xwrite(out, &c, 1);
	xread(in);
	return 0;
}

/* POSIX locks stay with the process across exec, and any close in the new
 * image drops them. */
static void posix_exec(void)
{
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		int fd = open(P("x-posix"), O_RDWR | O_CREAT, 0644);
		if (lk(fd, F_SETLK, F_WRLCK, SEEK_SET, 0, 10) < 0)
			_exit(3);
		char fi[16], fo[16];
		snprintf(fi, sizeof fi, "%d", down[0]);
		snprintf(fo, sizeof fo, "%d", up[1]);
		execl(self_exe, self_exe, base, "posix-exec", fi, fo, (char *)NULL);
		_exit(127);
	}
	name_pid(c, "exec'd child");
	printf("exec'd child: %c\n", xread(up[0]));
	int fd = open(P("x-posix"), O_RDWR);
	printf("getlk: %s\n", getlk(fd, F_GETLK, F_RDLCK, 0, 0));
	xwrite(down[1], "x", 1);
	printf("exec'd child: %c\n", xread(up[0]));
	printf("getlk after its close: %s\n", getlk(fd, F_GETLK, F_RDLCK, 0, 0));
	xwrite(down[1], "z", 1);
	waitpid(c, NULL, 0);
	close(fd);
}

static int posix_exec_child(char **argv)
{
	int in = atoi(argv[3]), out = atoi(argv[4]);
	alarm(60);
	xwrite(out, "r", 1);
	xread(in);
	int fd = open(P("x-posix"), O_RDONLY);
	char c = fd >= 0 && close(fd) == 0 ? 'y' : 'n';
	xwrite(out, &c, 1);
	xread(in);
	return 0;
}

/* ---- 6. deadlock ------------------------------------------------------------ */

static void deadlock_section(void)
{
	printf("== deadlock\n");
	ask(&A, "open", "o 0 dl");
	ask(&B, "open", "o 0 dl");
	ask(&A, "lock 0+1", "l 0 S w 0 1");
	ask(&B, "lock 1+1", "l 0 S w 1 1");
	/* Whichever request closes the cycle fails; the other waits. */
	send_cmd(&A, "l 0 W w 1 1");
	send_cmd(&B, "l 0 W w 0 1");
	struct pollfd p[2] = { { A.from, POLLIN, 0 }, { B.from, POLLIN, 0 } };
	while (poll(p, 2, -1) < 1 || !(p[0].revents | p[1].revents))
		;
	struct peer *first = p[0].revents ? &A : &B, *second = first == &A ? &B : &A;
	printf("first answer: %s\n", get_reply(first));
	send_cmd(first, "l 0 S u 0 0");
	printf("its unlock: %s\n", get_reply(first));
	printf("the other's wait: %s\n", get_reply(second));
	ask(&A, "unlock", "l 0 S u 0 0");
	ask(&B, "unlock", "l 0 S u 0 0");
	/* OFD waits are not checked for deadlock (Linux does not either); a
	 * chain through a process that is not waiting is no deadlock. */
	ask(&A, "lock 0+1", "l 0 S w 0 1");
	ask(&B, "lock 1+1", "l 0 S w 1 1");
	send_cmd(&A, "l 0 W w 1 1");
	ask(&B, "unlock 1+1", "l 0 S u 1 1");
	printf("A's wait: %s\n", get_reply(&A));
	ask(&A, "unlock", "l 0 S u 0 0");
	ask(&A, "close", "c 0");
	ask(&B, "close", "c 0");
}

/* Three processes in a cycle: the request that closes it fails. */
static struct peer C;

static void cycle3(void)
{
	struct peer *ps[3] = { &A, &B, &C };
	for (int i = 0; i < 3; i++) {
		ask(ps[i], "open", "o 0 dl3");
		ask(ps[i], "lock own byte", "l 0 S w %d 1", i);
	}
	for (int i = 0; i < 3; i++)
		send_cmd(ps[i], "l 0 W w %d 1", (i + 1) % 3);
	for (int left = 3; left > 0; left--) {
		struct pollfd p[3];
		int n = 0;
		struct peer *which[3];
		for (int i = 0; i < 3; i++)
			if (ps[i]) {
				p[n] = (struct pollfd){ ps[i]->from, POLLIN, 0 };
				which[n++] = ps[i];
			}
		while (poll(p, (nfds_t)n, -1) < 1)
			;
		for (int i = 0; i < n; i++)
			if (p[i].revents) {
				printf("answer %d: %s\n", 4 - left, get_reply(which[i]));
				send_cmd(which[i], "l 0 S u 0 0");
				get_reply(which[i]);
				for (int k = 0; k < 3; k++)
					if (ps[k] == which[i])
						ps[k] = NULL;
				break;
			}
	}
	ask(&A, "close", "c 0");
	ask(&B, "close", "c 0");
	ask(&C, "close", "c 0");
}

/* A holder killed while another process waits: its locks go with it (also
 * while it is a zombie nobody reaped yet). */
static void killed_holder(int ofd)
{
	const char *name = ofd ? "k-ofd" : "k-posix";
	int up[2];
	if (pipe(up))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		int fd = open(P(name), O_RDWR | O_CREAT, 0644);
		char r = lk(fd, ofd ? F_OFD_SETLK : F_SETLK, F_WRLCK, SEEK_SET, 0, 0) == 0 ? 'l' : 'n';
		xwrite(up[1], &r, 1);
		for (;;)
			pause();
	}
	printf("%s holder: %c\n", ofd ? "ofd" : "posix", xread(up[0]));
	ask(&A, "open", "o 0 %s", name);
	ask(&A, "try", "l 0 %c w 0 1", ofd ? 's' : 'S');
	send_cmd(&A, "l 0 %c w 0 1", ofd ? 'w' : 'W');
	kill(c, SIGKILL);
	printf("A's wait after the kill: %s\n", get_reply(&A));
	waitpid(c, NULL, 0);
	ask(&A, "close", "c 0");
	close(up[0]);
	close(up[1]);
}

/* ---- 7. signals ------------------------------------------------------------- */

static int sig_out = -1;
static void on_sig(int s)
{
	(void)s;
	if (sig_out >= 0)
		xwrite(sig_out, "h", 1);
}

/* Waits until pid sleeps (in its lock wait: it has nothing else to block on). */
static void wait_sleeping(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	for (;;) {
		int fd = open(path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			return;
		buf[n] = 0;
		char *c = strrchr(buf, ')');
		if (c && c[1] == ' ' && (c[2] == 'S' || c[2] == 'Z'))
			return;
		sched_yield();
	}
}

enum { W_FCNTL, W_OFD, W_FLOCK, W_LOCKF };

static int blocking_lock(int fd, int how)
{
	switch (how) {
	case W_FCNTL: return lk(fd, F_SETLKW, F_WRLCK, SEEK_SET, 0, 1);
	case W_OFD: return lk(fd, F_OFD_SETLKW, F_WRLCK, SEEK_SET, 0, 1);
	case W_FLOCK: return flock(fd, LOCK_EX);
	default: return lockf(fd, F_LOCK, 1);
	}
}

static void interrupted(int how, int restart)
{
	static const char *hows[] = { "F_SETLKW", "F_OFD_SETLKW", "flock", "lockf F_LOCK" };
	int hold = open(P("sig"), O_RDWR | O_CREAT, 0644);
	if (how == W_FLOCK ? flock(hold, LOCK_EX) : lk(hold, F_OFD_SETLK, F_WRLCK, SEEK_SET, 0, 1))
		printf("hold failed\n");
	int up[2], sigp[2], down[2];
	if (pipe(up) || pipe(sigp) || pipe(down))
		exit(2);
	fflush(stdout);
	pid_t c = fork();
	if (c == 0) {
		alarm(60);
		close(hold); /* its own open below: the inherited description holds the lock */
		sig_out = sigp[1];
		struct sigaction sa = { .sa_handler = on_sig, .sa_flags = restart ? SA_RESTART : 0 };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		int fd = open(P("sig"), O_RDWR);
		xwrite(up[1], "r", 1);
		errno = 0;
		int r = blocking_lock(fd, how);
		char msg[128];
		int n = snprintf(msg, sizeof msg, "%s %s: %s\n", hows[how], restart ? "SA_RESTART" : "no SA_RESTART",
				 res(r, errno));
		xwrite(up[1], msg, (size_t)n);
		xread(down[0]);
		_exit(0);
	}
	xread(up[0]);
	if (restart) {
		wait_sleeping(c);
		kill(c, SIGUSR1);
		xread(sigp[0]); /* the handler ran... */
		wait_sleeping(c); /* ...and the wait went on */
		if (how == W_FLOCK)
			flock(hold, LOCK_UN);
		else
			lk(hold, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 1);
	} else {
		/* Until the child answers: a signal that came before the
		 * wait only ran the handler. */
		struct pollfd p = { up[0], POLLIN, 0 };
		do {
			wait_sleeping(c);
			kill(c, SIGUSR1);
		} while (poll(&p, 1, 100) < 1);
	}
	char buf[128];
	readline(up[0], buf, sizeof buf);
	printf("%s\n", buf);
	xwrite(down[1], "z", 1);
	waitpid(c, NULL, 0);
	close(hold);
	close(up[0]);
	close(up[1]);
	close(sigp[0]);
	close(sigp[1]);
	close(down[0]);
	close(down[1]);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	base = argv[1];
	main_pid = getpid();
	self_exe = realpath("/proc/self/exe", NULL);
	if (argc > 2 && !strcmp(argv[2], "exec-holder"))
		return exec_holder(argv);
	if (argc > 2 && !strcmp(argv[2], "posix-exec"))
		return posix_exec_child(argv);
	alarm(90);
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* Peers first: they must not inherit any descriptor of the files. */
	A = peer_start("A");
	B = peer_start("B");
	C = peer_start("C");
	send_cmd(&A, "n B %d", (int)B.pid);
	get_reply(&A);
	send_cmd(&B, "n A %d", (int)A.pid);
	get_reply(&B);
	ranges();
	lockf_section();
	flock_section();
	fork_section();
	printf("== description lifetime\n");
	shared_close(0);
	shared_close(1);
	locker_exits(0);
	locker_exits(1);
	across_exec();
	posix_exec();
	deadlock_section();
	cycle3();
	killed_holder(0);
	killed_holder(1);
	printf("== signals\n");
	for (int how = W_FCNTL; how <= W_LOCKF; how++) {
		interrupted(how, 0);
		interrupted(how, 1);
	}
	send_cmd(&A, "q");
	send_cmd(&B, "q");
	send_cmd(&C, "q");
	waitpid(A.pid, NULL, 0);
	waitpid(B.pid, NULL, 0);
	waitpid(C.pid, NULL, 0);
	printf("done\n");
	return 0;
}
