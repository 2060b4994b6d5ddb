/* tx.c — undo-log transactions (see tx.h for the protocol). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "crc.h"
#include "fault.h"
#include "layout.h"
#include "tx.h"

static inline uint64_t block_start(uint64_t b)
{
	return b << KURA_BLOCK_SHIFT;
}

/* ---- log records -------------------------------------------------------- */

static uint32_t rec_crc(const struct kura_log_rec *r, const void *data)
{
	uint32_t c = crc32c(0, &r->off, 8);
	c = crc32c(c, &r->epoch, 8);
	c = crc32c(c, &r->len, 4);
	return crc32c(c, data, r->len);
}

/* A record written where stores reach memory in program order and only a
 * process can die (the memory back end, the file back end's working copy):
 * its data go first and its head last, so a head in the current epoch
 * vouches for the data and no checksum is needed.  Kept in len's top bit,
 * which a pmem writer never sets. */
#define REC_ORDERED 0x80000000u

static uint32_t rec_len(const struct kura_log_rec *r)
{
	return r->len & ~REC_ORDERED;
}

static uint64_t rec_size(uint32_t len)
{
	return (sizeof(struct kura_log_rec) + len + 7) & ~7ull;
}

void tx_format(struct media *m, uint64_t log_off, uint64_t log_size)
{
	struct kura_log_head h = { .magic = LOG_MAGIC, .epoch = 1 };
	if (log_size)
		media_memset(m, log_off, 0, log_size);
	media_store(m, log_off, &h, sizeof h);
	media_persist(m, log_off, log_size ? log_size : sizeof h);
}

void tx_format_view(struct media *m, uint64_t log_off)
{
	const struct kura_log_rec *first = media_ptr(m, log_off + sizeof(struct kura_log_head));
	struct kura_log_head h = { .magic = LOG_MAGIC, .epoch = first->epoch + 1 };
	media_store(m, log_off, &h, sizeof h);
}

int tx_check_head(struct media *m, uint64_t log_off)
{
	const struct kura_log_head *h = media_ptr(m, log_off);
	return h->magic == LOG_MAGIC ? 0 : -EUCLEAN;
}

void tx_init(struct tx *t, struct media *m, uint64_t log_off, uint64_t log_size)
{
	memset(t, 0, sizeof *t);
	t->m = m;
	t->log_off = log_off;
	t->log_end = log_off + log_size;
	t->log_backed = log_off;
	t->stamp = 1;
	t->ordered = media_is_memory(m);
}

void tx_destroy(struct tx *t)
{
	u64set_free(&t->logged);
	u64set_free(&t->dirty);
	u64set_free(&t->fresh);
	free(t->dirty_list);
	t->dirty_list = NULL;
	free(t->lines);
	t->lines = NULL;
	free(t->fresh_list);
	t->fresh_list = NULL;
}

static uint64_t head_epoch(struct tx *t)
{
	const struct kura_log_head *h = media_ptr(t->m, t->log_off);
	return __atomic_load_n(&h->epoch, __ATOMIC_ACQUIRE);
}

uint64_t tx_head_epoch(struct tx *t)
{
	return head_epoch(t);
}

static void retire_records(struct tx *t)
{
	uint64_t at = t->log_off + offsetof(struct kura_log_head, epoch);
	media_store64(t->m, at, head_epoch(t) + 1);
	media_persist(t->m, at, 8);
}

