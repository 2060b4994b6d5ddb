/* tx.c — undo-log transactions (see tx.h for the protocol). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "crc.h"
#include "fault.h"
#include "layout.h"
#include "tx.h"

/* ---- a set of u64 keys emptied by bumping a stamp ---------------------- */

static size_t slot_of(uint64_t k, size_t cap)
{
	k *= 0x9e3779b97f4a7c15ull;
	return (size_t)(k >> 17) & (cap - 1);
}

static int set_grow(struct u64set *s, uint32_t stamp)
{
	size_t cap = s->cap ? s->cap * 2 : 1024;
	uint64_t *keys = calloc(cap, sizeof *keys);
	uint32_t *stamps = calloc(cap, sizeof *stamps);
	if (!keys || !stamps) {
		free(keys);
		free(stamps);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->cap; i++) {
		if (s->stamps[i] != stamp)
			continue;
		size_t j = slot_of(s->keys[i], cap);
		while (stamps[j] == stamp)
			j = (j + 1) & (cap - 1);
		keys[j] = s->keys[i];
		stamps[j] = stamp;
	}
	free(s->keys);
	free(s->stamps);
	s->keys = keys;
	s->stamps = stamps;
	s->cap = cap;
	return 0;
}

static int set_has(const struct u64set *s, uint32_t stamp, uint64_t k)
{
	if (!s->cap)
		return 0;
	for (size_t j = slot_of(k, s->cap);; j = (j + 1) & (s->cap - 1)) {
		if (s->stamps[j] != stamp)
			return 0;
		if (s->keys[j] == k)
			return 1;
	}
}

/* 1 if added, 0 if present, -ENOMEM. */
static int set_add(struct u64set *s, uint32_t stamp, uint64_t k)
{
	if ((s->n + 1) * 2 > s->cap && set_grow(s, stamp))
		return -ENOMEM;
	for (size_t j = slot_of(k, s->cap);; j = (j + 1) & (s->cap - 1)) {
		if (s->stamps[j] != stamp) {
			s->stamps[j] = stamp;
			s->keys[j] = k;
			s->n++;
			return 1;
		}
		if (s->keys[j] == k)
			return 0;
	}
}

static void set_free(struct u64set *s)
{
	free(s->keys);
	free(s->stamps);
	memset(s, 0, sizeof *s);
}

/* ---- log records -------------------------------------------------------- */

static uint32_t rec_crc(const struct kura_log_rec *r, const void *data)
{
	uint32_t c = crc32c(0, &r->off, 8);
	c = crc32c(c, &r->epoch, 8);
	c = crc32c(c, &r->len, 4);
	return crc32c(c, data, r->len);
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
	t->stamp = 1;
}

void tx_destroy(struct tx *t)
{
	set_free(&t->logged);
	set_free(&t->dirty);
	set_free(&t->fresh);
	free(t->dirty_list);
	t->dirty_list = NULL;
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
		if (r->epoch != epoch || r->len == 0 || r->len > t->log_end - pos - sizeof *r ||
		    r->off >= m->size || r->len > m->size - r->off)
			break;
		/* Nothing is ever logged in the superblocks or in the log itself:
		 * a record aimed there is damage, and replaying one into the log
		 * could rewrite the records still to be replayed. */
		if (r->off < 2ull * KURA_BLOCK || (r->off < t->log_end && r->off + r->len > t->log_off))
			break;
		if (rec_crc(r, r + 1) != r->crc)
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
		pos += rec_size(r->len);
	}
	if (n == 0) {
		free(recs);
		return 0;
	}
	media_mark(m, 'R', n);
	for (size_t i = n; i-- > 0;) {
		const struct kura_log_rec *r = media_ptr(m, recs[i]);
		media_store(m, r->off, r + 1, r->len);
		media_flush(m, r->off, r->len);
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
		set_free(&t->logged);
		set_free(&t->dirty);
		set_free(&t->fresh);
		t->stamp = 1;
	}
	t->epoch = head_epoch(t);
	media_mark(t->m, 'B', 0);
}

void tx_fail(struct tx *t, int err)
{
	if (!t->err)
		t->err = err;
}

void tx_mark_fresh(struct tx *t, uint64_t block)
{
	if (set_add(&t->fresh, t->stamp, block) < 0)
		tx_fail(t, -ENOMEM);
}

int tx_is_fresh(struct tx *t, uint64_t block)
{
	return set_has(&t->fresh, t->stamp, block);
}

static void append_record(struct tx *t, uint64_t off, uint32_t len)
{
	uint64_t need = rec_size(len);
	if (t->tail + need > t->log_end) {
		tx_fail(t, -ENOSPC);
		return;
	}
	struct kura_log_rec r = { .off = off, .epoch = t->epoch, .len = len };
	r.crc = rec_crc(&r, media_ptr(t->m, off));
	media_store(t->m, t->tail, &r, sizeof r);
	media_store(t->m, t->tail + sizeof r, media_ptr(t->m, off), len);
	media_flush(t->m, t->tail, sizeof r + len);
	t->tail += need;
	t->records++;
	t->need_fence = 1;
}

