/* dir_index.c — a thread's index of directory buckets (see dir_index.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "dir_index.h"
#include "lock.h"

#define INDEX_ENTRIES DIR_INDEX_ENTRIES
/* Buckets a thread keeps, by block number: 20,000 names fill about 220. */
#define INDEX_SLOTS 1024u

/* Walks a thread keeps: a program works in a few directories at a time. */
#define WALK_SLOTS 8u

struct walk_slot {
	uint64_t gen, walk_gen; /* valid only in these generations */
	uint64_t start;
	uint16_t len;
	char prefix[WALK_MEMO_PREFIX];
	struct walk_memo memo;
};

struct index_cache {
	uint64_t mount_id; /* whose buckets these are */
	uint64_t seq;      /* the sequence counter's value at which they are exact */
	int exact;         /* 0: seq means nothing, build nothing before a new one */
	uint64_t gen;      /* slots of another generation are empty */
	uint64_t walk_gen; /* walks of another one are forgotten (dir_index_walks_drop) */
	/* Slots ever built.  The rest are memory never touched, where a look
	 * would fault in a page of zeros only for the build's first store to
	 * fault again: two faults a page, 230 in a directory of 20,000 names. */
	uint64_t built[INDEX_SLOTS / 64];
	struct dir_index slot[INDEX_SLOTS];
	struct walk_slot walk[WALK_SLOTS];
};

/* Initial-exec: a preloaded library's own static TLS, no lookup per use. */
static __thread struct index_cache *cache __attribute__((tls_model("initial-exec")));
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_free(void *c)
{
	free(c);
}

static void make_key(void)
{
	if (pthread_key_create(&cache_key, cache_free))
		cache_key = (pthread_key_t)-1;
}

static struct index_cache *cache_of(const struct kura_fs *fs, int make)
{
	struct index_cache *c = cache;
	if (!c) {
		if (!make)
			return NULL;
		pthread_once(&cache_once, make_key);
		if (cache_key == (pthread_key_t)-1 || !(c = calloc(1, sizeof *c)))
			return NULL;
		if (pthread_setspecific(cache_key, c)) {
			free(c);
			return NULL;
		}
		cache = c;
	}
	if (c->mount_id != fs->mount_id) {
		if (!make)
			return NULL;
		c->mount_id = fs->mount_id;
		c->exact = 0;
	}
	return c;
}

static uint64_t seq_now(const struct kura_fs *fs)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE); /* after the bucket's bytes were read */
	return lock_read_begin(&fs->lk);
}

static unsigned slot_index(uint64_t block)
{
	return (unsigned)((block ^ block >> 8) % INDEX_SLOTS);
}

/* block's slot, or NULL if it was never built. */
static struct dir_index *slot_for(struct index_cache *c, uint64_t block)
{
	unsigned i = slot_index(block);
	return c->built[i / 64] >> (i % 64) & 1 ? &c->slot[i] : NULL;
}

static struct dir_index *slot_to_build(struct index_cache *c, uint64_t block)
{
	unsigned i = slot_index(block);
	c->built[i / 64] |= 1ull << (i % 64);
	return &c->slot[i];
}

static void forget_all(struct index_cache *c)
{
	c->gen++;
	c->exact = 0;
}

