/* bind.c — bind mounts inside a pool (see bind.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "api.h"
#include "bind.h"
#include "creds.h"
#include "inode.h"
#include "path.h"
#include "super.h"
#include "xattr.h" /* inode_dispose */

/* The table lives in shared memory every process of the pool can write:
 * its count is bounded before use, and a chain of binds is followed at
 * most LOCK_BINDS steps, so a damaged table cannot make a walk loop. */
static uint32_t bounded(uint32_t n)
{
	return n > LOCK_BINDS ? LOCK_BINDS : n;
}

static const struct lock_bind *bind_at(const struct kura_fs *fs, uint64_t point, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fs->lk.t->binds[i].point == point)
			return &fs->lk.t->binds[i];
	return NULL;
}

uint64_t bind_cross_slow(const struct kura_fs *fs, uint64_t ino, uint32_t n)
{
	n = bounded(n);
	for (uint32_t hop = 0; hop < LOCK_BINDS; hop++) {
		const struct lock_bind *b = bind_at(fs, ino, n);
		if (!b || b->root == ino)
			break; /* "mount --bind a a" makes a a point over itself */
		ino = b->root;
	}
	return ino;
}

int bind_is_point(const struct kura_fs *fs, uint64_t ino)
{
	uint32_t n = fs->lk.t ? bounded(__atomic_load_n(&fs->lk.t->nbinds, __ATOMIC_ACQUIRE)) : 0;
	return n && bind_at(fs, ino, n) != NULL;
}

/* Linux's order (do_mount, do_loopback): the target's lookup, then the
 * privilege, then the source's lookup, then the kinds. */
static int do_bind(struct kura_fs *fs, uint64_t sstart, const char *source, uint64_t tstart, const char *target)
{
	struct walk t, s;
	int err = path_walk(fs, tstart, target, WALK_FOLLOW, &t);
	if (err)
		return err;
	if (!creds_capable(creds_of(fs), KURA_CAP_SYS_ADMIN))
		return -EPERM;
	if ((err = path_walk(fs, sstart, source, WALK_FOLLOW, &s)))
		return err;
	const struct kura_inode *tip = ino_get(fs, t.ino), *sip = ino_get(fs, s.ino);
	if (!tip || !sip)
		return -EUCLEAN;
	if (S_ISDIR(tip->mode) != S_ISDIR(sip->mode))
		return -ENOTDIR;
	/* The pool's root is where the pool itself is mounted; and a point
	 * bound over itself is the one a walk can still reach, where the
	 * kernel would stack a second mount, which kura does not. */
	if (t.ino == fs->sb->root_ino || bind_is_point(fs, t.ino))
		return -EBUSY;
	struct locktab *lt = fs->lk.t;
	uint32_t n = bounded(lt->nbinds);
	if (n == LOCK_BINDS)
		return -ENOSPC; /* as the kernel past fs.mount-max */
	if ((err = lock_open_inc(&fs->lk, s.ino)))
		return err;
	lt->binds[n] = (struct lock_bind){.point = t.ino, .root = s.ino};
	__atomic_store_n(&lt->nbinds, n + 1, __ATOMIC_RELEASE);
	return 0;
}

/* The walk stops at the last name without crossing a bind there, so that
 * the point is found; the topmost of binds stacked by binding over a bind's
 * root goes first, as the kernel unmounts the mount a path shows. */
static int do_unbind(struct kura_fs *fs, uint64_t start, const char *target, int follow)
{
	struct walk w;
	int err = path_walk(fs, start, target, WALK_PARENT | (follow ? WALK_FOLLOW : 0), &w);
	if (err)
		return err;
	if (!w.ino)
		return -ENOENT;
	if (w.trailing_slash && w.type != DT_DIR)
		return -ENOTDIR;
	if (!creds_capable(creds_of(fs), KURA_CAP_SYS_ADMIN))
		return -EPERM;
	struct locktab *lt = fs->lk.t;
	uint32_t n = bounded(lt->nbinds);
	struct lock_bind *top = NULL;
	if (w.dot || w.len == 0) {
		/* "b/." names what the walk crossed into: a bind's root */
		for (uint32_t i = n; i-- > 0;)
			if (lt->binds[i].root == w.ino && !top)
				top = &lt->binds[i];
	} else {
		uint64_t ino = w.ino;
		for (uint32_t hop = 0; hop < LOCK_BINDS; hop++) {
			struct lock_bind *b = (struct lock_bind *)bind_at(fs, ino, n);
			if (!b)
				break;
			top = b;
			if (b->root == ino)
				break;
			ino = b->root;
		}
	}
	if (!top)
		return -EINVAL; /* not a mount point */
	uint64_t root = top->root;
	*top = lt->binds[n - 1];
	__atomic_store_n(&lt->nbinds, n - 1, __ATOMIC_RELEASE);
	const struct kura_inode *rip = ino_get(fs, root);
	if (!lock_open_dec(&fs->lk, root) && rip && rip->nlink == 0) {
		orphan_remove(fs, root);
		inode_dispose(fs, root);
	}
	return 0;
}

int kura_bindat(kura_fs *fs, int srcdirfd, const char *source, int dstdirfd, const char *target)
{
	uint64_t sstart, tstart;
	int err = fd_dir_ino(fs, dstdirfd, target, &tstart);
	if (err || (err = fd_dir_ino(fs, srcdirfd, source, &sstart)) || (err = fs_begin(fs)))
		return err;
	return fs_end(fs, do_bind(fs, sstart, source, tstart, target));
}

int kura_unbindat(kura_fs *fs, int dirfd, const char *target, int flags)
{
	if (flags & ~AT_SYMLINK_NOFOLLOW)
		return -EINVAL;
	uint64_t start;
	int err = fd_dir_ino(fs, dirfd, target, &start);
	if (err || (err = fs_begin(fs)))
		return err;
	return fs_end(fs, do_unbind(fs, start, target, !(flags & AT_SYMLINK_NOFOLLOW)));
}
