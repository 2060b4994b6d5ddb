/*
 * spawn.c — vfork, posix_spawn, system, popen.
 *
 * glibc's system, popen and posix_spawn exec through internal calls, so
 * they are rebuilt on fork + our exec (proc.c); only a posix_spawn with no
 * kura state to hand over goes to glibc (with the environment fixed up).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kp.h"

extern char **environ;

/* ---- fork family ---- */

KP_EXPORT pid_t vfork(void)
{
	return fork();
}

/* ---- posix_spawn ----
 * glibc runs file actions and the exec in a CLONE_VM child with internal
 * calls.  That is fine while no kura state must cross (no kura fds, kernel
 * cwd); otherwise it is redone here with fork, where our wrappers run.
 * The file-action list is glibc's own record (spawn_int.h, glibc >= 2.35),
 * mirrored below: it is not public, which is why this path is a fallback. */
struct spawn_action {
	enum { do_close, do_dup2, do_open, do_chdir, do_fchdir, do_closefrom, do_tcsetpgrp } tag;
	union {
		struct { int fd; } close_action;
		struct { int fd, newfd; } dup2_action;
		struct { int fd; char *path; int oflag; mode_t mode; } open_action;
		struct { char *path; } chdir_action;
		struct { int fd; } fchdir_action;
		struct { int from; } closefrom_action;
		struct { int fd; } setpgrp_action;
	} action;
};

static void any_fd(int fd, struct kp_fd *e, void *arg)
{
	(void)fd;
	(void)e;
	*(int *)arg = 1;
}

static int is_kura(const char *p)
{
	struct kp_path kp;
	return kp_classify(AT_FDCWD, p, &kp) == 0 && kp.where == KP_KURA;
}

/* Whether the program may be a pool file, which the kernel cannot run:
 * path names one, or (usepath) a directory of $PATH lies in a pool. */
static int program_in_pool(const char *path, int usepath)
{
	if (!KP_PATH_OK(path))
		return 0;
	if (!usepath || strchr(path, '/'))
		return is_kura(path);
	const char *pv = getenv("PATH");
	char dir[PATH_MAX];
	for (const char *p = pv ? pv : "/bin:/usr/bin"; *p;) {
		size_t l = strcspn(p, ":");
		if (l < sizeof dir) {
			memcpy(dir, l ? p : ".", l ? l : 1);
			dir[l ? l : 1] = '\0';
			if (is_kura(dir))
				return 1;
		}
		p += l + (p[l] == ':');
	}
	return 0;
}

static int must_emulate(const posix_spawn_file_actions_t *fa, const char *path, int usepath, char *const envp[])
{
	/* LD_LIBRARY_PATH into a pool: its libraries are copied for the
	 * loader by our execve (ldlibs.c). */
	int any = kp_vcwd[0] != 0 || program_in_pool(path, usepath) || kp_ldlibs_wanted(0, envp ? envp : environ);
	if (!any)
		kp_foreach(any_fd, &any);
	if (!any && fa) {
		const struct spawn_action *a = (const void *)fa->__actions;
		for (int i = 0; i < fa->__used && !any; i++)
			if (a[i].tag == do_open || a[i].tag == do_chdir) {
				const char *p = a[i].tag == do_open ? a[i].action.open_action.path
								   : a[i].action.chdir_action.path;
				/* a kura path leading out is opened by our wrappers too */
				any = is_kura(p);
			}
	}
	return any;
}

static int spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *at, char *const argv[], char *const envp[], int usepath)
{
	kp_config();
	if (!must_emulate(fa, path, usepath, envp)) {
		char **env = kp_build_env(envp ? envp : environ, 1, NULL); /* no kura descriptors here */
		if (!env)
			return errno;
		int r = usepath ? REAL(posix_spawnp)(pid, path, fa, at, argv, env)
				: REAL(posix_spawn)(pid, path, fa, at, argv, env);
		kp_exec_failed(env); /* the parent goes on either way */
		return r;
	}
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return errno;
	pid_t c = fork();
	if (c < 0) {
		int er = errno;
		REAL(close)(pfd[0]);
		REAL(close)(pfd[1]);
		return er;
	}
	if (c == 0) {
		int err = 0;
		short flags = 0;
		REAL(close)(pfd[0]);
		if (at) {
			posix_spawnattr_getflags(at, &flags);
			if (flags & POSIX_SPAWN_SETSIGDEF) {
				sigset_t def;
				posix_spawnattr_getsigdefault(at, &def);
				for (int s = 1; s < NSIG; s++)
					if (sigismember(&def, s) == 1)
						signal(s, SIG_DFL);
			}
			if (flags & POSIX_SPAWN_SETSID && setsid() < 0)
				err = errno;
			if (!err && (flags & POSIX_SPAWN_SETPGROUP)) {
				pid_t pg;
				posix_spawnattr_getpgroup(at, &pg);
				if (setpgid(0, pg) < 0)
					err = errno;
			}
			if (!err && (flags & POSIX_SPAWN_RESETIDS) && (setgid(getgid()) < 0 || setuid(getuid()) < 0))
				err = errno;
		}
		if (!err && fa) {
			const struct spawn_action *a = (const void *)fa->__actions;
			for (int i = 0; i < fa->__used && !err; i++) {
				switch (a[i].tag) {
				case do_close:
					close(a[i].action.close_action.fd);
					break;
				case do_dup2:
					if (a[i].action.dup2_action.fd == a[i].action.dup2_action.newfd) {
						int f = REAL(fcntl)(a[i].action.dup2_action.fd, F_GETFD);
						if (f < 0 || REAL(fcntl)(a[i].action.dup2_action.fd, F_SETFD, f & ~FD_CLOEXEC) < 0)
							err = errno;
					} else if (dup2(a[i].action.dup2_action.fd, a[i].action.dup2_action.newfd) < 0) {
						err = errno;
					}
					break;
				case do_open: {
					int fd = open(a[i].action.open_action.path, a[i].action.open_action.oflag,
						      a[i].action.open_action.mode);
					int want = a[i].action.open_action.fd;
					if (fd < 0)
						err = errno;
					else if (fd != want) {
						if (dup2(fd, want) < 0)
							err = errno;
						close(fd);
					}
					break;
				}
				case do_chdir:
					if (chdir(a[i].action.chdir_action.path) < 0)
						err = errno;
					break;
				case do_fchdir:
					if (fchdir(a[i].action.fchdir_action.fd) < 0)
						err = errno;
					break;
				case do_closefrom:
					closefrom(a[i].action.closefrom_action.from);
					break;
				default:
					err = ENOSYS;
				}
			}
		}
		if (!err && at && (flags & POSIX_SPAWN_SETSIGMASK)) {
			sigset_t m;
			posix_spawnattr_getsigmask(at, &m);
			sigprocmask(SIG_SETMASK, &m, NULL);
		}
		if (!err) {
			if (usepath)
				execvpe(path, argv, envp ? envp : environ);
			else
				execve(path, argv, envp ? envp : environ);
			err = errno;
		}
		REAL(write)(pfd[1], &err, sizeof err);
		_exit(127);
	}
	REAL(close)(pfd[1]);
	int err = 0;
	ssize_t r;
	while ((r = REAL(read)(pfd[0], &err, sizeof err)) < 0 && errno == EINTR)
		;
	REAL(close)(pfd[0]);
	if (r == sizeof err && err) {
		waitpid(c, NULL, 0);
		return err;
	}
	if (pid)
		*pid = c;
	return 0;
}

