/*
 * names.c — calls that take a path: stat family, access, create/remove,
 * metadata, file-system info, temporary names (namepairs.c has the calls
 * that take two, and the symlink calls).
 *
 * Each classifies its path with kp_classify; kernel paths go to libc as
 * given (or in absolute form when they were relative to a virtual cwd and
 * left the prefix).  A kura path that leaves the pool through a symlink is
 * tried again where it leads (KP_ENGINE), and a host path that failed in
 * the kernel because a host symlink on it leads into a prefix is tried
 * again in the pool (KP_KERNEL_CALL).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statfs.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "kp.h"

int kp_statvfs_mnt(int m, struct statvfs *sv);
void kp_to_statfs(const struct statvfs *sv, struct statfs *sf);

/* AT_EMPTY_PATH with AT_FDCWD names the working directory, which the
 * kernel does not know when it is a virtual one. */
#define EMPTY_AT_CWD(dirfd, path, flags) \
	((flags) & AT_EMPTY_PATH && (dirfd) == AT_FDCWD && kp_vcwd[0] && KP_PATH_OK(path) && !*(path) ? "." : (path))

/* ---- stat family ---- */

static int kstatat(int dirfd, const char *path, struct stat *st, int flags, int (*realf)(int, const char *, struct stat *, int))
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	int pfd = KP_PATH_OK(path) ? kp_procfd(path) : -1;
	if (pfd >= 0 && !(flags & AT_SYMLINK_NOFOLLOW))
		return fstat(pfd, st);
	if ((flags & AT_EMPTY_PATH) && dirfd >= 0 && KP_PATH_OK(path) && !*path && !kp_get(dirfd))
		return kp_fifo_fstat(dirfd, st); /* glibc's fstat is this call */
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   realf(KDIR(kp, dirfd), kp.p, st, flags));
	KFS(kp);
	/* Into a copy: the kernel answers for the path before it writes the
	 * result, so EFAULT comes only for a path that stat would answer. */
	struct stat got;
	long r = KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW),
			   kura_fstatat(fs, kp.kdirfd, kp.p, &got, flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)));
	if (!r && !(r = KP_OUT(st, sizeof *st)))
		*st = got;
	return (int)kp_ret(r);
}

static int real_fstatat(int d, const char *p, struct stat *st, int fl) { return REAL(fstatat)(d, p, st, fl); }

KP_EXPORT int stat(const char *p, struct stat *st) { return kstatat(AT_FDCWD, p, st, 0, real_fstatat); }
KP_EXPORT int stat64(const char *p, struct stat64 *st) { return stat(p, (struct stat *)st); }
KP_EXPORT int lstat(const char *p, struct stat *st) { return kstatat(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW, real_fstatat); }
KP_EXPORT int lstat64(const char *p, struct stat64 *st) { return lstat(p, (struct stat *)st); }
KP_EXPORT int fstatat(int d, const char *p, struct stat *st, int fl) { return kstatat(d, p, st, fl, real_fstatat); }
KP_EXPORT int fstatat64(int d, const char *p, struct stat64 *st, int fl) { return fstatat(d, p, (struct stat *)st, fl); }
/* The pre-2.33 ABI: the version argument is _STAT_VER (1 on x86-64) and
 * the structure the same as today's. */
KP_EXPORT int __xstat(int v, const char *p, struct stat *st) { (void)v; return stat(p, st); }
KP_EXPORT int __xstat64(int v, const char *p, struct stat64 *st) { (void)v; return stat64(p, st); }
KP_EXPORT int __lxstat(int v, const char *p, struct stat *st) { (void)v; return lstat(p, st); }
KP_EXPORT int __lxstat64(int v, const char *p, struct stat64 *st) { (void)v; return lstat64(p, st); }
KP_EXPORT int __fxstatat(int v, int d, const char *p, struct stat *st, int fl) { (void)v; return fstatat(d, p, st, fl); }
KP_EXPORT int __fxstatat64(int v, int d, const char *p, struct stat64 *st, int fl) { (void)v; return fstatat(d, p, (struct stat *)st, fl); }

