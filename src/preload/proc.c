/*
 * proc.c — fork and exec*: what crosses into a new program image.
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
 *   KURA_INHERIT=<mount>:<state fd>:<item>,...;<mount>:...
 *   item: <fd>=<id>[@<percent-encoded path>]  a descriptor to adopt
 *         x<id>                             a close-on-exec one to drop
 * The kernel closes only the placeholders of close-on-exec descriptors, and
 * only if the exec succeeds; so their engine descriptors are kept (hidden)
 * through the exec, the new image drops their references, and a failed
 * exec puts them back.  The constructor of the new image (kp_inherit)
 * remaps the engine from the state memfd and adopts or drops each id.
 *
 * vfork, posix_spawn, system and popen are in spawn.c.
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

/* A growable string (KURA_INHERIT can carry many paths). */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
	for (int pass = 0; pass < 2 && !b->oom; pass++) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
}

/* Paths travel percent-encoded: ',', ';', '@', '=' separate the list. */
static void sb_add_path(struct sbuf *b, const char *path)
{
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    strchr("/._-+~", *c))
			sb_add(b, "%c", *c);
		else
			sb_add(b, "%%%02X", *c);
	}
}

static void decode_path(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '%' && s[1] && s[2]) {
			char hex[3] = { s[1], s[2], 0 };
			*o++ = (char)strtol(hex, NULL, 16);
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Close-on-exec kura descriptors while an exec is under way.  The kernel
 * closes their placeholders only if the exec succeeds, and then nothing of
 * this image runs any more; so they are hidden from the table (their
 * locks dropped as at a close, since a successful exec closes them) but
 * their engine descriptors stay, and the new image drops the references
 * (KURA_INHERIT "x<id>").  A failed exec puts them back unchanged. */
struct hidden {
	int fd;
	int kfd;
	struct kp_fd *e;
};
static __thread struct hidden *hid;
static __thread size_t nhid, caphid;

static int hide(int fd, struct kp_fd *e)
{
	if (nhid == caphid) {
		size_t cap = caphid ? caphid * 2 : 16;
		struct hidden *h = realloc(hid, cap * sizeof *h);
		if (!h)
			return -1;
		hid = h;
		caphid = cap;
	}
	pthread_mutex_lock(kp_tab_lock());
	kp_lock_close(fd, e);
	/* One at a time, so a later descriptor of the same description sees
	 * the earlier ones gone, as a sequence of closes would. */
	__atomic_store_n(&e->used, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(kp_tab_lock());
	hid[nhid++] = (struct hidden){ fd, e->kfd, e };
	return 0;
}

static void unhide_all(void)
{
	pthread_mutex_lock(kp_tab_lock());
	for (size_t i = 0; i < nhid; i++) {
		struct kp_fd *e = hid[i].e;
		/* Unless another thread attached something to the number meanwhile. */
		if (!e->used && e->kfd == hid[i].kfd)
			__atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(kp_tab_lock());
	nhid = 0;
}

struct inh {
	struct sbuf *b;
	int mnt;
	int any;
	int keep_cloexec; /* hide close-on-exec descriptors (else close them now) */
};

static void add_fd(int fd, struct kp_fd *e, void *arg)
{
	struct inh *h = arg;
	if (e->mnt != h->mnt)
		return;
	long id = kura_fd_export(kp_mounts[e->mnt].fs, e->kfd);
	if (id < 0)
		return;
	int cl = REAL(fcntl)(fd, F_GETFD);
	if (cl < 0 || (cl & FD_CLOEXEC)) {
		if (!h->keep_cloexec || hide(fd, e) < 0) {
			kp_release(fd); /* closed now: the kernel drops the placeholder at exec */
			return;
		}
		sb_add(h->b, "%sx%ld", h->any++ ? "," : "", id);
		return;
	}
	sb_add(h->b, "%s%d=%ld", h->any++ ? "," : "", fd, id);
	/* Paths are a nicety (readlink): past 64 KiB they are left out, well
	 * below the kernel's 128 KiB limit on one environment string. */
	if (e->path && h->b->len < 65536) {
		sb_add(h->b, "@");
		sb_add_path(h->b, e->path);
	}
}

/* Will the new image run this layer?  Not if it is statically linked (no
 * PT_INTERP) or set-id for someone else (LD_PRELOAD ignored): then nothing
 * there would drop the references of close-on-exec descriptors, so they
 * are closed before the exec, as a failed exec then cannot undo.  When in
 * doubt (unreadable file), yes: the exec likely fails, and the descriptors
 * must survive that.  path NULL or "": the file open as fd. */
static int preloadable(int fd, const char *path)
{
	int own = 0;
	if (path && KP_PATH_OK(path) && *path) {
		fd = REAL(openat)(fd, path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 1;
		own = 1;
	}
	struct stat st;
	unsigned char b[1024];
	ssize_t n = -1;
	int yes = 1;
	if (fstat(fd, &st) == 0) {
		if (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) || ((st.st_mode & S_ISGID) && st.st_gid != getegid()))
			yes = 0;
		else
			n = pread(fd, b, sizeof b, 0);
	}
	if (yes && n >= (ssize_t)sizeof(Elf64_Ehdr) && !memcmp(b, ELFMAG, SELFMAG) && b[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		memcpy(&eh, b, sizeof eh);
		yes = 0;
		for (unsigned i = 0; i < eh.e_phnum && !yes; i++) {
			uint64_t off = eh.e_phoff + (uint64_t)i * eh.e_phentsize;
			Elf64_Phdr ph;
			if (eh.e_phentsize < sizeof ph || off + sizeof ph > (uint64_t)n) {
				yes = 1; /* headers beyond what was read: assume the common case */
				break;
			}
			memcpy(&ph, b + off, sizeof ph);
			yes = ph.p_type == PT_INTERP;
		}
	}
	if (own)
		REAL(close)(fd);
	return yes;
}

/* The environment for a new image: envp plus what kura needs.  Hides the
 * close-on-exec kura descriptors (see above).  Returned array and strings
 * are leaked on success (exec replaces us); kp_exec_failed() frees the array
 * and restores the descriptors. */
char **kp_build_env(char *const *envp, int keep_cloexec)
{
	kp_config();
	size_t n = 0;
	while (envp && envp[n])
		n++;
	char **env = calloc(n + 12, sizeof *env);
	char *cwd = NULL, *preload = NULL;
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
	struct sbuf b = { 0 };
	sb_add(&b, "KURA_INHERIT=");
	size_t head = b.len;
	for (int m = 0; m < kp_nmounts; m++) {
		if (!kp_mounts[m].fs)
			continue;
		size_t mark = b.len;
		sb_add(&b, "%s%d:%d:", mark > head ? ";" : "", m, kura_state_fd(kp_mounts[m].fs));
		struct inh h = { &b, m, 0, keep_cloexec };
		kp_foreach(add_fd, &h);
		if (!h.any)
			b.len = mark; /* nothing to hand over from this mount */
		else /* the engine keeps it close-on-exec except for this hand-over */
			REAL(fcntl)(kura_state_fd(kp_mounts[m].fs), F_SETFD, 0);
		if (b.p)
			b.p[b.len] = '\0';
	}
	if (b.oom) {
		free(b.p);
		free(env);
		unhide_all();
		errno = ENOMEM;
		return NULL;
	}
	if (b.len > head)
		env[k++] = b.p; /* leaked with the rest on success */
	else
		free(b.p);
	env[k] = NULL;
	kp_map_exec(0); /* exec drops the maps; kp_exec_failed takes them back */
	return env;
}

/* After a failed exec: the state memfds go back to close-on-exec and the
 * hidden descriptors come back. */
void kp_exec_failed(char **env)
{
	int er = errno;
	for (int m = 0; m < kp_nmounts; m++)
		if (kp_mounts[m].fs)
			REAL(fcntl)(kura_state_fd(kp_mounts[m].fs), F_SETFD, FD_CLOEXEC);
	unhide_all();
	free(env);
	kp_map_exec(1);
	errno = er;
}

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
	char buf[65536];
	ssize_t r;
	while ((r = read(in, buf, sizeof buf)) > 0)
		if (REAL(write)(mfd, buf, (size_t)r) != r) {
			r = -1;
			break;
		}
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

static void exec_memfd(int mfd, char *const argv[], char **env)
{
	kp_syscall(SYS_execveat, mfd, "", argv, env, AT_EMPTY_PATH);
}

KP_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct kp_path kp;
	int r = kp_resolve(AT_FDCWD, path, &kp);
	if (r)
		return (int)kp_ret(r);
again:;
	int mfd = -1, mnt = 0, mark = 0;
	if (kp.where == KP_KURA && (mfd = kura_exec_memfd(kp.hops ? kp.host : path, &mnt, &mark)) < 0)
		return -1;
	char **env = kp_build_env(envp, mfd >= 0 ? preloadable(mfd, NULL) : preloadable(AT_FDCWD, kp.p));
	if (!env) {
		if (mfd >= 0)
			copy_failed(mfd, mnt, mark);
		return -1;
	}
	if (mfd >= 0)
		exec_memfd(mfd, argv, env);
	else
		REAL(execve)(kp.p, argv, env);
	kp_exec_failed(env);
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
		char **env = kp_build_env(envp, preloadable(mfd, NULL));
		if (!env) {
			copy_failed(mfd, e->mnt, mark);
			return -1;
		}
		exec_memfd(mfd, argv, env);
		kp_exec_failed(env);
		copy_failed(mfd, e->mnt, mark);
		return -1;
	}
	char **env = kp_build_env(envp, preloadable(fd, NULL));
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
	char **env = kp_build_env(envp, preloadable(kdir, kp.p));
	if (!env)
		return -1;
	kp_syscall(SYS_execveat, kp.where == KP_KERNEL ? dirfd : AT_FDCWD, kp.p, argv, env, flags);
	kp_exec_failed(env);
	if (!(flags & AT_SYMLINK_NOFOLLOW) && KP_HOST_MISS() && kp_host_resolve(&kp, kdir))
		return execve(kp.where == KP_KURA ? kp.host : kp.p, argv, envp);
	return -1;
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
			if (*it == 'x') {
				/* A close-on-exec descriptor of the old image: the
				 * exec succeeded, so its reference ends here. */
				int kfd = kura_fd_import(fs, strtol(it + 1, NULL, 10));
				if (kfd >= 0)
					kura_close(fs, kfd);
				continue;
			}
			long fd = strtol(it, &end, 10);
			if (*end != '=')
				continue;
			long id = strtol(end + 1, &end, 10);
			char *path = NULL;
			if (*end == '@') {
				path = end + 1;
				decode_path(path);
			}
			int kfd = kura_fd_import(fs, id);
			if (kfd < 0) {
				kp_debug("inherit fd %ld (id %ld): %s", fd, id, strerror(-kfd));
				continue;
			}
			struct stat st;
			int isdir = kura_fstat(fs, kfd, &st) == 0 && S_ISDIR(st.st_mode);
			kp_attach((int)fd, (int)m, kfd, path, isdir);
		}
	}
	free(copy);
}

