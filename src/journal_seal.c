/* journal_seal.c — the pending set of fsync mode and its seals, and
 * checkpoints (see journal.h and journal_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fault.h"
#include "journal_int.h"

/* The most a block adds to a seal's record: every other line a run. */
#define BLOCK_RECORD_MAX (KURA_BLOCK + KURA_BLOCK / MEDIA_LINE / 2 * sizeof(struct kura_jitem))

static int may_go_home(const struct journal *j, uint64_t b)
{
	return b >= j->first_data && !bit(j->home_used, b) && !bit(j->journaled, b);
}

/* Room a seal may need beyond the pending estimate: the blocks it could
 * have written home, journaled after all because there are too few. */
uint64_t jn_seal_slack(const struct journal *j)
{
	return sizeof(struct kura_jrec) + (j->home_min - 1) * BLOCK_RECORD_MAX;
}

/* The lines of [off, off + len), which lies in one block. */
static uint64_t line_mask(uint64_t off, uint64_t len)
{
	uint64_t first = (off % KURA_BLOCK) / MEDIA_LINE, n = ((off + len - 1) % KURA_BLOCK) / MEDIA_LINE - first + 1;
	return (n == 64 ? ~0ull : (1ull << n) - 1) << first;
}

/* Counts (add 0) or adds to the pending set (add 1) the blocks of a range. */
static void pend_range(struct journal *j, uint64_t off, uint64_t len, int add, uint64_t *nnew, uint64_t *est)
{
	for (uint64_t end = off + len; off < end;) {
		uint64_t b = off >> KURA_BLOCK_SHIFT, stop = (b + 1) << KURA_BLOCK_SHIFT;
		if (stop > end)
			stop = end;
		uint64_t lines = line_mask(off, stop - off), fresh_lines = lines & ~j->pend_mask[b];
		if (!add) {
			/* A seal records a block's lines in runs: these lines add at
			 * most themselves and one run; a block a map showed goes
			 * whole (see seal). */
			*nnew += !j->pend_mask[b];
			if (may_go_home(j, b))
				;
			else if (bit(j->map_stores, b))
				*est += j->pend_mask[b] ? 0 : KURA_BLOCK + sizeof(struct kura_jitem);
			else if (fresh_lines)
				*est += (uint64_t)__builtin_popcountll(fresh_lines) * MEDIA_LINE + sizeof(struct kura_jitem);
		} else {
			/* Listed before its mask is set: a holder dying in between
			 * leaves a listed block with no lines, which a seal skips,
			 * never lines no seal will find. */
			if (!j->pend_mask[b]) {
				if (!j->ctl->pend_n)
					j->ctl->pend_since = now_ns();
				j->pend_list[j->ctl->pend_n] = b;
				__atomic_store_n(&j->ctl->pend_n, j->ctl->pend_n + 1, __ATOMIC_RELEASE);
			}
			j->pend_mask[b] |= lines;
			mark_dirty(j, off, stop - off);
		}
		off = stop;
	}
}

void jn_pend_tx(struct journal *j, const struct jtx *t, int add, uint64_t *nnew, uint64_t *est)
{
	*nnew = *est = 0;
	for (size_t i = 0; i < t->nfresh; i++)
		pend_range(j, t->fresh[i].off, t->fresh[i].len, add, nnew, est);
	FOR_EACH_LINE_RUN(t, off, len, pend_range(j, off, len, add, nnew, est));
}

int jn_pend_fits(const struct journal *j, uint64_t nnew, uint64_t est)
{
	return j->ctl->pend_n + nnew <= j->pend_max && j->ctl->staged + j->ctl->pend_est + est + jn_seal_slack(j) <= j->cap;
}

/* block as a seal records it: the copy, or, inside transaction t, as the
 * last committed transaction left it. */
static const uint8_t *seal_view(struct journal *j, const struct jtx *t, uint64_t b)
{
	if (!t)
		return media_ptr(j->m, b << KURA_BLOCK_SHIFT);
	t->committed(t->ctx, b, j->view);
	return j->view;
}

