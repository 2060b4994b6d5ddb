/*
 * journal_int.h — what the journal's five files share; no other layer
 * includes it (they use journal.h):
 *   journal.c         the format on the disk, the working copy;
 *   journal_recover.c recovery at the first mount;
 *   journal_commit.c  staging records, group commit and syncs, repair;
 *   journal_seal.c    the pending set (fsync mode) and its seals;
 *   journal_checkpoint.c checkpoints.
 */
#ifndef KURA_JOURNAL_INT_H
#define KURA_JOURNAL_INT_H

#include <time.h>
#include "journal.h"

/* A seal's record belongs to no transaction: a holder that dies before
 * publishing it leaves it for journal_repair to erase. */
#define SEAL_UNDO_EPOCH UINT64_MAX

/* Runs of consecutive changed lines, each cut at block boundaries. */
#define FOR_EACH_LINE_RUN(t, off, len, body)                                                        \
	for (size_t i_ = 0; i_ < (t)->nlines;) {                                                    \
		size_t k_ = i_ + 1;                                                                 \
		while (k_ < (t)->nlines && (t)->lines[k_] == (t)->lines[k_ - 1] + 1 &&             \
		       ((t)->lines[k_] * MEDIA_LINE) % KURA_BLOCK)                                  \
			k_++;                                                                       \
		uint64_t off = (t)->lines[i_] * MEDIA_LINE, len = (k_ - i_) * MEDIA_LINE;           \
		body;                                                                               \
		i_ = k_;                                                                            \
	}

typedef void (*apply_fn)(void *ctx, uint64_t off, const void *src, uint32_t len);

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void set_bits(uint64_t *map, uint64_t off, uint64_t len)
{
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++)
		map[b / 64] |= 1ull << (b % 64);
}

static inline int bit(const uint64_t *map, uint64_t b)
{
	return map[b / 64] >> (b % 64) & 1;
}

static inline void mark_dirty(struct journal *j, uint64_t off, uint64_t len)
{
	set_bits(j->dirty, off, len);
}

/* A record's bytes (or a seal's home write) now define these blocks in
 * the state recovery produces: they may no longer go home ahead of one. */
static inline void mark_journaled(struct journal *j, uint64_t off, uint64_t len)
{
	set_bits(j->dirty, off, len);
	set_bits(j->journaled, off, len);
}

static inline uint64_t item_size(uint64_t len, int zero)
{
	return sizeof(struct kura_jitem) + (zero ? 0 : (len + 7) & ~7ull);
}

/* The super block fields that checking and replaying records look at. */
static inline struct kura_super region_super(const struct journal *j)
{
	return (struct kura_super){ .log_block = j->head_off / KURA_BLOCK, .log_blocks = j->cap / KURA_BLOCK + 1,
				    .pool_size = j->nblocks * KURA_BLOCK };
}

/* journal.c */
const struct kura_journal_head *jn_current_head(const uint8_t *block);
uint32_t jn_rec_crc(const void *rec, uint32_t len);
uint32_t jn_rec_check(const struct kura_super *sb, const uint8_t *rec, uint64_t have, uint64_t epoch, uint64_t pos);
uint32_t jn_item_stored(const struct kura_jitem *it);
int jn_replay_region(const struct kura_super *sb, const uint8_t *region, uint64_t epoch, apply_fn apply, void *ctx);
int jn_write_head(struct media *dm, const struct kura_super *sb, uint64_t epoch, uint64_t nonce);
/* Recovery at the first mount (journal_recover.c): the head it writes
 * gets *nonce and *epoch.  -errno and why on failure. */
int jn_recover_disk(int pool_fd, const struct kura_super *sb, uint64_t *nonce, uint64_t *epoch, char *why,
		    size_t whylen);

/* journal_commit.c */
void jn_put_item_from(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero, const void *src);
/* The same, leaving the blocks' journaled bits to the caller (a seal sets
 * them once its record counts: jn_mark_sealed). */
void jn_put_item_unmarked(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero, const void *src);
/* After a seal's record counts: its blocks (the pending list, still as it
 * sealed it) may no longer go home ahead of a record. */
void jn_mark_sealed(struct journal *j);
void jn_finish_record(struct journal *j, uint64_t pos, uint64_t at, uint64_t undo_epoch);
void jn_lock_flush(struct journal *j);
void jn_unlock_flush(struct journal *j);
int jn_write_pending(struct journal *j);

/* journal_seal.c */
uint64_t jn_seal_slack(const struct journal *j);
void jn_pend_tx(struct journal *j, const struct jtx *t, int add, uint64_t *nnew, uint64_t *est);
int jn_pend_fits(const struct journal *j, uint64_t nnew, uint64_t est);
int jn_seal(struct journal *j, const struct jtx *t);
const uint8_t *jn_seal_view(struct journal *j, const struct jtx *t, uint64_t b);
int jn_cmp_block(const void *a, const void *b);

/* journal_checkpoint.c */
int jn_checkpoint(struct journal *j, const struct jtx *t, uint64_t reserve);

#endif
