/*
 * dir.c — directory streams, getdents64, scandir, glob (ftw/nftw are in
 * ftw.c, fts in fts.c).
 *
 * glibc's opendir/readdir/scandir/ftw read directories with internal
 * getdents64 calls no wrapper sees, so for kura directories they are
 * reimplemented here.  A kura DIR* is our own structure whose first member
 * is the placeholder fd, as glibc's DIR begins with its kernel fd: a DIR*
 * is ours exactly when that fd is a placeholder with a stream attached.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

/* readdir_r is deprecated but still called by programs we must serve. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define KDIR_MAGIC 0x6b646972u

struct kdir {
	int fd; /* must stay first, see above */
	unsigned magic;
	kura_dir *d;
	struct dirent64 ent;
};

static struct kdir *ours(DIR *dp)
{
	if (!dp)
		return NULL;
	struct kdir *k = (struct kdir *)dp;
	struct kp_fd *e = kp_get(k->fd);
	if (!e || !e->dir || k->magic != KDIR_MAGIC || k->d != e->dir)
		return NULL;
	return k;
}

static int attach_stream(struct kp_fd *e)
{
	if (e->dir)
		return 0;
	kura_fs *fs = kp_mounts[e->mnt].fs;
	int dfd = kura_dup(fs, e->kfd);
	if (dfd < 0)
		return dfd;
	int err = 0;
	kura_dir *d = kura_fdopendir(fs, dfd, &err);
	if (!d) {
		kura_close(fs, dfd);
		return err ? err : -ENOMEM;
	}
	e->dir = d;
	return 0;
}

DIR *kp_opendir_fd(int fd)
{
	struct kp_fd *e = kp_get(fd);
	if (!e) {
		errno = EBADF;
		return NULL;
	}
	if (!e->isdir) {
		errno = ENOTDIR;
		return NULL;
	}
	struct kdir *k = calloc(1, sizeof *k);
	if (!k)
		return NULL;
	sighold_lock(kp_tab_lock());
	int r = attach_stream(e);
	sighold_unlock(kp_tab_lock());
	if (r < 0) {
		free(k);
		errno = -r;
		return NULL;
	}
	k->fd = fd;
	k->magic = KDIR_MAGIC;
	k->d = e->dir;
	return (DIR *)k;
}