int tx_recover(struct tx *t)
{
	struct media *m = t->m;
	uint64_t epoch = head_epoch(t);
	uint64_t pos = t->log_off + sizeof(struct kura_log_head);
	uint64_t *recs = NULL;
	size_t n = 0, cap = 0;
	while (pos + sizeof(struct kura_log_rec) <= t->log_end) {
		const struct kura_log_rec *r = media_ptr(m, pos);
		uint32_t len = rec_len(r);
		if (r->epoch != epoch || len == 0 || len > t->log_end - pos - sizeof *r || r->off >= m->size ||
		    len > m->size - r->off)
			break;
		/* Nothing is ever logged in the superblocks or in the log itself:
		 * a record aimed there is damage, and replaying one into the log
		 * could rewrite the records still to be replayed. */
		if (r->off < 2ull * KURA_BLOCK || (r->off < t->log_end && r->off + len > t->log_off))
			break;
		if (!(r->len & REC_ORDERED) && rec_crc(r, r + 1) != r->crc)
			break;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			uint64_t *nr = realloc(recs, cap * sizeof *nr);
			if (!nr) {
				free(recs);
				return -ENOMEM;
			}
			recs = nr;
		}
		recs[n++] = pos;
		pos += rec_size(len);
	}
	if (n == 0) {
		free(recs);
		return 0;
	}
	media_mark(m, 'R', n);
	for (size_t i = n; i-- > 0;) {
		const struct kura_log_rec *r = media_ptr(m, recs[i]);
		media_store(m, r->off, r + 1, rec_len(r));
		media_flush(m, r->off, rec_len(r));
	}
	media_fence(m);
	retire_records(t);
	free(recs);
	return (int)n;
}

void tx_begin(struct tx *t)
{
	t->active = 1;
	t->err = 0;
	t->records = 0;
	t->need_fence = 0;
	t->tail = t->log_off + sizeof(struct kura_log_head);
	t->ndirty_list = 0;
	t->nfresh_list = 0;
	t->commit_lsn = 0;
	t->logged.n = t->dirty.n = t->fresh.n = 0;
	if (++t->stamp == 0) {
		/* The stamp wrapped: old entries could look current. */
		u64set_free(&t->logged);
		u64set_free(&t->dirty);
		u64set_free(&t->fresh);
		t->stamp = 1;
	}
	t->epoch = head_epoch(t);
	t->track_lines = t->j || t->m->kind == KURA_PERSIST_PMEM;
	t->nlines = 0;
	media_mark(t->m, 'B', 0);
}

void tx_fail(struct tx *t, int err)
{
	if (!t->err)
		t->err = err;
}

void tx_mark_fresh(struct tx *t, uint64_t block)
{
	int created;
	if (!u64set_get(&t->fresh, t->stamp, block, &created))
		tx_fail(t, -ENOMEM);
	/* It was free, so no map shows it. */
	if (t->j)
		journal_forget_map(t->j, block);
}

void tx_forget_contents(struct tx *t, uint64_t block)
{
	if (t->j)
		journal_forget_contents(t->j, block);
}

int tx_has_cheap_blocks(const struct tx *t)
{
	return t->j && !t->j->sync_each_op;
}

uint64_t tx_cheap_word(struct tx *t, uint64_t w)
{
	return t->j ? journal_cheap_word(t->j, w) : ~0ull;
}

uint64_t tx_in_place_room(struct tx *t)
{
	/* A journal record must hold what changes in place (the large path
	 * takes only fresh blocks home); the undo log takes a record per
	 * 64-byte line, with its head.  Half of either leaves room for the
	 * rest of the transaction, less what it changed in place already: a
	 * commit of several groups asks once per group. */
	if (t->j) {
		uint64_t used = 0, half = t->j->cap / 2;
		for (size_t i = 0; i < t->ndirty_list; i++) {
			uint64_t b = t->dirty_list[i];
			const uint64_t *logged = u64set_get(&t->logged, t->stamp, b, NULL);
			if (logged)
				used += (uint64_t)__builtin_popcountll(*logged) * (MEDIA_LINE + 16);
		}
		return used < half ? half - used : 0;
	}
	uint64_t left = t->log_end > t->tail ? t->log_end - t->tail : 0;
	return left / 2 / rec_size(64) * 64;
}

int tx_is_fresh(struct tx *t, uint64_t block)
{
	return u64set_get(&t->fresh, t->stamp, block, NULL) != NULL;
}

/* The log is stored to through the map like the rest of the pool, and a
 * working copy's log (journal.c) starts as a hole. */
static int back_log(struct tx *t, uint64_t end)
{
	const uint64_t chunk = 1ull << MEDIA_BACK_SHIFT;
	uint64_t to = (end + chunk - 1) & ~(chunk - 1);
	int err = media_back(t->m, t->log_backed, (to < t->log_end ? to : t->log_end) - t->log_backed, MEDIA_FILL_STORES);
	if (err)
		tx_fail(t, err);
	else
		t->log_backed = to;
	return err;
}

