/*
 * fts.c — fts_open/fts_read/fts_children/fts_set/fts_close (and fts64_*)
 * for trees under a kura prefix.
 *
 * glibc's fts reads directories and stats files through internal names no
 * wrapper sees, so when any root is a kura path the whole traversal is done
 * here, through the public (wrapped) opendir/readdir/stat/lstat/open/fchdir,
 * which serve kura and host paths alike; with only host roots glibc's fts
 * runs untouched.  Callers read FTS and FTSENT fields directly, so both are
 * glibc's structures from <fts.h>, filled as glibc fills them; an FTS is
 * ours when the private KFTS_OURS bit is set in fts_options (glibc keeps
 * only FTS_OPTIONMASK and its two private bits there).  On x86-64 FTS64 and
 * FTSENT64 have the same layout as FTS and FTSENT (ino64_t is ino_t,
 * struct stat64 is struct stat), so one implementation serves both names.
 *
 * Without FTS_NOCHDIR the walk changes directory like glibc's: the cwd is the
 * parent of the entry returned (the starting directory for roots) and
 * fts_accpath is the name relative to it.  For kura directories this moves
 * the layer's virtual cwd.  Differences from glibc: every FTSENT has its own
 * fts_path string (glibc points all of them at one shared buffer that holds
 * the current entry's path), and fts_statp is valid even with FTS_NOSTAT.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <fts.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"
#include "ftsent.h"

#define KFTS_OURS 0x40000000
#define KFTS_MAGIC 0x6b667473u

_Static_assert(sizeof(FTS) == sizeof(FTS64), "FTS64 layout");
_Static_assert(sizeof(FTSENT) == sizeof(FTSENT64), "FTSENT64 layout");
_Static_assert(offsetof(FTSENT, fts_statp) == offsetof(FTSENT64, fts_statp), "FTSENT64 layout");
_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat64 layout");

/* fts_build's callers, as in BSD fts: fts_read, fts_children, and
 * fts_children(FTS_NAMEONLY). */
enum { BREAD, BCHILD, BNAMES };

struct kfts {
	FTS fts; /* first: callers hold the FTS* */
	unsigned magic;
	FTSENT *rootparent;
};

static struct kfts *ours(FTS *sp)
{
	if (!sp || !(sp->fts_options & KFTS_OURS))
		return NULL;
	struct kfts *k = (struct kfts *)sp;
	return k->magic == KFTS_MAGIC ? k : NULL;
}

/* Makes directory p the cwd, through fd if >= 0 or else path (relative to
 * the cwd), checking that it still is the directory p was statted as: a
 * directory renamed meanwhile must not send the walk somewhere else. */