KP_EXPORT DIR *opendir(const char *path)
{
	struct kp_path kp;
	int r = kp_resolve(AT_FDCWD, path, &kp);
	if (r) {
		errno = -r;
		return NULL;
	}
	while (kp.where != KP_KURA) {
		DIR *d = REAL(opendir)(kp.p);
		if (d || !KP_HOST_MISS() || !kp_host_resolve(&kp, AT_FDCWD))
			return d;
	}
	int fd = kp_open_path(&kp, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	DIR *d = kp_opendir_fd(fd);
	if (!d) {
		int er = errno;
		kp_close(fd);
		errno = er;
	}
	return d;
}

KP_EXPORT DIR *fdopendir(int fd)
{
	if (!kp_get(fd))
		return REAL(fdopendir)(fd);
	return kp_opendir_fd(fd);
}

KP_EXPORT int closedir(DIR *dp)
{
	struct kdir *k = ours(dp);
	if (!k) {
		kp_mountpoint_forget(dp);
		return REAL(closedir)(dp);
	}
	int fd = k->fd;
	k->magic = 0;
	free(k);
	return kp_close(fd);
}

static int next(struct kdir *k, struct dirent64 **out)
{
	struct kura_dirent ke;
	int r = kura_readdir(k->d, &ke);
	if (r <= 0) {
		*out = NULL;
		return r;
	}
	k->ent.d_ino = ke.ino;
	k->ent.d_off = (off64_t)ke.next_cookie;
	k->ent.d_reclen = sizeof k->ent;
	k->ent.d_type = ke.type;
	size_t l = strnlen(ke.name, sizeof k->ent.d_name - 1);
	memcpy(k->ent.d_name, ke.name, l);
	k->ent.d_name[l] = '\0';
	*out = &k->ent;
	return 1;
}

/* A host stream: its entries, then the prefixes it is the parent of. */
static struct dirent64 *host_next(DIR *dp)
{
	int er = errno;
	errno = 0;
	struct dirent64 *d = REAL(readdir64)(dp);
	if (!d && !errno && kp_nmounts)
		d = kp_mountpoint_next(dp, REAL(dirfd)(dp));
	if (!errno)
		errno = er;
	return d;
}

KP_EXPORT struct dirent64 *readdir64(DIR *dp)
{
	struct kdir *k = ours(dp);
	if (!k)
		return host_next(dp);
	struct dirent64 *d;
	int r = next(k, &d);
	if (r < 0)
		errno = -r;
	return d;
}

/* struct dirent and struct dirent64 have one layout on x86-64. */
KP_EXPORT struct dirent *readdir(DIR *dp)
{
	return (struct dirent *)readdir64(dp);
}

KP_EXPORT int readdir64_r(DIR *dp, struct dirent64 *entry, struct dirent64 **result)
{
	struct kdir *k = ours(dp);
	struct dirent64 *d;
	if (!k) {
		int er = errno;
		d = host_next(dp);
		int r = d || errno == er ? 0 : errno;
		errno = er;
		if (r)
			return r;
	} else {
		int r = next(k, &d);
		if (r < 0)
			return -r;
	}
	if (d)
		memcpy(entry, d, sizeof *d);
	*result = d ? entry : NULL;
	return 0;
}

KP_EXPORT int readdir_r(DIR *dp, struct dirent *entry, struct dirent **result)
{
	return readdir64_r(dp, (struct dirent64 *)entry, (struct dirent64 **)result);
}

KP_EXPORT void rewinddir(DIR *dp)
{
	struct kdir *k = ours(dp);
	if (!k) {
		kp_mountpoint_forget(dp);
		REAL(rewinddir)(dp);
		return;
	}
	kura_rewinddir(k->d);
}

KP_EXPORT long telldir(DIR *dp)
{
	struct kdir *k = ours(dp);
	return k ? kura_telldir(k->d) : REAL(telldir)(dp);
}

KP_EXPORT void seekdir(DIR *dp, long loc)
{
	struct kdir *k = ours(dp);
	if (!k) {
		kp_mountpoint_forget(dp);
		REAL(seekdir)(dp, loc);
		return;
	}
	kura_seekdir(k->d, loc);
}

KP_EXPORT int dirfd(DIR *dp)
{
	struct kdir *k = ours(dp);
	return k ? k->fd : REAL(dirfd)(dp);
}

/* ---- getdents64 ---- */

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

KP_EXPORT ssize_t getdents64(int fd, void *buf, size_t n)
{
	struct kp_fd *e = kp_get(fd);
	if (!e)
		return REAL(getdents64)(fd, buf, n);
	if (!e->isdir)
		return kp_ret(-ENOTDIR);
	/* Entries go up to the first page the program may not fill, as the
	 * kernel's copy stops there (EFAULT if none fits). */
	size_t asked = n;
	n = kp_mem_writable(buf, n);
	sighold_lock(kp_tab_lock());
	int r = attach_stream(e);
	sighold_unlock(kp_tab_lock());
	if (r < 0)
		return kp_ret(r);
	size_t used = 0;
	for (;;) {
		long at = kura_telldir(e->dir);
		struct kura_dirent ke;
		r = kura_readdir(e->dir, &ke);
		if (r < 0)
			return used ? (ssize_t)used : kp_ret(r);
		if (r == 0)
			break;
		size_t l = strlen(ke.name);
		size_t rec = (offsetof(struct linux_dirent64, d_name) + l + 1 + 7) & ~(size_t)7;
		if (used + rec > n) {
			kura_seekdir(e->dir, at); /* give it back for the next call */
			if (!used)
				return kp_ret(n < asked ? -EFAULT : -EINVAL);
			break;
		}
		struct linux_dirent64 *d = (struct linux_dirent64 *)((char *)buf + used);
		d->d_ino = ke.ino;
		d->d_off = (int64_t)ke.next_cookie;
		d->d_reclen = (unsigned short)rec;
		d->d_type = ke.type;
		memcpy(d->d_name, ke.name, l + 1);
		used += rec;
	}
	return (ssize_t)used;
}

/* ---- scandir ---- */

static int scan(DIR *d, struct dirent ***list, int (*filter)(const struct dirent *),
		int (*cmp)(const struct dirent **, const struct dirent **))
{
	struct dirent **v = NULL, *de;
	size_t n = 0, cap = 0;
	int saved = errno;
	errno = 0;
	while ((de = readdir(d))) {
		if (filter && !filter(de))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			struct dirent **nv = realloc(v, cap * sizeof *v);
			if (!nv)
				goto fail;
			v = nv;
		}
		struct dirent *c = malloc(sizeof *c);
		if (!c)
			goto fail;
		memcpy(c, de, sizeof *c);
		v[n++] = c;
	}
	if (errno)
		goto fail;
	closedir(d);
	if (cmp && n > 1)
		qsort(v, n, sizeof *v, (int (*)(const void *, const void *))cmp);
	*list = v;
	errno = saved;
	return (int)n;
fail:;
	int er = errno ? errno : ENOMEM;
	while (n)
		free(v[--n]);
	free(v);
	closedir(d);
	errno = er;
	return -1;
}

