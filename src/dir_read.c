/* dir_read.c — readdir over a directory's buckets in key order (see dir.h). */
#include <stdlib.h>
#include <string.h>
#include "dir_int.h"

int dir_next(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t *cookie, struct dir_entry *out)
{
	uint64_t c = *cookie;
	if (!dip->root)
		return 0;
	/* Each pass either returns or moves c past one bucket's range, and a
	 * range is at least 2^(62-DIR_MAX_DEPTH) keys: the loop is bounded even
	 * on a damaged directory. */
	while (c < DIR_COOKIE_END) {
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, hash_of(c) & mask_of(dip), NULL);
		if (!bk)
			return -EUCLEAN;
		const struct kura_dirent_disk *e, *best = NULL;
		uint64_t best_key = 0;
		int bad = 0;
		FOR_EACH_ENTRY(bk, pos, e, bad)
		{
			uint64_t k = key_of(e->hash & HASH_MASK);
			if (k >= c && (!best || k < best_key)) {
				best = e;
				best_key = k;
			}
		}
		if (bad)
			return -EUCLEAN;
		if (best) {
			out->ino = best->ino;
			out->type = best->type;
			out->name_len = best->name_len;
			memcpy(out->name, best->name, best->name_len);
			out->name[best->name_len] = 0;
			*cookie = best_key + 1;
			return 1;
		}
		unsigned shift = 62 - bk->depth;
		c = ((c >> shift) + 1) << shift;
	}
	*cookie = DIR_COOKIE_END;
	return 0;
}

/* The most entries a bucket can hold: each takes a head and a name of one
 * byte at least. */
#define BUCKET_ENTRIES_MAX (BUCKET_SPACE / dirent_reclen(1))

struct keyed_entry {
	uint64_t key;
	uint32_t pos;
};

static int by_key(const void *a, const void *b)
{
	uint64_t x = ((const struct keyed_entry *)a)->key, y = ((const struct keyed_entry *)b)->key;
	return x < y ? -1 : x > y;
}

int dir_next_batch(const struct kura_fs *fs, const struct kura_inode *dip, uint64_t cookie, struct dir_entry *out,
		   uint64_t *keys, int max)
{
	uint64_t c = cookie;
	if (!dip->root || max < 1)
		return 0;
	/* Bounded as dir_next's loop is. */
	while (c < DIR_COOKIE_END) {
		const struct kura_bucket *bk = dir_bucket_at(fs, dip, hash_of(c) & mask_of(dip), NULL);
		if (!bk)
			return -EUCLEAN;
		struct keyed_entry found[BUCKET_ENTRIES_MAX];
		int n = 0, bad = 0;
		const struct kura_dirent_disk *e;
		FOR_EACH_ENTRY(bk, pos, e, bad)
		{
			uint64_t k = key_of(e->hash & HASH_MASK);
			if (k >= c && n < (int)BUCKET_ENTRIES_MAX)
				found[n++] = (struct keyed_entry){ k, pos };
		}
		if (bad)
			return -EUCLEAN;
		if (n) {
			qsort(found, (size_t)n, sizeof *found, by_key);
			if (n > max)
				n = max;
			for (int i = 0; i < n; i++) {
				e = entry_at(bk, found[i].pos);
				out[i].ino = e->ino;
				out[i].type = e->type;
				out[i].name_len = e->name_len;
				memcpy(out[i].name, e->name, e->name_len);
				out[i].name[e->name_len] = 0;
				keys[i] = found[i].key;
			}
			return n;
		}
		unsigned shift = 62 - bk->depth;
		c = ((c >> shift) + 1) << shift;
	}
	return 0;
}
