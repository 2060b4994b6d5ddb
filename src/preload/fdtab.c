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
	if (!__atomic_load_n(&e->used, __ATOMIC_ACQUIRE))
		return NULL;
	kp_creds_sync(); /* the engine call that follows checks them */
	return e;
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
	sighold_lock(&tab_lock);
	struct kp_fd *e = slot(fd);
	if (!e) {
		sighold_unlock(&tab_lock);
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
	sighold_unlock(&tab_lock);
	kp_std_fixup(fd);
	return 0;
}

/* Creating and sealing a memfd costs about 4 us; duplicating a sealed one
 * under 1 us.  So every placeholder is a duplicate of one template, kept
 * close-on-exec at the top of the fd range.  They share one kernel open
 * file description, which holds no state we use (flags, offsets and locks
 * are the engine's and lock.c's). */
static int tmpl = -1;
static pthread_mutex_t tmpl_lock = PTHREAD_MUTEX_INITIALIZER;

static int move_high(int fd);

static int make_template(void)
{
	int fd = REAL(memfd_create)("kura", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	REAL(fcntl)(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	return move_high(fd);
}

int kp_template_fd(void)
{
	return __atomic_load_n(&tmpl, __ATOMIC_ACQUIRE);
}

/* The application is about to reuse the template's number (dup2 onto it):
 * forget it so the next placeholder comes from a fresh template. */
void kp_template_lost(int fd)
{
	if (fd >= 0 && fd == __atomic_load_n(&tmpl, __ATOMIC_ACQUIRE))
		__atomic_store_n(&tmpl, -1, __ATOMIC_RELEASE);
}

static int new_placeholder(int cloexec)
{
	for (int tries = 0; tries < 2; tries++) {
		int t = __atomic_load_n(&tmpl, __ATOMIC_ACQUIRE);
		if (t < 0) {
			sighold_lock(&tmpl_lock);
			t = tmpl;
			if (t < 0) {
				t = make_template();
				__atomic_store_n(&tmpl, t, __ATOMIC_RELEASE);
			}
			sighold_unlock(&tmpl_lock);
			if (t < 0)
				return -1;
		}
		int fd = REAL(fcntl)(t, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
		if (fd >= 0 || errno != EBADF)
			return fd;
		kp_template_lost(t); /* closed behind our back: make another */
	}
	return -1;
}

int kp_install(int mnt, int kfd, int cloexec, const char *path, int isdir)
{
	int fd = new_placeholder(cloexec);
	if (fd < 0) {
		int e = errno;
		kura_close(kp_fs(mnt), kfd);
		errno = e;
		return -1;
	}
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
	sighold_lock(&tab_lock);
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		sighold_unlock(&tab_lock);
		return;
	}
	kura_fs *fs = kp_mounts[e->mnt].fs;
	if (KP_WATCHED(e->mnt))
		kp_notify_closing(fd, e);
	kp_lock_close(fd, e);
	if (__atomic_load_n(&kp_groups_active, __ATOMIC_RELAXED))
		kp_group_closing(e, fs);
	__atomic_store_n(&e->used, 0, __ATOMIC_RELEASE);
	if (e->dir)
		kura_closedir(e->dir); /* reads its own duplicate of kfd */
	kura_close(fs, e->kfd);
	e->dir = NULL;
	free(e->path);
	e->path = NULL;
	sighold_unlock(&tab_lock);
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
		/* glibc's own stream serves the kernel descriptor again; ours
		 * stays alive (kp_std_stream). */
		fflush(*v);
		*v = std_orig[fd];
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
	return move_high(fd);
}

static int move_high(int fd)
{
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