KP_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *sx)
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	int pfd = KP_PATH_OK(path) && !(flags & AT_SYMLINK_NOFOLLOW) ? kp_procfd(path) : -1;
	struct stat st;
	int r;
	if (pfd >= 0) {
		r = fstat(pfd, &st);
	} else if ((flags & AT_EMPTY_PATH) && dirfd >= 0 && KP_PATH_OK(path) && !*path && !kp_get(dirfd) &&
		   kp_fifo_stat_of(dirfd, &st) == 1) {
		r = 0;
	} else {
		RESOLVE(dirfd, path, kp);
		if (kp.where != KP_KURA)
			return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
						   REAL(statx)(KDIR(kp, dirfd), kp.p, flags, mask, sx));
		KFS(kp);
		r = (int)kp_ret(KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW),
					  kura_fstatat(fs, kp.kdirfd, kp.p, &st, flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))));
	}
	if (r < 0)
		return r;
	if (!KP_MEM_FILL_OK(sx, sizeof *sx))
		return (int)kp_ret(-EFAULT);
	memset(sx, 0, sizeof *sx);
	sx->stx_mask = STATX_BASIC_STATS;
	sx->stx_blksize = (uint32_t)st.st_blksize;
	sx->stx_nlink = (uint32_t)st.st_nlink;
	sx->stx_uid = st.st_uid;
	sx->stx_gid = st.st_gid;
	sx->stx_mode = (uint16_t)st.st_mode;
	sx->stx_ino = st.st_ino;
	sx->stx_size = (uint64_t)st.st_size;
	sx->stx_blocks = (uint64_t)st.st_blocks;
	sx->stx_atime.tv_sec = st.st_atim.tv_sec;
	sx->stx_atime.tv_nsec = (uint32_t)st.st_atim.tv_nsec;
	sx->stx_mtime.tv_sec = st.st_mtim.tv_sec;
	sx->stx_mtime.tv_nsec = (uint32_t)st.st_mtim.tv_nsec;
	sx->stx_ctime.tv_sec = st.st_ctim.tv_sec;
	sx->stx_ctime.tv_nsec = (uint32_t)st.st_ctim.tv_nsec;
	sx->stx_dev_major = major(st.st_dev);
	sx->stx_dev_minor = minor(st.st_dev);
	sx->stx_rdev_major = major(st.st_rdev);
	sx->stx_rdev_minor = minor(st.st_rdev);
	return 0;
}

/* ---- access ---- */

KP_EXPORT int faccessat(int dirfd, const char *path, int mode, int flags)
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   REAL(faccessat)(KDIR(kp, dirfd), kp.p, mode, flags));
	KFS(kp);
	return (int)kp_ret(KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW),
				     kura_faccessat(fs, kp.kdirfd, kp.p, mode,
						    flags & (AT_SYMLINK_NOFOLLOW | AT_EACCESS | AT_EMPTY_PATH))));
}
KP_EXPORT int access(const char *p, int mode)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(access)(kp.p, mode));
	return faccessat(AT_FDCWD, KPATH(kp, p), mode, 0);
}
KP_EXPORT int euidaccess(const char *p, int mode)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(euidaccess)(kp.p, mode));
	return faccessat(AT_FDCWD, KPATH(kp, p), mode, AT_EACCESS);
}
KP_EXPORT int eaccess(const char *p, int mode) { return euidaccess(p, mode); }

/* ---- create and remove ---- */


KP_EXPORT int mkdirat(int dirfd, const char *path, mode_t mode)
{
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, KP_NAME, REAL(mkdirat)(KDIR(kp, dirfd), kp.p, mode));
	KFS(kp);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, KP_NAME, kura_mkdirat(fs, kp.kdirfd, kp.p, mode)), IN_CREATE, KN_CHILD));
}
KP_EXPORT int mkdir(const char *p, mode_t mode)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, KP_NAME, REAL(mkdir)(kp.p, mode));
	return mkdirat(AT_FDCWD, KPATH(kp, p), mode);
}

