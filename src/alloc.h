/*
 * alloc.h — blocks: a bitmap in the pool, one bit per block.
 *
 * Allocation sets bits under the current transaction and marks the blocks
 * fresh (tx.h).  Frees are deferred to alloc_apply_frees(), called just
 * before commit: a block freed and reallocated within one transaction could
 * otherwise be overwritten unlogged while a rollback still needs its old
 * contents.
 */
#ifndef KURA_ALLOC_H
#define KURA_ALLOC_H

#include <stdint.h>
#include "fs.h"

/* What fills a block the calls below hand out (their `zero`):
 * ALLOC_FILLED: the caller copies a whole block in (tx_copy_fresh);
 * ALLOC_ZEROED: zeroed, then stored to through the map (metadata);
 * ALLOC_ZEROED_DATA: zeroed file data (fallocate, a shared map's hole):
 *   given storage unmapped, as a copied block is, and on memory zeroed
 *   through the pool file;
 * ALLOC_UNWRITTEN: an unwritten block (layout.h): nothing is written; it
 *   is given storage now where the pool file holds the data (memory,
 *   pmem), and by its first write (bmap_take_unwritten) in a disk pool's
 *   working copy, whose pages only cache the disk's. */
enum { ALLOC_FILLED = 0, ALLOC_ZEROED = 1, ALLOC_ZEROED_DATA = 2, ALLOC_UNWRITTEN = 3 };

/* A pool that file data fill must still take a new name: a lock file, a
 * temporary file, the directory an unpacker makes before it writes, a
 * rename into a full bucket.  On ext4 the inode tables are set aside at
 * mkfs and on tmpfs names cost no room, so there a full file system fails
 * the write that does not fit, not the open.  Kura makes inodes and
 * buckets from the same blocks as data, so the last meta_reserve free
 * blocks (1/64 of the pool, at most 1 MiB) go to metadata alone
 * (ALLOC_ZEROED): data, including what fallocate sets aside, stop short
 * of them, and statvfs counts them free but not available, as ext4 counts
 * its reserved blocks. */
uint64_t alloc_meta_reserve(uint64_t data_blocks);
/* Free blocks file data may still take. */
uint64_t alloc_free_for_data(const struct kura_fs *fs);

/* Returns a block filled as `zero` says, or 0 with the transaction
 * failed with -ENOSPC. */
uint64_t alloc_block(struct kura_fs *fs, int zero);
/* A block the disk takes once (a disk pool in fsync mode: journal.h's
 * journal_cheap_word) found without a long search, or 0, with nothing
 * failed, when there is none near or none counts as cheaper. */
uint64_t alloc_cheap_block(struct kura_fs *fs, int zero);
/* Where a block goes decides how many kernel mappings a shared map of its
 * file takes: one per run of the file's blocks that lie side by side in the
 * pool.  So a file's blocks are placed by goal (inode.h's bmap_alloc):
 * alloc_block_at takes exactly `goal` if it is free, else returns 0 with
 * nothing changed; alloc_block_in_stretch takes the block `slot` blocks
 * into a stretch of at least `words` free bitmap words (more if slot is
 * further), or falls back to alloc_block. */
uint64_t alloc_block_at(struct kura_fs *fs, int zero, uint64_t goal);
uint64_t alloc_block_in_stretch(struct kura_fs *fs, int zero, unsigned slot, unsigned words);
/* Slot `slot` of a free bitmap word near the pool's used space, or as
 * alloc_block. */
uint64_t alloc_block_in_word(struct kura_fs *fs, int zero, unsigned slot);
void alloc_free(struct kura_fs *fs, uint64_t block);
void alloc_apply_frees(struct kura_fs *fs);
void alloc_drop_frees(struct kura_fs *fs);
int alloc_is_used(const struct kura_fs *fs, uint64_t block);

#endif
