/*
 * names.c — calls that take paths: stat family, access, create/remove,
 * rename/link/symlink, metadata, file-system info, temporary names.
 *
 * Each classifies its path(s) with kp_classify; kernel paths go to libc as
 * given (or in absolute form when they were relative to a virtual cwd and
 * left the prefix).  A call whose two paths lie on different sides fails
 * with EXDEV, as across two kernel mounts.  A kura path that leaves the
 * pool through a symlink is tried again where it leads (KP_ENGINE), and a
 * host path that failed in the kernel because a host symlink on it leads
 * into a prefix is tried again in the pool (KP_KERNEL_CALL).
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

/* What the kernel answers for an unusable path argument (unreadable, too
 * long, or empty where that is not allowed), 0 for a usable one. */
static int bad_arg(const char *p, int empty_ok)
{
	int r = kp_path_arg(p);
	return r ? r : !*p && !empty_ok ? -ENOENT : 0;
}

/* ---- stat family ---- */

static int kstatat(int dirfd, const char *path, struct stat *st, int flags, int (*realf)(int, const char *, struct stat *, int))
{
	path = EMPTY_AT_CWD(dirfd, path, flags);
	int pfd = KP_PATH_OK(path) ? kp_procfd(path) : -1;
	if (pfd >= 0 && !(flags & AT_SYMLINK_NOFOLLOW))
		return fstat(pfd, st);
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, !(flags & AT_SYMLINK_NOFOLLOW),
					   realf(KDIR(kp, dirfd), kp.p, st, flags));
	KFS(kp);
	return (int)kp_ret(KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW),
				     kura_fstatat(fs, kp.kdirfd, kp.p, st, flags & (AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))));
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

/* ---- two-path calls ---- */

/* The directory of path (relative to dirfd) as a walk to its last name
 * finds it, through the wrappers (either side): 0, or -1 with errno
 * (ENOENT, ENOTDIR, ELOOP, EACCES...), as Linux's parent walk answers. */