KP_EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, KP_NAME, REAL(unlinkat)(KDIR(kp, dirfd), kp.p, flags));
	KFS(kp);
	int deferred;
	if (kp_gset_unlink(&kp, flags, &deferred)) /* an open set changes names at its commit */
		return (int)kp_ret(deferred);
	struct kp_nstat was = { 0 };
	if (KP_WATCHED(kp.mnt))
		kp_notify_pre(kp.mnt, kp.kdirfd, kp.p, &was);
	int r = (int)KP_ENGINE(kp, KP_NAME, kura_unlinkat(fs, kp.kdirfd, kp.p, flags));
	if (r == 0 && was.ok)
		kp_notify_unlinked(kp.mnt, kp.kdirfd, kp.p, &was);
	return (int)kp_ret(r);
}
KP_EXPORT int unlink(const char *p)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, KP_NAME, REAL(unlink)(kp.p));
	return unlinkat(AT_FDCWD, KPATH(kp, p), 0);
}
KP_EXPORT int rmdir(const char *p)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, KP_NAME, REAL(rmdir)(kp.p));
	return unlinkat(AT_FDCWD, KPATH(kp, p), AT_REMOVEDIR);
}
KP_EXPORT int remove(const char *p)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, KP_NAME, REAL(remove)(kp.p));
	p = KPATH(kp, p);
	int r = unlinkat(AT_FDCWD, p, 0);
	if (r < 0 && (errno == EISDIR || errno == EPERM))
		r = unlinkat(AT_FDCWD, p, AT_REMOVEDIR);
	return r;
}

KP_EXPORT int mknodat(int dirfd, const char *path, mode_t mode, dev_t dev)
{
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, KP_NAME, REAL(mknodat)(KDIR(kp, dirfd), kp.p, mode, dev));
	KFS(kp);
	if ((mode & S_IFMT) == 0)
		mode |= S_IFREG;
	/* A FIFO's token names the kernel FIFO behind it (socket.c). */
	if (S_ISFIFO(mode) && getrandom(&dev, sizeof dev, 0) != sizeof dev)
		return -1;
	return (int)kp_ret(
		NOTED_AT(kp, KP_ENGINE(kp, KP_NAME, kura_mknodat(fs, kp.kdirfd, kp.p, mode, dev)), IN_CREATE, KN_CHILD));
}
KP_EXPORT int mknod(const char *p, mode_t m, dev_t d) { return mknodat(AT_FDCWD, p, m, d); }
KP_EXPORT int __xmknod(int v, const char *p, mode_t m, dev_t *d) { (void)v; return mknodat(AT_FDCWD, p, m, *d); }
KP_EXPORT int __xmknodat(int v, int fd, const char *p, mode_t m, dev_t *d) { (void)v; return mknodat(fd, p, m, *d); }
KP_EXPORT int mkfifoat(int d, const char *p, mode_t m) { return mknodat(d, p, S_IFIFO | (m & 07777), 0); }
KP_EXPORT int mkfifo(const char *p, mode_t m) { return mkfifoat(AT_FDCWD, p, m); }

/* ---- metadata ---- */

KP_EXPORT int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   REAL(fchmodat)(KDIR(kp, dirfd), kp.p, mode, flags));
	KFS(kp);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW), kura_fchmodat(fs, kp.kdirfd, kp.p, mode, flags)), IN_ATTRIB, KN_BOTH));
}
KP_EXPORT int chmod(const char *p, mode_t m)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(chmod)(kp.p, m));
	return fchmodat(AT_FDCWD, KPATH(kp, p), m, 0);
}
KP_EXPORT int lchmod(const char *p, mode_t m) { return fchmodat(AT_FDCWD, p, m, AT_SYMLINK_NOFOLLOW); }

KP_EXPORT int fchownat(int dirfd, const char *path, uid_t u, gid_t g, int flags)
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   REAL(fchownat)(KDIR(kp, dirfd), kp.p, u, g, flags));
	KFS(kp);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW), kura_fchownat(fs, kp.kdirfd, kp.p, u, g, flags)), IN_ATTRIB, KN_BOTH));
}
KP_EXPORT int chown(const char *p, uid_t u, gid_t g)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(chown)(kp.p, u, g));
	return fchownat(AT_FDCWD, KPATH(kp, p), u, g, 0);
}
KP_EXPORT int lchown(const char *p, uid_t u, gid_t g)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 0, REAL(lchown)(kp.p, u, g));
	return fchownat(AT_FDCWD, KPATH(kp, p), u, g, AT_SYMLINK_NOFOLLOW);
}

