/* alloc.c — the block bitmap (see alloc.h). */
#include <errno.h>
#include <stdlib.h>
#include "alloc.h"

static uint64_t bitmap_word_off(const struct kura_fs *fs, uint64_t block)
{
	return block_off(fs->sb->bitmap_block) + (block / 64) * 8;
}

static uint64_t bitmap_word(const struct kura_fs *fs, uint64_t w)
{
	const uint64_t *p = media_ptr(&fs->m, block_off(fs->sb->bitmap_block) + w * 8);
	return *p;
}

int alloc_is_used(const struct kura_fs *fs, uint64_t block)
{
	return block < fs->nblocks && (bitmap_word(fs, block / 64) >> (block % 64)) & 1;
}

uint64_t alloc_meta_reserve(uint64_t data_blocks)
{
	return data_blocks / 64 < 256 ? data_blocks / 64 : 256;
}

uint64_t alloc_free_for_data(const struct kura_fs *fs)
{
	uint64_t free = fs_state(fs)->free_blocks;
	return free > fs->meta_reserve ? free - fs->meta_reserve : 0;
}

/* Whether a block for `zero`'s use may be taken: metadata may take the
 * last ones. */
static int room_for(const struct kura_fs *fs, int zero)
{
	return zero == ALLOC_ZEROED ? fs_state(fs)->free_blocks > 0 : alloc_free_for_data(fs) > 0;
}

static uint64_t claim(struct kura_fs *fs, uint64_t b, uint64_t bits, int zero)
{
	struct tx *t = &fs->tx;
	/* Storage first (media_back): a full file system under the pool is
	 * this operation's ENOSPC, not a SIGBUS at the store. */
	int err = zero == ALLOC_UNWRITTEN && fs->m.disk_fd >= 0 ? 0 :
		  media_back(&fs->m, block_off(b), KURA_BLOCK, zero == ALLOC_ZEROED ? MEDIA_FILL_STORES : MEDIA_FILL_COPIES);
	if (!err)
		err = media_back(&fs->m, bitmap_word_off(fs, b), 8, MEDIA_FILL_STORES);
	if (err) {
		tx_fail(t, err);
		return 0;
	}
	tx_write64(t, bitmap_word_off(fs, b), bits | (1ull << (b % 64)));
	tx_write64(t, STATE_OFF(free_blocks), fs_state(fs)->free_blocks - 1);
	if (t->err)
		return 0;
	tx_mark_fresh(t, b);
	/* The next block is likely taken for the same use as this one. */
	__atomic_store_n(&fs->back_ahead, block_off(b + 1) | (zero == ALLOC_ZEROED ? BACK_AHEAD_STORES : 0),
			 __ATOMIC_RELAXED);
	if (zero && zero != ALLOC_UNWRITTEN) /* unlogged (the block is fresh); commit orders it before the block becomes reachable */
		tx_zero_fresh(t, block_off(b), KURA_BLOCK, zero == ALLOC_ZEROED_DATA);
	return b;
}

/* Whether block b may be taken: free, and cheap when cheapness counts. */
static int takeable(struct kura_fs *fs, uint64_t b, uint64_t bits)
{
	return !((bits >> (b % 64)) & 1) &&
	       (!tx_has_cheap_blocks(&fs->tx) || tx_block_cheap(&fs->tx, b));
}

#define RECENT_FREE (sizeof ((struct kura_fs *)0)->recent_free / sizeof (uint64_t))

/* A block this mount freed lately, if still free: those of the last
 * transaction that freed any first, in the order it freed them.  An
 * overwrite of whole blocks writes new ones and frees those it replaces,
 * somewhere inside a full region: without this, next-fit would scan from
 * its hint across that region to reach them, on every write, and on a pool
 * in memory it would rather take storage never used (the kernel's page
 * allocation, 2 us a page here, and more memory) than what the last write
 * gave back.  1,024 deep, so that a sequential rewrite in writes of up to
 * 4 MiB takes the blocks the write before it freed, in the order they held
 * the file's data: the file's blocks stay in ascending runs. */
static uint64_t reuse_recent(struct kura_fs *fs, int zero)
{
	while (fs->nrecent_free) {
		uint64_t b = fs->recent_free[(fs->recent_first + --fs->nrecent_free) % RECENT_FREE], bits;
		if (block_valid(fs, b) && takeable(fs, b, bits = bitmap_word(fs, b / 64)))
			return claim(fs, b, bits, zero);
	}
	return 0;
}

