/*
 * dir_int.h — what dir.c (lookups and changes) and dir_read.c (readdir)
 * share; no other layer includes it (they use dir.h).
 */
#ifndef KURA_DIR_INT_H
#define KURA_DIR_INT_H

#include "dir.h"

#define HASH_MASK (((uint64_t)1 << 62) - 1)

static inline uint64_t reverse64(uint64_t x)
{
	x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
	x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
	x = ((x >> 4) & 0x0f0f0f0f0f0f0f0full) | ((x & 0x0f0f0f0f0f0f0f0full) << 4);
	return __builtin_bswap64(x);
}

/* Hash bits 0..61 reversed into key bits 61..0: key order visits buckets in
 * contiguous ranges, and the key maps back to the hash exactly. */
static inline uint64_t key_of(uint64_t hash) { return reverse64(hash) >> 2; }
static inline uint64_t hash_of(uint64_t key) { return reverse64(key << 2); }

static inline uint64_t mask_of(const struct kura_inode *dip)
{
	return dip->dir_depth > DIR_MAX_DEPTH ? 0 : (1ull << dip->dir_depth) - 1;
}

/* The valid bucket serving slot i (and its block in *block), or NULL. */
const struct kura_bucket *dir_bucket_at(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i,
				       uint64_t *block);

static inline const struct kura_dirent_disk *entry_at(const struct kura_bucket *bk, uint32_t pos)
{
	return (const struct kura_dirent_disk *)((const char *)(bk + 1) + pos);
}

/* Walks a bucket's entries; stops (returns NULL through *bad) on a record that
 * does not fit, so a damaged bucket is reported, never overrun. */
#define FOR_EACH_ENTRY(bk, pos, e, bad)                                                               \
	for (uint32_t pos = 0; pos + DIRENT_HEAD <= (bk)->used &&                                     \
			       ((e) = entry_at(bk, pos), pos + dirent_reclen((e)->name_len) <= (bk)->used || \
								 ((bad) = 1, 0));                     \
	     pos += dirent_reclen((e)->name_len))

#endif
