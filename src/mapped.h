/*
 * mapped.h — the blocks of files that processes map shared.
 *
 * A shared map of a kura file shows the file's pool blocks themselves
 * (map.c), so while any process maps an inode (lock_maps() > 0) two rules
 * hold, for every process of the pool:
 *  - its data is changed in place, never by swapping in a fresh block,
 *    which no map would show (inode_write, punch);
 *  - no block a map may show is reused.  Blocks cut off the file while it
 *    is mapped (truncation) leave its block map for a holder: an unnamed
 *    inode on the orphan list, named in the file's lock-table slot and
 *    freed with the file's last map (mapped_unpinned).  Being an orphan,
 *    a holder left by a crash or a killed process is freed by the next
 *    mount that finds itself alone, as any orphan is.
 *
 * A program that never unmaps (fsx leaks a map per mapped read) would
 * keep every block it ever truncated.  So a holder may also go early,
 * when the process that truncated holds every pin of the file and none of
 * its pages can show a held block: kura_map_trim.  What a process cannot
 * see for itself is another's truncation while it mapped the file (its
 * pages then show held blocks); the slot counts the truncations that fed
 * the holder (truncs), and a process that saw every one of them made by
 * itself knows its pages are clean (src/preload/map.c).
 */
#ifndef KURA_MAPPED_H
#define KURA_MAPPED_H

#include <stdint.h>
#include "fs.h"

/* Every write asks, so the common answer (no map anywhere) costs one load. */
static inline int inode_mapped(struct kura_fs *fs, uint64_t ino)
{
	return fs->lk.t->maps_total && lock_maps(&fs->lk, ino) != 0;
}

/* Frees file blocks [first, last) of ino, or, if it is mapped, gives the
 * data blocks to its holder and frees only the block-map nodes. */
void mapped_release(struct kura_fs *fs, uint64_t ino, uint64_t first, uint64_t last);
/* The slot's truncs as the calling thread's first and last truncations
 * that fed a holder since the last kura_map_own_truncation left it (one
 * call may release several ranges); 0: none. */
extern __thread uint64_t mapped_own_first, mapped_own_last, mapped_own_n;
/* With the mutex and a transaction, as the last map of ino goes (before
 * lock_map_dec takes the slot that names the holder away): frees its
 * holder, if it has one. */
void mapped_unpinned(struct kura_fs *fs, uint64_t ino);
/* In a transaction: drops a map's pin of ino (kura_map_unpin), freeing an
 * unnamed inode that nothing holds any more. */
void mapped_unpin(struct kura_fs *fs, uint64_t ino);

#endif
