/*
 * cli_rclone.c — stage-in and stage-out with an rclone remote at the other
 * end (S3, Swift, Google Cloud Storage, SFTP... whatever `rclone config`
 * names, or an on-the-fly ":backend:path").  rclone is the transport:
 * its parallel transfers, its check of what the far side already holds
 * (size and modification time, or hashes with --verify), its retries and
 * progress.  A Go program cannot use the preload library, so rclone
 * reaches the pool through `kura mount` on a private directory, mounted
 * for the one copy and unmounted after it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_stage.h"

/* argv run to its end; its exit status, or -1 after a message. */
static int run_command(const char *cmd, char *const argv[])
{
	pid_t pid = fork();
	if (pid < 0) {
		cli_err(cmd, argv[0], errno);
		return -1;
	}
	if (pid == 0) {
		execvp(argv[0], argv);
		int e = errno;
		if (e == ENOENT && !strcmp(argv[0], "rclone"))
			cli_msg(cmd, "rclone is not installed (Debian: apt install rclone)");
		else
			cli_err(cmd, argv[0], e);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(status)) {
		cli_msg(cmd, "%s died of signal %d", argv[0], WTERMSIG(status));
		return -1;
	}
	return WEXITSTATUS(status);
}

int cli_rclone_stage(const char *cmd, int out, const struct cli_stage_opts *so, const char *pool_arg,
		     const char *remote)
{
	struct cli_target t;
	char self[PATH_MAX], dir[] = "/tmp/kura-rclone-XXXXXX", local[PATH_MAX + 64], jobs[16];

	if (cli_parse_target(cmd, pool_arg, &t) < 0)
		return CLI_EXIT_USAGE;
	if (!strchr(remote, ':'))
		return cli_usage_error(cmd, "'%s' is not an rclone remote (REMOTE:path, or :backend:path)", remote);
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0) {
		cli_err(cmd, "/proc/self/exe", errno);
		return CLI_EXIT_FAIL;
	}
	self[n] = '\0';
	if (!mkdtemp(dir)) {
		cli_err(cmd, "/tmp", errno);
		return CLI_EXIT_FAIL;
	}
	char *mount_argv[] = { self, "mount", t.pool, dir, "-o", out ? "ro" : "rw", NULL };
	if (run_command(cmd, mount_argv) != 0) {
		cli_msg(cmd, "%s: could not be mounted for rclone (kura mount said why)", t.pool);
		rmdir(dir);
		return CLI_EXIT_FAIL;
	}
	snprintf(local, sizeof local, "%s%s", dir, t.path);
	snprintf(jobs, sizeof jobs, "%d", so->jobs);
	/* Symlinks travel as rclone's .rclonelink files, which a stage back
	 * in turns into links again; --checksum compares hashes where both
	 * ends have them, rather than size and time. */
	char *argv[16];
	int a = 0;
	argv[a++] = "rclone";
	argv[a++] = "copy";
	argv[a++] = "--links";
	argv[a++] = "--transfers";
	argv[a++] = jobs;
	if (so->verify)
		argv[a++] = "--checksum";
	if (isatty(STDERR_FILENO))
		argv[a++] = "--progress";
	argv[a++] = out ? local : (char *)remote;
	argv[a++] = out ? (char *)remote : local;
	argv[a] = NULL;
	int rc = run_command(cmd, argv);
	if (rc == 0 && so->verify) {
		/* What the copy made, read back on both sides. */
		char *check[] = { "rclone", "check", "--one-way", "--download", "--links", out ? local : (char *)remote,
				  out ? (char *)remote : local, NULL };
		rc = run_command(cmd, check);
		if (rc)
			cli_msg(cmd, "rclone check found differences after the copy");
	} else if (rc) {
		cli_msg(cmd, "rclone copy failed (exit status %d); running the same command again resumes", rc);
	}
	char *umount_argv[] = { self, "umount", dir, NULL };
	if (run_command(cmd, umount_argv) != 0)
		cli_msg(cmd, "%s: left mounted on %s", t.pool, dir);
	else
		rmdir(dir);
	return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
