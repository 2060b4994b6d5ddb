/*
 * fdtab.c — kernel fd -> kura descriptor table, and the placeholders.
 *
 * Each kura descriptor is backed by a real kernel descriptor: a sealed, empty
 * memfd.  The kernel stays the only allocator of numbers, so lowest-free
 * numbering, dup2 onto 0/1/2, O_CLOEXEC, close_range and inheritance across
 * fork/exec keep working even inside code we never see (posix_spawn
 * children, glibc internals).  A kernel write that slipped past the wrappers
 * fails with EPERM instead of landing silently somewhere.
 *
 * The table is indexed by kernel fd, two levels of 1024 entries allocated on
 * demand and never freed, so a reader needs no lock; changes hold tab_lock.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kp.h"

#define CHUNK 1024
#define NCHUNKS 1024 /* fds up to 1M, the kernel's nr_open default */

static struct kp_fd *chunks[NCHUNKS];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *std_orig[3];

pthread_mutex_t *kp_tab_lock(void)
{
	return &tab_lock;
}

struct kp_fd *kp_get(int fd)
{
	if (fd < 0 || fd >= CHUNK * NCHUNKS)
		return NULL;
	struct kp_fd *c = __atomic_load_n(&chunks[fd / CHUNK], __ATOMIC_ACQUIRE);
	if (!c)
		return NULL;
	struct kp_fd *e = &c[fd % CHUNK];
	return __atomic_load_n(&e->used, __ATOMIC_ACQUIRE) ? e : NULL;
}

static struct kp_fd *slot(int fd)
{
	if (fd < 0 || fd >= CHUNK * NCHUNKS)
		return NULL;
	struct kp_fd *c = chunks[fd / CHUNK];
	if (!c) {
		c = calloc(CHUNK, sizeof *c);
		if (!c)
			return NULL;
		__atomic_store_n(&chunks[fd / CHUNK], c, __ATOMIC_RELEASE);
	}
	return &c[fd % CHUNK];
}

int kp_attach(int fd, int mnt, int kfd, const char *path, int isdir)
{
	pthread_mutex_lock(&tab_lock);
	struct kp_fd *e = slot(fd);
	if (!e) {
		pthread_mutex_unlock(&tab_lock);
		return -EMFILE;
	}
	if (e->used) { /* a stale entry: its kernel fd was closed behind our back */
		kura_close(kp_fs(e->mnt), e->kfd);
		free(e->path);
	}
	e->kfd = kfd;
	e->mnt = mnt;
	e->dir = NULL;
	e->path = path ? strdup(path) : NULL;
	e->isdir = isdir;
	__atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&tab_lock);
	kp_std_fixup(fd);
	return 0;
}

int kp_install(int mnt, int kfd, int cloexec, const char *path, int isdir)
{
	int fd = memfd_create("kura", MFD_ALLOW_SEALING | (cloexec ? MFD_CLOEXEC : 0));
	if (fd < 0) {
		int e = errno;
		kura_close(kp_fs(mnt), kfd);
		errno = e;
		return -1;
	}
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	int r = kp_attach(fd, mnt, kfd, path, isdir);
	if (r < 0) {
		REAL(close)(fd);
		kura_close(kp_fs(mnt), kfd);
		errno = -r;
		return -1;
	}
	return fd;
}

void kp_release(int fd)
{
	pthread_mutex_lock(&tab_lock);
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		pthread_mutex_unlock(&tab_lock);
		return;
	}
	kura_fs *fs = kp_mounts[e->mnt].fs;
	kp_lock_close(fd, e);
	__atomic_store_n(&e->used, 0, __ATOMIC_RELEASE);
	if (e->dir)
		kura_closedir(e->dir); /* reads its own duplicate of kfd */
	kura_close(fs, e->kfd);
	e->dir = NULL;
	free(e->path);
	e->path = NULL;
	pthread_mutex_unlock(&tab_lock);
}

void kp_foreach(void (*f)(int fd, struct kp_fd *e, void *arg), void *arg)
{
	for (int c = 0; c < NCHUNKS; c++) {
		struct kp_fd *ch = __atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE);
		if (!ch)
			continue;
		for (int i = 0; i < CHUNK; i++)
			if (__atomic_load_n(&ch[i].used, __ATOMIC_ACQUIRE))
				f(c * CHUNK + i, &ch[i], arg);
	}
}

static FILE **std_var(int fd)
{
	return fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
}

void kp_std_preflush(int fd)
{
	if (fd >= 1 && fd <= 2 && *std_var(fd))
		fflush(*std_var(fd));
}

/* stdout is a copy-relocated global shared by the executable and libc, so
 * assigning it redirects printf and friends of everyone. */
void kp_std_fixup(int fd)
{
	if (fd < 0 || fd > 2)
		return;
	FILE **v = std_var(fd);
	int ours = *v && kp_is_stream(*v);
	if (kp_get(fd)) {
		if (ours)
			return; /* our stream reads fd by number, whatever it now is */
		FILE *f = kp_std_stream(fd);
		if (!f)
			return;
		if (*v)
			fflush(*v);
		if (!std_orig[fd])
			std_orig[fd] = *v;
		*v = f;
	} else if (ours && std_orig[fd]) {
		FILE *old = *v;
		*v = std_orig[fd];
		kp_stream_detach(old);
	}
}

/* ---- the engine's own descriptors ----
 * The engine opens the pool, its lock table and its descriptor-table memfd
 * while mounting (kp_inside > 0).  Left at the lowest free numbers they
 * would sit on 3, 4, 5, where shells and scripts put their own files
 * (`exec 3>file` would silently replace the pool's descriptor), so they are
 * moved to the top of the descriptor range, as GekkoFS does. */
#include <sys/resource.h>

int kp_relocate(int fd)
{
	if (fd < 0 || kp_inside <= 0)
		return fd;
	struct rlimit rl;
	long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 1024;
	if (top > (1 << 20))
		top = 1 << 20;
	long want = top - 64;
	if (want <= fd)
		return fd;
	int cl = REAL(fcntl)(fd, F_GETFD);
	int nfd = REAL(fcntl)(fd, (cl >= 0 && (cl & FD_CLOEXEC)) ? F_DUPFD_CLOEXEC : F_DUPFD, (int)want);
	if (nfd < 0)
		return fd;
	REAL(close)(fd);
	return nfd;
}

KP_EXPORT int memfd_create(const char *name, unsigned flags)
{
	return kp_relocate(REAL(memfd_create)(name, flags));
}

KP_EXPORT int shm_open(const char *name, int flags, mode_t mode)
{
	return kp_relocate(REAL(shm_open)(name, flags, mode));
}