static int enter(FTS *sp, FTSENT *p, int fd, const char *path)
{
	if (ISSET(sp, FTS_NOCHDIR))
		return 0;
	int nfd = fd;
	if (nfd < 0 && (nfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -1;
	struct stat st;
	int r = -1;
	if (fstat(nfd, &st) == 0) {
		if (st.st_dev != p->fts_dev || st.st_ino != p->fts_ino)
			errno = ENOENT;
		else
			r = fchdir(nfd);
	}
	if (fd < 0) {
		int er = errno;
		close(nfd);
		errno = er;
	}
	return r;
}

static int back_to_start(FTS *sp)
{
	return ISSET(sp, FTS_NOCHDIR) ? 0 : fchdir(sp->fts_rfd);
}

/* The way back from directory p to its parent, after its children. */
static int leave(FTS *sp, FTSENT *p)
{
	if (p->fts_level == FTS_ROOTLEVEL) {
		if (p->fts_flags & FTS_SYMFOLLOW) {
			close(p->fts_symfd);
			p->fts_flags &= ~FTS_SYMFOLLOW;
		}
		return back_to_start(sp);
	}
	if (p->fts_flags & FTS_SYMFOLLOW) {
		int r = fchdir(p->fts_symfd);
		int er = errno;
		close(p->fts_symfd);
		p->fts_flags &= ~FTS_SYMFOLLOW;
		errno = er;
		return r;
	}
	if (p->fts_flags & FTS_DONTCHDIR)
		return 0;
	return enter(sp, p->fts_parent, -1, "..");
}

/* The children of sp->fts_cur as a list (NULL when it has none, or on
 * error with fts_info/fts_errno of the directory telling which). */
static FTSENT *build(FTS *sp, int type)
{
	FTSENT *cur = sp->fts_cur;
	DIR *d = opendir(cur->fts_accpath);
	if (!d) {
		if (type == BREAD) {
			cur->fts_info = FTS_DNR;
			cur->fts_errno = errno;
		}
		return NULL;
	}
	/* With FTS_NOSTAT on a physical walk only what may be a directory is
	 * statted (glibc counts link numbers for the same effect). */
	int nostat = type != BNAMES && ISSET(sp, FTS_NOSTAT) && ISSET(sp, FTS_PHYSICAL);
	int descend = 0, cderrno = 0;
	if (type != BNAMES) {
		if (enter(sp, cur, dirfd(d), NULL)) {
			if (type == BREAD)
				cur->fts_errno = errno;
			cur->fts_flags |= FTS_DONTCHDIR;
			cderrno = errno;
		} else {
			descend = 1;
		}
	}
	/* "dir/" and "/" get no doubled slash before the child's name. */
	size_t plen = cur->fts_pathlen;
	if (plen && cur->fts_path[plen - 1] == '/')
		plen--;
	char *buf = NULL;
	size_t bufcap = 0;
	FTSENT *head = NULL, *tail = NULL;
	int n = 0;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d))) {
		if (!ISSET(sp, FTS_SEEDOT) && isdot(de->d_name))
			continue;
		size_t nl = strlen(de->d_name);
		if (plen + 1 + nl + 1 > bufcap) {
			bufcap = (plen + 1 + nl + 1) * 2;
			char *nb = realloc(buf, bufcap);
			if (!nb)
				goto fail;
			buf = nb;
		}
		memcpy(buf, cur->fts_path, plen);
		buf[plen] = '/';
		memcpy(buf + plen + 1, de->d_name, nl + 1);
		FTSENT *p = kfts_ent_alloc(de->d_name, nl, buf, plen + 1 + nl);
		if (!p) {
			if (errno == ENAMETOOLONG) {
				cur->fts_info = FTS_ERR;
				SET(sp, FTS_STOP);
			}
			goto fail;
		}
		p->fts_level = (short)(cur->fts_level + 1);
		p->fts_parent = cur;
		p->fts_accpath = ISSET(sp, FTS_NOCHDIR) || cderrno ? p->fts_path : p->fts_name;
		if (cderrno) {
			/* The directory could be read but not entered: the names
			 * relative to it cannot be statted from here. */
			p->fts_info = type == BNAMES ? FTS_NSOK : FTS_NS;
			p->fts_errno = cderrno;
		} else if (type == BNAMES || (nostat && de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)) {
			p->fts_info = FTS_NSOK;
		} else {
			p->fts_info = kfts_stat(sp, p, 0);
		}
		if (tail)
			tail->fts_link = p;
		else
			head = p;
		tail = p;
		n++;
		errno = 0;
	}
	free(buf);
	closedir(d);
	/* fts_children and an empty directory leave the cwd where it was. */
	if (descend && (type == BCHILD || !n) && leave(sp, cur)) {
		cur->fts_info = FTS_ERR;
		SET(sp, FTS_STOP);
		kfts_list_free(head);
		return NULL;
	}
	if (!n) {
		if (type == BREAD)
			cur->fts_info = FTS_DP;
		return NULL;
	}
	if (sp->fts_compar && n > 1)
		head = kfts_sort(sp, head, n);
	return head;
fail:;
	int er = errno ? errno : ENOMEM;
	free(buf);
	closedir(d);
	kfts_list_free(head);
	if (descend)
		leave(sp, cur);
	errno = er;
	return NULL;
}

/* A root becomes current: its path is the argument, its name the last
 * component ("dir/" keeps an empty name, "/" stays "/", as glibc does). */
