/*
 * cli_mount.c — `kura mount` and `kura umount`: a pool in the kernel's
 * name space through FUSE, for what the preload library cannot reach
 * (static binaries, Go programs, set-id programs, other users' shells).
 *
 * The mount process is a FUSE server (fuse_ops.c) with the pool mounted
 * through the engine like any `kura run` process, so both kinds of user
 * share one pool at once under the engine's locks.  In the background
 * (the default) it forks first and the parent returns only when the
 * child has mounted both the pool and the directory, or has said why it
 * could not: a script may use the directory as soon as `kura mount`
 * succeeded.  The fork comes before the pool is mounted because a mount
 * of the engine does not survive a fork made behind its back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#ifdef KURA_HAVE_FUSE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include "fuse_ops.h"
#endif

/* The mount process's pid, for `kura umount` to wait for it: named after
 * the mount point, its owner the mounting user. */
static void pid_file_name(const char *dir, char *out, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const unsigned char *p = (const unsigned char *)dir; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	snprintf(out, len, "/dev/shm/kura-mount-%u-%016llx", (unsigned)geteuid(), (unsigned long long)h);
}

/* Whether dir is a kura FUSE mount (as /proc/self/mountinfo says); the
 * pool it serves into pool when it is. */
static int is_kura_mount(const char *dir, char *pool, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	int found = 0;
	while (!found && getline(&line, &cap, f) > 0) {
		char mnt[PATH_MAX], type[64], src[PATH_MAX];
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
		    sscanf(dash + 3, "%63s %4095s", type, src) != 2)
			continue;
		/* mountinfo writes space, tab, newline and backslash octal. */
		for (char *s = mnt, *d = mnt;; s++, d++) {
			if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] && s[3]) {
				*d = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
				s += 3;
			} else if (!(*d = *s)) {
				break;
			}
		}
		if (strcmp(mnt, dir) == 0 && strcmp(type, "fuse.kura") == 0) {
			found = 1;
			snprintf(pool, len, "%s", src);
		}
	}
	free(line);
	fclose(f);
	return found;
}

/* Whether pid is running (a zombie has exited: its parent may be an init
 * that does not reap). */