static void append_record(struct tx *t, uint64_t off, uint32_t len)
{
	uint64_t need = rec_size(len);
	if (t->tail + need > t->log_end) {
		tx_fail(t, -ENOSPC);
		return;
	}
	if (__builtin_expect(t->tail + need > t->log_backed, 0) && back_log(t, t->tail + need))
		return;
	struct kura_log_rec r = { .off = off, .epoch = t->epoch, .len = len };
	if (t->ordered) {
		/* The data, then the head's place and length, then its epoch,
		 * which makes the record valid, in one 8-byte store: a process
		 * killed between two stores of a head must not leave one that
		 * reads as valid with the length or place of the record that
		 * lay there before (which an inline copy of the whole head, in
		 * two stores, did).  The compiler keeps the order; x86 does.
		 * The length and the (unused) crc go as one word made in a
		 * register: read back from a struct just stored in halves, it
		 * stalled store forwarding, a tenth of the time spent here. */
		_Static_assert(offsetof(struct kura_log_rec, crc) == offsetof(struct kura_log_rec, len) + 4,
			       "len and crc share a word");
		media_store_lines(t->m, t->tail + sizeof r, media_ptr(t->m, off), len);
		asm volatile("" ::: "memory");
		media_store64(t->m, t->tail + offsetof(struct kura_log_rec, off), off);
		media_store64(t->m, t->tail + offsetof(struct kura_log_rec, len), (uint64_t)(len | REC_ORDERED));
		asm volatile("" ::: "memory");
		media_store64(t->m, t->tail + offsetof(struct kura_log_rec, epoch), r.epoch);
	} else {
		r.crc = rec_crc(&r, media_ptr(t->m, off));
		media_store(t->m, t->tail, &r, sizeof r);
		media_store_lines(t->m, t->tail + sizeof r, media_ptr(t->m, off), len);
	}
	media_flush(t->m, t->tail, sizeof r + len);
	t->tail += need;
	t->records++;
	t->need_fence = 1;
}

/* Lines first..last (numbers within one block, 0..63) as a mask. */
static inline uint64_t line_mask(unsigned first, unsigned last)
{
	return (last == 63 ? ~0ull : (2ull << last) - 1) & ~((1ull << first) - 1);
}

static int list_changed(struct tx *t, uint64_t b)
{
	if (t->ndirty_list == t->cap_dirty_list) {
		size_t cap = t->cap_dirty_list ? t->cap_dirty_list * 2 : 64;
		uint64_t *n = realloc(t->dirty_list, cap * sizeof *n);
		if (!n) {
			tx_fail(t, -ENOMEM);
			return -1;
		}
		t->dirty_list = n;
		t->cap_dirty_list = cap;
	}
	t->dirty_list[t->ndirty_list++] = b;
	return 0;
}

/* Notes lines first..last (pool line numbers) as changed, and snapshots
 * those not yet logged, as runs of adjacent lines so one record covers a
 * run.  Lines are tracked as a mask per block: one lookup for a write
 * however many lines it spans.  A block's changed lines are its logged
 * ones (each is logged before it changes), so one set holds both; a fresh
 * block, which needs no snapshot, has its changed lines in another. */
static void note_and_snapshot(struct tx *t, uint64_t first, uint64_t last)
{
	const unsigned per_block = KURA_BLOCK / MEDIA_LINE;
	for (uint64_t b = first / per_block; b <= last / per_block; b++) {
		int fresh = t->fresh.n && tx_is_fresh(t, b), created;
		if (fresh && !t->track_lines)
			continue;
		uint64_t *lines = u64set_get(fresh ? &t->dirty : &t->logged, t->stamp, b, &created);
		if (!lines) {
			tx_fail(t, -ENOMEM);
			return;
		}
		if (created && t->track_lines && list_changed(t, b))
			return;
		uint64_t mask = line_mask(b == first / per_block ? (unsigned)(first % per_block) : 0,
					  b == last / per_block ? (unsigned)(last % per_block) : per_block - 1);
		uint64_t need = fresh ? 0 : mask & ~*lines;
		*lines |= mask;
		while (need) {
			unsigned at = (unsigned)__builtin_ctzll(need);
			uint64_t run = need >> at;
			unsigned n = ~run ? (unsigned)__builtin_ctzll(~run) : 64 - at;
			append_record(t, block_start(b) + at * MEDIA_LINE, n * MEDIA_LINE);
			need &= n + at >= 64 ? 0 : ~0ull << (at + n);
		}
		if (t->err)
			return;
	}
}