static void load(FTS *sp, FTSENT *p)
{
	p->fts_accpath = p->fts_path;
	char *cp = strrchr(p->fts_name, '/');
	if (cp && (cp != p->fts_name || cp[1])) {
		size_t l = strlen(cp + 1);
		memmove(p->fts_name, cp + 1, l + 1);
		p->fts_namelen = (unsigned short)l;
	}
	sp->fts_dev = p->fts_dev;
}

static FTS *k_open(char *const *argv, int options, int (*compar)(const FTSENT **, const FTSENT **))
{
	if (options & ~FTS_OPTIONMASK) {
		errno = EINVAL;
		return NULL;
	}
	int er;
	struct kfts *k = calloc(1, sizeof *k);
	if (!k)
		return NULL;
	FTS *sp = &k->fts;
	k->magic = KFTS_MAGIC;
	sp->fts_compar = (int (*)(const void *, const void *))compar;
	sp->fts_options = options | KFTS_OURS;
	sp->fts_rfd = -1;
	/* Symlinks make the way back up ambiguous: logical walks never chdir. */
	if (ISSET(sp, FTS_LOGICAL))
		SET(sp, FTS_NOCHDIR);
	FTSENT *parent = kfts_ent_alloc("", 0, "", 0), *root = NULL, *tail = NULL;
	if (!parent)
		goto fail;
	parent->fts_level = FTS_ROOTPARENTLEVEL;
	k->rootparent = parent;
	int n = 0;
	size_t maxlen = 0;
	for (char *const *a = argv; a && *a; a++) {
		size_t l = strlen(*a);
		if (l == 0) {
			errno = ENOENT;
			goto fail_list;
		}
		FTSENT *p = kfts_ent_alloc(*a, l, *a, l);
		if (!p)
			goto fail_list;
		if (l > maxlen)
			maxlen = l;
		p->fts_level = FTS_ROOTLEVEL;
		p->fts_parent = parent;
		p->fts_info = kfts_stat(sp, p, ISSET(sp, FTS_COMFOLLOW) != 0);
		if (p->fts_info == FTS_DOT) /* "." named on the command line is a directory */
			p->fts_info = FTS_D;
		if (compar) {
			p->fts_link = root;
			root = p;
		} else {
			if (tail)
				tail->fts_link = p;
			else
				root = p;
			tail = p;
		}
		n++;
	}
	if (compar && n > 1)
		root = kfts_sort(sp, root, n);
	/* The entry fts_read starts from: its successor is the first root. */
	FTSENT *init = kfts_ent_alloc("", 0, "", 0);
	if (!init)
		goto fail_list;
	init->fts_link = root;
	init->fts_parent = parent;
	init->fts_level = FTS_ROOTLEVEL;
	init->fts_info = FTS_INIT;
	sp->fts_cur = init;
	/* fts_path of FTS: room for the longest root, as glibc sizes it. */
	sp->fts_pathlen = (int)(maxlen > PATH_MAX ? maxlen + 1 : PATH_MAX);
	sp->fts_path = calloc(1, (size_t)sp->fts_pathlen);
	if (!sp->fts_path) {
		sp->fts_cur = NULL;
		kfts_ent_free(init);
		goto fail_list;
	}
	/* The way back to the starting directory; without one, no chdir. */
	if (!ISSET(sp, FTS_NOCHDIR) && (sp->fts_rfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		SET(sp, FTS_NOCHDIR);
	return sp;
fail_list:
	er = errno;
	kfts_list_free(root);
	kfts_ent_free(parent);
	errno = er;
fail:
	er = errno;
	free(sp->fts_path);
	free(sp->fts_array);
	free(k);
	errno = er;
	return NULL;
}

static FTSENT *k_read(FTS *sp)
{
	if (!sp->fts_cur || ISSET(sp, FTS_STOP))
		return NULL;
	FTSENT *p = sp->fts_cur, *tmp;
	int instr = p->fts_instr;
	p->fts_instr = FTS_NOINSTR;

	if (instr == FTS_AGAIN) {
		p->fts_info = kfts_stat(sp, p, 0);
		return p;
	}
	/* FTS_FOLLOW on a link just returned: return it again as its target. */
	if (instr == FTS_FOLLOW && (p->fts_info == FTS_SL || p->fts_info == FTS_SLNONE)) {
		kfts_follow_link(sp, p);
		return p;
	}
	if (p->fts_info == FTS_D) {
		if (instr == FTS_SKIP || (ISSET(sp, FTS_XDEV) && p->fts_dev != sp->fts_dev)) {
			if (p->fts_flags & FTS_SYMFOLLOW) {
				close(p->fts_symfd);
				p->fts_flags &= ~FTS_SYMFOLLOW;
			}
			kfts_list_free(sp->fts_child);
			sp->fts_child = NULL;
			p->fts_info = FTS_DP;
			return p;
		}
		if (sp->fts_child && ISSET(sp, FTS_NAMEONLY)) {
			CLR(sp, FTS_NAMEONLY);
			kfts_list_free(sp->fts_child);
			sp->fts_child = NULL;
		}
		if (sp->fts_child) {
			/* Children listed earlier by fts_children: only enter. */
			if (enter(sp, p, -1, p->fts_accpath)) {
				p->fts_errno = errno;
				p->fts_flags |= FTS_DONTCHDIR;
				for (FTSENT *c = sp->fts_child; c; c = c->fts_link)
					c->fts_accpath = c->fts_path;
			}
		} else if (!(sp->fts_child = build(sp, BREAD))) {
			if (ISSET(sp, FTS_STOP))
				return NULL;
			return p; /* FTS_DNR, or an empty directory now FTS_DP */
		}
		p = sp->fts_child;
		sp->fts_child = NULL;
		return sp->fts_cur = p;
	}

next:
	tmp = p;
	if ((p = p->fts_link)) {
		sp->fts_cur = p;
		kfts_ent_free(tmp);
		if (p->fts_level == FTS_ROOTLEVEL) {
			if (back_to_start(sp)) {
				SET(sp, FTS_STOP);
				return NULL;
			}
			load(sp, p);
			return p;
		}
		if (p->fts_instr == FTS_SKIP)
			goto next;
		if (p->fts_instr == FTS_FOLLOW) {
			kfts_follow_link(sp, p);
			p->fts_instr = FTS_NOINSTR;
		}
		return p;
	}
	/* No more siblings: the parent, in postorder. */
	p = tmp->fts_parent;
	sp->fts_cur = p;
	kfts_ent_free(tmp);
	if (p->fts_level == FTS_ROOTPARENTLEVEL) {
		kfts_ent_free(p);
		((struct kfts *)sp)->rootparent = NULL;
		sp->fts_cur = NULL;
		errno = 0;
		return NULL;
	}
	if (leave(sp, p)) {
		SET(sp, FTS_STOP);
		return NULL;
	}
	p->fts_info = p->fts_errno ? FTS_ERR : FTS_DP;
	return p;
}

static FTSENT *k_children(FTS *sp, int instr)
{
	if (instr && instr != FTS_NAMEONLY) {
		errno = EINVAL;
		return NULL;
	}
	FTSENT *p = sp->fts_cur;
	errno = 0;
	if (!p || ISSET(sp, FTS_STOP))
		return NULL;
	if (p->fts_info == FTS_INIT)
		return p->fts_link;
	if (p->fts_info != FTS_D)
		return NULL;
	kfts_list_free(sp->fts_child);
	sp->fts_child = NULL;
	int type = BCHILD;
	if (instr == FTS_NAMEONLY) {
		SET(sp, FTS_NAMEONLY);
		type = BNAMES;
	}
	/* A relative root is entered from the starting directory, which is
	 * the cwd only while fts_read has not moved; return to it after. */
	if (p->fts_level != FTS_ROOTLEVEL || p->fts_accpath[0] == '/' || ISSET(sp, FTS_NOCHDIR))
		return sp->fts_child = build(sp, type);
	int fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	sp->fts_child = build(sp, type);
	int er = errno;
	if (fchdir(fd)) {
		er = errno;
		close(fd);
		errno = er;
		return NULL;
	}
	close(fd);
	errno = er;
	return sp->fts_child;
}

static int k_close(FTS *sp)
{
	struct kfts *k = (struct kfts *)sp;
	if (sp->fts_cur) {
		FTSENT *p = sp->fts_cur;
		while (p->fts_level >= FTS_ROOTLEVEL) {
			FTSENT *f = p;
			p = p->fts_link ? p->fts_link : p->fts_parent;
			kfts_ent_free(f);
		}
		kfts_ent_free(p); /* the root parent */
	} else {
		kfts_ent_free(k->rootparent);
	}
	kfts_list_free(sp->fts_child);
	free(sp->fts_array);
	free(sp->fts_path);
	int r = 0;
	if (!ISSET(sp, FTS_NOCHDIR) && sp->fts_rfd >= 0) {
		r = fchdir(sp->fts_rfd);
		int er = errno;
		close(sp->fts_rfd);
		errno = er;
	}
	k->magic = 0;
	free(k);
	return r ? -1 : 0;
}

static int any_kura(char *const *argv)
{
	kp_config();
	if (kp_nmounts == 0)
		return 0;
	for (char *const *a = argv; a && *a; a++) {
		struct kp_path kp;
		/* classify, not resolve: see is_kura in dir.c */
		if (kp_classify(AT_FDCWD, *a, &kp) == 0 && kp.where == KP_KURA)
			return 1;
		/* glibc's fts would resolve a relative root against the
		 * kernel's cwd, not the virtual one. */
		if ((*a)[0] != '/' && kp_vcwd[0])
			return 1;
	}
	return 0;
}

KP_EXPORT FTS *fts_open(char *const *argv, int options, int (*compar)(const FTSENT **, const FTSENT **))
{
	if (!any_kura(argv))
		return REAL(fts_open)(argv, options, compar);
	return k_open(argv, options, compar);
}

KP_EXPORT FTSENT *fts_read(FTS *sp)
{
	if (!ours(sp))
		return REAL(fts_read)(sp);
	return k_read(sp);
}

KP_EXPORT FTSENT *fts_children(FTS *sp, int instr)
{
	if (!ours(sp))
		return REAL(fts_children)(sp, instr);
	return k_children(sp, instr);
}

KP_EXPORT int fts_set(FTS *sp, FTSENT *p, int instr)
{
	if (!ours(sp))
		return REAL(fts_set)(sp, p, instr);
	if (instr && instr != FTS_AGAIN && instr != FTS_FOLLOW && instr != FTS_NOINSTR && instr != FTS_SKIP) {
		errno = EINVAL;
		return 1;
	}
	p->fts_instr = (unsigned short)instr;
	return 0;
}

KP_EXPORT int fts_close(FTS *sp)
{
	if (!ours(sp))
		return REAL(fts_close)(sp);
	return k_close(sp);
}

KP_EXPORT FTS64 *fts64_open(char *const *argv, int options, int (*compar)(const FTSENT64 **, const FTSENT64 **))
{
	if (!any_kura(argv))
		return REAL(fts64_open)(argv, options, compar);
	return (FTS64 *)k_open(argv, options, (int (*)(const FTSENT **, const FTSENT **))compar);
}

KP_EXPORT FTSENT64 *fts64_read(FTS64 *sp)
{
	if (!ours((FTS *)sp))
		return REAL(fts64_read)(sp);
	return (FTSENT64 *)k_read((FTS *)sp);
}

KP_EXPORT FTSENT64 *fts64_children(FTS64 *sp, int instr)
{
	if (!ours((FTS *)sp))
		return REAL(fts64_children)(sp, instr);
	return (FTSENT64 *)k_children((FTS *)sp, instr);
}

KP_EXPORT int fts64_set(FTS64 *sp, FTSENT64 *p, int instr)
{
	if (!ours((FTS *)sp))
		return REAL(fts64_set)(sp, p, instr);
	return fts_set((FTS *)sp, (FTSENT *)p, instr);
}

KP_EXPORT int fts64_close(FTS64 *sp)
{
	if (!ours((FTS *)sp))
		return REAL(fts64_close)(sp);
	return k_close((FTS *)sp);
}