static int running(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

static const char umount_help[] =
	"usage: kura umount DIR\n\n"
	"Unmount a pool that kura mount put on DIR, and wait until the mount\n"
	"process has unmounted the pool and exited (so kura fsck may follow).\n"
	"Root unmounts directly; another user through fusermount3 -u, which lets\n"
	"only the user who mounted unmount.\n";

int cmd_umount(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(umount_help, stdout);
		return CLI_EXIT_OK;
	}
	if (argc != 2 || argv[1][0] == '-')
		return cli_usage_error("umount", "expected one directory");
	char dir[PATH_MAX], pool[PATH_MAX], pidfile[128];
	if (!realpath(argv[1], dir)) {
		cli_err("umount", argv[1], errno);
		return CLI_EXIT_FAIL;
	}
	if (!is_kura_mount(dir, pool, sizeof pool)) {
		cli_msg("umount", "%s: not a kura mount", argv[1]);
		return CLI_EXIT_FAIL;
	}
	pid_file_name(dir, pidfile, sizeof pidfile);
	pid_t server = 0;
	struct stat st;
	int pfd = open(pidfile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *pf = pfd >= 0 ? fdopen(pfd, "r") : NULL;
	if (!pf && pfd >= 0)
		close(pfd);
	if (pf && fstat(fileno(pf), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
		long pid;
		if (fscanf(pf, "%ld", &pid) == 1 && pid > 0)
			server = (pid_t)pid;
	}
	if (pf)
		fclose(pf);
	/* A server killed outright leaves its file, and its pid may be
	 * another program's by now. */
	char comm_path[64], comm[32] = "";
	snprintf(comm_path, sizeof comm_path, "/proc/%ld/comm", (long)server);
	FILE *cf = server > 0 ? fopen(comm_path, "re") : NULL;
	if (cf) {
		if (!fgets(comm, sizeof comm, cf))
			comm[0] = '\0';
		fclose(cf);
	}
	if (strcmp(comm, "kura\n") != 0)
		server = 0;
	if (geteuid() == 0) {
		if (umount2(dir, 0) < 0) {
			int e = errno;
			if (e == EBUSY)
				cli_msg("umount", "%s: busy: a process has a file, a directory or its working "
					"directory there (fuser -vm %s names it)", argv[1], argv[1]);
			else
				cli_err("umount", argv[1], e);
			return CLI_EXIT_FAIL;
		}
	} else {
		pid_t pid = fork();
		if (pid < 0) {
			cli_err("umount", "fork", errno);
			return CLI_EXIT_FAIL;
		}
		if (pid == 0) {
			execlp("fusermount3", "fusermount3", "-u", "--", dir, (char *)NULL);
			cli_msg("umount", "cannot run fusermount3 (package fuse3): %s", strerror(errno));
			_exit(127);
		}
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return CLI_EXIT_FAIL; /* fusermount3 said why */
	}
	/* The mount process unmounts the pool once the kernel lets it go,
	 * and removes its file; one killed outright leaves it here. */
	for (int i = 0; server > 0 && i < 600 && running(server); i++)
		nanosleep(&(struct timespec){ .tv_nsec = 50000000 }, NULL);
	if (server > 0 && running(server)) {
		cli_msg("umount", "%s is unmounted, but its server (pid %ld) has not exited after 30 s",
			argv[1], (long)server);
		return CLI_EXIT_FAIL;
	}
	if (server > 0)
		unlink(pidfile);
	return CLI_EXIT_OK;
}

static const char mount_help[] =
	"usage: kura mount POOL DIR [-o OPTIONS] [-f]\n\n"
	"Mount POOL on the directory DIR through FUSE, so that every program\n"
	"(static, Go, set-id, other users') sees the pool there, while kura run\n"
	"processes use the same pool at the same time: what one writes the other\n"
	"sees at once.  Returns when the mount is usable; the server stays in the\n"
	"background until kura umount DIR (or SIGTERM/SIGINT to it).\n"
	"  -f          stay in the foreground (errors on standard error)\n"
	"  -o OPTIONS  comma-separated mount options:\n"
	"      ro                   read-only (the pool too)\n"
	"      allow_other          let other users in (a non-root user needs\n"
	"                           user_allow_other in /etc/fuse.conf)\n"
	"      default_permissions  the kernel checks modes too, before kura does\n"
	"                           (it knows no ACLs: named-user grants are refused)\n"
	"      others are passed to FUSE (see mount.fuse3(8))\n"
	"Permissions are checked by kura with each caller's ids and groups.\n";

#ifndef KURA_HAVE_FUSE

int cmd_mount(int argc, char **argv)
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(mount_help, stdout);
		return CLI_EXIT_OK;
	}
	cli_msg("mount", "this kura was built without FUSE (libfuse3 was not found at build time: "
		"install libfuse3-dev and fuse3, then rebuild)");
	return CLI_EXIT_FAIL;
}

#else

/* libfuse's own messages, kept to be told in ours ("fuse: " dropped). */
static char fuse_said[512];

static void keep_fuse_message(enum fuse_log_level level, const char *fmt, va_list ap)
{
	if (level > FUSE_LOG_ERR)
		return;
	vsnprintf(fuse_said, sizeof fuse_said, fmt, ap);
	size_t n = strlen(fuse_said);
	while (n && fuse_said[n - 1] == '\n')
		fuse_said[--n] = '\0';
	if (strncmp(fuse_said, "fuse: ", 6) == 0)
		memmove(fuse_said, fuse_said + 6, n - 5);
}

/* "fsname=POOL" with the commas and backslashes of POOL escaped, as
 * libfuse's option parser wants them. */
static char *fsname_option(const char *pool, const char *extra)
{
	size_t n = strlen(pool), len = 0;
	char *s = malloc(2 * n + strlen(extra) + 32);
	if (!s)
		return NULL;
	len += sprintf(s, "fsname=");
	for (size_t i = 0; i < n; i++) {
		if (pool[i] == ',' || pool[i] == '\\')
			s[len++] = '\\';
		s[len++] = pool[i];
	}
	sprintf(s + len, ",subtype=kura%s%s", *extra ? "," : "", extra);
	return s;
}

