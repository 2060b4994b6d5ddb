/* spawn_pool.c — posix_spawn and posix_spawnp of a program stored in the
 * pool from a process holding no pool descriptors (glibc's own spawn
 * cannot reach it), and execveat of a descriptor of it, compared with
 * tmpfs.  Usage: spawn_pool BASE. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void run(const char *label, int usepath, const char *prog)
{
	pid_t pid;
	char *av[] = { "t", (char *)label, NULL };
	int r = usepath ? posix_spawnp(&pid, prog, NULL, NULL, av, environ)
			: posix_spawn(&pid, prog, NULL, NULL, av, environ);
	int st = 0;
	if (!r)
		waitpid(pid, &st, 0);
	printf("%s: %s, exit %d\n", label, r ? strerrorname_np(r) : "ok", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	char p[4096];
	snprintf(p, sizeof p, "%s/prog", argv[1]);
	FILE *f = fopen(p, "w");
	if (!f)
		return 1;
	fprintf(f, "#!/bin/sh\necho \"spawned $1\"\nexit 3\n");
	fclose(f);
	chmod(p, 0755);
	run("posix_spawn", 0, p);
	setenv("PATH", argv[1], 1);
	run("posix_spawnp", 1, "prog");
	run("posix_spawnp missing", 1, "no-such-prog");

	/* execveat of a descriptor: "" alone is ENOENT, with AT_EMPTY_PATH
	 * the descriptor's own file runs. */
	int fd = open(p, O_RDONLY);
	char *av[] = { "t", "execveat", NULL };
	int r = execveat(fd, "", av, environ, 0);
	printf("execveat \"\" without AT_EMPTY_PATH: %s\n", r < 0 ? strerrorname_np(errno) : "ran");
	pid_t pid = fork();
	if (pid == 0) {
		execveat(fd, "", av, environ, AT_EMPTY_PATH);
		printf("execveat AT_EMPTY_PATH: %s\n", strerrorname_np(errno));
		_exit(1);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}