#define FOR_EACH_MASK_RUN(mask, first, n, body)                                                     \
	for (unsigned l_ = 0; l_ < 64;) {                                                            \
		if (!((mask) >> l_ & 1)) {                                                           \
			l_++;                                                                        \
			continue;                                                                    \
		}                                                                                    \
		unsigned e_ = l_;                                                                    \
		while (e_ < 64 && ((mask) >> e_ & 1))                                                \
			e_++;                                                                        \
		uint64_t first = l_, n = e_ - l_;                                                    \
		body;                                                                                \
		l_ = e_;                                                                             \
	}

static int cmp_block(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Blocks of list[from, to) that go home, consecutive from list[i]: at most RUN. */
static uint64_t home_run(const struct journal *j, const uint64_t *home, uint64_t i, uint64_t to)
{
	uint64_t r = 1;
	while (r < 64 && i + r < to && bit(home, i + r) && j->pend_list[i + r] == j->pend_list[i] + r)
		r++;
	return r;
}

/* The bytes of the record a seal makes of list[0, k), but the blocks in
 * home (NULL: none), which go home instead. */
static uint64_t seal_record_size(const struct journal *j, const uint64_t *home, uint64_t k)
{
	uint64_t need = sizeof(struct kura_jrec);
	for (uint64_t i = 0; i < k; i++)
		if (!home || !bit(home, i))
			FOR_EACH_MASK_RUN(j->pend_mask[j->pend_list[i]], f, nl, (void)f; need += item_size(nl * MEDIA_LINE, 0));
	return need;
}

/* Turns the pending set into one staged record (writing its fresh blocks
 * home first when there are enough of them); t is the transaction open
 * meanwhile, or NULL.  Under the pool mutex. */
static int line_is_zero(const uint8_t *p)
{
	uint64_t any = 0;
	for (unsigned i = 0; i < MEDIA_LINE; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		any |= w;
	}
	return !any;
}

/* Lines [f, f + n) of block b as items, runs of zero lines as zero items
 * with no bytes: a fresh block (a map node, a new file's tail) is mostly
 * zeros.  A zero line saves its 64 bytes for at most two 16-byte heads,
 * so the record never outgrows seal_record_size's estimate. */
static void put_lines(struct journal *j, uint64_t *at, uint64_t b, unsigned f, unsigned n, const uint8_t *v)
{
	for (unsigned i = f, end = f + n; i < end;) {
		int zero = line_is_zero(v + i * MEDIA_LINE);
		unsigned k = i + 1;
		while (k < end && line_is_zero(v + k * MEDIA_LINE) == zero)
			k++;
		jn_put_item_unmarked(j, at, (b << KURA_BLOCK_SHIFT) + i * MEDIA_LINE, (k - i) * MEDIA_LINE, zero,
				     v + i * MEDIA_LINE);
		i = k;
	}
}

int jn_seal(struct journal *j, const struct jtx *t)
{
	struct jctl *c = j->ctl;
	int err = 0;
	if (c->home_unsynced) {
		/* A seal died after writing blocks home: their pages are in the
		 * kernel's cache; they must be durable before any later record. */
		if ((err = media_disk_sync(j->m)))
			return err;
		c->home_unsynced = 0;
	}
	uint64_t n = c->pend_n < j->pend_max ? c->pend_n : j->pend_max, k = 0;
	if (!n)
		return 0;
	/* In block order, once each (a holder that died may have listed a
	 * block twice), blocks with no lines dropped. */
	qsort(j->pend_list, n, sizeof *j->pend_list, cmp_block);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b = j->pend_list[i];
		if (b < j->nblocks && (!k || j->pend_list[k - 1] != b) && j->pend_mask[b]) {
			j->pend_list[k++] = b;
		}
	}
	__atomic_store_n(&c->pend_n, k, __ATOMIC_RELEASE);
	uint64_t *home = calloc((k + 63) / 64 + 1, sizeof *home), nhome = 0;
	for (uint64_t i = 0; home && i < k; i++)
		if (may_go_home(j, j->pend_list[i])) {
			home[i / 64] |= 1ull << (i % 64);
			nhome++;
		}
	if (nhome < j->home_min)
		memset(home, 0, home ? ((k + 63) / 64 + 1) * sizeof *home : 0), nhome = 0;
	uint64_t need = seal_record_size(j, home, k), whole = 0;
	for (uint64_t i = 0; i < k; i++) {
		uint64_t b = j->pend_list[i];
		if ((!home || !bit(home, i)) && bit(j->map_stores, b) && ~j->pend_mask[b])
			whole += item_size(KURA_BLOCK, 0);
	}
	/* A map's stores are in the copy with no line of their own: some lines
	 * of such a block would tear the page the kernel writes whole, so the
	 * seal takes all of it, unless the whole blocks do not fit, which only
	 * a seal before a map exists should meet (journal_mark_dirty): its
	 * lines hold no store of the map yet. */
	if (whole && c->staged + need + whole <= j->cap) {
		for (uint64_t i = 0; i < k; i++)
			if ((!home || !bit(home, i)) && bit(j->map_stores, j->pend_list[i]))
				j->pend_mask[j->pend_list[i]] = ~0ull;
		need = seal_record_size(j, home, k);
	}
	if (c->staged + need > j->cap) {
		free(home); /* commit_lazy's bound keeps this from happening */
		return -ENOSPC;
	}
	/* Home first, and durable: nothing links these blocks in until the
	 * record, and from then on recovery reads them from home. */
	if (nhome) {
		c->home_unsynced = 1;
		for (uint64_t i = 0; i < k && !err;) {
			if (!bit(home, i)) {
				i++;
				continue;
			}
			uint64_t b = j->pend_list[i], r = t ? 1 : home_run(j, home, i, k);
			err = media_disk_write(j->m, b << KURA_BLOCK_SHIFT, seal_view(j, t, b), r * KURA_BLOCK);
			i += r;
		}
		/* FAULT_SEAL_HOME_EARLY: an injected bug (crash tests only) */
		if (!err && kura_fault != FAULT_SEAL_HOME_EARLY)
			err = media_disk_sync(j->m);
		if (err) {
			free(home);
			return err;
		}
		c->home_unsynced = 0;
		c->sealed_home += nhome;
	}
	uint64_t pos = c->staged, at = j->rec_off + pos + sizeof(struct kura_jrec);
	for (uint64_t i = 0; i < k; i++) {
		uint64_t b = j->pend_list[i];
		if (home && bit(home, i))
			continue;
		const uint8_t *v = seal_view(j, t, b);
		FOR_EACH_MASK_RUN(j->pend_mask[b], f, nl, put_lines(j, &at, b, (unsigned)f, (unsigned)nl, v));
	}
	free(home);
	jn_finish_record(j, pos, at, SEAL_UNDO_EPOCH);
	/* Only once the record counts may the sealed blocks no longer go home
	 * ahead of one.  Marked any earlier, a holder dying before it counted
	 * left them marked and still pending, estimated as going home: the
	 * next seal had to journal them, beyond what the estimate let fit in
	 * the journal, and failed with ENOSPC ever after (tests/death_test.c).
	 * Their homes then hold bytes no record links in, which a block free
	 * at the last checkpoint may: the next seal writes them again.  One
	 * dying after the record counts and before the marks are all set
	 * leaves "marking" for journal_repair to finish. */
	c->marking_from = pos;
	__atomic_store_n(&c->marking, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&c->staged, at - j->rec_off, __ATOMIC_RELEASE);
	c->seals++;
	jn_mark_sealed(j);
	/* Sealed.  A holder dying while this clears leaves masks that the next
	 * seal records again as they are then, which is harmless. */
	for (uint64_t i = 0; i < k; i++)
		j->pend_mask[j->pend_list[i]] = 0;
	c->pend_est = 0;
	__atomic_store_n(&c->pend_n, 0, __ATOMIC_RELEASE);
	return 0;
}