/* ---- dlopen of a library stored in the pool ----
 * ld.so reads libraries with its own system calls, so a library under the
 * prefix is copied to a memfd and loaded through /proc/self/fd.  Libraries
 * it names in DT_NEEDED are looked up by ld.so itself and must be on the
 * host.
 *
 * ld.so knows a library it has loaded by the device and inode of what it
 * opened, so each pool file keeps its memfd (while its size and mtime stay
 * the same): a second dlopen of it, or one with RTLD_NOLOAD, finds the
 * same object instead of loading another copy with its own globals.
 * ld.so's messages name what it opened; dlerror() gives them back with the
 * name the program passed instead of /proc/self/fd/N. */
#define DL_COPIES 64
static struct dl_copy {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int mfd;
	ino_t mfd_ino; /* a program may close every descriptor: is mfd still ours? */
} dl_copies[DL_COPIES];
static int dl_ncopies;
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char dl_msg[1024];
static __thread int dl_msg_pending;

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
	int err = errno;
	close(in);
	if (r < 0) {
		REAL(close)(mfd);
		errno = err;
		return -1;
	}
	return mfd;
}

/* The memfd for path's current contents; *kept says the table holds it. */
static int library_copy(const char *path, int *kept)
{
	struct stat st;
	*kept = 0;
	if (stat(path, &st))
		return -1;
	pthread_mutex_lock(&dl_lock);
	for (int i = 0; i < dl_ncopies; i++) {
		struct dl_copy *c = &dl_copies[i];
		struct stat mst;
		if (REAL(fstat)(c->mfd, &mst) || mst.st_ino != c->mfd_ino) {
			*c = dl_copies[--dl_ncopies]; /* not ours now: not ours to close either */
			i--;
			continue;
		}
		if (c->dev == st.st_dev && c->ino == st.st_ino) {
			if (c->size == st.st_size && c->mtime.tv_sec == st.st_mtim.tv_sec &&
			    c->mtime.tv_nsec == st.st_mtim.tv_nsec) {
				*kept = 1;
				pthread_mutex_unlock(&dl_lock);
				return c->mfd;
			}
			/* Changed since: objects loaded from the old copy keep its pages. */
			REAL(close)(c->mfd);
			*c = dl_copies[--dl_ncopies];
			break;
		}
	}
	int mfd = copy_to_memfd(path);
	struct stat mst;
	if (mfd >= 0 && dl_ncopies < DL_COPIES && !REAL(fstat)(mfd, &mst)) {
		dl_copies[dl_ncopies++] = (struct dl_copy){ st.st_dev, st.st_ino, st.st_size, st.st_mtim, mfd, mst.st_ino };
		*kept = 1;
	}
	pthread_mutex_unlock(&dl_lock);
	return mfd;
}