/* Next-fit over at most limit words from the hint, taking only blocks the
 * journal calls cheap when cheap is set. */
static uint64_t next_fit(struct kura_fs *fs, int zero, int cheap, uint64_t limit)
{
	uint64_t nwords = (fs->nblocks + 63) / 64;
	uint64_t start = fs->alloc_hint / 64;
	if (start >= nwords)
		start = 0;
	for (uint64_t i = 0; i < nwords && i < limit; i++) {
		uint64_t w = (start + i) % nwords;
		uint64_t bits = bitmap_word(fs, w), free = ~bits & (cheap ? tx_cheap_word(&fs->tx, w) : ~0ull);
		if (!free)
			continue;
		uint64_t b = w * 64 + (uint64_t)__builtin_ctzll(free);
		if (b >= fs->nblocks)
			continue;
		fs->alloc_hint = b + 1;
		return claim(fs, b, bits, zero);
	}
	return 0;
}

/* A block freed lately, else, where some blocks are cheaper (a disk pool
 * in fsync mode writes a block that was free at its last checkpoint once,
 * any other through the journal too: journal.h), a cheap one searched a
 * bounded stretch ahead; 0 with nothing failed when neither is found. */
static uint64_t near_block(struct kura_fs *fs, int zero)
{
	uint64_t b = reuse_recent(fs, zero);
	return b || fs->tx.err || !tx_has_cheap_blocks(&fs->tx) ? b : next_fit(fs, zero, 1, 4096);
}

/* Recently freed blocks first, then next-fit from a per-process hint; both
 * are only guesses, the bitmap decides.  Words are scanned whole so a full
 * region costs 1/64 per block. */
uint64_t alloc_block(struct kura_fs *fs, int zero)
{
	struct tx *t = &fs->tx;
	if (t->err)
		return 0;
	if (!room_for(fs, zero)) {
		tx_fail(t, -ENOSPC);
		return 0;
	}
	uint64_t b = near_block(fs, zero);
	if (!b && !t->err)
		b = next_fit(fs, zero, 0, UINT64_MAX);
	if (!b && !t->err)
		tx_fail(t, -ENOSPC);
	return b;
}

uint64_t alloc_cheap_block(struct kura_fs *fs, int zero)
{
	if (fs->tx.err || !tx_has_cheap_blocks(&fs->tx) || !room_for(fs, zero))
		return 0;
	return near_block(fs, zero);
}

uint64_t alloc_block_at(struct kura_fs *fs, int zero, uint64_t goal)
{
	if (fs->tx.err || !block_valid(fs, goal) || !room_for(fs, zero))
		return 0;
	uint64_t bits = bitmap_word(fs, goal / 64);
	return takeable(fs, goal, bits) ? claim(fs, goal, bits, zero) : 0;
}

/* Words a search for a free stretch reads at most: 8 KiB of bitmap, a
 * microsecond, on the rare allocation whose neighbours' places are taken. */
#define STRETCH_SCAN 1024u
/* Free words a stretch may span: 16 MiB a file can grow into unbroken. */
#define STRETCH_WORDS 64u

static int word_all_free(struct kura_fs *fs, uint64_t w)
{
	uint64_t first = w * 64;
	return first >= fs->first_data_block && first + 64 <= fs->nblocks && !bitmap_word(fs, w) &&
	       (!tx_has_cheap_blocks(&fs->tx) || tx_cheap_word(&fs->tx, w) == ~0ull);
}

/* Reused space first: the search runs up from the lowest word a free made
 * whole again, as next-fit does from the lowest block freed, so a pool that
 * creates and deletes files keeps to the storage it has. */
uint64_t alloc_block_in_word(struct kura_fs *fs, int zero, unsigned slot)
{
	uint64_t nwords = fs->nblocks / 64;
	if (fs->tx.err || !nwords || slot >= 64 || !room_for(fs, zero))
		return alloc_block(fs, zero);
	uint64_t w = fs->word_hint < nwords ? fs->word_hint : 0;
	for (unsigned i = 0; i < STRETCH_SCAN && i < nwords; i++, w = w + 1 < nwords ? w + 1 : 0)
		if (word_all_free(fs, w)) {
			fs->word_hint = w + 1;
			return claim(fs, w * 64 + slot, 0, zero);
		}
	fs->word_hint = w;
	return alloc_block(fs, zero);
}