KP_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			  const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	return spawn(pid, path, fa, at, argv, envp, 0);
}

KP_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	return spawn(pid, file, fa, at, argv, envp, 1);
}

/* ---- system, popen ---- */

KP_EXPORT int system(const char *cmd)
{
	if (!cmd)
		return 1;
	struct sigaction ign = { .sa_handler = SIG_IGN }, oint, oquit;
	sigset_t block, omask;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGINT, &ign, &oint);
	sigaction(SIGQUIT, &ign, &oquit);
	sigemptyset(&block);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &omask);
	pid_t c = fork();
	int status = -1;
	if (c == 0) {
		sigaction(SIGINT, &oint, NULL);
		sigaction(SIGQUIT, &oquit, NULL);
		sigprocmask(SIG_SETMASK, &omask, NULL);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (c > 0) {
		while (waitpid(c, &status, 0) < 0) {
			if (errno != EINTR) {
				status = -1;
				break;
			}
		}
	}
	int er = errno;
	sigaction(SIGINT, &oint, NULL);
	sigaction(SIGQUIT, &oquit, NULL);
	sigprocmask(SIG_SETMASK, &omask, NULL);
	errno = er;
	return status;
}

struct pchild {
	FILE *f;
	pid_t pid;
	struct pchild *next;
};
static struct pchild *pchildren;
static pthread_mutex_t plock = PTHREAD_MUTEX_INITIALIZER;

KP_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	int rd = mode[0] == 'r';
	if ((mode[0] != 'r' && mode[0] != 'w')) {
		errno = EINVAL;
		return NULL;
	}
	int cloexec = strchr(mode, 'e') != NULL;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return NULL;
	struct pchild *pc = malloc(sizeof *pc);
	if (!pc) {
		REAL(close)(p[0]);
		REAL(close)(p[1]);
		return NULL;
	}
	pid_t c = fork();
	if (c < 0) {
		int er = errno;
		REAL(close)(p[0]);
		REAL(close)(p[1]);
		free(pc);
		errno = er;
		return NULL;
	}
	if (c == 0) {
		int want = rd ? 1 : 0, mine = rd ? p[1] : p[0];
		if (mine == want)
			REAL(fcntl)(mine, F_SETFD, 0);
		else
			dup2(mine, want);
		/* POSIX: streams from earlier popen calls are not inherited. */
		for (struct pchild *q = pchildren; q; q = q->next)
			REAL(close)(REAL(fileno)(q->f));
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	int keep = rd ? p[0] : p[1];
	REAL(close)(rd ? p[1] : p[0]);
	if (!cloexec)
		REAL(fcntl)(keep, F_SETFD, 0);
	FILE *f = REAL(fdopen)(keep, rd ? "r" : "w");
	if (!f) {
		REAL(close)(keep);
		free(pc);
		waitpid(c, NULL, 0);
		return NULL;
	}
	pc->f = f;
	pc->pid = c;
	sighold_lock(&plock);
	pc->next = pchildren;
	pchildren = pc;
	sighold_unlock(&plock);
	return f;
}

KP_EXPORT int pclose(FILE *f)
{
	sighold_lock(&plock);
	struct pchild **pp = &pchildren, *pc = NULL;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->f == f) {
			pc = *pp;
			*pp = pc->next;
			break;
		}
	sighold_unlock(&plock);
	if (!pc)
		return REAL(pclose)(f);
	fclose(f);
	int status;
	pid_t r;
	while ((r = waitpid(pc->pid, &status, 0)) < 0 && errno == EINTR)
		;
	free(pc);
	return r < 0 ? -1 : status;
}
