/*
 * tx.h — undo-log transactions: the only way metadata changes.
 *
 * A transaction snapshots every 64-byte line it is about to change into the
 * log, makes the snapshot durable, then changes the line in place.  Commit
 * makes the changed lines durable and then retires the snapshots with one
 * 8-byte store of a new log epoch.  A crash before that store leaves valid
 * snapshots, which recovery (or the next process to take the pool lock)
 * copies back: the transaction never happened.  A crash after it leaves
 * nothing to undo: the transaction happened wholly.
 *
 * Blocks allocated within the transaction ("fresh") are unreachable until the
 * transaction links them in, so writes to them skip the log; if the
 * transaction is undone, the allocation is undone with it.
 *
 * Errors are sticky: once the log is full, further writes are refused (not
 * performed) and tx_commit() rolls everything back and returns the error.
 */
#ifndef KURA_TX_H
#define KURA_TX_H

#include <stdint.h>
#include <stddef.h>
#include "journal.h"
#include "media.h"
#include "u64set.h"

#define TX_RECENT 16

struct tx {
	struct media *m;
	uint64_t log_off, log_end; /* the log region, bytes */
	uint64_t tail;             /* where the next record goes */
	uint64_t log_backed;       /* the log up to here has storage (media_back) */
	uint64_t epoch;
	uint32_t stamp;            /* generation that empties the sets below in O(1) */
	int active;
	int err;
	int need_fence;            /* records written but not yet fenced */
	int ordered;               /* records need no checksum (see REC_ORDERED in tx.c) */
	/* Whether commit needs the changed lines (dirty_list, lines): pmem
	 * flushes them, the journal records them.  On the memory back end
	 * nothing does, and the logged set alone keeps lines logged once. */
	int track_lines;
	unsigned records;
	/* block -> mask of its lines logged (which are its changed lines),
	 * or changed though fresh (not logged); the fresh blocks */
	struct u64set logged, dirty, fresh;
	struct tx_recent {
		uint64_t line;     /* + 1; 0: empty */
		uint32_t stamp;    /* valid in the transaction with this stamp */
	} recent[TX_RECENT];
	uint64_t *dirty_list;      /* blocks changed, in the order first changed */
	size_t ndirty_list, cap_dirty_list;
	uint64_t *lines;           /* at commit: the changed lines (dirty_lines) */
	size_t nlines, cap_lines;
	/* file back end: the journal that makes commits durable (NULL on the
	 * others), the fresh bytes filled for its record, and the log
	 * sequence number the last commit must reach to be durable. */
	struct journal *j;
	struct jrange *fresh_list;
	size_t nfresh_list, cap_fresh_list;
	uint64_t commit_lsn;
};

void tx_init(struct tx *t, struct media *m, uint64_t log_off, uint64_t log_size);
void tx_destroy(struct tx *t);
/* Formats an empty log (mkfs); log_size 0: the region is known zero, only
 * the head is written. */
void tx_format(struct media *m, uint64_t log_off, uint64_t log_size);
/* For a view no other mount sees (a read-only mount's private map of a
 * region the file back end's journal filled): a head whose epoch is not
 * the one the first record's place holds, so recovery takes nothing there
 * for a record, without zeroing the region.  Zeroing copied every page of
 * it on write: 16 MiB and 9 ms at each `kura run` of a 1 GiB disk pool
 * (its probe mounts read-only), a whole second for a pool of 64 GiB. */
void tx_format_view(struct media *m, uint64_t log_off);
/* Validates the log head; 0 or -EUCLEAN. */
int tx_check_head(struct media *m, uint64_t log_off);
/* Undoes a transaction left unfinished by a crash or a dead process.
 * Returns the number of records undone. */
int tx_recover(struct tx *t);

/* The undo log's current epoch (journal_repair needs it). */
uint64_t tx_head_epoch(struct tx *t);
void tx_begin(struct tx *t);
/* Logs what [off, off+len) held unless this transaction has already;
 * 1 when the range may now change, 0 after an error (then it must not). */
int tx_prepare(struct tx *t, uint64_t off, size_t len);
/* Inline so that the copy of a field of known size is a move or two. */
static inline void tx_write(struct tx *t, uint64_t off, const void *src, size_t len)
{
	if (tx_prepare(t, off, len))
		media_store(t->m, off, src, len);
}

static inline void tx_write64(struct tx *t, uint64_t off, uint64_t value)
{
	if (tx_prepare(t, off, 8))
		media_store64(t->m, off, value);
}
void tx_memset(struct tx *t, uint64_t off, int c, size_t len);
/* Copies into fresh blocks (side by side), bypassing the cache; durable
 * at commit. */
void tx_copy_fresh(struct tx *t, uint64_t off, const void *src, size_t len);
/* Zeroes [off, off+len) of a fresh block; durable at commit.  data: file
 * data, which media_zero may zero through the pool file. */
void tx_zero_fresh(struct tx *t, uint64_t off, size_t len, int data);
void tx_mark_fresh(struct tx *t, uint64_t block);
/* [off, off+len) was changed outside any transaction (a shared map's
 * stores): the commit makes the bytes as they are then durable (the
 * journal records them; pmem flushes them), without undo. */
void tx_note_changed(struct tx *t, uint64_t off, size_t len);
int tx_is_fresh(struct tx *t, uint64_t block);
/* About how many bytes one transaction may still change in place. */
uint64_t tx_in_place_room(struct tx *t);
/* The blocks of bitmap word w the journal would rather see allocated
 * (journal_cheap_word); all of them without a journal. */
uint64_t tx_cheap_word(struct tx *t, uint64_t w);
static inline int tx_block_cheap(struct tx *t, uint64_t block)
{
	return tx_cheap_word(t, block / 64) >> (block % 64) & 1;
}
/* Whether some blocks are cheaper than others at all (fsync mode). */
int tx_has_cheap_blocks(const struct tx *t);
/* journal_forget_contents (fsync mode; nothing otherwise). */
void tx_forget_contents(struct tx *t, uint64_t block);
void tx_fail(struct tx *t, int err);
/* Returns 0, or the sticky error after rolling back. */
int tx_commit(struct tx *t);
void tx_abort(struct tx *t);

#endif
