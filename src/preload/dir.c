/*
 * dir.c — directory streams, getdents64, scandir, glob, ftw/nftw (fts is
 * in fts.c).
 *
 * glibc's opendir/readdir/scandir/ftw read directories with internal
 * getdents64 calls no wrapper sees, so for kura directories they are
 * reimplemented here.  A kura DIR* is our own structure whose first member
 * is the placeholder fd, as glibc's DIR begins with its kernel fd: a DIR*
 * is ours exactly when that fd is a placeholder with a stream attached.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
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
	pthread_mutex_lock(kp_tab_lock());
	int r = attach_stream(e);
	pthread_mutex_unlock(kp_tab_lock());
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
	pthread_mutex_lock(kp_tab_lock());
	int r = attach_stream(e);
	pthread_mutex_unlock(kp_tab_lock());
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
				return kp_ret(-EINVAL);
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

/* ---- nftw / ftw ----
 * Reimplemented for kura trees with glibc's observable behaviour: a missing
 * start is -1 without a callback, FTW_MOUNT leaves out entries on other
 * devices, a non-FTW_PHYS walk enters each directory once (links to an
 * ancestor do not loop), FTW_CHDIR runs each callback with the cwd at the
 * entry's directory (the FTW_DP callback inside the directory itself) and
 * restores the cwd at the end. */

typedef int (*nftw_fn)(const char *, const struct stat *, int, struct FTW *);

struct walk {
	nftw_fn fn;
	int flags;
	dev_t dev; /* the start's, for FTW_MOUNT */
	struct { dev_t dev; ino_t ino; } *seen;
	size_t nseen, capseen;
	char path[PATH_MAX];
};

/* Records a directory for non-physical walks; 1 if it was seen before. */
static int seen(struct walk *w, const struct stat *st)
{
	for (size_t i = 0; i < w->nseen; i++)
		if (w->seen[i].dev == st->st_dev && w->seen[i].ino == st->st_ino)
			return 1;
	if (w->nseen == w->capseen) {
		size_t cap = w->capseen ? w->capseen * 2 : 32;
		void *n = realloc(w->seen, cap * sizeof *w->seen);
		if (!n)
			return -1;
		w->seen = n;
		w->capseen = cap;
	}
	w->seen[w->nseen].dev = st->st_dev;
	w->seen[w->nseen].ino = st->st_ino;
	w->nseen++;
	return 0;
}

static int walk_entry(struct walk *w, size_t len, int level, size_t base, DIR *parent);

static int is_actionret(const struct walk *w, int r, int what)
{
	return (w->flags & FTW_ACTIONRETVAL) && r == what;
}

/* Directory w->path (length len, st its stat) whose access name is acc.
 * parent is the stream of the directory holding it (NULL for the start),
 * for the way back with FTW_CHDIR.  Returns the callback's result. */
static int walk_dir(struct walk *w, size_t len, int level, size_t base, const char *acc, struct stat *st,
		    DIR *parent)
{
	struct FTW f = { .base = (int)base, .level = level };
	int r;
	DIR *d = opendir(acc);
	if (!d)
		return errno == EACCES ? w->fn(w->path, st, FTW_DNR, &f) : -1;
	if (!(w->flags & FTW_DEPTH)) {
		r = w->fn(w->path, st, FTW_D, &f);
		if (r) {
			closedir(d);
			return r;
		}
	}
	if ((w->flags & FTW_CHDIR) && fchdir(dirfd(d)) < 0) {
		int er = errno;
		closedir(d);
		errno = er;
		return -1;
	}
	size_t cbase = len;
	if (cbase == 0 || w->path[cbase - 1] != '/')
		w->path[cbase++] = '/';
	struct dirent *de;
	r = 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		size_t nl = strlen(de->d_name);
		if (cbase + nl >= sizeof w->path) {
			r = -1;
			errno = ENAMETOOLONG;
			break;
		}
		memcpy(w->path + cbase, de->d_name, nl + 1);
		r = walk_entry(w, cbase + nl, level + 1, cbase, d);
		if (r)
			break;
	}
	w->path[len] = '\0';
	int er = errno;
	closedir(d);
	errno = er;
	if (is_actionret(w, r, FTW_SKIP_SIBLINGS))
		r = 0;
	if (r == 0 && (w->flags & FTW_DEPTH))
		r = w->fn(w->path, st, FTW_DP, &f);
	if (parent && (w->flags & FTW_CHDIR) &&
	    (r == 0 || ((w->flags & FTW_ACTIONRETVAL) && r != -1 && r != FTW_STOP))) {
		er = errno;
		if (fchdir(dirfd(parent)) < 0)
			r = -1;
		else
			errno = er;
	}
	return r;
}