/* The search runs down from the top of the pool while next-fit runs up from
 * the bottom, so that small files packed by next-fit do not land where
 * large files grow.  In a stretch of free words it leaves the lowest `need`
 * to whatever lies below (a file placed earlier may not have filled its
 * words yet), takes its place in the next `need` and leaves the rest above
 * for its file to grow into.  The next search starts below the stretch. */
uint64_t alloc_block_in_stretch(struct kura_fs *fs, int zero, unsigned slot, unsigned words)
{
	uint64_t nwords = fs->nblocks / 64, need = slot / 64 + 1, run = 0, spare = 0;
	if (need < words)
		need = words;
	if (fs->tx.err || !nwords || 2 * need > STRETCH_WORDS || !room_for(fs, zero))
		return alloc_block(fs, zero);
	uint64_t w = fs->stretch_hint < nwords ? fs->stretch_hint : nwords - 1;
	for (unsigned i = 0; i < STRETCH_SCAN && i < nwords; i++, w = w ? w - 1 : nwords - 1) {
		if (!word_all_free(fs, w)) {
			run = 0;
			continue;
		}
		int free_below = w && word_all_free(fs, w - 1);
		if (++run < STRETCH_WORDS && free_below)
			continue;
		if (run >= 2 * need) {
			fs->stretch_hint = w ? w - 1 : nwords - 1;
			return claim(fs, (w + need) * 64 + slot, 0, zero);
		}
		if (run >= 2 && !spare)
			spare = w + 1;
		run = 0;
	}
	fs->stretch_hint = w;
	/* A pool too full for such a stretch: a word at least, so that the
	 * block's stretch is not broken up block by block. */
	return spare ? claim(fs, spare * 64 + slot % 64, 0, zero) : alloc_block(fs, zero);
}

void alloc_free(struct kura_fs *fs, uint64_t block)
{
	if (!block_valid(fs, block))
		return;
	if (fs->npending_free == fs->cap_pending_free) {
		size_t cap = fs->cap_pending_free ? fs->cap_pending_free * 2 : 256;
		uint64_t *n = realloc(fs->pending_free, cap * sizeof *n);
		if (!n) {
			tx_fail(&fs->tx, -ENOMEM);
			return;
		}
		fs->pending_free = n;
		fs->cap_pending_free = cap;
	}
	fs->pending_free[fs->npending_free++] = block;
}

void alloc_apply_frees(struct kura_fs *fs)
{
	struct tx *t = &fs->tx;
	uint64_t freed = 0;
	for (size_t i = 0; i < fs->npending_free && !t->err; i++) {
		uint64_t b = fs->pending_free[i];
		uint64_t bits = bitmap_word(fs, b / 64);
		if (!((bits >> (b % 64)) & 1))
			continue; /* freed twice: keep the count honest */
		tx_write64(t, bitmap_word_off(fs, b), bits & ~(1ull << (b % 64)));
		freed++;
		if (b < fs->alloc_hint)
			fs->alloc_hint = b;
		if (!(bits & ~(1ull << (b % 64)))) { /* the word is whole again */
			if (b / 64 < fs->word_hint)
				fs->word_hint = b / 64;
			if (b / 64 > fs->stretch_hint)
				fs->stretch_hint = b / 64;
		}
	}
	if (freed)
		tx_write64(t, STATE_OFF(free_blocks), fs_state(fs)->free_blocks + freed);
	/* Stacked last first, so that they come off in the order freed; a
	 * block freed twice is stacked twice and skipped when taken. */
	for (size_t i = fs->npending_free; i-- > 0 && !t->err;) {
		if (fs->nrecent_free == RECENT_FREE) { /* full: the oldest gives way */
			fs->recent_first = (fs->recent_first + 1) % RECENT_FREE;
			fs->nrecent_free--;
		}
		fs->recent_free[(fs->recent_first + fs->nrecent_free++) % RECENT_FREE] = fs->pending_free[i];
	}
	fs->npending_free = 0;
}

void alloc_drop_frees(struct kura_fs *fs)
{
	fs->npending_free = 0;
}
