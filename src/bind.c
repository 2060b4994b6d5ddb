/*
 * bind.c — bind mounts inside a pool: `mount --bind /kura/a /kura/b` makes
 * every walk that reaches b go on in a, until the bind is undone.
 *
 * The kernel cannot mount onto a directory only kura knows, so kura keeps
 * these binds itself, in the lock table (lock.h, lock_bind.c): like the
 * kernel's mounts they are seen by every process using the pool and end
 * with the last of them, and nothing of them is written to the pool.  A
 * bind is a pair of inodes, the point (b, covered) and the root (a): names
 * resolve by inode, so a bind follows its point through renames of the
 * directories above it.  The point cannot be removed or renamed while bound
 * (EBUSY, as a mount point: names.c's may_delete); the root may be, and
 * then lives on, empty, as an orphan the bind holds open, until the bind
 * goes.  path.c crosses binds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "api.h"
#include "creds.h"
#include "inode.h"
#include "path.h"
#include "super.h"
#include "xattr.h" /* inode_dispose */

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
	if (t.ino == fs->sb->root_ino || lock_bind_point(&fs->lk, t.ino))
		return -EBUSY;
	return lock_bind_add(&fs->lk, t.ino, s.ino);
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
	/* "b/." or "/" names what the walk crossed into: a bind's root. */
	uint64_t root;
	int last = lock_bind_remove(&fs->lk, w.ino, w.dot || w.len == 0, &root);
	if (last < 0)
		return last; /* not a mount point: EINVAL */
	const struct kura_inode *rip = ino_get(fs, root);
	if (last && rip && rip->nlink == 0) {
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
