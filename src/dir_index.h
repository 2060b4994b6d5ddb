/*
 * dir_index.h — a thread's index of the directory buckets it reads (dir.c's;
 * bracket.c tells it where operations begin and end).
 *
 * A bucket is a block of packed entries of varying length, so proving a name
 * absent walks every entry, one dependent load after another: in a directory
 * of 20,000 names that walk was a quarter of a create+stat+unlink.  The index
 * keeps, per bucket, a 16-bit tag of each entry's hash and the entry's place;
 * a lookup compares tags and reads only the entries whose tag matches.
 *
 * Exact, not a hint: a name whose tag is absent is absent.  It lives in the
 * thread's memory and is exact at one value of the lock table's sequence
 * counter, which every change to the pool moves.  A thread finding another
 * value drops all it knows; its own changes keep it exact (dir.c tells it of
 * each entry it adds, moves or removes, and drops a bucket it rewrites in
 * other ways), and dir_index_end moves it to the value its change ended at,
 * or drops it when the change was rolled back.  Readers without the mutex
 * use it only at the value they read the pool at, and their reads are
 * checked against the counter afterwards as before.  Every place it gives is
 * still checked against the bucket (bounds, hash and name), so a fault here
 * can make a lookup miss but never read outside a bucket.
 */
#ifndef KURA_DIR_INDEX_H
#define KURA_DIR_INDEX_H

#include <emmintrin.h>
#include <stdint.h>
#include "fs.h"

struct kura_bucket;

/* Buckets holding fewer entries are walked: the index would not pay. */
#define DIR_INDEX_MIN_ENTRIES 24u

/* A bucket holds at most this many entries (a head and a one-byte name
 * each), rounded up to whole vectors of tags. */
#define DIR_INDEX_ENTRIES ((BUCKET_SPACE / ((DIRENT_HEAD + 1u + 7u) & ~7u) + 15u) & ~15u)

struct dir_index {
	uint64_t block;
	uint64_t gen;     /* the cache's generation it was built in */
	uint16_t used, n; /* the bucket's bytes and entries it describes */
	/* Entry i's tag and place; tags past n are garbage a search masks off. */
	uint16_t tag[DIR_INDEX_ENTRIES] __attribute__((aligned(16)));
	uint16_t place[DIR_INDEX_ENTRIES] __attribute__((aligned(16)));
};

static inline uint16_t dir_index_tag(uint64_t hash)
{
	return (uint16_t)(hash >> 40);
}

/* The entries from i on whose tag is tag, as a mask of the 16 from i
 * (i a multiple of 16). */
static inline uint32_t dir_index_match(const struct dir_index *ix, unsigned i, uint16_t tag)
{
	__m128i want = _mm_set1_epi16((short)tag);
	__m128i a = _mm_cmpeq_epi16(_mm_load_si128((const __m128i *)&ix->tag[i]), want);
	__m128i b = _mm_cmpeq_epi16(_mm_load_si128((const __m128i *)&ix->tag[i + 8]), want);
	uint32_t m = (uint32_t)_mm_movemask_epi8(_mm_packs_epi16(a, b));
	return ix->n - i >= 16 ? m : m & ((1u << (ix->n - i)) - 1);
}

/* The index of bucket bk (at block), built if need be; NULL when there is
 * none to trust (a small bucket, a change in flight, no memory). */
const struct dir_index *dir_index_of(const struct kura_fs *fs, uint64_t block, const struct kura_bucket *bk);

/* Whether an entry of block starts at at: 1 or 0 if this thread's
 * operation keeps block's index exact, -1 if it does not know. */
int dir_index_is_entry(const struct kura_fs *fs, uint64_t block, uint32_t at);

/* What dir.c did to a bucket inside an operation. */
void dir_index_added(const struct kura_fs *fs, uint64_t block, uint64_t hash, uint32_t at, uint32_t reclen);
/* The entry at at is gone; the last one, at from, took its place (from ==
 * at: the gone entry was the last). */
void dir_index_moved(const struct kura_fs *fs, uint64_t block, uint32_t from, uint32_t at, uint32_t reclen);
/* The entry at at is gone and those after it moved down by reclen. */
void dir_index_shifted(const struct kura_fs *fs, uint64_t block, uint32_t at, uint32_t reclen);
void dir_index_drop(const struct kura_fs *fs, uint64_t block);

/*
 * Walks: what the leading components of a path led to, so that a walk
 * through the same directories again (every call on files of one
 * directory) skips their lookups.  Kept beside the index and exact as it
 * is: another process's change drops them; of this thread's own changes,
 * dir.c drops them when an entry naming a directory or a symlink goes or
 * is retargeted, the only changes that can send a known prefix elsewhere.
 * A remembered walk holds no permission: path.c checks every directory on
 * it again (type and search permission) each time, so a chmod, an ACL or
 * other credentials need no dropping.
 */
#define WALK_MEMO_DIRS 16
#define WALK_MEMO_PREFIX 240

struct walk_memo {
	/* dirs[i] is searched for the i-th component; dirs[n] is where the
	 * path's rest goes on. */
	uint64_t dirs[WALK_MEMO_DIRS + 1];
	unsigned n;
};

/* The walk from start through prefix (len bytes, ending just past a run
 * of slashes), remembered at sequence value seq: 1 and *m, or 0. */
int dir_index_walk_recall(const struct kura_fs *fs, uint64_t start, const char *prefix, size_t len, uint64_t seq,
			  struct walk_memo *m);
/* Remembers a walk made entirely at sequence value seq. */
void dir_index_walk_remember(const struct kura_fs *fs, uint64_t start, const char *prefix, size_t len, uint64_t seq,
			     const struct walk_memo *m);
/* An entry naming a directory or symlink went or changed. */
void dir_index_walks_drop(const struct kura_fs *fs);
/* The sequence value a walk begins at (lock_read_begin). */
uint64_t dir_index_seq(const struct kura_fs *fs);

/* With the pool mutex, before the sequence counter turns odd for an
 * operation, and after it turned even again (committed: 0 if rolled back). */
void dir_index_begin(const struct kura_fs *fs);
void dir_index_end(const struct kura_fs *fs, int committed);

#endif
