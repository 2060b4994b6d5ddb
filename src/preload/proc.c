/*
 * proc.c — the exec family, _exit, and running a program stored in a pool.
 * What an exec hands the new image (the environment, the descriptors) is
 * handover.c's; vfork, posix_spawn, system and popen are in spawn.c.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kp.h"

extern char **environ;

static void release_fd(int fd, struct kp_fd *e, void *arg)
{
	(void)e;
	(void)arg;
	kp_release(fd);
}

/* _exit ends a process without the destructors that let go of its kura
 * descriptors and maps: the kernel closes the placeholders, but the
 * engine's references (a forked child holds one per description, as the
 * kernel's child does) would outlive the process until the pool is next
 * mounted alone, keeping unlinked files allocated.  A forked child that
 * ends with _exit (after a failed exec, a worker of Python's
 * multiprocessing) is the usual case.  _exit may be called from a signal
 * handler that interrupted the layer or the engine, whose locks are not
 * async-signal-safe: then nothing is released (the thread might wait for
 * itself).  _exit flushes no stdio buffers, so none can need a descriptor
 * afterwards. */
static void exit_release(void)
{
	if (kp_inside)
		return;
	for (int i = 0; i < kp_nmounts; i++)
		if (kp_mounts[i].fs && kura_in_operation(kp_mounts[i].fs))
			return;
	kp_release_all();
}

/* Every descriptor and map of this process lets go of the engine: the end
 * of the process (see exit_release and config.c's destructor). */
void kp_release_all(void)
{
	kp_map_exit();
	pthread_mutex_t *tab = kp_tab_lock();
	if (pthread_mutex_trylock(tab))
		return;
	pthread_mutex_unlock(tab);
	kp_foreach(release_fd, NULL);
}

KP_EXPORT void _exit(int status)
{
	exit_release();
	REAL(_exit)(status);
	__builtin_unreachable();
}

KP_EXPORT void _Exit(int status)
{
	exit_release();
	REAL(_Exit)(status);
	__builtin_unreachable();
}

/* Copies in to out until the end: 0, or -1 with errno. */
ssize_t kp_copy_all(int in, int out)
{
	/* On the heap: a thread with a small stack may exec a pool file. */
	char small[512], *big = malloc(65536), *buf = big ? big : small;
	size_t cap = big ? 65536 : sizeof small;
	ssize_t r;
	while ((r = read(in, buf, cap)) > 0)
		if (REAL(write)(out, buf, (size_t)r) != r) {
			r = -1;
			break;
		}
	int saved = errno;
	free(big);
	errno = saved;
	return r < 0 ? -1 : 0;
}

/* A file stored in the pool cannot be executed by the kernel: its bytes go
 * to a memfd first.  A script's interpreter opens it again through
 * /proc/self/fd, so its copy stays open across the exec; a binary's closes
 * then, and the program runs from it: it is recorded as executing the pool
 * file (txtbsy.c, *mark) before the copy is made.  Done before
 * kp_build_env hides close-on-exec descriptors, in is one of them.
 * Returns the memfd, or -1 (ETXTBSY if this process has it open for
 * writing, as the kernel refuses). */
static int memfd_of(int in, int *mark)
{
	*mark = 0;
	struct kp_fd *e = kp_get(in);
	int64_t ino = e ? kura_fd_ino(kp_mounts[e->mnt].fs, e->kfd) : -1;
	if (ino > 0 && kp_exec_writing(e->mnt, (uint64_t)ino)) {
		errno = ETXTBSY;
		return -1;
	}
	char head[4] = { 0 };
	int binary = pread(in, head, sizeof head, 0) == (ssize_t)sizeof head && !memcmp(head, ELFMAG, SELFMAG);
	int mfd = memfd_create("exec-from-pool", binary ? MFD_CLOEXEC : 0);
	if (mfd < 0)
		return -1;
	if (binary && ino > 0)
		*mark = kp_exec_mark(e->mnt, (uint64_t)ino, mfd);
	ssize_t r = kp_copy_all(in, mfd);
	if (r < 0) {
		int er = errno;
		if (*mark)
			kp_exec_unmark(e->mnt, *mark);
		REAL(close)(mfd);
		errno = er;
		return -1;
	}
	return mfd;
}