void jn_mark_sealed(struct journal *j)
{
	/* Bounded as the seal's own walk is: the list is shared memory that a
	 * dead holder left. */
	for (uint64_t i = 0; i < j->ctl->pend_n && i < j->pend_max; i++)
		if (j->pend_list[i] < j->nblocks)
			set_bits(j->journaled, j->pend_list[i] << KURA_BLOCK_SHIFT, KURA_BLOCK);
	__atomic_store_n(&j->ctl->marking, 0, __ATOMIC_RELEASE);
}

void journal_forget_contents(struct journal *j, uint64_t block)
{
	/* The list keeps the block; a seal drops blocks left with no lines. */
	if (!j->sync_each_op && block < j->nblocks)
		j->pend_mask[block] = 0;
}

int journal_rewrite_in_place(const struct journal *j, uint64_t block)
{
	return !j->sync_each_op && block < j->nblocks && may_go_home(j, block);
}

uint64_t journal_cheap_word(const struct journal *j, uint64_t w)
{
	return j->sync_each_op || w >= j->map_words ? ~0ull : ~j->home_used[w] & ~j->journaled[w];
}

int journal_sync_due(const struct journal *j)
{
	return !j->sync_each_op && __atomic_load_n(&j->ctl->pend_n, __ATOMIC_ACQUIRE) &&
	       now_ns() - __atomic_load_n(&j->ctl->pend_since, __ATOMIC_ACQUIRE) > JOURNAL_COMMIT_NS;
}

