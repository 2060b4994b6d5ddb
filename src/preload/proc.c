/*
 * proc.c — fork, vfork, exec*, posix_spawn, system, popen.
 *
 * fork: pthread_atfork handlers (config.c) bracket it with the engine's
 * fork calls, so the child shares open file descriptions with the parent.
 * vfork becomes fork: a vfork child shares our tables with its parent and
 * would corrupt them (Python's subprocess dup2s in it).
 *
 * exec: the new image must find the preload, the configuration, the
 * virtual cwd and its kura descriptors.  Every exec wrapper rebuilds the
 * environment with LD_PRELOAD and KURA_* re-inserted (programs such as
 * `env -i` drop them) and KURA_INHERIT describing the descriptors:
 *   KURA_INHERIT=<mount>:<state fd>:<fd>=<id>,...;<mount>:...
 * Close-on-exec kura descriptors are closed first, since the kernel closes
 * only their placeholders.  The constructor of the new image (kp_inherit)
 * remaps the engine from the state memfd and adopts each id.
 *
 * glibc's system, popen and posix_spawn exec through internal calls, so
 * they are rebuilt on fork + our exec; only a posix_spawn with no kura
 * state to hand over goes to glibc (with the environment fixed up).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kp.h"

extern char **environ;

static char *saved_env[4]; /* "KURA_MOUNT=..." etc. as at start */
static const char *saved_names[4] = { "KURA_MOUNT", "KURA_POOL", "KURA_DEBUG", "KURA_PERSIST" };
static char self_path[PATH_MAX];

static void save_env(void)
{
	for (int i = 0; i < 4; i++) {
		const char *v = getenv(saved_names[i]);
		if (v && asprintf(&saved_env[i], "%s=%s", saved_names[i], v) < 0)
			saved_env[i] = NULL;
	}
	Dl_info info;
	if (dladdr((void *)save_env, &info) && info.dli_fname) {
		kp_inside++;
		if (!REAL(realpath)(info.dli_fname, self_path))
			snprintf(self_path, sizeof self_path, "%s", info.dli_fname);
		kp_inside--;
	}
}

static int env_has(char *const *env, const char *name, size_t nl)
{
	for (char *const *e = env; e && *e; e++)
		if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=')
			return 1;
	return 0;
}

struct inh {
	char buf[8192];
	size_t len;
	int mnt;
};

static void add_fd(int fd, struct kp_fd *e, void *arg)
{
	struct inh *h = arg;
	if (e->mnt != h->mnt)
		return;
	int cl = REAL(fcntl)(fd, F_GETFD);
	if (cl < 0 || (cl & FD_CLOEXEC)) {
		kp_release(fd); /* the kernel drops the placeholder at exec */
		return;
	}
	long id = kura_fd_export(kp_mounts[e->mnt].fs, e->kfd);
	if (id < 0)
		return;
	int n = snprintf(h->buf + h->len, sizeof h->buf - h->len, "%s%d=%ld",
			 h->buf[h->len - 1] == ':' ? "" : ",", fd, id);
	if (n > 0 && (size_t)n < sizeof h->buf - h->len)
		h->len += (size_t)n;
}

/* The environment for a new image: envp plus what kura needs.  Closes the
 * close-on-exec kura descriptors (see above).  Returned array and strings
 * are leaked on success (exec replaces us) and freed on failure. */
