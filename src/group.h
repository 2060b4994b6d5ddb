/*
 * group.h — atomic groups of writes on one open file description
 * (kura_atomic_begin … kura_atomic_commit / kura_atomic_abort in kura.h).
 *
 * A group's changes go to a shadow: an unnamed inode on the orphan list
 * holding only the blocks the group wrote, plus the group's size.  The
 * description sees the file through the group (its "view"): a block the
 * shadow holds, else the file's bytes below the cut, else zeros.  The cut
 * starts at the file's size when the group begins and falls with every
 * truncation of the view, so bytes the group cut off stay cut off whatever
 * the file holds there.  Everyone else sees the file itself.
 *
 * Commit is one transaction: the file is cut where the view was, each
 * shadow block takes its place in the file (its map entry moves; a block
 * some process maps is copied in place instead, so the map shows it), the
 * size becomes the view's, and the shadow goes.  Abort frees the shadow.
 * A crash or a killed process before the commit leaves an orphan that the
 * next lone mount frees like any other: the group never happened.
 *
 * Every group operation runs inside the caller's transaction (fs_begin) and
 * reads the group's fields of the description only there or under FS_READ:
 * they change only with the pool mutex held.
 */
#ifndef KURA_GROUP_H
#define KURA_GROUP_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "fs.h"
#include "ofile.h"

static inline int group_open(const struct ofile *of)
{
	return __atomic_load_n(&of->group_ino, __ATOMIC_ACQUIRE) != 0;
}

/* The view: read, write, truncate, fallocate, size. */
ssize_t group_read(const struct kura_fs *fs, const struct ofile *of, void *buf, size_t len, uint64_t off);
ssize_t group_write(struct kura_fs *fs, struct ofile *of, const void *buf, size_t len, uint64_t off);
int group_truncate(struct kura_fs *fs, struct ofile *of, uint64_t size);
int group_fallocate(struct kura_fs *fs, struct ofile *of, int mode, uint64_t off, uint64_t len);
/* The view's size, or -EBADF if the shadow is gone. */
int64_t group_size(const struct kura_fs *fs, const struct ofile *of);

/* The group's shadow inode, or NULL if the description has none or it is
 * not what the description says (a damaged pool). */
const struct kura_inode *group_shadow(const struct kura_fs *fs, const struct ofile *of);
/* In the caller's transaction: the file takes the group's changes (the
 * body of a commit; own_pins as kura_atomic_commit_maps).  1 if it copied
 * some block in place, 0 if it moved them all, or -errno.  The caller
 * clears of->group_ino, and puts it back if the transaction fails; the
 * shadow may have become the description's spare (of->spare_ino), which
 * the caller then clears. */
int group_apply(struct kura_fs *fs, struct ofile *of, const struct kura_inode *sp, uint64_t own_pins);

/* In a transaction, when a description with a group is released (the last
 * close): frees the shadow named by ino and gen, if it still is one. */
void group_discard(struct kura_fs *fs, uint64_t ino, uint32_t gen);

#endif