static void tell_parent(int *fd, char status)
{
	if (*fd >= 0) {
		while (write(*fd, &status, 1) < 0 && errno == EINTR)
			;
		close(*fd);
		*fd = -1;
	}
}

/* The mount process: pool, session, directory, then the loop; what it
 * could not do it says naming the pool and the directory. */
static int serve(const char *pool, const char *dir, const char *shown_dir, const char *opts, int read_only,
		 int foreground, int notify)
{
	char pidfile[128];
	int err = 0, rc = CLI_EXIT_FAIL;
	struct kura_mount_opts mo = { .persist = KURA_PERSIST_AUTO, .read_only = read_only };
	kura_fs *fs = kura_mount(pool, &mo, &err);
	if (!fs) {
		cli_msg("mount", "cannot mount %s on %s: %s", pool, shown_dir,
			kura_last_error()[0] ? kura_last_error() : strerror(-err));
		tell_parent(&notify, 1);
		return CLI_EXIT_FAIL;
	}
	const struct fuse_lowlevel_ops *ops;
	size_t ops_size;
	char *o = fsname_option(pool, opts);
	if (!o || (err = kura_fuse_prepare(fs, &ops, &ops_size)) < 0) {
		cli_msg("mount", "cannot mount %s on %s: %s", pool, shown_dir, strerror(o ? -err : ENOMEM));
		goto out_pool;
	}
	char *args_v[] = { "kura", "-o", o, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, args_v);
	fuse_set_log_func(keep_fuse_message);
	struct fuse_session *se = fuse_session_new(&args, ops, ops_size, NULL);
	fuse_opt_free_args(&args); /* libfuse may have copied them to add its own */
	if (!se) {
		cli_msg("mount", "cannot mount %s on %s: %s", pool, shown_dir,
			fuse_said[0] ? fuse_said : "bad mount options");
		goto out_pool;
	}
	if (fuse_set_signal_handlers(se) < 0) {
		cli_msg("mount", "cannot mount %s on %s: cannot catch signals", pool, shown_dir);
		goto out_session;
	}
	if (fuse_session_mount(se, dir) < 0) {
		cli_msg("mount", "cannot mount %s on %s: %s", pool, shown_dir,
			fuse_said[0] ? fuse_said : "the kernel refused the FUSE mount");
		goto out_signals;
	}
	pid_file_name(dir, pidfile, sizeof pidfile);
	/* /dev/shm is everyone's: no following a link planted there, and a
	 * file someone else made is not ours to write (umount then does not
	 * wait for this server, which is all the file is for). */
	int pfd = open(pidfile, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	struct stat pst;
	if (pfd >= 0 && fstat(pfd, &pst) == 0 && S_ISREG(pst.st_mode) && pst.st_uid == geteuid() &&
	    ftruncate(pfd, 0) == 0)
		dprintf(pfd, "%ld\n", (long)getpid());
	if (pfd >= 0)
		close(pfd);
	if (!foreground) {
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, 0), dup2(null, 1), dup2(null, 2);
			if (null > 2)
				close(null);
		}
		if (chdir("/") < 0)
			(void)0; /* "/" is there */
	}
	tell_parent(&notify, 0);
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (cfg) {
		/* One thread per request in flight, up to a few idle. */
		fuse_loop_cfg_set_clone_fd(cfg, 0);
		fuse_loop_cfg_set_idle_threads(cfg, 4);
	}
	/* The loop ends with 0 at an unmount and with the signal's number
	 * at SIGTERM, SIGINT or SIGHUP: both are an orderly end. */
	rc = fuse_session_loop_mt(se, cfg) < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (cfg)
		fuse_loop_cfg_destroy(cfg);
	kura_fuse_finish();
	fuse_session_unmount(se);
	unlink(pidfile);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_pool:
	free(o);
	kura_unmount(fs);
	/* As kura run does: the last user of a disk pool writes it home and
	 * removes its shared state. */
	cli_tidy_pool(pool);
	tell_parent(&notify, 1);
	return rc;
}