const struct dir_index *dir_index_of(const struct kura_fs *fs, uint64_t block, const struct kura_bucket *bk)
{
	uint32_t used = bk->used, count = bk->count;
	if (count < DIR_INDEX_MIN_ENTRIES || count > INDEX_ENTRIES || used > BUCKET_SPACE)
		return NULL;
	struct index_cache *c = cache_of(fs, 1);
	if (!c)
		return NULL;
	uint64_t seq = seq_now(fs);
	if (!c->exact || c->seq != seq) {
		if (seq & 1)
			return NULL; /* someone else's change is under way */
		c->gen++;
		c->seq = seq;
		c->exact = 1;
	}
	struct dir_index *ix = slot_for(c, block);
	if (ix && ix->gen == c->gen && ix->block == block && ix->used == used && ix->n == count)
		return ix;
	ix = slot_to_build(c, block);
	uint32_t n = 0, pos = 0;
	const uint8_t *base = (const uint8_t *)(bk + 1);
	while (pos + DIRENT_HEAD <= used) {
		const struct kura_dirent_disk *e = (const void *)(base + pos);
		uint32_t rl = dirent_reclen(e->name_len);
		if (pos + rl > used || n == INDEX_ENTRIES)
			break;
		ix->tag[n] = dir_index_tag(e->hash);
		ix->place[n++] = (uint16_t)pos;
		pos += rl;
	}
	ix->gen = 0;
	/* A damaged bucket is the walk's to report; a bucket that changed
	 * while a reader without the mutex walked it is not to be kept. */
	if (pos != used || n != count)
		return NULL;
	if (seq_now(fs) != seq) {
		forget_all(c);
		return NULL;
	}
	ix->block = block;
	ix->used = (uint16_t)used;
	ix->n = (uint16_t)n;
	ix->gen = c->gen;
	return ix;
}

/* The index of block that this thread's operation keeps exact, if any. */
static struct dir_index *kept(const struct kura_fs *fs, uint64_t block)
{
	struct index_cache *c = cache_of(fs, 0);
	if (!c || !c->exact)
		return NULL;
	if (c->seq != seq_now(fs)) {
		forget_all(c); /* a change outside dir_index_begin's bracket */
		return NULL;
	}
	struct dir_index *ix = slot_for(c, block);
	return ix && ix->gen == c->gen && ix->block == block ? ix : NULL;
}

static int find_place(const struct dir_index *ix, uint32_t at)
{
	__m128i want = _mm_set1_epi16((short)at);
	for (unsigned i = 0; i < ix->n; i += 8) {
		__m128i eq = _mm_cmpeq_epi16(_mm_load_si128((const __m128i *)&ix->place[i]), want);
		uint32_t m = (uint32_t)_mm_movemask_epi8(eq);
		if (ix->n - i < 8)
			m &= (1u << 2 * (ix->n - i)) - 1;
		if (m)
			return (int)(i + (unsigned)__builtin_ctz(m) / 2);
	}
	return -1;
}

int dir_index_is_entry(const struct kura_fs *fs, uint64_t block, uint32_t at)
{
	const struct dir_index *ix = kept(fs, block);
	return ix ? find_place(ix, at) >= 0 : -1;
}

static void remove_at(struct dir_index *ix, int i)
{
	ix->n--;
	ix->tag[i] = ix->tag[ix->n];
	ix->place[i] = ix->place[ix->n];
}

void dir_index_added(const struct kura_fs *fs, uint64_t block, uint64_t hash, uint32_t at, uint32_t reclen)
{
	struct dir_index *ix = kept(fs, block);
	if (!ix)
		return;
	if (at != ix->used || ix->n == INDEX_ENTRIES) {
		ix->gen = 0;
		return;
	}
	ix->tag[ix->n] = dir_index_tag(hash);
	ix->place[ix->n++] = (uint16_t)at;
	ix->used = (uint16_t)(ix->used + reclen);
}

void dir_index_moved(const struct kura_fs *fs, uint64_t block, uint32_t from, uint32_t at, uint32_t reclen)
{
	struct dir_index *ix = kept(fs, block);
	if (!ix)
		return;
	int gone = find_place(ix, at), last = find_place(ix, from);
	if (gone < 0 || last < 0 || ix->used < reclen) {
		ix->gen = 0;
		return;
	}
	ix->tag[gone] = ix->tag[last];
	remove_at(ix, last); /* the moved entry's old place, or the gone last one */
	ix->used = (uint16_t)(ix->used - reclen);
}