static char **build_env(char *const *envp, char **extra_out)
{
	kp_config();
	size_t n = 0;
	while (envp && envp[n])
		n++;
	char **env = calloc(n + 12, sizeof *env);
	char *inherit = NULL, *cwd = NULL, *preload = NULL;
	if (!env)
		return NULL;
	size_t k = 0;
	const char *old_preload = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!strncmp(envp[i], "KURA_INHERIT=", 13) || !strncmp(envp[i], "KURA_CWD=", 9))
			continue;
		if (!strncmp(envp[i], "LD_PRELOAD=", 11)) {
			old_preload = envp[i] + 11;
			continue;
		}
		env[k++] = envp[i];
	}
	if (self_path[0] && (!old_preload || !strstr(old_preload, self_path))) {
		if (asprintf(&preload, "LD_PRELOAD=%s%s%s", self_path, old_preload && *old_preload ? " " : "",
			     old_preload ? old_preload : "") > 0)
			env[k++] = preload;
	} else if (old_preload) {
		env[k++] = (char *)old_preload - 11;
	}
	for (int i = 0; i < 4; i++)
		if (saved_env[i] && !env_has(env, saved_names[i], strlen(saved_names[i])))
			env[k++] = saved_env[i];
	if (kp_vcwd[0] && asprintf(&cwd, "KURA_CWD=%s", kp_vcwd) > 0)
		env[k++] = cwd;
	struct inh h;
	strcpy(h.buf, "KURA_INHERIT=");
	h.len = strlen(h.buf);
	for (int m = 0; m < kp_nmounts; m++) {
		if (!kp_mounts[m].fs)
			continue;
		size_t mark = h.len;
		int w = snprintf(h.buf + h.len, sizeof h.buf - h.len, "%s%d:%d:", mark > 13 ? ";" : "", m,
				 kura_state_fd(kp_mounts[m].fs));
		if (w <= 0 || (size_t)w >= sizeof h.buf - h.len)
			break;
		h.len += (size_t)w;
		h.mnt = m;
		kp_foreach(add_fd, &h);
		if (h.buf[h.len - 1] == ':')
			h.len = mark; /* nothing to hand over from this mount */
		else /* the engine keeps it close-on-exec except for this hand-over */
			REAL(fcntl)(kura_state_fd(kp_mounts[m].fs), F_SETFD, 0);
		h.buf[h.len] = '\0';
	}
	if (h.len > 13 && (inherit = strdup(h.buf)))
		env[k++] = inherit;
	env[k] = NULL;
	*extra_out = NULL;
	(void)preload;
	return env;
}

/* After a failed exec: the state memfds go back to close-on-exec. */
static void exec_failed(char **env)
{
	int er = errno;
	for (int m = 0; m < kp_nmounts; m++)
		if (kp_mounts[m].fs)
			REAL(fcntl)(kura_state_fd(kp_mounts[m].fs), F_SETFD, FD_CLOEXEC);
	free(env);
	errno = er;
}

/* Executes a file stored in the pool: the kernel cannot read it, so its
 * bytes go to a memfd first (not close-on-exec: a script's interpreter
 * opens it again through /proc/self/fd). */
static int exec_kura_file(const char *path, char *const argv[], char **env)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	struct stat st;
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(in);
		errno = EACCES;
		return -1;
	}
	if (access(path, X_OK) < 0) {
		close(in);
		return -1;
	}
	int mfd = memfd_create("exec-from-pool", 0);
	if (mfd < 0) {
		close(in);
		return -1;
	}
	char buf[65536];
	ssize_t r;
	while ((r = read(in, buf, sizeof buf)) > 0)
		if (REAL(write)(mfd, buf, (size_t)r) != r) {
			r = -1;
			break;
		}
	close(in);
	if (r < 0) {
		REAL(close)(mfd);
		return -1;
	}
	syscall(SYS_execveat, mfd, "", argv, env, AT_EMPTY_PATH);
	int er = errno;
	REAL(close)(mfd);
	errno = er;
	return -1;
}

KP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct kp_path kp;
	int r = kp_resolve(AT_FDCWD, path, &kp);
	if (r)
		return (int)kp_ret(r);
	char *extra;
	char **env = build_env(envp, &extra);
	if (!env)
		return -1;
	if (kp.where == KP_KURA)
		exec_kura_file(path, argv, env);
	else
		REAL(execve)(kp.p, argv, env);
	exec_failed(env);
	return -1;
}

KP_EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

KP_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	if (!KP_NN(file) || !*file) {
		errno = ENOENT;
		return -1;
	}
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		if (errno == ENOEXEC)
			goto script_direct;
		return -1;
	}
	const char *pathv = getenv("PATH");
	if (!pathv)
		pathv = "/bin:/usr/bin";
	int eacces = 0;
	size_t fl = strlen(file);
	for (const char *p = pathv;;) {
		const char *end = strchrnul(p, ':'), *dir = p;
		size_t dl = (size_t)(end - p);
		if (dl == 0) { /* an empty element is the current directory */
			dir = ".";
			dl = 1;
		}
		char cand[PATH_MAX];
		if (dl + 1 + fl < sizeof cand) {
			memcpy(cand, dir, dl);
			cand[dl] = '/';
			memcpy(cand + dl + 1, file, fl + 1);
			struct stat st;
			if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
				if (access(cand, X_OK) == 0) {
					execve(cand, argv, envp);
					if (errno == ENOEXEC) {
						file = cand;
						goto script;
					}
				}
				eacces = 1;
			}
		}
		if (!*end)
			break;
		p = end + 1;
	}
	errno = eacces ? EACCES : ENOENT;
	return -1;