KP_EXPORT int utimensat(int dirfd, const char *path, const struct timespec t[2], int flags)
{
	if (!KP_NN(path)) { /* glibc's answer: futimens is not reached this way */
		errno = EINVAL;
		return -1;
	}
	path = EMPTY_AT_CWD(dirfd, path, flags);
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   REAL(utimensat)(KDIR(kp, dirfd), kp.p, t, flags));
	KFS(kp);
	if (t && !KP_MEM_OK(t, 2 * sizeof *t)) /* copied in before the path is looked at */
		return (int)kp_ret(-EFAULT);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW), kura_utimensat(fs, kp.kdirfd, kp.p, t, flags)), IN_ATTRIB, KN_BOTH));
}

static int tv_utimes(int dirfd, const char *p, const struct timeval tv[2], int flags)
{
	struct timespec ts[2];
	if (tv && !KP_MEM_OK(tv, 2 * sizeof *tv))
		return (int)kp_ret(-EFAULT);
	if (tv)
		for (int i = 0; i < 2; i++) {
			ts[i].tv_sec = tv[i].tv_sec;
			ts[i].tv_nsec = tv[i].tv_usec * 1000;
		}
	return utimensat(dirfd, p, tv ? ts : NULL, flags);
}
KP_EXPORT int utimes(const char *p, const struct timeval tv[2])
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(utimes)(kp.p, tv));
	return tv_utimes(AT_FDCWD, KPATH(kp, p), tv, 0);
}
KP_EXPORT int lutimes(const char *p, const struct timeval tv[2])
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 0, REAL(lutimes)(kp.p, tv));
	return tv_utimes(AT_FDCWD, KPATH(kp, p), tv, AT_SYMLINK_NOFOLLOW);
}
KP_EXPORT int futimesat(int d, const char *p, const struct timeval tv[2])
{
	if (!KP_NN(p)) /* the descriptor's own file, as Linux */
		return futimes(d, tv);
	return tv_utimes(d, p, tv, 0);
}
KP_EXPORT int utime(const char *p, const struct utimbuf *ub)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(utime)(kp.p, ub));
	if (ub && !KP_MEM_OK(ub, sizeof *ub))
		return (int)kp_ret(-EFAULT);
	struct timespec ts[2] = { { ub ? ub->actime : 0, 0 }, { ub ? ub->modtime : 0, 0 } };
	return utimensat(AT_FDCWD, KPATH(kp, p), ub ? ts : NULL, 0);
}

KP_EXPORT int truncate(const char *p, off_t len)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(truncate)(kp.p, len));
	KFS(kp);
	int busy = len >= 0 ? kp_exec_check_write(kp.mnt, kp.kdirfd, kp.p, 1, O_WRONLY) : 0;
	if (busy)
		return (int)kp_ret(busy);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, 1, kura_truncateat(fs, kp.kdirfd, kp.p, len)), IN_MODIFY, KN_BOTH));
}
KP_EXPORT int truncate64(const char *p, off_t len) { return truncate(p, len); }

/* ---- file-system information ---- */

KP_EXPORT int statvfs(const char *p, struct statvfs *sv)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(statvfs)(kp.p, sv));
	KFS(kp);
	struct stat st;
	if (kp_ret(KP_ENGINE(kp, 1, kura_fstatat(fs, kp.kdirfd, kp.p, &st, 0))) < 0)
		return -1;
	return KP_MEM_FILL_OK(sv, sizeof *sv) ? kp_statvfs_mnt(kp.mnt, sv) : (int)kp_ret(-EFAULT);
}
KP_EXPORT int statvfs64(const char *p, struct statvfs64 *sv) { return statvfs(p, (struct statvfs *)sv); }
KP_EXPORT int statfs(const char *p, struct statfs *sf)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(statfs)(kp.p, sf));
	KFS(kp);
	struct stat st;
	struct statvfs sv;
	if (kp_ret(KP_ENGINE(kp, 1, kura_fstatat(fs, kp.kdirfd, kp.p, &st, 0))) < 0 || kp_statvfs_mnt(kp.mnt, &sv) < 0)
		return -1;
	if (!KP_MEM_FILL_OK(sf, sizeof *sf))
		return (int)kp_ret(-EFAULT);
	kp_to_statfs(&sv, sf);
	return 0;
}
KP_EXPORT int statfs64(const char *p, struct statfs64 *sf) { return statfs(p, (struct statfs *)sf); }
KP_EXPORT int __statfs(const char *p, struct statfs *sf) { return statfs(p, sf); }