int journal_seal(struct journal *j)
{
	/* In op mode too: a process in fsync mode may share the pool. */
	return journal_pending(j) ? jn_seal(j, NULL) : 0;
}

int journal_pending(const struct journal *j)
{
	return __atomic_load_n(&j->ctl->pend_n, __ATOMIC_ACQUIRE) != 0;
}

static int map_shown(const struct journal *j, uint64_t b)
{
	return bit(j->map_stores, b) && kura_fault != FAULT_MAP_HOME_UNRECORDED; /* injected bug: crash tests only */
}

/* ---- checkpoints ------------------------------------------------------------

 * Every dirty block goes home as the last committed transaction left it
 * (t, when a transaction is open, gives those), then a new head retires the
 * records.  Order: records durable, homes durable, head.  A crash before
 * the head is durable replays the old epoch's records onto homes that
 * already hold their bytes, which changes nothing, provided that a home
 * holds no byte newer than the last record to touch it: every block written
 * home outside a record (write_fresh_home, a seal's home blocks) was
 * written before any record of the epoch touched it, so in each byte the
 * last record to touch it has the final say.
 *
 * A block a writable map has shown breaks that proviso: the map stores
 * into the copy without telling kura, so the copy may hold bytes that no
 * record carries, after records that touched the same page.  Written home
 * as the copy shows it, such a page would come back from a crash before
 * the head half old and half new: the records undo the bytes they cover
 * and leave the rest.  So it goes home as recovery would rebuild it (its
 * home as on the disk, then every record of the epoch in order), and, if
 * the copy shows it otherwise, it is carried: the new epoch's first record
 * takes it whole (carry_blocks).  A crash then shows the page as rebuilt or
 * as the copy showed it, never part of each, as the explorer's oracle for
 * a map write in flight demands (a page at a time).  A map may show a
 * block across epochs, so the mark stays until the block is allocated
 * again (journal_forget_map). */

struct rebuild {
	const uint64_t *blocks; /* ascending */
	size_t n;
	uint8_t *buf;           /* n blocks */
};

static void apply_rebuild(void *ctx, uint64_t off, const void *src, uint32_t len)
{
	const struct rebuild *r = ctx;
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++) {
		const uint64_t *hit = bsearch(&b, r->blocks, r->n, sizeof *r->blocks, cmp_block);
		if (!hit)
			continue;
		uint64_t start = b << KURA_BLOCK_SHIFT, from = off > start ? off : start,
			 to = off + len < start + KURA_BLOCK ? off + len : start + KURA_BLOCK;
		memcpy(r->buf + (size_t)(hit - r->blocks) * KURA_BLOCK + (from - start), (const uint8_t *)src + (from - off),
		       to - from);
	}
}

static int read_home(struct journal *j, uint64_t b, uint8_t *to)
{
	ssize_t n = pread(j->m->disk_fd, to, KURA_BLOCK, (off_t)(b << KURA_BLOCK_SHIFT));
	return n == KURA_BLOCK ? 0 : n < 0 ? -errno : -EIO;
}

