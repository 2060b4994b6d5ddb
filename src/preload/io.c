/*
 * io.c — open, close and the descriptor-level calls.
 *
 * For a placeholder fd the call goes to the engine with the kura descriptor
 * behind it; for any other fd it goes to libc untouched.  The kernel fd is
 * kept in step: dup/dup2/F_DUPFD duplicate the placeholder in the kernel and
 * the description in the engine, so offsets stay shared as POSIX wants.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kp.h"

#define FS(e) (kp_mounts[(e)->mnt].fs)

static mode_t umask_cache;
static int umask_known;

static mode_t cur_umask(void)
{
	if (!umask_known) {
		mode_t m = REAL(umask)(022);
		REAL(umask)(m);
		umask_cache = m;
		umask_known = 1;
	}
	return umask_cache;
}

KP_EXPORT mode_t umask(mode_t m)
{
	mode_t old = REAL(umask)(m);
	umask_cache = m & 0777;
	umask_known = 1;
	__atomic_add_fetch(&kp_creds_gen, 1, __ATOMIC_RELEASE); /* the engine's copy, in the creds */
	return old;
}

mode_t kp_umask(void)
{
	return cur_umask();
}

/* ---- open ---- */

/* Whether an open with these flags follows a symlink in the last component. */
static int open_follows(int flags)
{
	return !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
}

/* The open left the pool through a symlink: open what it leads to, with
 * the caller's flags and mode. */
static int open_escaped(struct kp_path *kp, int flags, mode_t mode)
{
	int r = kp_escape(kp, open_follows(flags));
	if (r)
		return (int)kp_ret(r);
	if (kp->where == KP_KURA)
		return kp_open_path(kp, flags, mode); /* back in through a host symlink */
	return REAL(openat)(AT_FDCWD, kp->p, flags, mode);
}

/* An open's events, as the kernel orders them: IN_CREATE of a new name,
 * IN_MODIFY of a truncation, IN_OPEN. */
static void opened(int fd, struct kp_path *kp, int flags, int created)
{
	struct kp_fd *e = kp_get(fd);
	if (created)
		kp_notify_at(kp->mnt, kp->kdirfd, kp->p, IN_CREATE, KN_CHILD);
	else if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY && e)
		kp_notify_fd(e, IN_MODIFY);
	if (e)
		kp_notify_fd(e, IN_OPEN);
}

int kp_open_path(struct kp_path *kp, int flags, mode_t mode)
{
	kura_fs *fs = kp_fs(kp->mnt);
	if (!fs)
		return -1;
	int flags0 = flags;
	mode_t mode0 = mode;
	int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
	if (flags & O_PATH) /* kura has no path-only opens: a read-only open serves the uses we see */
		flags = (flags & ~(O_PATH | O_ACCMODE)) | O_RDONLY;
	int acc = flags & O_ACCMODE;
	if (!tmpfile && (acc != O_RDONLY || (flags & O_TRUNC)) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL)) {
		int busy = kp_exec_check_write(kp->mnt, kp->kdirfd, kp->p, open_follows(flags), acc);
		if (busy)
			return (int)kp_ret(busy);
	}
	struct kp_nstat was = { .ok = 1 };
	int watched = KP_WATCHED(kp->mnt);
	if (watched && (flags & O_CREAT))
		kp_notify_pre(kp->mnt, kp->kdirfd, kp->p, &was);
	int kfd;
	if (!kp_gset_create(kp, flags, mode, &kfd)) /* an open set names a new file at its commit */
		kfd = kura_openat(fs, kp->kdirfd, kp->p, flags & ~O_CLOEXEC, mode);
	if (kfd == KURA_ESCAPED)
		return open_escaped(kp, flags0, mode0);
	/* The engine opens no FIFO: the kernel's pipe behind it (socket.c). */
	if (kfd == -EOPNOTSUPP || kfd == -ENXIO) {
		int pfd = kp_fifo_open(kp, fs, flags);
		if (pfd != -EOPNOTSUPP)
			return pfd < 0 ? (int)kp_ret(pfd) : pfd;
	}
	/* Nor a device: the kernel's node for it (socket.c). */
	if (kfd == -EACCES) {
		int dfd = kp_dev_open(kp->mnt, fs, kp->kdirfd, kp->p, flags);
		if (dfd >= 0)
			return dfd;
	}
	if (kfd < 0)
		return (int)kp_ret(kfd);
	struct stat st;
	int isdir = kura_fstat(fs, kfd, &st) == 0 && S_ISDIR(st.st_mode);
	/* The name the descriptor shows: what the path came to ("d/.." is the
	 * parent); Linux names an unnamed file "DIR/#INO" (readlink adds
	 * " (deleted)"). */
	char name[PATH_MAX + 32];
	if (tmpfile)
		snprintf(name, sizeof name, "%s/#%llu", kp->host, (unsigned long long)st.st_ino);
	else
		snprintf(name, sizeof name, "%s", kp->host);
	kp_normalise(name);
	int fd = kp_install(kp->mnt, kfd, flags & O_CLOEXEC, kp->host[0] ? name : NULL, isdir && !tmpfile);
	if (fd >= 0 && watched)
		opened(fd, kp, flags, !was.ok);
	return fd;
}