static int parent_walk(int dirfd, const char *path)
{
	char dir[PATH_MAX];
	size_t l = strlen(path);
	while (l > 1 && path[l - 1] == '/')
		l--;
	while (l > 0 && path[l - 1] != '/')
		l--;
	if (l == 0)
		return 0; /* the starting directory itself */
	if (l >= sizeof dir) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(dir, path, l);
	dir[l] = '\0';
	struct stat st;
	if (fstatat(dirfd, dir, &st, 0) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

/* A name's directory, walked to, leaves the pool: *kp becomes the host
 * directory it leads to, with the name (and its slashes) as written.  The
 * name itself is not followed, whatever follows it.  1 if so, 0 if its
 * directory is in the pool, or -errno. */
static int escape_name(kura_fs *fs, struct kp_path *kp)
{
	const char *p = kp->p;
	size_t l = strlen(p), end = l;
	while (end > 1 && p[end - 1] == '/')
		end--;
	size_t s = end;
	while (s > 0 && p[s - 1] != '/')
		s--;
	if (s == 0)
		return 0; /* in kdirfd's directory, which is in the pool */
	char probe[PATH_MAX + 2], host[PATH_MAX];
	memcpy(probe, p, s);
	strcpy(probe + s, ".");
	struct stat st;
	if (kura_fstatat(fs, kp->kdirfd, probe, &st, 0) != KURA_ESCAPED)
		return 0;
	const char *dir = kura_escaped_path(); /* ends with the "." */
	size_t dl = strlen(dir);
	if (dl && dir[dl - 1] == '.')
		dl--;
	if (dl + (l - s) + 1 > sizeof host)
		return -ENAMETOOLONG;
	memcpy(host, dir, dl);
	memcpy(host + dl, p + s, l - s + 1);
	int r = kp_escape_to(kp, host, KP_NAME);
	return r < 0 ? r : 1;
}

/* A two-path call left the pool: each name whose own walk leaves it (a's
 * last component as follow_a says, b's never followed: rename and link act
 * on names) becomes the host path it leads to.  -EXDEV if neither does
 * alone (a followed last component of a led out of the pool while b is in
 * it). */
static int escape_pair(kura_fs *fs, struct kp_path *a, int follow_a, struct kp_path *b)
{
	int any = 0;
	struct kp_path *side[2] = { a, b };
	for (int i = 0; i < 2; i++) {
		struct stat st;
		int follow = i == 0 ? follow_a : KP_NAME, r;
		if (side[i]->where != KP_KURA)
			continue;
		if (follow == KP_NAME) {
			if ((r = escape_name(fs, side[i])) < 0)
				return r;
			any |= r;
			continue;
		}
		if (kura_fstatat(fs, side[i]->kdirfd, side[i]->p, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) != KURA_ESCAPED)
			continue;
		if ((r = kp_escape(side[i], follow)))
			return r;
		any = 1;
	}
	return any ? 0 : -EXDEV;
}

/* The kernel failed a two-path call (KP_HOST_MISS), or the names lie on
 * different sides (errno EXDEV): each kernel name whose host symlinks lead
 * into a prefix (the last component followed only for a's, if follow_a)
 * becomes that kura path.  1 if either did; else 0 with errno kept or the
 * walk's error. */
static int host_pair(struct kp_path *a, int ad, int follow_a, struct kp_path *b, int bd)
{
	int err = errno;
	int ra = kp_host_link(a, KDIR(*a, ad), follow_a);
	if (!ra && errno != err)
		return 0;
	int rb = kp_host_link(b, KDIR(*b, bd), KP_NAME);
	if (!rb && errno != err)
		return 0;
	return ra | rb;
}

KP_EXPORT int renameat2(int od, const char *op, int nd, const char *np, unsigned flags)
{
	RESOLVE(od, op, a);
	RESOLVE(nd, np, b);
	if (a.where != KP_KURA && b.where != KP_KURA) {
		int r = REAL(renameat2)(KDIR(a, od), a.p, KDIR(b, nd), b.p, flags);
		if (r < 0 && KP_HOST_MISS() && host_pair(&a, od, KP_NAME, &b, nd))
			goto b_again;
		return r;
	}
	if (a.where != KP_KURA || b.where != KP_KURA || a.mnt != b.mnt) {
		int r = bad_arg(op, 0);
		if (r || (r = bad_arg(np, 0)))
			return (int)kp_ret(r); /* what the kernel says first */
		errno = EXDEV; /* unless a host symlink leads the other name in too */
		if (host_pair(&a, od, KP_NAME, &b, nd))
			goto b_again;
		/* Linux walks to both names' directories before it compares
		 * their file systems. */
		if (errno == EXDEV && !parent_walk(od, op) && !parent_walk(nd, np))
			errno = EXDEV;
		return -1;
	}
	KFS(a);
	int deferred;
	if (kp_gset_rename(&a, &b, flags, &deferred))
		return (int)kp_ret(deferred);
	struct kp_nstat src = { 0 }, dst = { 0 };
	if (KP_WATCHED(a.mnt)) {
		kp_notify_pre(a.mnt, a.kdirfd, a.p, &src);
		kp_notify_pre(b.mnt, b.kdirfd, b.p, &dst);
	}
	int r = kura_renameat2(fs, a.kdirfd, a.p, b.kdirfd, b.p, flags);
	if (r == KURA_ESCAPED && !(r = escape_pair(fs, &a, KP_NAME, &b)))
		goto b_again; /* both names are resolved again on their new sides */
	if (r == 0 && src.ok && !(src.ino == dst.ino && dst.ok))
		kp_notify_renamed(a.mnt, a.kdirfd, a.p, b.kdirfd, b.p, &src, &dst, flags);
	return (int)kp_ret(r);
}
KP_EXPORT int renameat(int od, const char *op, int nd, const char *np) { return renameat2(od, op, nd, np, 0); }
KP_EXPORT int rename(const char *op, const char *np)
{
	RESOLVE(AT_FDCWD, op, a);
	RESOLVE(AT_FDCWD, np, b);
	if (a.where != KP_KURA && b.where != KP_KURA) {
		int r = REAL(rename)(a.p, b.p);
		if (r < 0 && KP_HOST_MISS() && host_pair(&a, AT_FDCWD, KP_NAME, &b, AT_FDCWD))
			goto b_again;
		return r;
	}
	return renameat2(AT_FDCWD, KPATH(a, op), AT_FDCWD, KPATH(b, np), 0);
}

/* A link between two file systems: Linux looks the old name up and the
 * new one's place (its directory, then EEXIST) before it refuses the
 * crossing. */
static int cross_link(int od, const char *op, int nd, const char *np, int flags)
{
	struct stat st;
	int fl = (flags & AT_SYMLINK_FOLLOW ? 0 : AT_SYMLINK_NOFOLLOW) | (flags & AT_EMPTY_PATH);
	if (fstatat(od, op, &st, fl) < 0 || parent_walk(nd, np) < 0)
		return -1;
	errno = fstatat(nd, np, &st, AT_SYMLINK_NOFOLLOW) == 0 ? EEXIST : EXDEV;
	return -1;
}

KP_EXPORT int linkat(int od, const char *op, int nd, const char *np, int flags)
{
	/* linkat(AT_FDCWD, "/proc/self/fd/N", ..., AT_SYMLINK_FOLLOW) is how
	 * programs name an O_TMPFILE file without CAP_DAC_READ_SEARCH: it
	 * links the descriptor's file, as AT_EMPTY_PATH does. */
	int pfd = KP_PATH_OK(op) && (flags & AT_SYMLINK_FOLLOW) ? kp_procfd(op) : -1;
	if (pfd >= 0) {
		od = pfd;
		op = "";
		flags = (flags & ~AT_SYMLINK_FOLLOW) | AT_EMPTY_PATH;
	}
	RESOLVE(od, op, a);
	RESOLVE(nd, np, b);
	if (a.where != KP_KURA && b.where != KP_KURA) {
		int r = REAL(linkat)(KDIR(a, od), a.p, KDIR(b, nd), b.p, flags);
		if (r < 0 && KP_HOST_MISS() && host_pair(&a, od, !!(flags & AT_SYMLINK_FOLLOW), &b, nd))
			goto b_again;
		return r;
	}
	if (a.where != KP_KURA || b.where != KP_KURA || a.mnt != b.mnt) {
		int r = bad_arg(op, flags & AT_EMPTY_PATH);
		if (r || (r = bad_arg(np, 0)))
			return (int)kp_ret(r);
		errno = EXDEV;
		if (host_pair(&a, od, !!(flags & AT_SYMLINK_FOLLOW), &b, nd))
			goto b_again;
		return errno == EXDEV ? cross_link(od, op, nd, np, flags) : -1;
	}
	KFS(a);
	int r = kura_linkat(fs, a.kdirfd, a.p, b.kdirfd, b.p, flags);
	if (r == KURA_ESCAPED && !(r = escape_pair(fs, &a, !!(flags & AT_SYMLINK_FOLLOW), &b)))
		goto b_again;
	if (r == 0 && KP_WATCHED(b.mnt))
		kp_notify_linked(b.mnt, b.kdirfd, b.p);
	return (int)kp_ret(r);
}
KP_EXPORT int link(const char *op, const char *np)
{
	RESOLVE(AT_FDCWD, op, a);
	RESOLVE(AT_FDCWD, np, b);
	if (a.where != KP_KURA && b.where != KP_KURA) {
		int r = REAL(link)(a.p, b.p);
		if (r < 0 && KP_HOST_MISS() && host_pair(&a, AT_FDCWD, 0, &b, AT_FDCWD))
			goto b_again;
		return r;
	}
	return linkat(AT_FDCWD, KPATH(a, op), AT_FDCWD, KPATH(b, np), 0);
}

KP_EXPORT int symlinkat(const char *target, int dirfd, const char *path)
{
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, dirfd, KP_NAME, REAL(symlinkat)(target, KDIR(kp, dirfd), kp.p));
	int bad = kp_path_arg(target); /* the kernel reads the target first */
	if (bad)
		return (int)kp_ret(bad);
	KFS(kp);
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, KP_NAME, kura_symlinkat(fs, target, kp.kdirfd, kp.p)), IN_CREATE, KN_CHILD));
}
KP_EXPORT int symlink(const char *target, const char *p)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where != KP_KURA)
		return (int)KP_KERNEL_CALL(kp, AT_FDCWD, KP_NAME, REAL(symlink)(target, kp.p));
	return symlinkat(target, AT_FDCWD, KPATH(kp, p));
}

