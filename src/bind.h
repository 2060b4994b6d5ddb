/*
 * bind.h — bind mounts inside a pool: `mount --bind /kura/a /kura/b` makes
 * every walk that reaches b go on in a, until the bind is undone.
 *
 * The kernel cannot mount onto a directory only kura knows, so kura keeps
 * these binds itself, in the lock table (lock.h): like the kernel's mounts
 * they are seen by every process using the pool and end with the last of
 * them, and nothing of them is written to the pool.  A bind is a pair of
 * inodes, the point (b, covered) and the root (a): names resolve by inode,
 * so a bind follows its point through renames of the directories above it.
 * The point cannot be removed or renamed while bound (EBUSY, as a mount
 * point); the root may be, and then lives on, empty, as an orphan the bind
 * holds open, until the bind goes.
 */
#ifndef KURA_BIND_H
#define KURA_BIND_H

#include <stdint.h>
#include "fs.h"

uint64_t bind_cross_slow(const struct kura_fs *fs, uint64_t ino, uint32_t n);

/* What a walk that reaches ino goes on in: the root bound over it, or ino.
 * Callers hold the mutex or read under the sequence counter. */
static inline uint64_t bind_cross(const struct kura_fs *fs, uint64_t ino)
{
	uint32_t n = fs->lk.t ? __atomic_load_n(&fs->lk.t->nbinds, __ATOMIC_ACQUIRE) : 0;
	return __builtin_expect(n == 0, 1) ? ino : bind_cross_slow(fs, ino, n);
}

/* Whether ino is covered by a bind (a mount point: not to be removed). */
int bind_is_point(const struct kura_fs *fs, uint64_t ino);

#endif