/* A changed block's lines: logged, or changed in place while fresh. */
static uint64_t changed_lines(struct tx *t, uint64_t b)
{
	const uint64_t *m = u64set_get(&t->logged, t->stamp, b, NULL);
	if (!m)
		m = u64set_get(&t->dirty, t->stamp, b, NULL);
	return m ? *m : 0;
}

/* The changed lines, block by block in the order first written, each
 * block's in ascending order (so the journal finds adjacent runs). */
static int dirty_lines(struct tx *t)
{
	t->nlines = 0;
	for (size_t i = 0; i < t->ndirty_list; i++) {
		uint64_t b = t->dirty_list[i], mask = changed_lines(t, b);
		if (t->nlines + 64 > t->cap_lines) {
			size_t cap = t->cap_lines ? t->cap_lines * 2 : 256;
			uint64_t *n = realloc(t->lines, cap * sizeof *n);
			if (!n)
				return -ENOMEM;
			t->lines = n;
			t->cap_lines = cap;
		}
		for (; mask; mask &= mask - 1)
			t->lines[t->nlines++] = b * (KURA_BLOCK / MEDIA_LINE) + (unsigned)__builtin_ctzll(mask);
	}
	return 0;
}

/* The snapshot must be durable before the line it protects may change. */
int tx_prepare(struct tx *t, uint64_t off, size_t len)
{
	if (!len || t->err)
		return 0;
	/* Operations write the same few lines again and again (an inode's
	 * fields, a bucket's head): a line prepared lately is logged (or
	 * fresh) and listed dirty already, so skip both set lookups. */
	uint64_t line = off / MEDIA_LINE, last = (off + len - 1) / MEDIA_LINE;
	struct tx_recent *rc = &t->recent[line % TX_RECENT];
	if (last == line && rc->line == line + 1 && rc->stamp == t->stamp)
		return 1;
	note_and_snapshot(t, line, last);
	if (t->err)
		return 0;
	if (t->need_fence) {
		media_fence(t->m);
		t->need_fence = 0;
	}
	for (uint64_t l = line; l <= last; l++)
		t->recent[l % TX_RECENT] = (struct tx_recent){ .line = l + 1, .stamp = t->stamp };
	return 1;
}

void tx_memset(struct tx *t, uint64_t off, int c, size_t len)
{
	if (tx_prepare(t, off, len))
		media_memset(t->m, off, c, len);
}

static void note_fresh(struct tx *t, uint64_t off, size_t len, int zero)
{
	if (!t->j)
		return;
	if (t->nfresh_list == t->cap_fresh_list) {
		size_t cap = t->cap_fresh_list ? t->cap_fresh_list * 2 : 64;
		struct jrange *n = realloc(t->fresh_list, cap * sizeof *n);
		if (!n) {
			tx_fail(t, -ENOMEM);
			return;
		}
		t->fresh_list = n;
		t->cap_fresh_list = cap;
	}
	t->fresh_list[t->nfresh_list++] = (struct jrange){ .off = off, .len = len, .zero = zero };
}

void tx_note_changed(struct tx *t, uint64_t off, size_t len)
{
	if (t->err || !len)
		return;
	if (t->j)
		note_fresh(t, off, len, 0);
	else
		media_flush(t->m, off, len);
}