KP_EXPORT ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t n)
{
	int pfd = KP_PATH_OK(path) ? kp_procfd(path) : -1;
	if (pfd >= 0) {
		/* What the kernel shows for a descriptor: the path it was opened
		 * by, marked as Linux marks a file unlinked since. */
		struct kp_fd *e = kp_get(pfd);
		const char *s = e && e->path ? e->path : "kura:(unknown)";
		char del[PATH_MAX + 16];
		struct stat st;
		if (e && e->path && kura_fstat(kp_fs(e->mnt), e->kfd, &st) == 0 && st.st_nlink == 0 &&
		    snprintf(del, sizeof del, "%s (deleted)", e->path) < (int)sizeof del)
			s = del;
		size_t l = strlen(s);
		if (l > n)
			l = n;
		memcpy(buf, s, l);
		return (ssize_t)l;
	}
	if (KP_PATH_OK(path) && (kp_proc_cwd(path) || kp_proc_exe(path))) {
		const char *s = kp_proc_exe(path) ? kp_pool_exe : kp_vcwd;
		size_t l = strlen(s);
		memcpy(buf, s, l < n ? l : n);
		return (ssize_t)(l < n ? l : n);
	}
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return KP_KERNEL_CALL(kp, dirfd, 0, REAL(readlinkat)(KDIR(kp, dirfd), kp.p, buf, n));
	KFS(kp);
	return kp_ret(KP_ENGINE(kp, 0, kura_readlinkat(fs, kp.kdirfd, kp.p, buf, n)));
}
KP_EXPORT ssize_t readlink(const char *p, char *buf, size_t n)
{
	RESOLVE(AT_FDCWD, p, kp);
	if (kp.where == KP_KERNEL && (!KP_PATH_OK(p) || (kp_procfd(p) < 0 && !kp_proc_cwd(p) && !kp_proc_exe(p))))
		return KP_KERNEL_CALL(kp, AT_FDCWD, 0, REAL(readlink)(p, buf, n));
	return readlinkat(AT_FDCWD, KPATH(kp, p), buf, n);
}
KP_EXPORT ssize_t __readlink_chk(const char *p, char *buf, size_t n, size_t bl) { (void)bl; return readlink(p, buf, n); }
KP_EXPORT ssize_t __readlinkat_chk(int d, const char *p, char *buf, size_t n, size_t bl) { (void)bl; return readlinkat(d, p, buf, n); }

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
	return (int)kp_ret(NOTED_AT(kp, KP_ENGINE(kp, !(flags & AT_SYMLINK_NOFOLLOW), kura_utimensat(fs, kp.kdirfd, kp.p, t, flags)), IN_ATTRIB, KN_BOTH));
}

static int tv_utimes(int dirfd, const char *p, const struct timeval tv[2], int flags)
{
	struct timespec ts[2];
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
	return kp_statvfs_mnt(kp.mnt, sv);
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