/* Snapshots the lines of [off, off+len) not yet logged and not fresh, as
 * runs of adjacent lines so one record covers a run. */
static void snapshot(struct tx *t, uint64_t off, size_t len)
{
	uint64_t first = off / MEDIA_LINE, last = (off + len - 1) / MEDIA_LINE;
	uint64_t run_start = 0, run_len = 0;
	for (uint64_t l = first; l <= last && !t->err; l++) {
		int need = !tx_is_fresh(t, (l * MEDIA_LINE) >> KURA_BLOCK_SHIFT);
		if (need) {
			int added = set_add(&t->logged, t->stamp, l);
			if (added < 0)
				tx_fail(t, -ENOMEM);
			need = added == 1;
		}
		if (need) {
			if (!run_len)
				run_start = l;
			run_len++;
		}
		if (run_len && (!need || l == last)) {
			append_record(t, run_start * MEDIA_LINE, (uint32_t)(run_len * MEDIA_LINE));
			run_len = 0;
		}
	}
}

static void note_dirty(struct tx *t, uint64_t off, size_t len)
{
	uint64_t first = off / MEDIA_LINE, last = (off + len - 1) / MEDIA_LINE;
	for (uint64_t l = first; l <= last; l++) {
		int added = set_add(&t->dirty, t->stamp, l);
		if (added < 0) {
			tx_fail(t, -ENOMEM);
			return;
		}
		if (!added)
			continue;
		if (t->ndirty_list == t->cap_dirty_list) {
			size_t cap = t->cap_dirty_list ? t->cap_dirty_list * 2 : 256;
			uint64_t *n = realloc(t->dirty_list, cap * sizeof *n);
			if (!n) {
				tx_fail(t, -ENOMEM);
				return;
			}
			t->dirty_list = n;
			t->cap_dirty_list = cap;
		}
		t->dirty_list[t->ndirty_list++] = l;
	}
}

/* The snapshot must be durable before the line it protects may change. */
static int prepare(struct tx *t, uint64_t off, size_t len)
{
	if (!len || t->err)
		return 0;
	snapshot(t, off, len);
	if (t->err)
		return 0;
	if (t->need_fence) {
		media_fence(t->m);
		t->need_fence = 0;
	}
	note_dirty(t, off, len);
	return !t->err;
}

void tx_write(struct tx *t, uint64_t off, const void *src, size_t len)
{
	if (prepare(t, off, len))
		media_store(t->m, off, src, len);
}

void tx_write64(struct tx *t, uint64_t off, uint64_t value)
{
	if (prepare(t, off, 8))
		media_store64(t->m, off, value);
}

void tx_memset(struct tx *t, uint64_t off, int c, size_t len)
{
	if (prepare(t, off, len))
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

void tx_copy_fresh(struct tx *t, uint64_t off, const void *src, size_t len)
{
	if (!t->err && len) {
		media_copy_nt(t->m, off, src, len);
		note_fresh(t, off, len, 0);
	}
}

void tx_zero_fresh(struct tx *t, uint64_t off, size_t len)
{
	if (!t->err && len) {
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
		if (r->off < hi && r->off + r->len > lo) {
			uint64_t s = r->off > lo ? r->off : lo, e = r->off + r->len < hi ? r->off + r->len : hi;
			memcpy((char *)buf + (s - lo), (const char *)(r + 1) + (s - r->off), e - s);
		}
		at += rec_size(r->len);
	}
}

static int journal_stage(struct tx *t)
{
	struct jtx jt = { .lines = t->dirty_list, .nlines = t->ndirty_list, .fresh = t->fresh_list,
			  .nfresh = t->nfresh_list, .undo_epoch = t->epoch, .is_fresh = jt_is_fresh,
			  .committed = jt_committed, .ctx = t };
	return journal_commit(t->j, &jt);
}

int tx_commit(struct tx *t)
{
	if (t->err) {
		int err = t->err;
		tx_abort(t);
		return err;
	}
	if (t->j) {
		/* The copy is memory: nothing to flush.  The record is staged,
		 * then the undo records retire, which is the commit point in the
		 * copy (journal_repair tells the two apart for a dead holder),
		 * then the record counts. */
		int err = (t->ndirty_list || t->nfresh_list) ? journal_stage(t) : 0;
		if (err) {
			tx_abort(t);
			return err;
		}
		if (t->ndirty_list || t->nfresh_list) {
			retire_records(t);
			t->commit_lsn = journal_publish(t->j);
		}
		finish(t);
		return 0;
	}
	/* Starting at 1 under FAULT_DROP_FLUSH loses one flush (crash tests only). */
	for (size_t i = kura_fault == FAULT_DROP_FLUSH; i < t->ndirty_list; i++)
		media_flush(t->m, t->dirty_list[i] * MEDIA_LINE, MEDIA_LINE);
	media_fence(t->m);
	if (t->records)
		retire_records(t);
	finish(t);
	return 0;
}