/* Opening /proc/self/fd/N or /dev/fd/N of a placeholder: as Linux, a new
 * description of the same file (own offset, the new open's flags), even if
 * the file was unlinked meanwhile; with O_TMPFILE, an unnamed file in the
 * directory it names. */
static int reopen_fd(int pfd, int flags, mode_t mode)
{
	struct kp_fd *e = kp_get(pfd);
	if ((flags & O_NOFOLLOW) && !(flags & O_PATH))
		return (int)kp_ret(-ELOOP); /* the magic link itself is a symlink */
	if ((flags & O_TMPFILE) == O_TMPFILE) {
		struct kp_path kp = { .where = KP_KURA, .mnt = e->mnt, .kdirfd = e->kfd, .p = "." };
		snprintf(kp.host, sizeof kp.host, "%s", e->path && e->isdir ? e->path : "");
		return kp_open_path(&kp, flags, mode);
	}
	if (flags & O_PATH)
		flags = (flags & ~(O_PATH | O_ACCMODE)) | O_RDONLY;
	int64_t ino = kura_fd_ino(FS(e), e->kfd);
	int writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
	int busy = writes && ino > 0 && kp_exec_busy(e->mnt, (uint64_t)ino);
	/* When busy, opened (without truncating) only for the errors Linux
	 * reports before ETXTBSY. */
	int kfd = kura_reopen(FS(e), e->kfd, (flags & ~(O_CLOEXEC | O_NOFOLLOW)) & ~(busy ? O_TRUNC : 0));
	if (kfd >= 0 && busy) {
		kura_close(FS(e), kfd);
		kfd = -ETXTBSY;
	}
	if (kfd < 0)
		return (int)kp_ret(kfd);
	int fd = kp_install(e->mnt, kfd, flags & O_CLOEXEC, e->path, e->isdir);
	if (fd >= 0)
		kp_noted(kp_get(fd), 0, 0, IN_OPEN);
	return fd;
}

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	kp_config();
	if (kp_inside)
		return kp_relocate(REAL(openat)(dirfd, path, flags, mode));
	if (kp_nmounts == 0 || !KP_PATH_OK(path))
		return REAL(openat)(dirfd, path, flags, mode); /* the kernel's EFAULT or ENAMETOOLONG */
	if (path[0] == '/' && (path[1] == 'p' || path[1] == 'd')) {
		int pfd = kp_procfd(path);
		if (pfd >= 0)
			return reopen_fd(pfd, flags, mode);
	}
	struct kp_path kp;
	int r = kp_classify(dirfd, path, &kp);
	if (r)
		return (int)kp_ret(r);
	if (kp.where != KP_KURA) {
		int kdir = kp.where == KP_KERNEL ? dirfd : AT_FDCWD;
		int fd = REAL(openat)(kdir, kp.p, flags, mode);
		if (fd >= 0 || !KP_HOST_MISS() || !kp_host_link(&kp, kdir, open_follows(flags)))
			return fd;
	}
	return kp_open_path(&kp, flags, mode);
}

static mode_t va_mode(int flags, va_list ap)
{
	return ((flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

KP_EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(AT_FDCWD, path, flags, m);
}

/* The same call under glibc's other names: open64, and __open and __open64
 * (data.c says why those). */
KP_EXPORT int open64(const char *path, int flags, ...) __attribute__((alias("open"), copy(open)));
KP_EXPORT int __open(const char *path, int flags, ...) __attribute__((alias("open"), copy(open)));
KP_EXPORT int __open64(const char *path, int flags, ...) __attribute__((alias("open"), copy(open)));

KP_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

KP_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = va_mode(flags, ap);
	va_end(ap);
	return do_openat(dirfd, path, flags, m);
}

KP_EXPORT int __open_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
KP_EXPORT int __open64_2(const char *path, int flags) { return do_openat(AT_FDCWD, path, flags, 0); }
KP_EXPORT int __openat_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0); }
KP_EXPORT int __openat64_2(int d, const char *path, int flags) { return do_openat(d, path, flags, 0); }
KP_EXPORT int creat(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m); }
KP_EXPORT int creat64(const char *path, mode_t m) { return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, m); }