/* Entry w->path (length len) of directory stream parent. */
static int walk_entry(struct walk *w, size_t len, int level, size_t base, DIR *parent)
{
	struct stat st;
	struct FTW f = { .base = (int)base, .level = level };
	int type, r = 0;
	int phys = w->flags & FTW_PHYS;
	const char *acc = (w->flags & FTW_CHDIR) ? w->path + base : w->path;
	if ((phys ? lstat(acc, &st) : stat(acc, &st)) < 0) {
		if (errno != EACCES && errno != ENOENT)
			return -1;
		if (!phys && lstat(acc, &st) == 0 && S_ISLNK(st.st_mode))
			type = FTW_SLN;
		else
			type = FTW_NS;
	} else if (S_ISDIR(st.st_mode)) {
		type = FTW_D;
	} else if (S_ISLNK(st.st_mode)) {
		type = FTW_SL;
	} else {
		type = FTW_F;
	}
	if (type != FTW_NS && (w->flags & FTW_MOUNT) && st.st_dev != w->dev)
		return 0;
	if (type == FTW_D) {
		if (!phys) {
			int s = seen(w, &st);
			if (s)
				return s < 0 ? -1 : 0;
		}
		r = walk_dir(w, len, level, base, acc, &st, parent);
	} else {
		r = w->fn(w->path, &st, type, &f);
	}
	if (is_actionret(w, r, FTW_SKIP_SUBTREE))
		r = 0;
	return r;
}

/* Walks we must do ourselves: kura starts, and relative starts while the
 * cwd is virtual (glibc's walk would resolve them against the kernel's). */
static int is_kura(const char *p)
{
	struct kp_path kp;
	/* classify, not resolve: a kura start whose symlink leads out is still
	 * ours to walk (the wrappers we call follow it); glibc would hand the
	 * kernel a path it cannot see. */
	if (kp_classify(AT_FDCWD, p, &kp) != 0)
		return 0;
	return kp.where == KP_KURA || (p && p[0] != '/' && kp_vcwd[0]);
}

KP_EXPORT int nftw(const char *dir, nftw_fn fn, int nopen, int flags)
{
	if (!is_kura(dir))
		return REAL(nftw)(dir, fn, nopen, flags);
	(void)nopen; /* every level keeps its stream: depth bounds the fds */
	struct walk *w = calloc(1, sizeof *w);
	if (!w)
		return -1;
	w->fn = fn;
	w->flags = flags;
	size_t l = strlen(dir);
	if (l >= sizeof w->path) {
		free(w);
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(w->path, dir, l + 1);
	while (l > 1 && w->path[l - 1] == '/')
		w->path[--l] = '\0';
	size_t base = l;
	while (base > 0 && w->path[base - 1] != '/')
		base--;
	int r = 0, cwdfd = -1;
	const char *acc = w->path;
	if (flags & FTW_CHDIR) {
		/* The callbacks see the cwd at the start's directory. */
		cwdfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cwdfd < 0) {
			free(w);
			return -1;
		}
		if (base == 1) {
			r = chdir("/");
		} else if (base > 1) {
			w->path[base - 1] = '\0';
			r = chdir(w->path);
			w->path[base - 1] = '/';
		}
		acc = w->path + base;
	}
	if (r == 0) {
		struct stat st;
		struct FTW f = { .base = (int)base, .level = 0 };
		if (((flags & FTW_PHYS) ? lstat(acc, &st) : stat(acc, &st)) < 0) {
			if (!(flags & FTW_PHYS) && errno == ENOENT && lstat(acc, &st) == 0 && S_ISLNK(st.st_mode))
				r = fn(w->path, &st, FTW_SLN, &f);
			else
				r = -1; /* nothing to report the callback */
		} else if (S_ISDIR(st.st_mode)) {
			w->dev = st.st_dev;
			if (!(flags & FTW_PHYS) && seen(w, &st) < 0)
				r = -1;
			else
				r = walk_dir(w, l, 0, base, acc, &st, NULL);
		} else {
			r = fn(w->path, &st, S_ISLNK(st.st_mode) ? FTW_SL : FTW_F, &f);
		}
		if ((flags & FTW_ACTIONRETVAL) && (r == FTW_SKIP_SUBTREE || r == FTW_SKIP_SIBLINGS))
			r = 0;
	}
	if (cwdfd >= 0) {
		int er = errno;
		fchdir(cwdfd);
		close(cwdfd);
		errno = er;
	}
	free(w->seen);
	free(w);
	return r;
}
KP_EXPORT int nftw64(const char *dir, int (*fn)(const char *, const struct stat64 *, int, struct FTW *), int nopen,
		     int flags)
{
	if (!is_kura(dir))
		return REAL(nftw64)(dir, fn, nopen, flags);
	return nftw(dir, (nftw_fn)fn, nopen, flags);
}

static __thread int (*ftw_user)(const char *, const struct stat *, int);
static int ftw_adapter(const char *p, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	if (type == FTW_SLN)
		type = FTW_NS; /* ftw has no FTW_SLN */
	return ftw_user(p, st, type);
}

KP_EXPORT int ftw(const char *dir, int (*fn)(const char *, const struct stat *, int), int nopen)
{
	if (!is_kura(dir))
		return REAL(ftw)(dir, fn, nopen);
	int (*saved)(const char *, const struct stat *, int) = ftw_user;
	ftw_user = fn;
	int r = nftw(dir, ftw_adapter, nopen, 0);
	ftw_user = saved;
	return r;
}
KP_EXPORT int ftw64(const char *dir, int (*fn)(const char *, const struct stat64 *, int), int nopen)
{
	if (!is_kura(dir))
		return REAL(ftw64)(dir, fn, nopen);
	return ftw(dir, (int (*)(const char *, const struct stat *, int))fn, nopen);
}
