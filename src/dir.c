/* dir.c — extendible-hash directories (see dir.h). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "crc.h"
#include "dir.h"
#include "dir_index.h"
#include "dir_int.h"
#include "fault.h"
#include "inode.h"

uint64_t dir_hash(const struct kura_fs *fs, const char *name, size_t len)
{
	return name_hash(fs->sb->hash_key, name, len) & HASH_MASK;
}

/* The directory being changed.  On a damaged pool its slot may be gone
 * from under the operation (a bitmap that called its block free let the
 * allocator hand it out and zero it): the operation fails with -EUCLEAN and
 * goes on with an empty stand-in, so nothing dereferences a missing inode. */
static const struct kura_inode *dir_inode(struct kura_fs *fs, uint64_t dino)
{
	static const struct kura_inode gone;
	const struct kura_inode *dip = ino_get(fs, dino);
	if (dip)
		return dip;
	tx_fail(&fs->tx, -EUCLEAN);
	return &gone;
}

/* Byte offset of slot i, or 0 if its block of the array is missing. */
static uint64_t slot_off(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i)
{
	uint64_t b = bmap_get(fs, dip, i / (KURA_BLOCK / 8));
	return b ? block_off(b) + 8 * (i % (KURA_BLOCK / 8)) : 0;
}

int dir_sane(const struct kura_fs *fs, const struct kura_inode *dip)
{
	if (dip->dir_depth > DIR_MAX_DEPTH)
		return 0;
	if (!dip->root)
		return 1;
	/* The slot array is 2^depth pointers, and its blocks are among those
	 * the directory owns, which the pool bounds: a damaged depth cannot
	 * send a loop over the slots through 2^40 steps. */
	uint64_t bytes = 8ull << dip->dir_depth;
	return dip->size == bytes && dip->blocks <= fs->nblocks &&
	       (bytes + KURA_BLOCK - 1) / KURA_BLOCK <= dip->blocks;
}

const struct kura_bucket *dir_bucket_at(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i,
					 uint64_t *block)
{
	uint64_t off = slot_off(fs, dip, i);
	if (!off)
		return NULL;
	uint64_t b = *(const uint64_t *)media_ptr(&fs->m, off);
	if (!block_valid(fs, b))
		return NULL;
	const struct kura_bucket *bk = block_ptr(fs, b);
	if (bk->magic != BUCKET_MAGIC || bk->used > BUCKET_SPACE || bk->depth > dip->dir_depth || !dir_sane(fs, dip))
		return NULL;
	if (block)
		*block = b;
	return bk;
}

const struct kura_bucket *dir_slot_bucket(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i)
{
	return dir_bucket_at(fs, dip, i, NULL);
}

/* Finds name; returns its bucket's block and the entry's position, and
 * the name's hash in *hash when the directory has more than one bucket (a
 * remove needs it again to merge; with one bucket its slot is 0 anyway). */
static int find(const struct kura_fs *fs, const struct kura_inode *dip, const char *name, size_t len,
		uint64_t *block, uint32_t *at, uint64_t *hash)
{
	*hash = 0;
	if (!dip->root)
		return -ENOENT;
	const struct kura_dirent_disk *e;
	int bad = 0;
	if (!mask_of(dip)) {
		/* One bucket: a small one is walked comparing names, which
		 * costs less than hashing the name (every path walk crosses
		 * such directories: /, /home...). */
		const struct kura_bucket *one = dir_bucket_at(fs, dip, 0, block);
		if (!one)
			return -EUCLEAN;
		if (one->count < DIR_INDEX_MIN_ENTRIES) {
			FOR_EACH_ENTRY(one, pos, e, bad)
			{
				if (e->name_len == len && !memcmp(e->name, name, len)) {
					*at = pos;
					return 0;
				}
			}
			return bad ? -EUCLEAN : -ENOENT;
		}
	}
	uint64_t h = *hash = dir_hash(fs, name, len);
	const struct kura_bucket *bk = dir_bucket_at(fs, dip, h & mask_of(dip), block);
	if (!bk)
		return -EUCLEAN;
	const struct dir_index *ix = dir_index_of(fs, *block, bk);
	if (ix) {
		uint16_t tag = dir_index_tag(h);
		uint32_t used = bk->used;
		for (unsigned i = 0; i < ix->n; i += 16)
			for (uint32_t m = dir_index_match(ix, i, tag); m; m &= m - 1) {
				uint32_t pos = ix->place[i + (unsigned)__builtin_ctz(m)];
				if (pos + DIRENT_HEAD > used)
					continue;
				e = entry_at(bk, pos);
				if (e->hash == h && e->name_len == len && pos + dirent_reclen(e->name_len) <= used &&
				    !memcmp(e->name, name, len)) {
					*at = pos;
					return 0;
				}
			}
		return -ENOENT;
	}
	FOR_EACH_ENTRY(bk, pos, e, bad)
	{
		if (e->hash == h && e->name_len == len && !memcmp(e->name, name, len)) {
			*at = pos;
			return 0;
		}
	}
	return bad ? -EUCLEAN : -ENOENT;
}