/* ---- close ---- */

int kp_close(int fd)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(close)(fd);
	kp_std_preflush(fd);
	kp_release(fd);
	int r = REAL(close)(fd);
	kp_std_fixup(fd);
	return r;
}

/* The descriptors the layer and its mounts live on: the placeholders'
 * template and each mount's own (kura_mount_fds), in no order. */
#define INTERNAL_MAX (KP_MAX_MOUNTS * 8 + 1)
static int internal_fds(unsigned *out)
{
	int n = 0;
	for (int i = 0; i < kp_nmounts; i++) {
		if (!kp_mounts[i].fs)
			continue;
		int fds[8], k = kura_mount_fds(kp_mounts[i].fs, fds, 8);
		for (int j = 0; j < k && j < 8; j++)
			out[n++] = (unsigned)fds[j];
	}
	if (kp_template_fd() >= 0)
		out[n++] = (unsigned)kp_template_fd();
	return n;
}

KP_EXPORT int close(int fd)
{
	/* Programs closing "every" fd must not take these with them: the
	 * template's number could be reused by a real file we would then
	 * duplicate, a mount would write to a closed or reused pool
	 * descriptor, and without the owner's descriptor the family's open
	 * files would look like a dead process's to other mounts (lock.h).
	 * The engine closes its own with kp_inside set. */
	if (fd >= 0 && !kp_inside) {
		unsigned internal[INTERNAL_MAX];
		int n = internal_fds(internal);
		for (int i = 0; i < n; i++)
			if ((unsigned)fd == internal[i])
				return 0;
	}
	return kp_close(fd);
}

struct range { unsigned lo, hi; };

static void release_in(int fd, struct kp_fd *e, void *arg)
{
	(void)e;
	struct range *r = arg;
	if ((unsigned)fd >= r->lo && (unsigned)fd <= r->hi)
		kp_release(fd);
}

KP_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	kp_config();
	if (first > last) {
		errno = EINVAL;
		return -1;
	}
	if (!(flags & CLOSE_RANGE_CLOEXEC)) {
		struct range r = { first, last };
		kp_foreach(release_in, &r);
	}
	/* Split the range around internal descriptors (ascending order). */
	unsigned keep[INTERNAL_MAX];
	int nk = internal_fds(keep);
	for (int i = 1; i < nk; i++)
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			unsigned t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned long long lo = first;
	for (int i = 0; i < nk; i++) {
		unsigned s = keep[i];
		if (s >= lo && s <= last) {
			if (s > lo && REAL(close_range)((unsigned)lo, s - 1, flags) < 0)
				return -1;
			lo = (unsigned long long)s + 1;
		}
	}
	int r = lo <= last ? REAL(close_range)((unsigned)lo, last, flags) : 0;
	for (unsigned fd = first; fd <= 2 && fd <= last; fd++)
		kp_std_fixup((int)fd);
	return r;
}

KP_EXPORT void closefrom(int lowfd)
{
	if (lowfd < 0)
		lowfd = 0;
	close_range((unsigned)lowfd, ~0u, 0);
}

/* ---- dup ---- */

KP_EXPORT int dup(int fd)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(dup)(fd);
	int kfd = kura_dup(FS(e), e->kfd);
	if (kfd < 0)
		return (int)kp_ret(kfd);
	int nfd = REAL(dup)(fd);
	if (nfd < 0) {
		int er = errno;
		kura_close(FS(e), kfd);
		errno = er;
		return -1;
	}
	kp_attach(nfd, e->mnt, kfd, e->path, e->isdir);
	return nfd;
}