script_direct:
script: {
	/* As glibc: a file without a #! line is a shell script. */
	size_t argc = 0;
	while (argv[argc])
		argc++;
	char **nv = calloc(argc + 2, sizeof *nv);
	if (!nv)
		return -1;
	nv[0] = (char *)"/bin/sh";
	nv[1] = (char *)file;
	for (size_t i = 1; i <= argc; i++)
		nv[i + 1] = argv[i];
	execve("/bin/sh", nv, envp);
	free(nv);
	return -1;
}
}

KP_EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

static char **collect(const char *arg0, va_list ap, char ***envp)
{
	size_t cap = 16, n = 0;
	char **v = malloc(cap * sizeof *v);
	if (!v)
		return NULL;
	v[n++] = (char *)arg0;
	for (;;) {
		char *a = va_arg(ap, char *);
		if (n == cap) {
			char **nv = realloc(v, (cap *= 2) * sizeof *v);
			if (!nv) {
				free(v);
				return NULL;
			}
			v = nv;
		}
		v[n++] = a;
		if (!a)
			break;
	}
	if (envp)
		*envp = va_arg(ap, char **);
	return v;
}

KP_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	char **v = collect(arg, ap, NULL);
	va_end(ap);
	if (!v)
		return -1;
	execve(path, v, environ);
	free(v);
	return -1;
}

KP_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	char **v = collect(arg, ap, NULL);
	va_end(ap);
	if (!v)
		return -1;
	execvpe(file, v, environ);
	free(v);
	return -1;
}

KP_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	char **envp;
	char **v = collect(arg, ap, &envp);
	va_end(ap);
	if (!v)
		return -1;
	execve(path, v, envp);
	free(v);
	return -1;
}

KP_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	char *extra;
	struct kp_fd *e = kp_get(fd);
	if (e) {
		if (!e->path)
			return kp_unsupported("fexecve of a kura descriptor", ENOSYS);
		char **env = build_env(envp, &extra);
		if (env) {
			exec_kura_file(e->path, argv, env);
			exec_failed(env);
		}
		return -1;
	}
	char **env = build_env(envp, &extra);
	if (!env)
		return -1;
	REAL(fexecve)(fd, argv, env);
	exec_failed(env);
	return -1;
}

KP_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	struct kp_path kp;
	int r = kp_resolve(dirfd, path, &kp);
	if (r)
		return (int)kp_ret(r);
	if (kp.where == KP_KURA && kp.host[0]) {
		char host[PATH_MAX];
		snprintf(host, sizeof host, "%s", kp.host);
		return execve(host, argv, envp);
	}
	if (kp_get(dirfd))
		return kp_unsupported("execveat relative to a kura directory", ENOSYS);
	char *extra;
	char **env = build_env(envp, &extra);
	if (!env)
		return -1;
	syscall(SYS_execveat, kp.where == KP_KERNEL ? dirfd : AT_FDCWD, kp.p, argv, env, flags);
	exec_failed(env);
	return -1;
}

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

static int must_emulate(const posix_spawn_file_actions_t *fa)
{
	int any = kp_vcwd[0] != 0;
	if (!any)
		kp_foreach(any_fd, &any);
	if (!any && fa) {
		const struct spawn_action *a = (const void *)fa->__actions;
		for (int i = 0; i < fa->__used && !any; i++)
			if (a[i].tag == do_open || a[i].tag == do_chdir) {
				struct kp_path kp;
				const char *p = a[i].tag == do_open ? a[i].action.open_action.path
								   : a[i].action.chdir_action.path;
				any = kp_resolve(AT_FDCWD, p, &kp) == 0 && kp.where == KP_KURA;
			}
	}
	return any;
}

