/*
 * ftw.c — nftw and ftw (and their 64 names) for trees under a kura prefix.
 *
 * Reimplemented for kura trees with glibc's observable behaviour: a missing
 * start is -1 without a callback, FTW_MOUNT leaves out entries on other
 * devices, a non-FTW_PHYS walk enters each directory once (links to an
 * ancestor do not loop), FTW_CHDIR runs each callback with the cwd at the
 * entry's directory (the FTW_DP callback inside the directory itself) and
 * restores the cwd at the end.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

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
