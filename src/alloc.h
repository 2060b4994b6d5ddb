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

/* Returns a zeroed block, or 0 with the transaction failed with -ENOSPC.
 * `zero` = 0 skips zeroing when the caller fills the whole block. */
uint64_t alloc_block(struct kura_fs *fs, int zero);
void alloc_free(struct kura_fs *fs, uint64_t block);
void alloc_apply_frees(struct kura_fs *fs);
void alloc_drop_frees(struct kura_fs *fs);
int alloc_is_used(const struct kura_fs *fs, uint64_t block);
/* Blocks that may be needed by an operation that must not fail midway. */
uint64_t alloc_free_count(const struct kura_fs *fs);

#endif
