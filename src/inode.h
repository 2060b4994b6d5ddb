/*
 * inode.h — inode slots, the per-inode block map, and file data.
 *
 * Inode slots (128 bytes) live in blocks taken from the allocator, 32 to a
 * block; free slots form a doubly linked list (kura_inode.link and .prev)
 * headed in the state block, so allocation is O(1), and when the last inode
 * of a block is freed the block's 32 slots leave the list in O(32) and the
 * block goes back to the allocator (unless its slots are the only free
 * ones, so create/delete in turn does not carve and free a block each time).
 *
 * Each inode maps file block numbers to pool blocks with a radix tree of
 * 512-entry nodes (height 0: the root is the single data block).  Data
 * invariant, relied on by extension and checked by fsck: every byte of an
 * allocated block that lies beyond the file's size is zero.
 *
 * Writes: a whole-block overwrite goes copy-on-write into a fresh block and
 * swaps one map entry; a partial-block write is logged in place.  Either way
 * it is part of the operation's transaction, so no write is ever torn.
 */
#ifndef KURA_INODE_H
#define KURA_INODE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "fs.h"

#define KURA_MAX_FILE_SIZE (1ull << 46) /* 64 TiB: keeps offset arithmetic far from overflow */

static inline uint64_t ino_off(uint64_t ino)
{
	return ino << INODE_SHIFT;
}

/* NULL unless ino names an in-use slot inside the data area. */
const struct kura_inode *ino_get(const struct kura_fs *fs, uint64_t ino);

#define INO_FIELD_OFF(ino, field) (ino_off(ino) + offsetof(struct kura_inode, field))
#define INO_SET(fs, ino, field, val)                                                         \
	do {                                                                                 \
		__typeof__(((struct kura_inode *)0)->field) ino_set_v_ = (val);              \
		tx_write(&(fs)->tx, INO_FIELD_OFF(ino, field), &ino_set_v_, sizeof ino_set_v_); \
	} while (0)

int inode_alloc(struct kura_fs *fs, mode_t mode, uint64_t *ino);
/* Unlinked-but-open inodes wait on a list headed in the state block. */
void orphan_add(struct kura_fs *fs, uint64_t ino);
void orphan_remove(struct kura_fs *fs, uint64_t ino);
/* Frees data and slot (nlink must already be 0), and the slot's block if
 * that leaves it empty. */
void inode_free(struct kura_fs *fs, uint64_t ino);
/* Gives an inode block whose slots are all free back to the allocator; 1 if
 * it did (not when its slots are the only free ones, or the list around them
 * is damaged).  freed: the slot of it just freed, whose neighbours are
 * looked at first (0: none). */
int inode_block_reclaim(struct kura_fs *fs, uint64_t block, uint64_t freed);
int inode_link_back(struct kura_fs *fs, uint64_t *cursor, uint64_t *prev, uint64_t max);

enum { TOUCH_A = 1, TOUCH_M = 2, TOUCH_C = 4 };
void inode_touch(struct kura_fs *fs, uint64_t ino, int which);
/* A directory gained (delta 1) or lost (-1) an entry: the count, and its
 * mtime and ctime set to the operation's time. */
void inode_count_entries(struct kura_fs *fs, uint64_t dino, int delta);
void ts_now(struct kura_ts *ts);
void inode_to_stat(const struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip, struct stat *st);

/* Block map.  bmap_get: the block holding fblock's bytes, 0 for a hole or
 * an unwritten block (layout.h), which read alike; bmap_entry: the block
 * fblock owns, with BMAP_UNWRITTEN set if it is unwritten, else as
 * bmap_get. */
uint64_t bmap_get(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock);
uint64_t bmap_entry(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock);
/* The block of an unwritten entry, fresh in this transaction from here on
 * (the bytes it holds are no one's until the entry that says otherwise
 * commits): the caller fills it whole and maps it (fblock of ip) with
 * bmap_set.  0 with the transaction failed if it has no storage. */
uint64_t bmap_take_unwritten(struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock, uint64_t entry);
/* Maps fblock to `block` (0 unmaps; BMAP_UNWRITTEN may be set); returns the
 * block previously owned, written or not, which the caller frees or keeps
 * (0 if it is `block` itself).
 * Interior nodes are allocated as needed. */
uint64_t bmap_set(struct kura_fs *fs, uint64_t ino, uint64_t fblock, uint64_t block);
/* A new block for fblock of ip, placed beside the file's neighbouring
 * blocks so that a shared map of the file takes few kernel mappings
 * (alloc.h); 0 with the transaction failed if none. */
uint64_t bmap_alloc(struct kura_fs *fs, const struct kura_inode *ip, uint64_t fblock, int zero);
/* The first file block >= fb that owns a block, written or not (bmap_entry);
 * UINT64_MAX if none. */
uint64_t bmap_next_data(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t fb);
/* Frees every mapped block in [first, last) and interior nodes left empty. */
void bmap_free_range(struct kura_fs *fs, uint64_t ino, uint64_t first, uint64_t last);

/* Data. */
ssize_t inode_read(const struct kura_fs *fs, const struct kura_inode *ip, void *buf, size_t len, uint64_t off);
ssize_t inode_write(struct kura_fs *fs, uint64_t ino, const void *buf, size_t len, uint64_t off);
int inode_truncate(struct kura_fs *fs, uint64_t ino, uint64_t size);
int inode_fallocate(struct kura_fs *fs, uint64_t ino, int mode, uint64_t off, uint64_t len);
/* SEEK_DATA / SEEK_HOLE from off: the offset, or -ENXIO. */
int64_t inode_seek_data(const struct kura_fs *fs, const struct kura_inode *ip, uint64_t off, int want_data);

#endif
