/*
 * ranges.h — locks2's sections on one process's locks against a peer's:
 * ranges split and merged, whence and negative lengths, F_GETLK's holder,
 * upgrades and downgrades, lockf, flock's conversions and OFD locks beside
 * the others.  Included once, by locks2.c (locks2/common.h says why).
 */
#ifndef LOCKS2_RANGES_H
#define LOCKS2_RANGES_H

#include "common.h"

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

#endif
