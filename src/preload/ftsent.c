/*
 * ftsent.c — the entries of the layer's fts (fts.c): allocation, stat,
 * following a link, sorting.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"
#include "ftsent.h"

/* One block: the FTSENT with its name, then the stat buffer.  fts_path is
 * a separate string so that a root's name can be cut to its last component
 * in place. */
FTSENT *kfts_ent_alloc(const char *name, size_t namelen, const char *path, size_t pathlen)
{
	if (pathlen >= USHRT_MAX || namelen >= USHRT_MAX) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	size_t off = offsetof(FTSENT, fts_name) + namelen + 1;
	off = (off + _Alignof(struct stat) - 1) & ~(size_t)(_Alignof(struct stat) - 1);
	FTSENT *p = calloc(1, off + sizeof(struct stat));
	if (!p)
		return NULL;
	p->fts_path = malloc(pathlen + 1);
	if (!p->fts_path) {
		free(p);
		return NULL;
	}
	memcpy(p->fts_path, path, pathlen);
	p->fts_path[pathlen] = '\0';
	p->fts_pathlen = (unsigned short)pathlen;
	memcpy(p->fts_name, name, namelen);
	p->fts_name[namelen] = '\0';
	p->fts_namelen = (unsigned short)namelen;
	p->fts_accpath = p->fts_path;
	p->fts_statp = (struct stat *)((char *)p + off);
	p->fts_symfd = -1;
	p->fts_instr = FTS_NOINSTR;
	return p;
}

void kfts_ent_free(FTSENT *p)
{
	if (!p)
		return;
	if (p->fts_flags & FTS_SYMFOLLOW)
		close(p->fts_symfd);
	free(p->fts_path);
	free(p);
}

void kfts_list_free(FTSENT *p)
{
	while (p) {
		FTSENT *n = p->fts_link;
		kfts_ent_free(p);
		p = n;
	}
}

unsigned short kfts_stat(FTS *sp, FTSENT *p, int follow)
{
	struct stat *st = p->fts_statp;
	if (ISSET(sp, FTS_LOGICAL) || follow) {
		if (stat(p->fts_accpath, st) < 0) {
			/* glibc: any link that cannot be followed (dangling,
			 * ELOOP...) is FTS_SLNONE, not only ENOENT. */
			int er = errno;
			if (lstat(p->fts_accpath, st) == 0) {
				errno = 0;
				return FTS_SLNONE;
			}
			p->fts_errno = er;
			memset(st, 0, sizeof *st);
			return FTS_NS;
		}
	} else if (lstat(p->fts_accpath, st) < 0) {
		p->fts_errno = errno;
		memset(st, 0, sizeof *st);
		return FTS_NS;
	}
	p->fts_dev = st->st_dev;
	p->fts_ino = st->st_ino;
	p->fts_nlink = st->st_nlink;
	if (S_ISDIR(st->st_mode)) {
		if (isdot(p->fts_name))
			return FTS_DOT;
		/* A directory that is its own ancestor closes a cycle (logical
		 * walks through a link to "..", bind mounts). */
		for (FTSENT *t = p->fts_parent; t && t->fts_level >= FTS_ROOTLEVEL; t = t->fts_parent)
			if (t->fts_dev == st->st_dev && t->fts_ino == st->st_ino) {
				p->fts_cycle = t;
				return FTS_DC;
			}
		return FTS_D;
	}
	if (S_ISLNK(st->st_mode))
		return FTS_SL;
	if (S_ISREG(st->st_mode))
		return FTS_F;
	return FTS_DEFAULT;
}

/* FTS_FOLLOW: the link becomes its target; a directory reached so, when
 * fts changes directory, needs a way back (fts_symfd), as in glibc. */
void kfts_follow_link(FTS *sp, FTSENT *p)
{
	p->fts_info = kfts_stat(sp, p, 1);
	if (p->fts_info == FTS_D && !ISSET(sp, FTS_NOCHDIR)) {
		if ((p->fts_symfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			p->fts_errno = errno;
			p->fts_info = FTS_ERR;
		} else {
			p->fts_flags |= FTS_SYMFOLLOW;
		}
	}
}

FTSENT *kfts_sort(FTS *sp, FTSENT *head, int n)
{
	if (n > sp->fts_nitems) {
		FTSENT **a = realloc(sp->fts_array, (size_t)(n + 40) * sizeof *a);
		if (!a)
			return head; /* unsorted beats failing, as in BSD fts */
		sp->fts_array = a;
		sp->fts_nitems = n + 40;
	}
	FTSENT **a = sp->fts_array;
	int i = 0;
	for (FTSENT *p = head; p; p = p->fts_link)
		a[i++] = p;
	qsort(a, (size_t)n, sizeof *a, sp->fts_compar);
	for (i = 0; i < n - 1; i++)
		a[i]->fts_link = a[i + 1];
	a[n - 1]->fts_link = NULL;
	return a[0];
}