/* After an exec from a copy failed: the copy goes, and so does its record. */
static void copy_failed(int mfd, int in_mnt, int mark)
{
	int er = errno;
	if (mark)
		kp_exec_unmark(in_mnt, mark);
	REAL(close)(mfd);
	errno = er;
}

static int kura_exec_memfd(const char *path, int *mnt, int *mark)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -1;
	struct kp_fd *e = kp_get(in);
	*mnt = e ? e->mnt : 0;
	struct stat st;
	int mfd = -1;
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
		errno = EACCES;
	else if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0) /* as exec: the effective ids */
		mfd = memfd_of(in, mark);
	int er = errno;
	close(in);
	errno = er;
	return mfd;
}

/* The pool path /proc/self/exe should name in the new image: a binary's
 * (a script's names its interpreter, as the kernel has it). */
static const char *pool_exe(int mfd, const char *path)
{
	char head[SELFMAG];
	return pread(mfd, head, SELFMAG, 0) == SELFMAG && !memcmp(head, ELFMAG, SELFMAG) ? path : NULL;
}

static void exec_memfd(int mfd, char *const argv[], char **env)
{
	kp_syscall(SYS_execveat, mfd, "", argv, env, AT_EMPTY_PATH);
}

/* A script whose "#!" names an interpreter in a pool: the kernel would look
 * the interpreter up in its own namespace and fail ("required file not
 * found": a venv's pip, say, whose interpreter is the venv's python).  And
 * a script in a pool run by the kernel from a copy would be /dev/fd/N to
 * its interpreter: "$0" and sys.argv[0] would not be its path, and scripts
 * that find their files beside themselves would not.  So unless the
 * interpreter is one the layer cannot run in (static, set-id), the layer
 * does what the kernel's binfmt_script does instead, as it does it:
 * the line is read up to 255 bytes, the interpreter is its first word and
 * one optional argument the rest, and the interpreter runs with argv
 * [interpreter, argument, the path given to execve, argv[1]...].  That
 * exec goes through execve again, which runs a pool binary from a copy,
 * and the interpreter finds the script by its path, since the layer runs
 * in it too.  Returns 0 when the kernel can do it itself (no such script),
 * else -1 with errno (the exec failed). */
static int exec_pool_interpreter(const char *path, int script_in_pool, char *const argv[], char *const envp[])
{
	static __thread int depth;
	char head[256];
	struct stat st;
	/* Regular files only: opening a FIFO or a device has effects of its
	 * own, and exec refuses them anyway. */
	if (stat(path, &st) || !S_ISREG(st.st_mode))
		return 0;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, head, sizeof head - 1, 0) : -1;
	close(fd);
	if (n < 3 || head[0] != '#' || head[1] != '!')
		return 0;
	head[n] = '\0';
	char *s = head + 2, *end = strchr(s, '\n');
	if (end)
		*end = '\0';
	while (*s == ' ' || *s == '\t')
		s++;
	char *interp = s;
	while (*s && *s != ' ' && *s != '\t')
		s++;
	if (!end && !*s)
		return 0; /* the name may go on past the line the kernel reads: its ENOEXEC */
	char *arg = NULL;
	if (*s) {
		*s++ = '\0';
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s) {
			arg = s;
			for (char *t = s + strlen(s); t > s && (t[-1] == ' ' || t[-1] == '\t');)
				*--t = '\0';
		}
	}
	struct kp_path kp;
	if (!*interp || kp_classify(AT_FDCWD, interp, &kp))
		return 0;
	if (kp.where != KP_KURA && (!script_in_pool || !kp_preloadable(AT_FDCWD, kp.p)))
		return 0;
	if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS)) /* the script's own right to run */
		return -1;
	if (depth >= 4) { /* as the kernel: an interpreter that is a script, at most four deep */
		errno = ELOOP;
		return -1;
	}
	size_t argc = 0;
	while (argv && argv[argc])
		argc++;
	char **nargv = malloc((argc + 3) * sizeof *nargv);
	if (!nargv)
		return -1;
	size_t k = 0;
	nargv[k++] = interp;
	if (arg)
		nargv[k++] = arg;
	nargv[k++] = (char *)path;
	for (size_t i = 1; i < argc; i++)
		nargv[k++] = argv[i];
	nargv[k] = NULL;
	depth++;
	execve(interp, nargv, envp);
	depth--;
	int er = errno;
	free(nargv);
	errno = er;
	return -1;
}