void dir_index_shifted(const struct kura_fs *fs, uint64_t block, uint32_t at, uint32_t reclen)
{
	struct dir_index *ix = kept(fs, block);
	if (!ix)
		return;
	int gone = find_place(ix, at);
	if (gone < 0 || ix->used < reclen) {
		ix->gen = 0;
		return;
	}
	remove_at(ix, gone);
	for (int i = 0; i < ix->n; i++)
		if (ix->place[i] > at)
			ix->place[i] = (uint16_t)(ix->place[i] - reclen);
	ix->used = (uint16_t)(ix->used - reclen);
}

void dir_index_drop(const struct kura_fs *fs, uint64_t block)
{
	struct index_cache *c = cache_of(fs, 0);
	if (c) {
		struct dir_index *ix = slot_for(c, block);
		if (ix && ix->block == block)
			ix->gen = 0;
	}
}

void dir_index_begin(const struct kura_fs *fs)
{
	struct index_cache *c = cache_of(fs, 0);
	if (!c)
		return;
	uint64_t seq = seq_now(fs);
	if (seq & 1) {
		forget_all(c);
		return;
	}
	if (!c->exact || c->seq != seq)
		c->gen++;
	c->seq = seq | 1; /* what lock_write_begin is about to make it */
	c->exact = 1;
}

void dir_index_end(const struct kura_fs *fs, int committed)
{
	struct index_cache *c = cache_of(fs, 0);
	if (!c || !c->exact)
		return;
	uint64_t seq = seq_now(fs);
	if (committed && seq == c->seq + 1)
		c->seq = seq;
	else
		forget_all(c); /* rolled back: the pool is as before the changes told */
}

/* ---- walks ---------------------------------------------------------------- */

uint64_t dir_index_seq(const struct kura_fs *fs)
{
	return seq_now(fs);
}

static struct walk_slot *walk_slot_for(struct index_cache *c, uint64_t start, const char *prefix, size_t len)
{
	uint64_t h = start * 0x9e3779b97f4a7c15ull ^ len;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)prefix[i]) * 0x100000001b3ull;
	return &c->walk[(h >> 32) % WALK_SLOTS];
}

/* Whether the cache is exact at seq, making it so if nothing else is
 * (the walk read the pool at seq, so what it found holds there). */
static int exact_at(struct index_cache *c, uint64_t seq)
{
	if (c->exact && c->seq == seq)
		return 1;
	if (seq & 1)
		return 0; /* another's change is under way */
	c->gen++;
	c->seq = seq;
	c->exact = 1;
	return 1;
}

int dir_index_walk_recall(const struct kura_fs *fs, uint64_t start, const char *prefix, size_t len, uint64_t seq,
			  struct walk_memo *m)
{
	struct index_cache *c = cache_of(fs, 0);
	if (!c || len > WALK_MEMO_PREFIX || !exact_at(c, seq))
		return 0;
	struct walk_slot *w = walk_slot_for(c, start, prefix, len);
	if (w->gen != c->gen || w->walk_gen != c->walk_gen || w->start != start || w->len != len ||
	    memcmp(w->prefix, prefix, len))
		return 0;
	*m = w->memo;
	return 1;
}

void dir_index_walk_remember(const struct kura_fs *fs, uint64_t start, const char *prefix, size_t len, uint64_t seq,
			     const struct walk_memo *m)
{
	struct index_cache *c = cache_of(fs, 1);
	if (!c || len > WALK_MEMO_PREFIX || m->n > WALK_MEMO_DIRS || !exact_at(c, seq) || seq_now(fs) != seq)
		return;
	struct walk_slot *w = walk_slot_for(c, start, prefix, len);
	w->gen = c->gen;
	w->walk_gen = c->walk_gen;
	w->start = start;
	w->len = (uint16_t)len;
	memcpy(w->prefix, prefix, len);
	w->memo = *m;
}

void dir_index_walks_drop(const struct kura_fs *fs)
{
	struct index_cache *c = cache_of(fs, 0);
	if (c)
		c->walk_gen++;
}
