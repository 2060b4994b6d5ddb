/*
 * gset.c — a group over several files and names: kura_gbegin …
 * kura_gcommit (include/kura.h), for preloaded programs.
 *
 * While a process has the group open, every pool file it writes (write,
 * pwrite, their vector forms, ftruncate, fallocate) or names in
 * kura_fbegin joins: the file gets an atomic group of its own on that
 * description (atomic.c, groupmap.c), which the set holds through a
 * duplicate descriptor, so a close does not end it.  Names change at the
 * commit: unlink, rmdir and rename are recorded, after the checks that can
 * be made at once (the name exists), and an open with O_CREAT of a name
 * that does not exist makes an unnamed file (O_TMPFILE) in its directory,
 * which the commit links under the name (its writes need no group: no one
 * else can reach it before).  kura_gcommit hands it all to the
 * engine's kura_group_commit: one transaction, so after a crash all of it
 * or none.  If the commit fails, nothing changed and the group is still
 * open, to commit again or abort.
 *
 * Until then, this process too sees names as they were (a file the group
 * created is reached through the descriptor its open returned), and the
 * other processes see neither names nor contents.  mkdir, link, symlink
 * and changes of attributes are not deferred: they take effect at once
 * (README, Atomic groups).  One set per process, on one pool; a forked
 * child has none.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

struct member {
	int kfd;        /* the set's own descriptor of the description */
	int64_t shadow; /* its group's shadow: names it to groupmap.c */
};

struct pending {
	struct kura_group_op op;
	int dirs[2]; /* the set's own duplicates of op's directory descriptors (-1: none) */
};

static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	pid_t pid;            /* the process that began it; 0: none */
	int mnt;              /* -1 until a file or name joins */
	struct member *m;
	int nm, capm;
	struct pending *ops;
	int nops, capops;
} set;
int kp_gset_open; /* one load in the write paths while no set is open */

#define SET_OPEN() (set.pid && set.pid == getpid())

static kura_fs *set_fs(void)
{
	return set.mnt >= 0 ? kp_fs(set.mnt) : NULL;
}

/* With the lock: the set's pool is mnt's (the first to join decides). */
static int same_pool(int mnt)
{
	if (set.mnt < 0)
		set.mnt = mnt;
	return set.mnt == mnt ? 0 : -EXDEV;
}

