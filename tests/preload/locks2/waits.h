/*
 * waits.h — locks2's sections on blocking waits: EDEADLK for a cycle of
 * POSIX waits (of two and of three processes), a holder killed while
 * another waits, and EINTR versus SA_RESTART in each kind of wait.
 * Included once, by locks2.c (locks2/common.h says why).
 */
#ifndef LOCKS2_WAITS_H
#define LOCKS2_WAITS_H

#include "common.h"

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
	pid_t c = fork_timed();
	if (c == 0) {
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
	pid_t c = fork_timed();
	if (c == 0) {
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

#endif