/* ld.so's last message with proc replaced by name, for dlerror(). */
static void keep_message(const char *proc, const char *name)
{
	const char *e = REAL(dlerror)();
	if (!e)
		return;
	size_t plen = strlen(proc), at = 0;
	for (const char *p = e; *p && at + 1 < sizeof dl_msg;) {
		if (!strncmp(p, proc, plen) && (p[plen] < '0' || p[plen] > '9')) {
			at += (size_t)snprintf(dl_msg + at, sizeof dl_msg - at, "%s", name);
			if (at >= sizeof dl_msg)
				at = sizeof dl_msg - 1;
			p += plen;
		} else {
			dl_msg[at++] = *p++;
		}
	}
	dl_msg[at] = 0;
	dl_msg_pending = 1;
}

KP_EXPORT char *dlerror(void)
{
	if (dl_msg_pending) {
		dl_msg_pending = 0;
		return dl_msg;
	}
	return REAL(dlerror)();
}

KP_EXPORT void *dlopen(const char *file, int mode)
{
	struct kp_path kp;
	dl_msg_pending = 0;
	if (!KP_NN(file) || !strchr(file, '/') || kp_resolve(AT_FDCWD, file, &kp) != 0)
		return REAL(dlopen)(file, mode);
	if (kp.where != KP_KURA) /* kp.p: where a kura symlink led, if it left the pool */
		return REAL(dlopen)(kp.p, mode);
	int kept, mfd = library_copy(file, &kept);
	if (mfd < 0) {
		snprintf(dl_msg, sizeof dl_msg, "%s: cannot open shared object file: %s", file, strerror(errno));
		dl_msg_pending = 1;
		return NULL;
	}
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", mfd);
	void *h = REAL(dlopen)(proc, mode);
	if (!h)
		keep_message(proc, file);
	if (!kept)
		REAL(close)(mfd); /* the mapping keeps the memfd's pages */
	return h;
}