static int grow(void **p, int *cap, int n, size_t each)
{
	if (n < *cap)
		return 0;
	if (n >= KURA_GROUP_MAX)
		return -ENOSPC;
	int c = *cap ? *cap * 2 : 8;
	void *q = realloc(*p, (size_t)c * each);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

static void clear_set(void)
{
	kura_fs *fs = set_fs();
	for (int i = 0; fs && i < set.nm; i++)
		kura_close(fs, set.m[i].kfd);
	for (int i = 0; fs && i < set.nops; i++) {
		for (int d = 0; d < 2; d++)
			if (set.ops[i].dirs[d] >= 0)
				kura_close(fs, set.ops[i].dirs[d]);
		if (set.ops[i].op.kind == KURA_GROUP_LINK)
			kura_close(fs, set.ops[i].op.olddirfd);
		free((char *)set.ops[i].op.oldpath);
		free((char *)set.ops[i].op.newpath);
	}
	free(set.m);
	free(set.ops);
	memset(&set, 0, sizeof set);
	set.mnt = -1;
	__atomic_store_n(&kp_gset_open, 0, __ATOMIC_RELEASE);
}

/* With the lock: is e's description in the set already? */
static int is_member(struct kp_fd *e, kura_fs *fs)
{
	int64_t shadow = kura_atomic_shadow(fs, e->kfd, NULL);
	for (int i = 0; shadow > 0 && i < set.nm; i++)
		if (set.m[i].shadow == shadow && e->mnt == set.mnt)
			return 1;
	return 0;
}

/* With the lock: is ino a file the set made (unnamed until the commit)?
 * Its writes need no group: nobody else can reach it before the commit
 * names it, and a crash before leaves it an orphan. */
static int made_here(kura_fs *fs, int64_t ino)
{
	for (int i = 0; ino > 0 && i < set.nops; i++)
		if (set.ops[i].op.kind == KURA_GROUP_LINK && kura_fd_ino(fs, set.ops[i].op.olddirfd) == ino)
			return 1;
	return 0;
}

/* With the lock: e's file joins, its group begun unless `begun`. */
static int join(struct kp_fd *e, kura_fs *fs, int begun)
{
	int err = same_pool(e->mnt);
	if (err || is_member(e, fs) || made_here(fs, kura_fd_ino(fs, e->kfd)))
		return err;
	if ((err = grow((void **)&set.m, &set.capm, set.nm, sizeof *set.m)))
		return err;
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return (int)ino;
	if (!begun && (err = kp_group_begin(e, fs, (uint64_t)ino)))
		return err;
	int kfd = kura_dup(fs, e->kfd);
	if (kfd < 0) {
		kp_group_abort(e, fs);
		return kfd;
	}
	set.m[set.nm++] = (struct member){ kfd, kura_atomic_shadow(fs, e->kfd, NULL) };
	return 0;
}

/* Before a write through e: its file joins the open set.  0 or -errno
 * (the write then fails with it). */
int kp_gset_join(struct kp_fd *e)
{
	kura_fs *fs = kp_fs(e->mnt);
	if (!fs)
		return 0;
	sighold_lock(&set_lock);
	int err = 0;
	if (SET_OPEN() && !e->isdir)
		err = join(e, fs, kura_atomic_shadow(fs, e->kfd, NULL) > 0);
	sighold_unlock(&set_lock);
	return err;
}

/* kura_fbegin or F2FS's START on e while the set is open: e joins.
 * 1 if the set took it, 0 if no set is open, or -errno. */
int kp_gset_begin(struct kp_fd *e)
{
	if (!__atomic_load_n(&kp_gset_open, __ATOMIC_ACQUIRE))
		return 0;
	kura_fs *fs = kp_fs(e->mnt);
	sighold_lock(&set_lock);
	int r = !SET_OPEN() ? 0 : !fs ? -EBADF : join(e, fs, kura_atomic_shadow(fs, e->kfd, NULL) > 0);
	sighold_unlock(&set_lock);
	return r < 0 ? r : SET_OPEN();
}

/* With the lock. */
static int commit_set(void)
{
	kura_fs *fs = set_fs();
	if (!fs)
		return set.nm || set.nops ? -EBADF : 0;
	struct kura_group_op *ops = calloc((size_t)set.nops + 1, sizeof *ops);
	int *kfds = calloc((size_t)set.nm + 1, sizeof *kfds);
	if (!ops || !kfds) {
		free(ops);
		free(kfds);
		return -ENOMEM;
	}
	for (int i = 0; i < set.nops; i++)
		ops[i] = set.ops[i].op;
	for (int i = 0; i < set.nm; i++)
		kfds[i] = set.m[i].kfd;
	int r = kp_group_commit_set(fs, set.mnt, kfds, set.nm, ops, set.nops);
	free(ops);
	free(kfds);
	if (!r)
		clear_set();
	return r;
}

static int abort_set(void)
{
	kura_fs *fs = set_fs();
	for (int i = 0; fs && i < set.nm; i++) {
		struct kp_fd probe = { .used = 1, .kfd = set.m[i].kfd, .mnt = set.mnt };
		kp_group_abort(&probe, fs);
	}
	clear_set();
	return 0;
}

/* fsync, fdatasync, kura_fcommit or F2FS's COMMIT of a member commits
 * the whole set; kura_fabort or F2FS's ABORT aborts it.  1 (and *ret) if
 * e is a member of the open set, else 0. */
int kp_gset_end(struct kp_fd *e, int commit, int *ret)
{
	if (!__atomic_load_n(&kp_gset_open, __ATOMIC_ACQUIRE))
		return 0;
	kura_fs *fs = kp_fs(e->mnt);
	sighold_lock(&set_lock);
	int member = SET_OPEN() && fs && is_member(e, fs);
	if (member)
		*ret = commit ? commit_set() : abort_set();
	sighold_unlock(&set_lock);
	return member;
}

/* With the lock: a pending op that creates (kdirfd, p), or -1. */
static int created_here(int kdirfd, const char *p)
{
	for (int i = 0; i < set.nops; i++)
		if (set.ops[i].op.kind == KURA_GROUP_LINK && set.ops[i].op.newdirfd == kdirfd &&
		    !strcmp(set.ops[i].op.newpath, p))
			return i;
	return -1;
}

/* With the lock: records op with its own copies of paths and directory
 * descriptors. */
static int record(kura_fs *fs, struct kura_group_op op)
{
	int err = grow((void **)&set.ops, &set.capops, set.nops, sizeof *set.ops);
	if (err)
		return err;
	struct pending *p = &set.ops[set.nops];
	p->dirs[0] = p->dirs[1] = -1;
	int *fds[2] = { op.kind == KURA_GROUP_LINK ? NULL : &op.olddirfd, &op.newdirfd };
	for (int d = 0; d < 2; d++)
		if (fds[d] && *fds[d] >= 0) {
			if ((p->dirs[d] = kura_dup(fs, *fds[d])) < 0) {
				err = p->dirs[d];
				p->dirs[d] = -1;
			}
			*fds[d] = p->dirs[d];
		}
	op.oldpath = op.oldpath ? strdup(op.oldpath) : NULL;
	op.newpath = op.newpath ? strdup(op.newpath) : NULL;
	p->op = op;
	set.nops++;
	if (!err && ((p->op.kind != KURA_GROUP_LINK && !p->op.oldpath) ||
		     (p->op.kind != KURA_GROUP_UNLINK && p->op.kind != KURA_GROUP_RMDIR && !p->op.newpath)))
		err = -ENOMEM;
	if (err) { /* taken back: the caller's call fails */
		set.nops--;
		for (int d = 0; d < 2; d++)
			if (p->dirs[d] >= 0)
				kura_close(fs, p->dirs[d]);
		free((char *)p->op.oldpath);
		free((char *)p->op.newpath);
	}
	return err;
}

/* The name (kdirfd, p) as a later op will see it: exists unless only a
 * pending op makes it. */
static int name_check(kura_fs *fs, int kdirfd, const char *p)
{
	struct stat st;
	int r = kura_fstatat(fs, kdirfd, p, &st, AT_SYMLINK_NOFOLLOW);
	return r == -ENOENT && created_here(kdirfd, p) >= 0 ? 0 : r;
}

/* unlink/rmdir of a pool name while the set is open: recorded.  1 (and
 * *ret) if taken, else 0. */
int kp_gset_unlink(const struct kp_path *kp, int flags, int *ret)
{
	if (!__atomic_load_n(&kp_gset_open, __ATOMIC_ACQUIRE))
		return 0;
	sighold_lock(&set_lock);
	int taken = SET_OPEN();
	kura_fs *fs = kp_fs(kp->mnt);
	if (taken) {
		int err = !fs ? -EBADF : (flags & ~AT_REMOVEDIR) ? -EINVAL : same_pool(kp->mnt);
		if (!err)
			err = name_check(fs, kp->kdirfd, kp->p);
		if (!err)
			err = record(fs, (struct kura_group_op){ flags & AT_REMOVEDIR ? KURA_GROUP_RMDIR : KURA_GROUP_UNLINK,
								 kp->kdirfd, kp->p, -1, NULL, 0 });
		*ret = err;
	}
	sighold_unlock(&set_lock);
	return taken;
}

int kp_gset_rename(const struct kp_path *a, const struct kp_path *b, unsigned flags, int *ret)
{
	if (!__atomic_load_n(&kp_gset_open, __ATOMIC_ACQUIRE))
		return 0;
	sighold_lock(&set_lock);
	int taken = SET_OPEN();
	kura_fs *fs = kp_fs(a->mnt);
	if (taken) {
		int err = !fs ? -EBADF : same_pool(a->mnt);
		if (!err && (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
			     (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE)))
			err = -EINVAL;
		if (!err)
			err = name_check(fs, a->kdirfd, a->p);
		if (!err)
			err = record(fs, (struct kura_group_op){ KURA_GROUP_RENAME, a->kdirfd, a->p, b->kdirfd, b->p, flags });
		*ret = err;
	}
	sighold_unlock(&set_lock);
	return taken;
}

/* open with O_TRUNC of an existing file while the set is open: the
 * truncation is the group's, the first change of the file in it. */
static int truncating_open(kura_fs *fs, const struct kp_path *kp, int flags, mode_t mode, int *ret)
{
	sighold_lock(&set_lock);
	int taken = SET_OPEN();
	if (taken) {
		int kfd = kura_openat(fs, kp->kdirfd, kp->p, flags & ~(O_TRUNC | O_CLOEXEC), mode);
		struct kp_fd probe = { .used = 1, .kfd = kfd, .mnt = kp->mnt };
		int err = kfd < 0 ? kfd : join(&probe, fs, 0);
		if (!err)
			err = kura_ftruncate(fs, kfd, 0);
		if (err && kfd >= 0)
			kura_close(fs, kfd); /* its part of the set, if it joined, goes with the last close */
		*ret = err ? err : kfd;
	}
	sighold_unlock(&set_lock);
	return taken;
}

/* open with O_CREAT of a name that does not exist, while the set is open:
 * an unnamed file in the name's directory, linked there at the commit.
 * 1 (and *ret: a kura descriptor for the caller, or -errno) if taken. */
int kp_gset_create(const struct kp_path *kp, int flags, mode_t mode, int *ret)
{
	if (!__atomic_load_n(&kp_gset_open, __ATOMIC_ACQUIRE) || !(flags & (O_CREAT | O_TRUNC)) ||
	    (flags & O_TMPFILE) == O_TMPFILE)
		return 0;
	kura_fs *fs = kp_fs(kp->mnt);
	struct stat st;
	int there = fs ? kura_fstatat(fs, kp->kdirfd, kp->p, &st, 0) : -EBADF;
	if (!there && S_ISREG(st.st_mode) && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY &&
	    !(flags & O_EXCL))
		return truncating_open(fs, kp, flags, mode, ret);
	if (there != -ENOENT || !(flags & O_CREAT))
		return 0; /* it exists (or the open says why not): an ordinary open */
	sighold_lock(&set_lock);
	int taken = SET_OPEN(), err = 0;
	if (taken) {
		int made = created_here(kp->kdirfd, kp->p);
		if (made >= 0) { /* made earlier in the group: that file */
			*ret = flags & O_EXCL ? -EEXIST
					      : kura_reopen(fs, set.ops[made].op.olddirfd, flags & ~(O_CREAT | O_EXCL | O_CLOEXEC));
			sighold_unlock(&set_lock);
			return 1;
		}
		char dir[PATH_MAX];
		const char *slash = strrchr(kp->p, '/');
		size_t dl = slash ? (size_t)(slash - kp->p) : 0;
		if (dl >= sizeof dir)
			err = -ENAMETOOLONG;
		else if (slash && !slash[1])
			err = -EISDIR; /* "name/": Linux's answer to creating it */
		else {
			memcpy(dir, kp->p, dl);
			strcpy(dir + dl, slash ? (dl ? "" : "/") : ".");
		}
		int tmp = err ? err : (err = same_pool(kp->mnt)) ? err
				 : kura_openat(fs, kp->kdirfd, dir, O_TMPFILE | O_RDWR, mode);
		if (!err && tmp < 0)
			err = tmp;
		if (!err && (err = record(fs, (struct kura_group_op){ KURA_GROUP_LINK, tmp, NULL, kp->kdirfd, kp->p, 0 })))
			kura_close(fs, tmp);
		if (!err) {
			*ret = kura_reopen(fs, tmp, flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC));
			if (*ret < 0) { /* the record stays: its file is the set's to link or drop */
				err = *ret;
			}
		}
		if (err)
			*ret = err;
	}
	sighold_unlock(&set_lock);
	return taken;
}

KP_EXPORT int kura_gbegin(void)
{
	sighold_lock(&set_lock);
	int err = 0;
	if (SET_OPEN())
		err = -EBUSY;
	else {
		if (set.pid) /* a parent's, inherited over fork: not ours to end */
			memset(&set, 0, sizeof set);
		set.mnt = -1;
		set.pid = getpid();
		__atomic_store_n(&kp_gset_open, 1, __ATOMIC_RELEASE);
	}
	sighold_unlock(&set_lock);
	return (int)kp_ret(err);
}

KP_EXPORT int kura_gcommit(void)
{
	sighold_lock(&set_lock);
	int r = SET_OPEN() ? commit_set() : -EINVAL;
	sighold_unlock(&set_lock);
	return (int)kp_ret(r);
}

KP_EXPORT int kura_gabort(void)
{
	sighold_lock(&set_lock);
	int r = SET_OPEN() ? abort_set() : -EINVAL;
	sighold_unlock(&set_lock);
	return (int)kp_ret(r);
}
