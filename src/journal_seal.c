/* journal_seal.c — the pending set of fsync mode and its seals (see
 * journal.h and journal_int.h). */
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
			/* Its home, if written behind, is older now.  Cleared
			 * here, with the lines, by the commit that changed it:
			 * until then a holder that dies is rolled back to the
			 * bytes the home holds. */
			if (kura_fault != FAULT_BEHIND_STALE) /* an injected bug: crash tests only */
				j->behind[b / 64] &= ~(1ull << (b % 64));
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
const uint8_t *jn_seal_view(struct journal *j, const struct jtx *t, uint64_t b)
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

int jn_cmp_block(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int written_behind(const struct journal *j, uint64_t b)
{
	return bit(j->behind, b) && !bit(j->map_stores, b);
}

/* Blocks of list[from, to) that go home, consecutive from list[i]: at most RUN. */
static uint64_t home_run(const struct journal *j, const uint64_t *home, uint64_t i, uint64_t to)
{
	uint64_t r = 1;
	while (r < 64 && i + r < to && bit(home, i + r) && j->pend_list[i + r] == j->pend_list[i] + r &&
	       !written_behind(j, j->pend_list[i + r]))
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
	qsort(j->pend_list, n, sizeof *j->pend_list, jn_cmp_block);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b = j->pend_list[i];
		if (b < j->nblocks && (!k || j->pend_list[k - 1] != b) && j->pend_mask[b]) {
			j->pend_list[k++] = b;
		}
	}
	__atomic_store_n(&c->pend_n, k, __ATOMIC_RELEASE);
	c->behind_n = 0; /* the list is in another order now */
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
			uint64_t b = j->pend_list[i], r = written_behind(j, b) ? 0 : t ? 1 : home_run(j, home, i, k);
			if (!r) {
				i++;
				continue;
			}
			err = media_disk_write(j->m, b << KURA_BLOCK_SHIFT, jn_seal_view(j, t, b), r * KURA_BLOCK);
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
		const uint8_t *v = jn_seal_view(j, t, b);
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
	__atomic_store_n(&c->seals, c->seals + 1, __ATOMIC_RELEASE); /* after staged: wait_for_fellow */
	jn_mark_sealed(j);
	/* Sealed.  A holder dying while this clears leaves masks that the next
	 * seal records again as they are then, which is harmless. */
	for (uint64_t i = 0; i < k; i++) {
		uint64_t b = j->pend_list[i];
		j->pend_mask[b] = 0;
		j->behind[b / 64] &= ~(1ull << (b % 64));
	}
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

/* Write-behind.  A block that may go home holds bytes no state a crash can
 * show links in, until the record of the seal that writes it there: it
 * may reach its home at any time before that.  Left to the seal, a large
 * pending set (a program writing a gigabyte without fsync) meant a seal
 * writing all of it while every operation waited; written behind, the
 * kernel takes it to the disk meanwhile and the seal only syncs.  A block
 * changed after it was written behind loses its mark in pend_range and
 * goes home again at the seal; a map may change a block without telling
 * kura, so blocks a map shows are left to the seal. */
void journal_write_behind(struct journal *j)
{
	struct jctl *c = j->ctl;
	if (j->sync_each_op)
		return;
	uint64_t n = __atomic_load_n(&c->pend_n, __ATOMIC_ACQUIRE), from = c->behind_n;
	if (n > j->pend_max)
		n = j->pend_max; /* shared memory a dead holder left: bounded */
	if (from > n)
		from = 0;
	if (n - from < j->behind_step)
		return;
	uint64_t lo = UINT64_MAX, hi = 0;
	for (uint64_t i = from; i < n;) {
		uint64_t b = j->pend_list[i], r = 0;
		/* The list holds blocks as they joined: a file written in order
		 * lists its blocks in order, and a run is one write. */
		while (i + r < n && j->pend_list[i + r] == b + r && b + r < j->nblocks && j->pend_mask[b + r] &&
		       !bit(j->behind, b + r) && !bit(j->map_stores, b + r) && may_go_home(j, b + r))
			r++;
		if (!r) {
			i++;
			continue;
		}
		if (media_disk_write(j->m, b << KURA_BLOCK_SHIFT, media_ptr(j->m, b << KURA_BLOCK_SHIFT), r * KURA_BLOCK))
			return; /* remembered in io_err; the seal tries again */
		for (uint64_t x = b; x < b + r; x++)
			j->behind[x / 64] |= 1ull << (x % 64);
		c->written_behind += r;
		lo = b < lo ? b : lo;
		hi = b + r > hi ? b + r : hi;
		i += r;
	}
	c->behind_n = n;
	if (hi)
		media_disk_start(j->m, lo << KURA_BLOCK_SHIFT, (hi - lo) << KURA_BLOCK_SHIFT);
}

void journal_forget_contents(struct journal *j, uint64_t block)
{
	/* The list keeps the block; a seal drops blocks left with no lines. */
	if (!j->sync_each_op && block < j->nblocks)
		j->pend_mask[block] = 0;
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
