/* journal_checkpoint.c — checkpoints: the journal's records retired once
 * every block they touched is home (see journal.h and journal_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fault.h"
#include "journal_int.h"

static int map_shown(const struct journal *j, uint64_t b)
{
	return bit(j->map_stores, b) && kura_fault != FAULT_MAP_HOME_UNRECORDED; /* injected bug: crash tests only */
}

/* Every dirty block goes home as the last committed transaction left it
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
		const uint64_t *hit = bsearch(&b, r->blocks, r->n, sizeof *r->blocks, jn_cmp_block);
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
			err = media_disk_write(j->m, carry[i] << KURA_BLOCK_SHIFT, jn_seal_view(j, t, carry[i]), KURA_BLOCK);
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
		jn_put_item_from(j, &at, carry[i] << KURA_BLOCK_SHIFT, KURA_BLOCK, 0, jn_seal_view(j, t, carry[i]));
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
		memcpy((uint8_t *)j->home_used + done, jn_seal_view(j, t, (j->bitmap_off + done) >> KURA_BLOCK_SHIFT),
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
			if ((err = read_home(j, b, buf)) || !memcmp(buf, jn_seal_view(j, t, b), KURA_BLOCK))
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

