/* spawn_pool.c — posix_spawn and posix_spawnp of a program stored in the
 * pool from a process holding no pool descriptors (glibc's own spawn
 * cannot reach it), compared with tmpfs.  Usage: spawn_pool BASE. */
#define _GNU_SOURCE
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
	return 0;
}