/* Writes blocks home as recovery would rebuild them now. */
static int write_rebuilt(struct journal *j, const uint64_t *blocks, size_t n, uint8_t *buf)
{
	int err = 0;
	for (size_t i = 0; i < n && !err; i++)
		err = read_home(j, blocks[i], buf + i * KURA_BLOCK);
	if (err)
		return err;
	struct kura_super sb = region_super(j);
	struct rebuild r = { blocks, n, buf };
	jn_replay_region(&sb, media_ptr(j->m, j->head_off), j->ctl->epoch, apply_rebuild, &r);
	for (size_t i = 0; i < n && !err; i++)
		err = media_disk_write(j->m, blocks[i] << KURA_BLOCK_SHIFT, buf + i * KURA_BLOCK, KURA_BLOCK);
	return err;
}

/* Runs body for each dirty block b that a map has shown. */
#define FOR_EACH_MAP_SHOWN(j, b, body)                                                              \
	for (uint64_t w_ = 0; w_ < ((j)->nblocks + 63) / 64; w_++)                                  \
		for (uint64_t m_ = (j)->dirty[w_] & (j)->map_stores[w_]; m_; m_ &= m_ - 1) {        \
			uint64_t b = w_ * 64 + (uint64_t)__builtin_ctzll(m_);                       \
			if (b >= (j)->nblocks || !map_shown(j, b))                                  \
				continue;                                                           \
			body;                                                                       \
		}

/* The copy's view of carried blocks goes into the new epoch's first record
 * (a seal's kind: it belongs to no transaction), whole, so that a crash
 * shows each page as the copy showed it or as rebuilt, never part of one;
 * reserve is the room the caller needs after it.  Blocks that do not fit
 * stay dirty for the next checkpoint; with CARRY_HOME they go home instead
 * (the last unmount, after rounds that did not get them all in). */
#define CARRY_HOME UINT64_MAX
static int carry_blocks(struct journal *j, const struct jtx *t, const uint64_t *carry, size_t n, uint64_t reserve)
{
	int err = 0;
	if (reserve == CARRY_HOME) {
		for (size_t i = 0; i < n && !err; i++)
			err = media_disk_write(j->m, carry[i] << KURA_BLOCK_SHIFT, seal_view(j, t, carry[i]), KURA_BLOCK);
		return err ? err : media_disk_sync(j->m);
	}
	uint64_t pos = j->ctl->staged, used = pos + sizeof(struct kura_jrec) + reserve, k = 0;
	if (used < j->cap)
		k = (j->cap - used) / item_size(KURA_BLOCK, 0);
	if (k > n)
		k = n;
	for (size_t i = k; i < n; i++)
		mark_dirty(j, carry[i] << KURA_BLOCK_SHIFT, KURA_BLOCK);
	if (!k)
		return 0;
	uint64_t at = j->rec_off + pos + sizeof(struct kura_jrec);
	for (size_t i = 0; i < k; i++)
		jn_put_item_from(j, &at, carry[i] << KURA_BLOCK_SHIFT, KURA_BLOCK, 0, seal_view(j, t, carry[i]));
	jn_finish_record(j, pos, at, SEAL_UNDO_EPOCH);
	__atomic_store_n(&j->ctl->staged, at - j->rec_off, __ATOMIC_RELEASE);
	return 0;
}

/* The bitmap of the state a checkpoint writes home: which blocks are free
 * there, and so may go home ahead of a record this epoch. */
static void snapshot_bitmap(struct journal *j, const struct jtx *t)
{
	uint64_t bytes = j->map_words * 8;
	for (uint64_t done = 0; done < bytes; done += KURA_BLOCK)
		memcpy((uint8_t *)j->home_used + done, seal_view(j, t, (j->bitmap_off + done) >> KURA_BLOCK_SHIFT),
		       bytes - done < KURA_BLOCK ? bytes - done : KURA_BLOCK);
}