int dir_lookup(const struct kura_fs *fs, const struct kura_inode *dip, const char *name, size_t len, uint64_t *ino,
	       unsigned *type)
{
	uint64_t b, h;
	uint32_t at;
	int err = find(fs, dip, name, len, &b, &at, &h);
	if (err)
		return err;
	const struct kura_dirent_disk *e = entry_at(block_ptr(fs, b), at);
	/* Inode 0 means "none": an entry naming it is damage, and callers
	 * take a found name's inode to exist. */
	if (!e->ino)
		return -EUCLEAN;
	*ino = e->ino;
	*type = e->type;
	return 0;
}

static void set_slot(struct kura_fs *fs, uint64_t dino, uint64_t i, uint64_t bucket)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	uint64_t off = slot_off(fs, dip, i);
	if (!off) {
		uint64_t nb = alloc_block(fs, 1);
		if (!nb)
			return;
		bmap_set(fs, dino, i / (KURA_BLOCK / 8), nb);
		off = block_off(nb) + 8 * (i % (KURA_BLOCK / 8));
	}
	tx_write64(&fs->tx, off, bucket);
}

static uint64_t get_slot(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t i)
{
	uint64_t off = slot_off(fs, dip, i);
	return off ? *(const uint64_t *)media_ptr(&fs->m, off) : 0;
}

static uint64_t new_bucket(struct kura_fs *fs, uint64_t dino, unsigned depth)
{
	uint64_t b = alloc_block(fs, 1);
	if (!b)
		return 0;
	struct kura_bucket h = { .magic = BUCKET_MAGIC, .depth = (uint16_t)depth };
	tx_write(&fs->tx, block_off(b), &h, sizeof h);
	dir_index_drop(fs, b);
	const struct kura_inode *dip = dir_inode(fs, dino);
	INO_SET(fs, dino, blocks, dip->blocks + 1);
	return b;
}

static int double_array(struct kura_fs *fs, uint64_t dino)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	unsigned g = dip->dir_depth;
	if (g >= DIR_MAX_DEPTH)
		return -ENOSPC;
	uint64_t n = 1ull << g;
	for (uint64_t j = 0; j < n && !fs->tx.err; j++)
		set_slot(fs, dino, j + n, get_slot(fs, dip, j));
	INO_SET(fs, dino, dir_depth, (uint8_t)(g + 1));
	INO_SET(fs, dino, size, 16 * n);
	return fs->tx.err;
}

