/* txtbsy.c — ETXTBSY: writing to a program a process is executing, and
 * executing a file open for writing, compared with tmpfs.  Usage:
 * txtbsy BASE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char B[3000];

static char *P(const char *rel)
{
	static char buf[4][4096];
	static int i;
	char *b = buf[i++ % 4];
	snprintf(b, 4096, "%s/%s", B, rel);
	return b;
}

static void show(const char *label, long r)
{
	printf("%s = %s\n", label, r < 0 ? strerrorname_np(errno) : "ok");
}

static long try_open(const char *p, int flags)
{
	int fd = open(p, flags);
	if (fd >= 0)
		close(fd);
	return fd;
}

static void copy(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY), out = open(to, O_CREAT | O_WRONLY | O_TRUNC, mode);
	char b[65536];
	ssize_t n;
	if (in < 0 || out < 0) {
		printf("copy %s: %s\n", from, strerror(errno));
		exit(1);
	}
	while ((n = read(in, b, sizeof b)) > 0)
		if (write(out, b, (size_t)n) != n)
			exit(1);
	close(in);
	close(out);
}

/* Starts argv[0] (a path) and waits until it runs: its exec is done when
 * the pipe's close-on-exec write end closes. */
static pid_t start(char *const argv[])
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	char c;
	while (read(p[0], &c, 1) > 0)
		;
	close(p[0]);
	return pid;
}

/* Waits (up to ten seconds) until pid runs a program named like `name`. */
static void wait_exe(pid_t pid, const char *name)
{
	char proc[64], exe[4096];
	snprintf(proc, sizeof proc, "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 1000; i++) {
		ssize_t n = readlink(proc, exe, sizeof exe - 1);
		if (n > 0) {
			exe[n] = 0;
			if (strstr(exe, name))
				return;
		}
		usleep(10000);
	}
	printf("%s never ran\n", name);
}

static void stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(B, sizeof B, "%s", argv[1]);
	const char *sleep_bin = access("/bin/sleep", X_OK) == 0 ? "/bin/sleep" : "/usr/bin/sleep";

	/* Executing a file this process has open for writing. */
	int w = open(P("prog"), O_CREAT | O_WRONLY | O_TRUNC, 0755);
	copy(sleep_bin, P("prog"), 0755);
	show("exec while open for writing", execl(P("prog"), "prog", "0", (char *)NULL));
	close(w);

	/* Writing to a program while it runs. */
	pid_t pid = start((char *[]){ P("prog"), "30", NULL });
	show("open O_WRONLY while it runs", try_open(P("prog"), O_WRONLY));
	show("open O_RDWR while it runs", try_open(P("prog"), O_RDWR));
	show("open O_RDONLY|O_TRUNC while it runs", try_open(P("prog"), O_RDONLY | O_TRUNC));
	show("open O_RDONLY while it runs", try_open(P("prog"), O_RDONLY));
	show("truncate while it runs", truncate(P("prog"), 0));
	symlink("prog", P("link"));
	show("open O_WRONLY through a symlink", try_open(P("link"), O_WRONLY));
	int r = open(P("prog"), O_RDONLY);
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", r);
	show("reopen for writing while it runs", try_open(proc, O_WRONLY));
	close(r);
	show("rename while it runs", rename(P("prog"), P("prog2")));
	show("open O_WRONLY under its new name", try_open(P("prog2"), O_WRONLY));
	show("rename back", rename(P("prog2"), P("prog")));
	/* A process that died (SIGKILL: no chance to clean up) runs nothing. */
	stop(pid);
	show("open O_WRONLY after it died", try_open(P("prog"), O_WRONLY));

	/* A program that went on to execute another one runs nothing of it. */
	copy("/bin/sh", P("sh"), 0755);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "exec %s 30", sleep_bin);
	pid = start((char *[]){ P("sh"), "-c", cmd, NULL });
	wait_exe(pid, "sleep");
	show("open O_WRONLY of a shell that exec'd sleep", try_open(P("sh"), O_WRONLY));
	stop(pid);

	/* A script is read by its interpreter: it stays writable. */
	int fd = open(P("script"), O_CREAT | O_WRONLY | O_TRUNC, 0755);
	snprintf(cmd, sizeof cmd, "#!/bin/sh\nexec %s 30\n", sleep_bin);
	if (write(fd, cmd, strlen(cmd)) < 0)
		return 1;
	close(fd);
	pid = start((char *[]){ P("script"), NULL });
	show("open O_WRONLY of a running script", try_open(P("script"), O_WRONLY));
	stop(pid);
	return 0;
}