static long kura_conf(int name)
{
	switch (name) {
	case _PC_NAME_MAX: return 255;
	case _PC_PATH_MAX: return PATH_MAX;
	case _PC_LINK_MAX: return 65000;
	case _PC_PIPE_BUF: return 4096;
	case _PC_FILESIZEBITS: return 47; /* 64 TiB */
	case _PC_NO_TRUNC: return 1;
	case _PC_CHOWN_RESTRICTED: return 1;
	case _PC_SYMLINK_MAX: return 4095;
	case _PC_REC_MIN_XFER_SIZE:
	case _PC_REC_XFER_ALIGN:
	case _PC_ALLOC_SIZE_MIN: return 4096;
	default: errno = EINVAL; return -1;
	}
}
KP_EXPORT long pathconf(const char *p, int name)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return KP_KERNEL_CALL(kp, AT_FDCWD, 1, REAL(pathconf)(kp.p, name));
	KFS(kp);
	struct stat st;
	if (kp_ret(KP_ENGINE(kp, 1, kura_fstatat(fs, kp.kdirfd, kp.p, &st, 0))) < 0)
		return -1;
	return kura_conf(name);
}
KP_EXPORT long fpathconf(int fd, int name)
{
	if (!kp_get(fd))
		return REAL(fpathconf)(fd, name);
	return kura_conf(name);
}

/* ---- temporary names ---- */

/* Fills the six X's before `suffix` characters with random letters and
 * tries `make` until it does not fail with EEXIST, as glibc does. */
static int tmpname(char *tmpl, int suffix, int (*make)(const char *, int), int arg)
{
	static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	size_t len = strlen(tmpl);
	if (suffix < 0 || len < 6 + (size_t)suffix || memcmp(tmpl + len - suffix - 6, "XXXXXX", 6) != 0) {
		errno = EINVAL;
		return -1;
	}
	char *x = tmpl + len - suffix - 6;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)tmpl;
	for (int tries = 0; tries < 62 * 62 * 62; tries++) {
		uint64_t w = v;
		for (int i = 0; i < 6; i++) {
			x[i] = letters[w % 62];
			w /= 62;
		}
		int r = make(tmpl, arg);
		if (r >= 0 || errno != EEXIST)
			return r;
		v = v * 6364136223846793005ull + 1442695040888963407ull;
	}
	errno = EEXIST;
	return -1;
}

static int make_file(const char *p, int flags)
{
	return open(p, O_RDWR | O_CREAT | O_EXCL | (flags & ~O_ACCMODE), 0600);
}

static int make_dir(const char *p, int unused)
{
	(void)unused;
	return mkdir(p, 0700);
}

static int is_kura_path(const char *p)
{
	struct kp_path kp; /* tmpname's open/mkdir follow symlinks out of the pool */
	return kp_classify(AT_FDCWD, p, &kp) == 0 && kp.where == KP_KURA;
}

KP_EXPORT int mkostemps(char *t, int suffix, int flags)
{
	if (!is_kura_path(t))
		return REAL(mkostemps)(t, suffix, flags);
	return tmpname(t, suffix, make_file, flags);
}
KP_EXPORT int mkostemps64(char *t, int s, int f) { return mkostemps(t, s, f); }
KP_EXPORT int mkstemp(char *t) { return mkostemps(t, 0, 0); }
KP_EXPORT int mkstemp64(char *t) { return mkostemps(t, 0, 0); }
KP_EXPORT int mkostemp(char *t, int f) { return mkostemps(t, 0, f); }
KP_EXPORT int mkostemp64(char *t, int f) { return mkostemps(t, 0, f); }
KP_EXPORT int mkstemps(char *t, int s) { return mkostemps(t, s, 0); }
KP_EXPORT int mkstemps64(char *t, int s) { return mkostemps(t, s, 0); }
KP_EXPORT char *mkdtemp(char *t)
{
	if (!is_kura_path(t))
		return REAL(mkdtemp)(t);
	return tmpname(t, 0, make_dir, 0) < 0 ? NULL : t;
}