/* Splits the bucket serving slot i on its next hash bit. */
static int split(struct kura_fs *fs, uint64_t dino, uint64_t i)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	uint64_t ob;
	const struct kura_bucket *bk = dir_bucket_at(fs, dip, i, &ob);
	if (!bk)
		return -EUCLEAN;
	unsigned d = bk->depth;
	uint32_t old_used = bk->used;
	if (d == dip->dir_depth) {
		int err = double_array(fs, dino);
		if (err)
			return err;
	}
	uint64_t nb = new_bucket(fs, dino, d + 1);
	if (!nb)
		return fs->tx.err;
	char keep[BUCKET_SPACE], move[BUCKET_SPACE];
	uint32_t nkeep = 0, nmove = 0, ckeep = 0, cmove = 0;
	const struct kura_dirent_disk *e;
	int bad = 0;
	FOR_EACH_ENTRY(bk, pos, e, bad)
	{
		uint32_t len = dirent_reclen(e->name_len);
		if ((e->hash >> d) & 1) {
			memcpy(move + nmove, e, len);
			nmove += len;
			cmove++;
		} else {
			memcpy(keep + nkeep, e, len);
			nkeep += len;
			ckeep++;
		}
	}
	if (bad)
		return -EUCLEAN;
	struct kura_bucket oh = { .magic = BUCKET_MAGIC, .depth = (uint16_t)(d + 1), .used = (uint16_t)nkeep,
				  .count = ckeep };
	struct kura_bucket nh = { .magic = BUCKET_MAGIC, .depth = (uint16_t)(d + 1), .used = (uint16_t)nmove,
				  .count = cmove };
	tx_write(&fs->tx, block_off(ob), &oh, sizeof oh);
	if (nkeep)
		tx_write(&fs->tx, block_off(ob) + sizeof oh, keep, nkeep);
	/* What moved out leaves zeros behind: fsck insists on a clean tail. */
	if (old_used > nkeep)
		tx_memset(&fs->tx, block_off(ob) + sizeof oh + nkeep, 0, old_used - nkeep);
	tx_write(&fs->tx, block_off(nb), &nh, sizeof nh);
	if (nmove)
		tx_write(&fs->tx, block_off(nb) + sizeof nh, move, nmove);
	dir_index_drop(fs, ob);
	dir_index_drop(fs, nb);
	/* Every slot that served the old bucket and has bit d set now serves the new one. */
	dip = dir_inode(fs, dino);
	uint64_t pattern = (i & ((1ull << d) - 1)) | (1ull << d);
	for (uint64_t j = pattern; j < (1ull << dip->dir_depth) && !fs->tx.err; j += 1ull << (d + 1))
		set_slot(fs, dino, j, nb);
	return fs->tx.err;
}

int dir_add(struct kura_fs *fs, uint64_t dino, const char *name, size_t len, uint64_t ino, unsigned type)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	uint64_t h = dir_hash(fs, name, len);
	uint32_t rl = dirent_reclen((unsigned)len);
	if (!dip->root) {
		uint64_t b = new_bucket(fs, dino, 0);
		if (!b)
			return fs->tx.err;
		set_slot(fs, dino, 0, b);
		INO_SET(fs, dino, dir_depth, 0);
		INO_SET(fs, dino, size, 8);
		if (fs->tx.err)
			return fs->tx.err;
	}
	for (int tries = 0; tries <= DIR_MAX_DEPTH + 1; tries++) {
		dip = dir_inode(fs, dino);
		uint64_t i = h & mask_of(dip);
		uint64_t b;
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, i, &b);
		if (!bk)
			return -EUCLEAN;
		if (bk->used + rl <= BUCKET_SPACE) {
			char rec[DIRENT_HEAD + KURA_NAME_MAX + 8];
			memset(rec, 0, rl);
			struct kura_dirent_disk *e = (struct kura_dirent_disk *)rec;
			e->hash = h;
			e->ino = ino;
			e->name_len = (uint8_t)len;
			e->type = (uint8_t)type;
			memcpy(e->name, name, len);
			uint64_t at = block_off(b) + sizeof *bk + bk->used;
			if (kura_fault == FAULT_DIR_IN_PLACE) /* injected bug: no undo record (crash tests only) */
				media_store(&fs->m, at, rec, rl);
			else
				tx_write(&fs->tx, at, rec, rl);
			struct kura_bucket nh = *bk;
			nh.used = (uint16_t)(bk->used + rl);
			nh.count = bk->count + 1;
			tx_write(&fs->tx, block_off(b), &nh, sizeof nh);
			dir_index_added(fs, b, h, bk->used - rl, rl);
			inode_count_entries(fs, dino, 1);
			return fs->tx.err;
		}
		int err = split(fs, dino, i);
		if (err)
			return err;
	}
	return -ENOSPC;
}

/* Buddies merge when their entries fill at most this much of one bucket:
 * the slack keeps one name added and removed in turn from splitting and
 * merging a bucket each time. */
#define MERGE_LIMIT (BUCKET_SPACE * 3 / 4)

int dir_can_merge(uint32_t used_a, uint32_t used_b)
{
	return used_a + used_b <= MERGE_LIMIT;
}

/* Halves the slot array while its two halves agree (no bucket is as deep
 * as the array), freeing the array blocks that falls out of use. */
