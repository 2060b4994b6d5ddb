/*
 * namepairs.c — calls that take two paths (rename, link) and the symlink calls
 * (symlink, readlink): names.c's conventions, and where the two paths lie
 * on different sides, EXDEV as across two kernel mounts.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

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
		int r = kp_path_arg_or_empty(op, 0);
		if (r || (r = kp_path_arg_or_empty(np, 0)))
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
		int r = kp_path_arg_or_empty(op, flags & AT_EMPTY_PATH);
		if (r || (r = kp_path_arg_or_empty(np, 0)))
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

/* Up to n bytes of a link's l-byte text into the program's buf: the
 * count, or -EFAULT for a buffer it does not have. */
static ssize_t link_out(char *buf, size_t n, const char *s, size_t l)
{
	if (l > n)
		l = n;
	if (l && !KP_MEM_FILL_OK(buf, l))
		return -EFAULT;
	memcpy(buf, s, l);
	return (ssize_t)l;
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
		return kp_ret(link_out(buf, n, s, strlen(s)));
	}
	if (KP_PATH_OK(path) && (kp_proc_cwd(path) || kp_proc_exe(path))) {
		char *cwd = kp_proc_cwd(path) ? kp_vcwd_name() : NULL;
		if (kp_proc_cwd(path) && !cwd && (errno != ENOENT || asprintf(&cwd, "%s (deleted)", kp_vcwd) < 0))
			return -1; /* Linux's link names a removed one so */
		if (cwd && strlen(cwd) >= PATH_MAX) { /* as the kernel's d_path past a page */
			free(cwd);
			errno = ENAMETOOLONG;
			return -1;
		}
		const char *s = cwd ? cwd : kp_pool_exe;
		ssize_t r = link_out(buf, n, s, strlen(s));
		free(cwd);
		return kp_ret(r);
	}
	RESOLVE(dirfd, path, kp);
	if (kp.where != KP_KURA)
		return KP_KERNEL_CALL(kp, dirfd, 0, REAL(readlinkat)(KDIR(kp, dirfd), kp.p, buf, n));
	KFS(kp);
	char got[PATH_MAX];
	long r = KP_ENGINE(kp, 0, kura_readlinkat(fs, kp.kdirfd, kp.p, got, n < sizeof got ? n : sizeof got));
	return kp_ret(r > 0 ? link_out(buf, n, got, (size_t)r) : r);
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
