/*
 * 16,400 processes, more than kura's lock table has records (16,384),
 * one after another, each take a POSIX lock on its own byte of one file
 * and are killed with SIGKILL holding it (killed
 * processes never unlock: the kernel drops their locks, and kura must not
 * keep their records until its table is full).  Then the survivor locks the
 * whole file, as SQLite would after its readers died.  Usage: dead_lockers
 * BASE.  The output on tmpfs and under kura must agree.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 16400

static int lock(int fd, short type, off_t start, off_t len)
{
	struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	return fcntl(fd, F_SETLK, &l);
}

int main(int argc, char **argv)
{
	if (argc != 2 || chdir(argv[1]))
		return 2;
	int fd = open("db", O_CREAT | O_RDWR, 0644);
	if (fd < 0)
		return 1;
	int ready[2];
	if (pipe(ready))
		return 1;
	int failed = 0, started = 0;
	for (int i = 0; i < N; i++) {
		pid_t p = fork();
		if (p < 0)
			break;
		if (p == 0) {
			char ok = lock(fd, F_WRLCK, i, 1) == 0 ? 'y' : 'n';
			if (write(ready[1], &ok, 1) != 1)
				_exit(1);
			pause();
			_exit(0);
		}
		started++;
		char ok;
		if (read(ready[0], &ok, 1) != 1 || ok != 'y')
			failed++;
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
	printf("%d processes took a lock each and were killed, %d could not lock\n", started - failed, failed);
	printf("whole file after they died: %s\n", lock(fd, F_WRLCK, 0, 0) == 0 ? "locked" : strerror(errno));
	printf("and again for reading: %s\n", lock(fd, F_RDLCK, 0, 0) == 0 ? "locked" : strerror(errno));
	return 0;
}