void tx_copy_fresh(struct tx *t, uint64_t off, const void *src, size_t len)
{
	if (!t->err && len) {
		media_copy_nt(t->m, off, src, len);
		/* The journal takes fresh blocks one at a time, however copied. */
		for (size_t done = 0; done < len; done += KURA_BLOCK)
			note_fresh(t, off + done, len - done < KURA_BLOCK ? len - done : KURA_BLOCK, 0);
	}
}

void tx_zero_fresh(struct tx *t, uint64_t off, size_t len, int data)
{
	if (!t->err && len) {
		if (data)
			media_zero(t->m, off, len);
		else
			media_memset(t->m, off, 0, len);
		media_flush(t->m, off, len);
		note_fresh(t, off, len, 1);
	}
}

static void finish(struct tx *t)
{
	t->active = 0;
	media_mark(t->m, 'E', 0);
}

void tx_abort(struct tx *t)
{
	if (t->records) {
		/* Our own records are valid log records: recovery undoes exactly them. */
		media_fence(t->m);
		tx_recover(t);
	}
	finish(t);
}

/* ---- the journal's view of a committing transaction ----------------------- */

static int jt_is_fresh(void *ctx, uint64_t block)
{
	return tx_is_fresh(ctx, block);
}

/* block as it was before this transaction: the copy, with this
 * transaction's undo records laid back over it.  A line is logged once per
 * transaction, so the records are disjoint and their order does not matter. */
static void jt_committed(void *ctx, uint64_t block, void *buf)
{
	struct tx *t = ctx;
	uint64_t lo = block << KURA_BLOCK_SHIFT, hi = lo + KURA_BLOCK;
	memcpy(buf, media_ptr(t->m, lo), KURA_BLOCK);
	for (uint64_t at = t->log_off + sizeof(struct kura_log_head); at < t->tail;) {
		const struct kura_log_rec *r = media_ptr(t->m, at);
		uint64_t len = rec_len(r);
		if (r->off < hi && r->off + len > lo) {
			uint64_t s = r->off > lo ? r->off : lo, e = r->off + len < hi ? r->off + len : hi;
			memcpy((char *)buf + (s - lo), (const char *)(r + 1) + (s - r->off), e - s);
		}
		at += rec_size((uint32_t)len);
	}
}

static int jt_touched(void *ctx, uint64_t block)
{
	struct tx *t = ctx;
	return u64set_get(&t->logged, t->stamp, block, NULL) != NULL;
}

static int journal_stage(struct tx *t)
{
	struct jtx jt = { .lines = t->lines, .nlines = t->nlines, .fresh = t->fresh_list,
			  .nfresh = t->nfresh_list, .undo_epoch = t->epoch, .is_fresh = jt_is_fresh,
			  .committed = jt_committed, .touched = jt_touched, .ctx = t };
	return journal_commit(t->j, &jt);
}

int tx_commit(struct tx *t)
{
	if (!t->err && t->track_lines && dirty_lines(t))
		tx_fail(t, -ENOMEM);
	if (t->err) {
		int err = t->err;
		tx_abort(t);
		return err;
	}
	if (t->j) {
		/* The copy is memory: nothing to flush.  The record is staged,
		 * then the undo records retire, which is the commit point in the
		 * copy (journal_repair tells the two apart for a dead holder),
		 * then the record counts.  A transaction that changed nothing
		 * still commits when the journal must seal (a map came to a
		 * pending block: journal_mark_dirty). */
		int stage = t->nlines || t->nfresh_list || t->j->seal_first;
		int err = stage ? journal_stage(t) : 0;
		if (err) {
			tx_abort(t);
			return err;
		}
		if (stage) {
			retire_records(t);
			t->commit_lsn = journal_publish(t->j);
		}
		finish(t);
		return 0;
	}
	/* Starting at 1 under FAULT_DROP_FLUSH loses one flush (crash tests only). */
	for (size_t i = kura_fault == FAULT_DROP_FLUSH; i < t->nlines && t->m->kind == KURA_PERSIST_PMEM; i++)
		media_flush(t->m, t->lines[i] * MEDIA_LINE, MEDIA_LINE);
	media_fence(t->m);
	if (t->records)
		retire_records(t);
	finish(t);
	return 0;
}
