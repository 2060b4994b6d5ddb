/* forkpty, login_tty and daemon with a file of the directory argv[1] on the
 * standard descriptors: glibc moves descriptors and the working directory
 * inside them, out of the interposition layer's sight.  Prints what the
 * new session sees; test_preload.py compares it on tmpfs and on kura. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utmp.h>

static const char *dir;

/* Puts a file of dir on fd 1, returning a copy of the old fd 1. */
static int stdout_to_file(const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (saved < 0 || fd < 0 || dup2(fd, 1) < 0) {
		perror(path);
		exit(1);
	}
	close(fd);
	return saved;
}

static void stdout_back(int saved)
{
	dup2(saved, 1);
	close(saved);
}

/* The child's exit status: 0 when its stdout is a terminal. */
static int drain_and_wait(int master, pid_t pid)
{
	char buf[256];
	while (read(master, buf, sizeof buf) > 0)
		;
	close(master);
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void check_forkpty(void)
{
	int saved = stdout_to_file("forkpty.out"), master;
	pid_t pid = forkpty(&master, NULL, NULL, NULL);
	if (pid == 0)
		_exit(isatty(1) && isatty(0) ? 0 : 3);
	stdout_back(saved);
	if (pid < 0) {
		perror("forkpty");
		return;
	}
	printf("forkpty: child's stdin and stdout are the terminal: %s\n", drain_and_wait(master, pid) ? "no" : "yes");
}

static void check_login_tty(void)
{
	int saved = stdout_to_file("login_tty.out"), master, slave;
	if (openpty(&master, &slave, NULL, NULL, NULL) < 0) {
		stdout_back(saved);
		perror("openpty");
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(master);
		if (login_tty(slave) < 0)
			_exit(1);
		_exit(isatty(1) && isatty(2) ? 0 : 3);
	}
	stdout_back(saved);
	close(slave);
	printf("login_tty: child's stdout and stderr are the terminal: %s\n",
	       drain_and_wait(master, pid) ? "no" : "yes");
}

/* The daemon reports through a pipe, whose end daemon() leaves alone; the
 * read ends when it exits. */
static void check_daemon(void)
{
	int p[2];
	if (pipe(p) < 0) {
		perror("pipe");
		return;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (chdir(dir) < 0)
			_exit(1);
		stdout_to_file("daemon.out");
		if (daemon(0, 0) < 0)
			_exit(2);
		char cwd[PATH_MAX] = "?", path[PATH_MAX];
		struct stat st, out;
		if (!getcwd(cwd, sizeof cwd))
			strcpy(cwd, "(none)");
		int null_out = fstat(1, &st) == 0 && S_ISCHR(st.st_mode);
		ssize_t w = write(1, "lost?", 5);
		snprintf(path, sizeof path, "%s/daemon.out", dir);
		int kept_empty = stat(path, &out) == 0 && out.st_size == 0;
		dprintf(p[1], "daemon: cwd %s, relative \"proc\" found: %s, stdout /dev/null: %s (write %zd), "
			"old stdout file empty: %s\n",
			cwd, access("proc", F_OK) == 0 ? "yes" : "no", null_out ? "yes" : "no", w,
			kept_empty ? "yes" : "no");
		_exit(0);
	}
	close(p[1]);
	char buf[512];
	ssize_t n;
	while ((n = read(p[0], buf, sizeof buf)) > 0)
		fwrite(buf, 1, (size_t)n, stdout);
	close(p[0]);
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: sessions DIR\n");
		return 2;
	}
	dir = argv[1];
	setvbuf(stdout, NULL, _IONBF, 0);
	check_forkpty();
	check_login_tty();
	check_daemon();
	return 0;
}