static int do_dup3(int old, int new, int flags, int is2)
{
	kp_config();
	struct kp_fd *e = kp_get(old);
	if (old == new) {
		if (!is2) {
			errno = EINVAL;
			return -1;
		}
		return e ? new : REAL(dup2)(old, new);
	}
	kp_std_preflush(new);
	kp_template_lost(new);
	int kfd = -1;
	if (e) {
		kfd = kura_dup(FS(e), e->kfd);
		if (kfd < 0)
			return (int)kp_ret(kfd);
	}
	int r = is2 ? REAL(dup2)(old, new) : REAL(dup3)(old, new, flags);
	if (r < 0) {
		int er = errno;
		if (e)
			kura_close(FS(e), kfd);
		errno = er;
		return -1;
	}
	if (kp_get(new))
		kp_release(new);
	if (e)
		kp_attach(new, e->mnt, kfd, e->path, e->isdir);
	else
		kp_std_fixup(new);
	return r;
}

KP_EXPORT int dup2(int old, int new) { return do_dup3(old, new, 0, 1); }
KP_EXPORT int __dup2(int old, int new) { return do_dup3(old, new, 0, 1); }
KP_EXPORT int dup3(int old, int new, int flags) { return do_dup3(old, new, flags, 0); }

/* ---- fcntl ---- */

static int do_fcntl(int fd, int cmd, void *arg, int is64)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return is64 ? REAL(fcntl64)(fd, cmd, arg) : REAL(fcntl)(fd, cmd, arg);
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC: {
		int kfd = kura_dup(FS(e), e->kfd);
		if (kfd < 0)
			return (int)kp_ret(kfd);
		int nfd = REAL(fcntl)(fd, cmd, arg);
		if (nfd < 0) {
			int er = errno;
			kura_close(FS(e), kfd);
			errno = er;
			return -1;
		}
		kp_attach(nfd, e->mnt, kfd, e->path, e->isdir);
		return nfd;
	}
	case F_GETFD:
	case F_SETFD:
		return REAL(fcntl)(fd, cmd, arg);
	case F_GETFL:
		return (int)kp_ret(kura_fd_flags(FS(e), e->kfd));
	case F_SETFL:
		return (int)kp_ret(kura_fd_setfl(FS(e), e->kfd, (int)(long)arg));
	case F_GETLK:
	case F_SETLK:
	case F_SETLKW:
	case F_OFD_GETLK:
	case F_OFD_SETLK:
	case F_OFD_SETLKW:
		if (cmd == F_GETLK || cmd == F_OFD_GETLK ? !KP_MEM_FILL_OK(arg, sizeof(struct flock))
							 : !KP_MEM_OK(arg, sizeof(struct flock)))
			return (int)kp_ret(-EFAULT);
		return kp_lock_fcntl(fd, e, cmd, arg);
	case F_NOTIFY:
		return kp_notify_dnotify(fd, e, (unsigned long)arg);
	case F_GETOWN:
	case F_SETOWN:
	case F_GETSIG:
	case F_SETSIG:
		return REAL(fcntl)(fd, cmd, arg);
	default:
		return kp_unsupported("fcntl command", EINVAL);
	}
}

KP_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(fd, cmd, arg, 0);
}

KP_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return do_fcntl(fd, cmd, arg, 1);
}

/* glibc's __fcntl is its fcntl64 (data.c says why it is here). */
KP_EXPORT int __fcntl(int fd, int cmd, ...) __attribute__((alias("fcntl64")));

KP_EXPORT int flock(int fd, int op)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(flock)(fd, op);
	return kp_lock_flock(fd, e, op);
}

KP_EXPORT int lockf(int fd, int cmd, off_t len)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(lockf)(fd, cmd, len);
	struct flock fl = { .l_whence = SEEK_CUR, .l_start = 0, .l_len = len, .l_type = F_WRLCK };
	switch (cmd) {
	case F_ULOCK:
		fl.l_type = F_UNLCK;
		return kp_lock_fcntl(fd, e, F_SETLK, &fl);
	case F_LOCK:
		return kp_lock_fcntl(fd, e, F_SETLKW, &fl);
	case F_TLOCK:
		return kp_lock_fcntl(fd, e, F_SETLK, &fl);
	case F_TEST:
		fl.l_type = F_RDLCK;
		if (kp_lock_fcntl(fd, e, F_GETLK, &fl) < 0)
			return -1;
		if (fl.l_type == F_UNLCK || fl.l_pid == getpid())
			return 0;
		errno = EACCES;
		return -1;
	default:
		errno = EINVAL;
		return -1;
	}
}
KP_EXPORT int lockf64(int fd, int cmd, off_t len) { return lockf(fd, cmd, len); }