static void shrink_array(struct kura_fs *fs, uint64_t dino)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	while (dip->dir_depth > 0 && !fs->tx.err) {
		uint64_t half = 1ull << (dip->dir_depth - 1);
		for (uint64_t j = 0; j < half; j++)
			if (get_slot(fs, dip, j) != get_slot(fs, dip, j + half))
				return;
		uint64_t bytes = 8 * half;
		if (bytes < KURA_BLOCK) {
			/* The dropped half shares a block with the kept one: zero it,
			 * so a later doubling finds what it writes. */
			uint64_t b0 = bmap_get(fs, dip, 0);
			if (!b0) {
				tx_fail(&fs->tx, -EUCLEAN);
				return;
			}
			tx_memset(&fs->tx, block_off(b0) + bytes, 0, bytes);
		}
		bmap_free_range(fs, dino, (bytes + KURA_BLOCK - 1) / KURA_BLOCK, UINT64_MAX);
		INO_SET(fs, dino, dir_depth, (uint8_t)(dip->dir_depth - 1));
		INO_SET(fs, dino, size, bytes);
	}
}

/* Merges the bucket serving slot i with its buddy while the two fit in one
 * (see MERGE_LIMIT).  The merged bucket serves the union of two adjacent key
 * ranges, so a readdir cookie means what it meant before. */
static int merge(struct kura_fs *fs, uint64_t dino, uint64_t i)
{
	int deepest = 0;
	for (;;) {
		const struct kura_inode *dip = dir_inode(fs, dino);
		uint64_t b, bb;
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, i, &b);
		if (!bk)
			return -EUCLEAN;
		unsigned d = bk->depth;
		if (d == 0)
			break;
		uint64_t bit = 1ull << (d - 1);
		const struct kura_bucket *buddy = dir_bucket_at(fs, dip, i ^ bit, &bb);
		if (!buddy || buddy->depth != d || bb == b || !dir_can_merge(bk->used, buddy->used))
			break;
		deepest |= d == dip->dir_depth;
		uint64_t keep = (i & bit) ? bb : b, drop = (i & bit) ? b : bb;
		const struct kura_bucket *kh = block_ptr(fs, keep), *dh = block_ptr(fs, drop);
		char moved[BUCKET_SPACE];
		uint32_t nmoved = dh->used;
		memcpy(moved, dh + 1, nmoved);
		struct kura_bucket nh = { .magic = BUCKET_MAGIC, .depth = (uint16_t)(d - 1),
					  .used = (uint16_t)(kh->used + nmoved), .count = kh->count + dh->count };
		if (nmoved)
			tx_write(&fs->tx, block_off(keep) + sizeof nh + kh->used, moved, nmoved);
		tx_write(&fs->tx, block_off(keep), &nh, sizeof nh);
		dir_index_drop(fs, keep);
		dir_index_drop(fs, drop);
		/* Every slot that served the dropped bucket serves the kept one. */
		uint64_t low = i & (bit - 1);
		for (uint64_t j = low | bit; j < (1ull << dip->dir_depth) && !fs->tx.err; j += bit << 1)
			set_slot(fs, dino, j, keep);
		alloc_free(fs, drop);
		INO_SET(fs, dino, blocks, dip->blocks - 1);
		if (fs->tx.err)
			return fs->tx.err;
		i = low;
	}
	if (deepest)
		shrink_array(fs, dino);
	return fs->tx.err;
}

/* A name of this type goes or changes: a remembered walk may have gone
 * through it if it is a directory (or a symlink, or damage saying
 * neither). */
static void walks_changed(const struct kura_fs *fs, unsigned type)
{
	if (type != DT_REG)
		dir_index_walks_drop(fs);
}

/* Whether bk's last entry starts at last, given an entry's place at: the
 * index knows, else a walk from there (which also refuses entries that do
 * not end at the bucket's end: damage, where only the tail's shift is
 * safe). */
static int last_entry_at(const struct kura_fs *fs, uint64_t b, const struct kura_bucket *bk, uint32_t at,
			 uint32_t last)
{
	int known = dir_index_is_entry(fs, b, last);
	if (known >= 0)
		return known;
	for (uint32_t pos = at, used = bk->used; pos + DIRENT_HEAD <= used;) {
		uint32_t next = pos + dirent_reclen(entry_at(bk, pos)->name_len);
		if (next == used)
			return pos == last;
		pos = next;
	}
	return 0;
}

