/* A program that closes "every" descriptor but its own, as daemons,
 * closefrom and Python's subprocess (close_fds) do, on a file of the
 * directory argv[1]: the pool's own descriptors must survive it (fsync
 * still reaches the disk; an exec still hands the file over).
 * test_preload.py compares the output on tmpfs and on kura, and runs it on
 * a disk pool. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int top_fd(void)
{
	struct rlimit rl;
	return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1 << 20 ? (int)rl.rlim_cur : 1 << 20;
}

static void report(const char *how, int fd)
{
	ssize_t w = write(fd, how, strlen(how));
	int s = fsync(fd);
	printf("%s: write %zd, fsync %s\n", how, w, s ? strerror(errno) : "ok");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: close_all DIR\n");
		return 2;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/kept", argv[1]);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	fflush(stdout);
	for (int i = 3, top = top_fd(); i < top; i++)
		if (i != fd)
			close(i);
	report("close loop", fd);
	closefrom(fd + 1);
	report(" closefrom", fd);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* subprocess's way: clear close-on-exec of the one to pass on,
		 * close the rest, exec. */
		fcntl(fd, F_SETFD, 0);
		for (int i = 3, top = top_fd(); i < top; i++)
			if (i != fd)
				close(i);
		char name[32];
		snprintf(name, sizeof name, "/dev/fd/%d", fd);
		execlp("cat", "cat", name, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("\nexec'd cat: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}