KP_EXPORT int scandirat(int dirfd, const char *path, struct dirent ***list, int (*filter)(const struct dirent *),
			int (*cmp)(const struct dirent **, const struct dirent **))
{
	struct kp_path kp;
	int r = kp_resolve(dirfd, path, &kp);
	if (r)
		return (int)kp_ret(r);
	while (kp.where != KP_KURA) {
		int kdir = kp.where == KP_KERNEL ? dirfd : AT_FDCWD;
		r = REAL(scandirat)(kdir, kp.p, list, filter, cmp);
		if (r >= 0 || !KP_HOST_MISS() || !kp_host_resolve(&kp, kdir))
			return r;
	}
	int fd = kp_open_path(&kp, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	DIR *d = kp_opendir_fd(fd);
	if (!d) {
		int er = errno;
		kp_close(fd);
		errno = er;
		return -1;
	}
	return scan(d, list, filter, cmp);
}
KP_EXPORT int scandirat64(int dirfd, const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
			  int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	return scandirat(dirfd, path, (struct dirent ***)list, (int (*)(const struct dirent *))filter,
			 (int (*)(const struct dirent **, const struct dirent **))cmp);
}
KP_EXPORT int scandir(const char *path, struct dirent ***list, int (*filter)(const struct dirent *),
		      int (*cmp)(const struct dirent **, const struct dirent **))
{
	return scandirat(AT_FDCWD, path, list, filter, cmp);
}
KP_EXPORT int scandir64(const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
			int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	return scandirat64(AT_FDCWD, path, list, filter, cmp);
}

/* ---- glob: the real one, reading directories through our wrappers ---- */

static void *g_opendir(const char *p) { return opendir(p); }
static void *g_readdir(void *d) { return readdir(d); }
static void g_closedir(void *d) { closedir(d); }
static int g_stat(const char *p, void *st) { return stat(p, st); }
static int g_lstat(const char *p, void *st) { return lstat(p, st); }

KP_EXPORT int glob(const char *pat, int flags, int (*errfunc)(const char *, int), glob_t *g)
{
	kp_config();
	if (!(flags & GLOB_ALTDIRFUNC) && kp_nmounts > 0) {
		g->gl_opendir = g_opendir;
		g->gl_readdir = (struct dirent *(*)(void *))g_readdir;
		g->gl_closedir = g_closedir;
		g->gl_stat = (int (*)(const char *, struct stat *))g_stat;
		g->gl_lstat = (int (*)(const char *, struct stat *))g_lstat;
		flags |= GLOB_ALTDIRFUNC;
	}
	return REAL(glob)(pat, flags, errfunc, g);
}
KP_EXPORT int glob64(const char *pat, int flags, int (*errfunc)(const char *, int), glob64_t *g)
{
	kp_config();
	if (!(flags & GLOB_ALTDIRFUNC) && kp_nmounts > 0) {
		g->gl_opendir = g_opendir;
		g->gl_readdir = (struct dirent64 *(*)(void *))g_readdir;
		g->gl_closedir = g_closedir;
		g->gl_stat = (int (*)(const char *, struct stat64 *))g_stat;
		g->gl_lstat = (int (*)(const char *, struct stat64 *))g_lstat;
		flags |= GLOB_ALTDIRFUNC;
	}
	return REAL(glob64)(pat, flags, errfunc, g);
}