int dir_remove(struct kura_fs *fs, uint64_t dino, const char *name, size_t len)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	uint64_t b, h;
	uint32_t at;
	int err = find(fs, dip, name, len, &b, &at, &h);
	if (err)
		return err;
	const struct kura_bucket *bk = block_ptr(fs, b);
	walks_changed(fs, entry_at(bk, at)->type);
	uint32_t rl = dirent_reclen(entry_at(bk, at)->name_len);
	uint32_t tail = bk->used - at - rl;
	uint64_t base = block_off(b) + sizeof *bk;
	if (tail >= rl && last_entry_at(fs, b, bk, at, bk->used - rl) &&
	    dirent_reclen(entry_at(bk, bk->used - rl)->name_len) == rl) {
		/* The last entry has the hole's size (names of one length
		 * usually do): it moves into the hole, and the change is two
		 * entries, not the half bucket that shifting the tail would
		 * log.  Order within a bucket means nothing (dir_next sorts). */
		char buf[DIRENT_HEAD + KURA_NAME_MAX + 8];
		memcpy(buf, entry_at(bk, bk->used - rl), rl);
		tx_write(&fs->tx, base + at, buf, rl);
		dir_index_moved(fs, b, bk->used - rl, at, rl);
	} else if (tail) {
		char buf[BUCKET_SPACE];
		memcpy(buf, (const char *)(bk + 1) + at + rl, tail);
		tx_write(&fs->tx, base + at, buf, tail);
		dir_index_shifted(fs, b, at, rl);
	} else {
		dir_index_moved(fs, b, at, at, rl);
	}
	/* Keep the unused part of a bucket zero, so fsck can insist on it. */
	tx_memset(&fs->tx, base + bk->used - rl, 0, rl);
	struct kura_bucket nh = *bk;
	nh.used = (uint16_t)(bk->used - rl);
	nh.count = bk->count - 1;
	tx_write(&fs->tx, block_off(b), &nh, sizeof nh);
	inode_count_entries(fs, dino, -1);
	if (fs->tx.err)
		return fs->tx.err;
	return merge(fs, dino, h & mask_of(dip));
}

int dir_compact(struct kura_fs *fs, uint64_t dino)
{
	const struct kura_inode *dip = ino_get(fs, dino);
	if (!dip || !dip->root)
		return 0;
	if (!dir_sane(fs, dip))
		return -EUCLEAN;
	for (uint64_t i = 0; i < (1ull << dip->dir_depth) && !fs->tx.err; i++)
		merge(fs, dino, i);
	shrink_array(fs, dino);
	return fs->tx.err;
}

int dir_retarget(struct kura_fs *fs, uint64_t dino, const char *name, size_t len, uint64_t ino, unsigned type)
{
	const struct kura_inode *dip = dir_inode(fs, dino);
	uint64_t b, h;
	uint32_t at;
	int err = find(fs, dip, name, len, &b, &at, &h);
	if (err)
		return err;
	walks_changed(fs, entry_at(block_ptr(fs, b), at)->type);
	walks_changed(fs, type);
	uint64_t e = block_off(b) + sizeof(struct kura_bucket) + at;
	tx_write64(&fs->tx, e + offsetof(struct kura_dirent_disk, ino), ino);
	uint8_t t8 = (uint8_t)type;
	tx_write(&fs->tx, e + offsetof(struct kura_dirent_disk, type), &t8, 1);
	return fs->tx.err;
}

int dir_empty_check(const struct kura_fs *fs, const struct kura_inode *dip)
{
	if (dip->entries)
		return -ENOTEMPTY;
	if (!dip->root)
		return 0;
	if (!dir_sane(fs, dip))
		return -EUCLEAN;
	/* The count is the pool's word: a damaged one must not let rmdir free
	 * buckets that still name inodes. */
	for (uint64_t i = 0; i < (1ull << dip->dir_depth); i++) {
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, i, NULL);
		if (!bk || bk->used || bk->count)
			return -EUCLEAN;
	}
	return 0;
}

void dir_release(struct kura_fs *fs, uint64_t dino)
{
	const struct kura_inode *dip = ino_get(fs, dino);
	if (!dip || !dip->root)
		return;
	if (!dir_sane(fs, dip)) {
		tx_fail(&fs->tx, -EUCLEAN);
		return;
	}
	uint64_t n = 1ull << dip->dir_depth;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b;
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, i, &b);
		/* A bucket of local depth d first appears at slot i < 2^d. */
		if (bk && i < (1ull << bk->depth)) {
			dir_index_drop(fs, b);
			alloc_free(fs, b);
		}
	}
	/* The slot array goes too, so an open descriptor of a removed directory
	 * reads it as empty rather than following freed buckets. */
	bmap_free_range(fs, dino, 0, UINT64_MAX);
	INO_SET(fs, dino, dir_depth, 0);
	INO_SET(fs, dino, size, 0);
	INO_SET(fs, dino, blocks, 0);
}
