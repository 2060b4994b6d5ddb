/*
 * cli_run.c — `kura run`: start a program with the interposition layer.
 *
 * Sets KURA_POOL, KURA_MOUNT and LD_PRELOAD (the absolute path of the
 * libkura.so beside this binary, ../lib/libkura.so.0; see find_lib) and runs
 * the command.  Everything else happens inside the preloaded library.
 *
 * It runs it as a child and waits, passing on the signals sent to it alone
 * and then the child's exit status (or its death by a signal), because the
 * last process to use a pool is not always the one to tidy up: a process
 * that ends with _exit (dash does), or is killed, leaves the shared state
 * in /dev/shm behind, and a disk pool's working copy with changes not yet
 * written home.  When the command is done and no process has the pool
 * mounted any more, what is left is written home and removed here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static const char run_help[] =
	"usage: kura run [--pool POOL] [--mount PREFIX] [--] COMMAND [ARGS...]\n\n"
	"Run COMMAND with libkura.so preloaded, so that paths under PREFIX\n"
	"(default /kura) are served from POOL (default: the default pool, created\n"
	"if missing).  Children, including exec'd ones, stay on kura.\n"
	"Environment set for COMMAND: KURA_POOL, KURA_MOUNT, LD_PRELOAD.\n"
	"KURA_DEBUG=1 reports calls kura does not support on standard error.\n";

/* The library to preload, by its soname (what a runtime-only install
 * keeps): beside the running binary, ../lib/KURA_SONAME (the build tree,
 * or an install under any prefix or DESTDIR), else in the libdir this
 * binary was configured to install into.  On failure `out` is the first
 * place looked. */
static int find_lib(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
	}
	if (snprintf(out, len, "%s/lib/" KURA_SONAME, self) >= (int)len)
		return -1;
	if (access(out, R_OK) == 0)
		return 0;
	static const char installed[] = KURA_INSTALLED_LIBDIR "/" KURA_SONAME;
	if (access(installed, R_OK) == 0 && snprintf(out, len, "%s", installed) < (int)len)
		return 0;
	return -1;
}

/* Whether an absolute path names "/" once "." and ".." are taken as the
 * interposition layer takes them, lexically ("//", "/a/.."): it drops such
 * a prefix, which would swallow the whole host, and the command would run
 * with no pool at all. */
static int names_the_root(const char *path)
{
	size_t depth = 0;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.')
			depth -= depth > 0;
		else if (len && !(len == 1 && p[0] == '.'))
			depth++;
		p += len;
	}
	return depth == 0;
}

static pid_t child;

static void pass_on(int sig)
{
	if (child > 0)
		kill(child, sig);
}

int cmd_run(int argc, char **argv)
{
	const char *pool = NULL, *mount = "/kura";
	int i = 1;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(run_help, stdout);
			return CLI_EXIT_OK;
		}
		if (strcmp(argv[i], "--pool") == 0 || strcmp(argv[i], "--mount") == 0) {
			if (i + 1 >= argc)
				return cli_usage_error("run", "%s needs an argument", argv[i]);
			if (argv[i][2] == 'p')
				pool = argv[++i];
			else
				mount = argv[++i];
			continue;
		}
		if (strncmp(argv[i], "--pool=", 7) == 0) {
			pool = argv[i] + 7;
			continue;
		}
		if (strncmp(argv[i], "--mount=", 8) == 0) {
			mount = argv[i] + 8;
			continue;
		}
		if (argv[i][0] == '-')
			return cli_usage_error("run", "unknown option '%s'", argv[i]);
		break;
	}
	if (i >= argc)
		return cli_usage_error("run", "no command given");
	if (mount[0] != '/' || names_the_root(mount))
		return cli_usage_error("run", "the mount prefix must be an absolute path other than / (got '%s')", mount);
	if (strlen(mount) >= PATH_MAX)
		return cli_usage_error("run", "the mount prefix is longer than PATH_MAX (%d bytes)", PATH_MAX - 1);

	char poolbuf[PATH_MAX], lib[PATH_MAX];
	if (!pool) {
		if (kura_default_pool_path(poolbuf, sizeof poolbuf) < 0) {
			cli_msg("run", "cannot locate the default pool (HOME unset?)");
			return CLI_EXIT_FAIL;
		}
		if (cli_ensure_default_pool("run", poolbuf) < 0)
			return CLI_EXIT_FAIL;
		pool = poolbuf;
	}
	/* The pool path must survive the program's chdir: make it absolute. */
	char abspool[PATH_MAX];
	if (!realpath(pool, abspool)) {
		cli_err("run", pool, errno);
		return CLI_EXIT_FAIL;
	}
	/* A pool the command could not mount (an older format, damage, no
	 * permission) would only show as errors on every path under the
	 * prefix: say why now, once.  Alone, a read-only mount checks it all
	 * (nothing is recovered or copied for it).  Beside another mount the
	 * command joins that mount, which checked the pool; a read-only mount
	 * would replay into a private map all the journal that mount has not
	 * written home (40 ms per program beside a disk pool held through a
	 * sqlite3 build), so only what may differ for this user is checked:
	 * that the pool opens and its superblock reads. */
	int err = 0;
	if (cli_pool_mounted_elsewhere(abspool)) {
		err = kura_probe(abspool);
	} else {
		kura_fs *probe = kura_mount(abspool, &(struct kura_mount_opts){ .read_only = 1 }, &err);
		if (probe)
			kura_unmount(probe);
	}
	if (err) {
		cli_msg("run", "%s", kura_last_error()[0] ? kura_last_error() : strerror(-err));
		return CLI_EXIT_FAIL;
	}
	if (find_lib(lib, sizeof lib) < 0) {
		cli_msg("run", "cannot find %s next to this binary (expected %s) nor in %s", KURA_SONAME, lib,
			KURA_INSTALLED_LIBDIR);
		return CLI_EXIT_FAIL;
	}
	const char *old = getenv("LD_PRELOAD");
	char *preload = NULL;
	if (asprintf(&preload, "%s%s%s", lib, old && *old ? " " : "", old ? old : "") < 0)
		return CLI_EXIT_FAIL;
	setenv("KURA_POOL", abspool, 1);
	setenv("KURA_MOUNT", mount, 1);
	setenv("LD_PRELOAD", preload, 1);

	/* Terminal signals reach the whole process group, the child too; the
	 * others, sent to this process alone, are passed on. */
	static const int passed[] = { SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH, SIGCONT, SIGPIPE };
	sigset_t all, old_mask;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old_mask);
	pid_t parent = getpid();
	child = fork();
	if (child < 0) {
		cli_err("run", argv[i], errno);
		return CLI_EXIT_FAIL;
	}
	if (child == 0) {
		/* A wrapper killed outright takes its command along. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		execvp(argv[i], argv + i);
		int e = errno;
		cli_err("run", argv[i], e);
		_exit(e == ENOENT ? 127 : 126);
	}
	struct sigaction sa = { .sa_handler = pass_on };
	sigemptyset(&sa.sa_mask);
	for (size_t k = 0; k < sizeof passed / sizeof passed[0]; k++)
		sigaction(passed[k], &sa, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	int status;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	cli_tidy_pool(abspool);
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		signal(sig, SIG_DFL);
		struct rlimit no_core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &no_core); /* the child dumped its own */
		sigset_t just;
		sigemptyset(&just);
		sigaddset(&just, sig);
		sigprocmask(SIG_UNBLOCK, &just, NULL);
		kill(getpid(), sig);
		return 128 + sig;
	}
	return WEXITSTATUS(status);
}
