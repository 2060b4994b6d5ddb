/*
 * common.h — what every section of locks2 uses: the directory's paths,
 * results printed as the value or errno's name, pids printed by name, and
 * the peers, processes that run lock commands sent over a pipe.  The
 * sections are headers that locks2.c includes once: test_preload.py builds
 * each .c in tests/preload/ alone into a program of its own, so the parts
 * cannot be .c files there, and all of it stays static in one translation
 * unit.  They include each other by their own directory's name, as gcc is
 * given no -I.
 */
#ifndef LOCKS2_COMMON_H
#define LOCKS2_COMMON_H

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

/* fork() for a test's child: stdout flushed first, or the child would
 * print the parent's pending lines again, and a minute to live in the
 * child, so that a lock that never comes cannot hang the run. */
static pid_t fork_timed(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		alarm(60);
	return pid;
}

static struct peer peer_start(const char *name)
{
	int a[2], b[2];
	if (pipe(a) || pipe(b))
		exit(2);
	pid_t pid = fork_timed();
	if (pid == 0) {
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

#endif