KP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct kp_path kp;
	int r = kp_resolve(AT_FDCWD, path, &kp);
	if (r)
		return (int)kp_ret(r);
	if (exec_pool_interpreter(path, kp.where == KP_KURA, argv, envp))
		return -1;
again:;
	int mfd = -1, mnt = 0, mark = 0;
	if (kp.where == KP_KURA && (mfd = kura_exec_memfd(kp.hops ? kp.host : path, &mnt, &mark)) < 0)
		return -1;
	int preloadable = mfd >= 0 ? kp_preloadable(mfd, NULL) : kp_preloadable(AT_FDCWD, kp.p);
	char *libdir = NULL, **libenv = preloadable && kp_ldlibs_wanted(mfd >= 0, envp)
						? kp_ldlibs_env(mfd >= 0 ? (kp.hops ? kp.host : path) : kp.p, envp, &libdir)
						: NULL;
	char **env = kp_build_env(libenv ? libenv : envp, preloadable, mfd >= 0 ? pool_exe(mfd, kp.host) : NULL);
	if (!env) {
		kp_ldlibs_failed(libenv, libdir);
		if (mfd >= 0)
			copy_failed(mfd, mnt, mark);
		return -1;
	}
	if (mfd >= 0)
		exec_memfd(mfd, argv, env);
	else
		REAL(execve)(kp.p, argv, env);
	kp_exec_failed(env);
	kp_ldlibs_failed(libenv, libdir);
	if (mfd >= 0)
		copy_failed(mfd, mnt, mark);
	/* A binary in the pool reached through a host symlink. */
	if (mfd < 0 && KP_HOST_MISS() && kp_host_resolve(&kp, AT_FDCWD))
		goto again;
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
			int found = stat(cand, &st) == 0;
			if (!found && errno == EACCES)
				eacces = 1; /* as glibc: an unsearchable directory on the way */
			if (found && S_ISREG(st.st_mode)) {
				if (eaccess(cand, X_OK) == 0) { /* as the exec will judge */
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
	struct kp_fd *e = kp_get(fd);
	if (e) {
		/* From the descriptor's own file (it may have no name left). */
		struct stat st;
		if (kura_fstat(kp_mounts[e->mnt].fs, e->kfd, &st) < 0 || !S_ISREG(st.st_mode) ||
		    !(st.st_mode & 0111)) {
			errno = EACCES;
			return -1;
		}
		char proc[64];
		snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
		int in = open(proc, O_RDONLY | O_CLOEXEC);
		if (in < 0)
			return -1;
		int mark;
		int mfd = memfd_of(in, &mark);
		int er = errno;
		close(in);
		errno = er;
		if (mfd < 0)
			return -1;
		int preloadable = kp_preloadable(mfd, NULL);
		char *libdir = NULL, **libenv = preloadable && e->path ? kp_ldlibs_env(e->path, envp, &libdir) : NULL;
		char **env = kp_build_env(libenv ? libenv : envp, preloadable, pool_exe(mfd, e->path));
		if (env) {
			exec_memfd(mfd, argv, env);
			kp_exec_failed(env);
		}
		kp_ldlibs_failed(libenv, libdir);
		copy_failed(mfd, e->mnt, mark);
		return -1;
	}
	char **env = kp_build_env(envp, kp_preloadable(fd, NULL), NULL);
	if (!env)
		return -1;
	REAL(fexecve)(fd, argv, env);
	kp_exec_failed(env);
	return -1;
}

KP_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	if (KP_PATH_OK(path) && !*path && kp_get(dirfd)) {
		if (!(flags & AT_EMPTY_PATH)) {
			errno = ENOENT;
			return -1;
		}
		return fexecve(dirfd, argv, envp); /* the descriptor's own file */
	}
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
	int kdir = kp.where == KP_KERNEL ? dirfd : AT_FDCWD;
	char **env = kp_build_env(envp, kp_preloadable(kdir, kp.p), NULL);
	if (!env)
		return -1;
	kp_syscall(SYS_execveat, kp.where == KP_KERNEL ? dirfd : AT_FDCWD, kp.p, argv, env, flags);
	kp_exec_failed(env);
	if (!(flags & AT_SYMLINK_NOFOLLOW) && KP_HOST_MISS() && kp_host_resolve(&kp, kdir))
		return execve(kp.where == KP_KURA ? kp.host : kp.p, argv, envp);
	return -1;
}