int cmd_mount(int argc, char **argv)
{
	int foreground = 0, read_only = 0;
	const char *operands[2];
	int nop = 0;
	size_t optlen = 0;
	char *opts = calloc(1, 1);
	if (!opts)
		return CLI_EXIT_FAIL;
	for (int i = 1; i < argc; i++) {
		const char *o = NULL;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(mount_help, stdout);
			free(opts);
			return CLI_EXIT_OK;
		} else if (strcmp(argv[i], "-f") == 0) {
			foreground = 1;
		} else if (strcmp(argv[i], "-o") == 0) {
			if (++i >= argc) {
				free(opts);
				return cli_usage_error("mount", "-o needs options");
			}
			o = argv[i];
		} else if (strncmp(argv[i], "-o", 2) == 0) {
			o = argv[i] + 2;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			free(opts);
			return cli_usage_error("mount", "unknown option '%s'", argv[i]);
		} else if (nop < 2) {
			operands[nop++] = argv[i];
		} else {
			free(opts);
			return cli_usage_error("mount", "too many operands: expected POOL DIR");
		}
		if (o && *o) {
			char *grown = realloc(opts, optlen + strlen(o) + 2);
			if (!grown) {
				free(opts);
				return CLI_EXIT_FAIL;
			}
			opts = grown;
			optlen += sprintf(opts + optlen, "%s%s", optlen ? "," : "", o);
		}
	}
	if (nop != 2) {
		free(opts);
		return cli_usage_error("mount", "expected POOL DIR");
	}
	/* "ro" among the options mounts the pool read-only too. */
	for (char *s = opts; *s;) {
		size_t n = strcspn(s, ",");
		if (n == 2 && strncmp(s, "ro", 2) == 0)
			read_only = 1;
		else if (n == 2 && strncmp(s, "rw", 2) == 0)
			read_only = 0;
		s += n + (s[n] == ',');
	}
	const char *poolarg = operands[0], *dirarg = operands[1];
	char pool[PATH_MAX], dir[PATH_MAX];
	struct stat st;
	int rc = CLI_EXIT_FAIL;
	if (!realpath(poolarg, pool)) {
		cli_msg("mount", "cannot mount %s on %s: %s: %s", poolarg, dirarg, poolarg, strerror(errno));
		goto out;
	}
	if (!realpath(dirarg, dir) || stat(dir, &st) < 0) {
		cli_msg("mount", "cannot mount %s on %s: %s: %s", poolarg, dirarg, dirarg,
			errno == ENOENT ? "no such directory" : strerror(errno));
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		cli_msg("mount", "cannot mount %s on %s: %s is not a directory", poolarg, dirarg, dirarg);
		goto out;
	}
	if (foreground) {
		rc = serve(pool, dir, dirarg, opts, read_only, 1, -1);
		goto out;
	}
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		cli_err("mount", "pipe", errno);
		goto out;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		cli_err("mount", "fork", errno);
		close(pipefd[0]), close(pipefd[1]);
		goto out;
	}
	if (pid == 0) {
		close(pipefd[0]);
		setsid();
		/* The terminal's signals stay with the shell that started it. */
		signal(SIGHUP, SIG_IGN);
		_exit(serve(pool, dir, dirarg, opts, read_only, 0, pipefd[1]));
	}
	close(pipefd[1]);
	char status = 1;
	ssize_t n;
	while ((n = read(pipefd[0], &status, 1)) < 0 && errno == EINTR)
		;
	close(pipefd[0]);
	if (n == 1 && status == 0) {
		rc = CLI_EXIT_OK;
	} else {
		/* The child said why, on our standard error, and is gone. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		if (n != 1)
			cli_msg("mount", "cannot mount %s on %s: the mount process died", poolarg, dirarg);
	}
out:
	free(opts);
	return rc;
}

#endif