static int spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *at, char *const argv[], char *const envp[], int usepath)
{
	kp_config();
	if (!must_emulate(fa)) {
		char *extra;
		char **env = build_env(envp ? envp : environ, &extra);
		if (!env)
			return errno;
		int r = usepath ? REAL(posix_spawnp)(pid, path, fa, at, argv, env)
				: REAL(posix_spawn)(pid, path, fa, at, argv, env);
		exec_failed(env); /* the parent goes on either way */
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
	pthread_mutex_lock(&plock);
	pc->next = pchildren;
	pchildren = pc;
	pthread_mutex_unlock(&plock);
	return f;
}

KP_EXPORT int pclose(FILE *f)
{
	pthread_mutex_lock(&plock);
	struct pchild **pp = &pchildren, *pc = NULL;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->f == f) {
			pc = *pp;
			*pp = pc->next;
			break;
		}
	pthread_mutex_unlock(&plock);
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

/* ---- the new image's side ---- */

void kp_inherit(void)
{
	save_env();
	const char *cwd = getenv("KURA_CWD");
	if (cwd && kp_mount_of(cwd) >= 0)
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", cwd);
	const char *inh = getenv("KURA_INHERIT");
	if (!inh) {
		unsetenv("KURA_CWD");
		return;
	}
	char *copy = strdup(inh);
	/* Grandchildren exec'd behind our back must not see a stale list. */
	unsetenv("KURA_INHERIT");
	unsetenv("KURA_CWD");
	if (!copy)
		return;
	char *save = NULL;
	for (char *grp = strtok_r(copy, ";", &save); grp; grp = strtok_r(NULL, ";", &save)) {
		char *end;
		long m = strtol(grp, &end, 10);
		if (*end != ':' || m < 0 || m >= kp_nmounts)
			continue;
		long sfd = strtol(end + 1, &end, 10);
		if (*end != ':')
			continue;
		char *list = end + 1;
		struct kura_mount_opts opts = { .persist = KURA_PERSIST_AUTO };
		int err = 0;
		kp_inside++;
		kura_fs *fs = kura_mount_inherit(kp_mounts[m].pool, &opts, (int)sfd, &err);
		kp_inside--;
		if (!fs) {
			kp_debug("inherit %s: %s", kp_mounts[m].pool, kura_last_error());
			continue;
		}
		kp_set_fs((int)m, fs);
		char *s2 = NULL;
		for (char *it = strtok_r(list, ",", &s2); it; it = strtok_r(NULL, ",", &s2)) {
			long fd = strtol(it, &end, 10);
			if (*end != '=')
				continue;
			long id = strtol(end + 1, NULL, 10);
			int kfd = kura_fd_import(fs, id);
			if (kfd < 0) {
				kp_debug("inherit fd %ld (id %ld): %s", fd, id, strerror(-kfd));
				continue;
			}
			struct stat st;
			int isdir = kura_fstat(fs, kfd, &st) == 0 && S_ISDIR(st.st_mode);
			kp_attach((int)fd, (int)m, kfd, NULL, isdir);
		}
	}
	free(copy);
}

/* ---- dlopen of a library stored in the pool ----
 * ld.so reads libraries with its own system calls, so a library under the
 * prefix is copied to a memfd and loaded through /proc/self/fd.  Libraries
 * it names in DT_NEEDED are looked up by ld.so itself and must be on the
 * host. */
static int copy_to_memfd(const char *path)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	int mfd = memfd_create("dlopen-from-pool", MFD_CLOEXEC);
	if (mfd < 0) {
		close(in);
		return -1;
	}
	char buf[65536];
	ssize_t r;
	while ((r = read(in, buf, sizeof buf)) > 0)
		if (REAL(write)(mfd, buf, (size_t)r) != r) {
			r = -1;
			break;
		}
	close(in);
	if (r < 0) {
		REAL(close)(mfd);
		return -1;
	}
	return mfd;
}

KP_EXPORT void *dlopen(const char *file, int mode)
{
	struct kp_path kp;
	if (!KP_NN(file) || !strchr(file, '/') || kp_resolve(AT_FDCWD, file, &kp) != 0 || kp.where != KP_KURA)
		return REAL(dlopen)(file, mode);
	int mfd = copy_to_memfd(file);
	if (mfd < 0)
		return NULL; /* dlerror() stays empty; errno tells why */
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", mfd);
	void *h = REAL(dlopen)(proc, mode);
	REAL(close)(mfd); /* the mapping keeps the memfd's pages */
	return h;
}
