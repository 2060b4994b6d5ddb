/*
 * lifetime.h — locks2's sections on whose a lock is: what fork and exec
 * do to each kind, and release when the last descriptor of a description
 * closes anywhere.  Included once, by locks2.c (locks2/common.h says why);
 * exec_holder and posix_exec_child are the images locks2.c becomes when it
 * runs itself.
 */
#ifndef LOCKS2_LIFETIME_H
#define LOCKS2_LIFETIME_H

#include "common.h"

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
	pid_t c = fork_timed();
	if (c == 0) {
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
	pid_t c = fork_timed();
	if (c == 0) {
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
	pid_t c = fork_timed();
	if (c == 0) {
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
	pid_t c = fork_timed();
	if (c == 0) {
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

#endif