int jn_checkpoint(struct journal *j, const struct jtx *t, uint64_t reserve)
{
	enum { RUN = 64 };
	/* On the heap: static TLS this size would go into every thread of
	 * every program preloading kura, and fail the creation of threads
	 * with small stacks (glibc puts static TLS on the stack). */
	uint8_t *buf = malloc(RUN * KURA_BLOCK);
	if (!buf)
		return -ENOMEM;
	/* Every change in a record first: homes may take only journaled bytes. */
	int err = jn_seal(j, t);
	if (err) {
		free(buf);
		return err;
	}
	jn_lock_flush(j);
	err = jn_write_pending(j);
	for (uint64_t b = 0; b < j->nblocks && !err;) {
		if (!(j->dirty[b / 64] >> (b % 64) & 1) || map_shown(j, b)) {
			b = j->dirty[b / 64] >> (b % 64) ? b + 1 : (b | 63) + 1;
			continue;
		}
		uint64_t n = 0;
		int rebuilt = 0;
		while (b + n < j->nblocks && n < RUN && (j->dirty[(b + n) / 64] >> ((b + n) % 64) & 1) &&
		       !map_shown(j, b + n)) {
			rebuilt |= t && t->touched(t->ctx, b + n);
			n++;
		}
		/* Only a run the open transaction changed differs from the copy. */
		for (uint64_t i = 0; rebuilt && i < n; i++)
			t->committed(t->ctx, b + i, buf + i * KURA_BLOCK);
		err = media_disk_write(j->m, b << KURA_BLOCK_SHIFT, rebuilt ? buf : media_ptr(j->m, b << KURA_BLOCK_SHIFT),
				       n * KURA_BLOCK);
		b += n;
	}
	uint64_t shown[RUN];
	size_t nshown = 0;
	FOR_EACH_MAP_SHOWN(j, b, {
		if (err)
			break;
		shown[nshown++] = b;
		if (nshown == RUN) {
			err = write_rebuilt(j, shown, nshown, buf);
			nshown = 0;
		}
	});
	if (!err && nshown)
		err = write_rebuilt(j, shown, nshown, buf);
	/* FAULT_CHECKPOINT_EARLY: an injected bug (crash tests only) */
	if (!err && kura_fault != FAULT_CHECKPOINT_EARLY)
		err = media_disk_sync(j->m);
	if (!err) {
		struct kura_super sb = { .log_block = j->head_off / KURA_BLOCK };
		err = jn_write_head(j->m, &sb, j->ctl->epoch + 1, j->ctl->nonce);
	}
	uint64_t *carry = NULL;
	size_t ncarry = 0;
	if (!err) {
		/* Retired.  Which map-shown blocks the copy shows otherwise than
		 * their homes now hold: those are carried. */
		size_t cap = 0;
		FOR_EACH_MAP_SHOWN(j, b, {
			if (err)
				break;
			if ((err = read_home(j, b, buf)) || !memcmp(buf, seal_view(j, t, b), KURA_BLOCK))
				continue;
			if (ncarry == cap) {
				uint64_t *more = realloc(carry, (cap = cap ? cap * 2 : 16) * sizeof *carry);
				if (!more) {
					err = -ENOMEM;
					break;
				}
				carry = more;
			}
			carry[ncarry++] = b;
		});
		/* A carry that failed leaves the map-shown blocks dirty, for the
		 * next checkpoint to write home. */
		for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
			j->dirty[w] &= err ? j->map_stores[w] : 0;
		memset(j->journaled, 0, j->map_words * 8);
		snapshot_bitmap(j, t);
		j->ctl->lsn_base += j->ctl->staged;
		j->ctl->staged = j->ctl->durable = 0;
		j->ctl->epoch++;
		j->ctl->checkpoints++;
	}
	if (!err && ncarry)
		err = carry_blocks(j, t, carry, ncarry, reserve);
	free(carry);
	free(buf);
	jn_unlock_flush(j);
	return err;
}

static int carried_left(const struct journal *j)
{
	for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
		if (j->dirty[w] & j->map_stores[w])
			return 1;
	return 0;
}

int journal_checkpoint(struct journal *j)
{
	/* The last mount out removes the copy next: carried blocks must reach
	 * the disk.  Each round records those that fit and writes them home in
	 * the next, until a round carries none; a map storing all along (it
	 * cannot at the last unmount, but the bound does not rely on that)
	 * ends with them written home. */
	enum { ROUNDS = 8 };
	int err = jn_checkpoint(j, NULL, 0);
	for (int round = 1; !err && (j->ctl->staged || carried_left(j)); round++)
		err = jn_checkpoint(j, NULL, round < ROUNDS ? 0 : CARRY_HOME);
	return err;
}

