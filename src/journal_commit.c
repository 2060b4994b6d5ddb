/* journal_commit.c — staging records, group commit and syncs, and the
 * repair of a holder that died (see journal.h and journal_int.h). */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fault.h"
#include "journal_int.h"
#include "sighold.h"
#include "tracee.h"

void journal_mark_dirty(struct journal *j, uint64_t off, uint64_t len)
{
	/* A checkpoint writes the block home whatever a record carried.  A
	 * pending block that a map now shows must be sealed before the map
	 * can store into it: its pending lines hold a transaction's bytes now,
	 * but would hold some of the map's too by the time a seal took them,
	 * and some lines of a map's stores tear the page the kernel writes
	 * whole.  The map is made once this operation returns, so the commit
	 * that ends it seals first (commit_lazy); from then on the block is
	 * counted whole whenever it is pending. */
	if (!len)
		return;
	mark_dirty(j, off, len);
	for (uint64_t b = off >> KURA_BLOCK_SHIFT; b <= (off + len - 1) >> KURA_BLOCK_SHIFT; b++)
		if (!bit(j->map_stores, b)) {
			if (j->pend_mask[b])
				j->seal_first = 1;
			j->map_stores[b / 64] |= 1ull << (b % 64);
		}
}

void journal_forget_map(struct journal *j, uint64_t block)
{
	if (block < j->nblocks)
		j->map_stores[block / 64] &= ~(1ull << (block % 64));
}

void jn_put_item_unmarked(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero, const void *src)
{
	struct kura_jitem it = { .off = off, .len = (uint32_t)len, .flags = zero ? JITEM_ZERO : 0 };
	media_store(j->m, *at, &it, sizeof it);
	if (!zero) {
		media_store(j->m, *at + sizeof it, src, len);
		if (len % 8) {
			static const uint8_t pad[8];
			media_store(j->m, *at + sizeof it + len, pad, 8 - len % 8);
		}
	}
	*at += item_size(len, zero);
}

void jn_put_item_from(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero, const void *src)
{
	jn_put_item_unmarked(j, at, off, len, zero, src);
	mark_journaled(j, off, len);
}

static void put_item(struct journal *j, uint64_t *at, uint64_t off, uint64_t len, int zero)
{
	jn_put_item_from(j, at, off, len, zero, media_ptr(j->m, off));
}

void jn_finish_record(struct journal *j, uint64_t pos, uint64_t at, uint64_t undo_epoch)
{
	uint64_t start = j->rec_off + pos;
	struct kura_jrec r = { .epoch = j->ctl->epoch, .pos = pos, .undo_epoch = undo_epoch,
			       .len = (uint32_t)(at - start) };
	media_store(j->m, start, &r, sizeof r);
	r.crc = jn_rec_crc(media_ptr(j->m, start), r.len);
	media_store(j->m, start + offsetof(struct kura_jrec, crc), &r.crc, sizeof r.crc);
}

/* A transaction too large for the journal even when empty writes what it
 * put in fresh blocks home first: those blocks are free in the durable
 * state (a checkpoint just made everything durable), so nothing can see
 * them until the record that links them in, which then carries only the
 * lines changed in place. */
static int write_fresh_home(struct journal *j, const struct jtx *t)
{
	int err = 0;
	for (size_t i = 0; i < t->nfresh && !err; i++) {
		err = media_disk_write(j->m, t->fresh[i].off, media_ptr(j->m, t->fresh[i].off), t->fresh[i].len);
		set_bits(j->journaled, t->fresh[i].off, t->fresh[i].len);
	}
	/* Fresh blocks written home stay clean in the copy's dirty map. */
	FOR_EACH_LINE_RUN(t, off, len, {
		if (!err && t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT)) {
			err = media_disk_write(j->m, off, media_ptr(j->m, off), len);
			set_bits(j->journaled, off, len);
		}
	});
	return err ? err : media_disk_sync(j->m);
}

/* fsync mode: t's lines join the pending set, sealing or checkpointing
 * first when they would not fit.  1: t is too large for the set and takes
 * the path of op mode (the set is empty then, so the order holds). */
static int commit_lazy(struct journal *j, const struct jtx *t)
{
	if (j->seal_first) {
		int err = jn_seal(j, t);
		if (err)
			return err;
		j->seal_first = 0;
	}
	uint64_t nnew, est;
	jn_pend_tx(j, t, 0, &nnew, &est);
	if (!jn_pend_fits(j, nnew, est)) {
		int err = jn_seal(j, t);
		if (err)
			return err;
		jn_pend_tx(j, t, 0, &nnew, &est);
		if (!jn_pend_fits(j, nnew, est) && j->ctl->staged) {
			if ((err = jn_checkpoint(j, t, est + jn_seal_slack(j))))
				return err;
			jn_pend_tx(j, t, 0, &nnew, &est);
		}
		if (!jn_pend_fits(j, nnew, est))
			return 1;
	}
	/* The estimate first: a holder that dies mid-way leaves it too high. */
	__atomic_store_n(&j->ctl->pend_est, j->ctl->pend_est + est, __ATOMIC_RELEASE);
	jn_pend_tx(j, t, 1, &nnew, &est);
	j->pending_end = j->ctl->staged;
	return 0;
}

int journal_commit(struct journal *j, const struct jtx *t)
{
	if (!j->sync_each_op) {
		int r = commit_lazy(j, t);
		if (r <= 0)
			return r;
	} else if (journal_pending(j) && kura_fault != FAULT_MIXED_UNSEALED) { /* an injected bug: crash tests only */
		/* A process in fsync mode left changes pending: they come
		 * before this one, so they go into a record first (a crash must
		 * not keep this change and lose one it may build on). */
		int err = jn_seal(j, t);
		if (err)
			return err;
	}
	uint64_t need = sizeof(struct kura_jrec), in_place = need;
	for (size_t i = 0; i < t->nfresh; i++)
		need += item_size(t->fresh[i].len, t->fresh[i].zero);
	FOR_EACH_LINE_RUN(t, off, len, {
		need += item_size(len, 0);
		if (!t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT))
			in_place += item_size(len, 0);
	});
	int big = need > j->cap;
	if (big && in_place > j->cap)
		return -ENOSPC;
	uint64_t pos = j->ctl->staged;
	/* The large path must open a new epoch: see jn_checkpoint().  Its first
	 * record may carry blocks a map showed, but never blocks this
	 * transaction took fresh, which no map can show yet. */
	if (big || pos + need > j->cap) {
		int err = jn_checkpoint(j, t, big ? in_place : need);
		if (err)
			return err;
		pos = j->ctl->staged;
	}
	if (big) {
		int err = write_fresh_home(j, t);
		if (err)
			return err;
	}
	uint64_t start = j->rec_off + pos, at = start + sizeof(struct kura_jrec);
	if (!big)
		for (size_t i = 0; i < t->nfresh; i++)
			put_item(j, &at, t->fresh[i].off, t->fresh[i].len, t->fresh[i].zero);
	/* After the fresh ranges: a zeroed block's lines written since land on
	 * the zeros at replay. */
	FOR_EACH_LINE_RUN(t, off, len, {
		if (!big || !t->is_fresh(t->ctx, off >> KURA_BLOCK_SHIFT))
			put_item(j, &at, off, len, 0);
	});
	jn_finish_record(j, pos, at, t->undo_epoch);
	j->pending_end = at - j->rec_off;
	return 0;
}

uint64_t journal_publish(struct journal *j)
{
	__atomic_store_n(&j->ctl->staged, j->pending_end, __ATOMIC_RELEASE);
	__atomic_store_n(&j->ctl->published, j->ctl->published + 1, __ATOMIC_RELEASE);
	return j->ctl->lsn_base + j->pending_end;
}

/* Both under the pool mutex, so committing is 0 or 1 and exact: the holder
 * is inside an operation.  A holder that dies there is cleared by the next
 * one (took_lock in bracket.c), so the flag cannot stay set. */
void journal_enter(struct journal *j)
{
	__atomic_store_n(&j->ctl->committing, 1, __ATOMIC_RELAXED);
}

void journal_leave(struct journal *j)
{
	__atomic_store_n(&j->ctl->committing, 0, __ATOMIC_RELEASE);
}

/* Group commit.  An operation takes a few microseconds and a flush about a
 * hundred, so a flush that starts while another operation is under way
 * waits for it to stage its record: two committers then share one flush
 * instead of taking turns.  Bounded: a process that died in between, or
 * an operation longer than a flush, costs at most GROUP_WAIT_NS. */
#define GROUP_WAIT_NS 100000u
static void wait_for_committers(struct journal *j)
{
	if (!__atomic_load_n(&j->ctl->committing, __ATOMIC_ACQUIRE))
		return;
	uint64_t until = now_ns() + GROUP_WAIT_NS;
	while (__atomic_load_n(&j->ctl->committing, __ATOMIC_ACQUIRE) && now_ns() < until)
		__builtin_ia32_pause();
}

/* Group commit across operations.  Committers that take turns (two
 * processes each writing and waiting for its write) arrive a few
 * microseconds apart: the one that finds the flush free would write its
 * record alone, and the other's would wait for it and then go alone too,
 * one record per flush.  So when the last flush took several records, the
 * next waits, briefly, for as many: two committers then share every flush.
 * A committer alone never waits (its flushes take one record), and one
 * that stops costs one wait of GROUP_DELAY_NS before the batch shrinks. */
#define GROUP_DELAY_NS 40000u

/* One turn of a bounded wait for another committer, who may need this
 * core: a pause, and every 64th turn the CPU given up. */
static void spin_turn(unsigned turn)
{
	if (turn % 64 == 63)
		sched_yield();
	else
		__builtin_ia32_pause();
}

/* Until *count has gone want past since, or GROUP_DELAY_NS. */
static void wait_for_count(const uint64_t *count, uint64_t since, uint64_t want)
{
	uint64_t until = now_ns() + GROUP_DELAY_NS;
	for (unsigned spins = 0; __atomic_load_n(count, __ATOMIC_ACQUIRE) - since < want && now_ns() < until; spins++)
		spin_turn(spins);
}

static void wait_for_batch(struct journal *j)
{
	struct jctl *c = j->ctl;
	uint64_t want = __atomic_load_n(&c->last_batch, __ATOMIC_ACQUIRE);
	if (want >= 2)
		wait_for_count(&c->published, c->flushed, want);
}

/*
 * Group commit in fsync mode.  Two processes that each write and fsync
 * take turns at the flush: the one whose sync finds the flush free writes
 * its record alone, while the other, just back from the last flush, is
 * still writing, and then flushes its record alone in turn: 0.77 flushes
 * a sync, where fio's two jobs wrote 4 KiB at random and fsynced each.
 * So a sync that is to flush waits for a fellow's seal, briefly
 * (GROUP_DELAY_NS), when the last sync's flush was another thread's or
 * took two seals: the flush then takes both records, and the fellow finds
 * its own durable.  Seals, not threads in a sync, are what it counts: a
 * fellow whose record the last flush took may still be on its way out of
 * its sync.  A thread that syncs alone is the last flusher each time, its
 * flushes take one seal, and it never waits; one that stops syncing costs
 * the other one wait.  With lock_flush_unless_durable, the same two jobs:
 * 0.51 flushes a sync.  This disk took as long for a flush of two records
 * as for two of one (10.3k -> 10.7k syncs a second, medians of 4 runs
 * alternated with the old build); on a disk whose flush costs the same
 * whatever it carries, sharing should come near twice the syncs.
 */
static void wait_for_fellow(struct journal *j, uint32_t me)
{
	struct jctl *c = j->ctl;
	if (__atomic_load_n(&c->staged, __ATOMIC_ACQUIRE) > c->durable &&
	    (c->last_flusher != me || c->last_seals >= 2))
		wait_for_count(&c->seals, c->seals_flushed, 2);
}

/* With the flush mutex: the staged records not yet durable, one write and
 * one sync for all of them.  Direct I/O writes whole 512-byte sectors: the
 * first one again (its durable bytes unchanged, so a torn write cannot
 * harm them) and the last one with whatever lies past the staged end,
 * which recovery refuses (another epoch, a wrong pos or crc), or which is
 * a record being staged right now, whose transaction then merely counts as
 * in flight at the crash. */
int jn_write_pending(struct journal *j)
{
	if (j->sync_each_op) {
		wait_for_batch(j);
		wait_for_committers(j);
	}
	/* published before staged: a record published in between is taken
	 * but not counted, which only makes the next batch smaller. */
	uint64_t published = __atomic_load_n(&j->ctl->published, __ATOMIC_ACQUIRE);
	uint64_t end = __atomic_load_n(&j->ctl->staged, __ATOMIC_ACQUIRE);
	uint64_t from = j->ctl->durable, to = end;
	if (to <= from)
		return 0;
	if (j->m->dio_fd >= 0) {
		from &= ~511ull;
		to = (to + 511) & ~511ull;
	}
	int err = media_disk_write_sync(j->m, j->rec_off + from, media_ptr(j->m, j->rec_off + from), to - from);
	if (err)
		return err;
	__atomic_store_n(&j->ctl->durable, end, __ATOMIC_RELEASE);
	j->ctl->syncs++;
	if (published > j->ctl->flushed) {
		__atomic_store_n(&j->ctl->last_batch, published - j->ctl->flushed, __ATOMIC_RELEASE);
		j->ctl->flushed = published;
	}
	return 0;
}

/* A holder that died mid-checkpoint either wrote the new head or did not;
 * the disk says which, and finishing is then only bookkeeping. */
static void finish_dead_checkpoint(struct journal *j)
{
	uint8_t block[KURA_BLOCK];
	if (pread(j->m->disk_fd, block, sizeof block, (off_t)j->head_off) != sizeof block)
		return;
	const struct kura_journal_head *h = jn_current_head(block);
	if (h && h->epoch == j->ctl->epoch + 1 && media_disk_sync(j->m) == 0) {
		/* It may have died before writing the copy's view of the
		 * map-shown blocks home (see checkpoint): the next one does. */
		for (uint64_t w = 0; w < (j->nblocks + 63) / 64; w++)
			j->dirty[w] &= j->map_stores[w];
		memset(j->journaled, 0, j->map_words * 8);
		/* The bitmap it checkpointed is gone: no block goes home ahead
		 * of its record until the next checkpoint. */
		memset(j->home_used, 0xff, j->map_words * 8);
		j->ctl->lsn_base += j->ctl->staged;
		j->ctl->staged = j->ctl->durable = 0;
		j->ctl->epoch = h->epoch;
	}
}

/* Whether a lock attempt that returned r took the flush mutex; a holder
 * that died mid-checkpoint is finished first. */
static int took_flush(struct journal *j, int r)
{
	if (r == EOWNERDEAD) {
		finish_dead_checkpoint(j);
		pthread_mutex_consistent(&j->ctl->flush);
	}
	return r == 0 || r == EOWNERDEAD;
}

void jn_lock_flush(struct journal *j)
{
	sighold_enter();
	took_flush(j, tracee_robust_lock(&j->ctl->flush));
}

void jn_unlock_flush(struct journal *j)
{
	pthread_mutex_unlock(&j->ctl->flush);
	__atomic_add_fetch(&j->ctl->flush_seq, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&j->ctl->sleepers, __ATOMIC_ACQUIRE))
		syscall(SYS_futex, &j->ctl->flush_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	sighold_leave();
}

static int durable_past(const struct journal *j, uint64_t lsn)
{
	return __atomic_load_n(&j->ctl->durable, __ATOMIC_ACQUIRE) + j->ctl->lsn_base >= lsn;
}

/* A follower, whose record someone else's flush may carry, sleeps until
 * a flush ends instead of queueing on the flush mutex: the mutex is not
 * fair, and a thread that flushes, commits again and flushes again would
 * take it back before a queued follower woke, so the follower, its record
 * long durable, waited flush after flush.  The sleep is bounded (a holder
 * that died never bumps flush_seq; the robust mutex then tells trylock).
 * A leader that this thread traces and that is stopped in its write never
 * ends (tracee.h): the follower returns then without waiting (0), its
 * record durable with the next flush, as README's Current limits says. */
#define FOLLOWER_SPIN_NS 150000u
static int spin_until_flushed(struct journal *j, uint32_t seq, uint64_t bound_ns)
{
	uint64_t until = now_ns() + bound_ns;
	for (unsigned spins = 0; now_ns() < until; spins++) {
		if (__atomic_load_n(&j->ctl->flush_seq, __ATOMIC_ACQUIRE) != seq)
			return 1;
		spin_turn(spins);
	}
	return 0;
}

static int lock_flush_or_durable(struct journal *j, uint64_t lsn)
{
	for (unsigned naps = 1;; naps++) {
		if (durable_past(j, lsn))
			return 0;
		uint32_t seq = __atomic_load_n(&j->ctl->flush_seq, __ATOMIC_ACQUIRE);
		if (took_flush(j, pthread_mutex_trylock(&j->ctl->flush)))
			return 1;
		if (naps % 32 == 0 && tracee_holds(&j->ctl->flush))
			return 0;
		/* First a flush's time on the CPU: a follower that a futex wakes
		 * comes back tens of microseconds after the flush ended, too late
		 * for the leader's next batch to wait for (wait_for_batch). */
		if (naps == 1 && spin_until_flushed(j, seq, FOLLOWER_SPIN_NS))
			continue;
		struct timespec bound = { 0, 2000000 };
		__atomic_add_fetch(&j->ctl->sleepers, 1, __ATOMIC_ACQ_REL);
		syscall(SYS_futex, &j->ctl->flush_seq, FUTEX_WAIT, seq, &bound, NULL, 0);
		__atomic_sub_fetch(&j->ctl->sleepers, 1, __ATOMIC_RELEASE);
	}
}

/* fsync mode: 1 with the flush mutex, 0 once lsn is durable, -EDEADLK
 * when a stopped tracee holds the mutex.  Like a follower in op mode, it
 * spins through a flush in progress first: asleep on the mutex, a syncer
 * whose record that flush took woke tens of microseconds after it ended,
 * and a fellow's flush waited for its next seal as long (wait_for_fellow).
 * Longer than one, up to a millisecond: a flush that outlasted 150 us (a
 * few a second here) put a writer to sleep, and two writers fell back to
 * taking turns, at 0.5 to 0.95 flushes a sync from one run of
 * tests/syncgroup_test.c to the next, against 0.51 to 0.55 with 1 ms.
 * Unlike one, it never returns before lsn is durable. */
#define SYNCER_SPIN_NS 1000000u
static int lock_flush_unless_durable(struct journal *j, uint64_t lsn)
{
	for (;;) {
		if (durable_past(j, lsn))
			return 0;
		uint32_t seq = __atomic_load_n(&j->ctl->flush_seq, __ATOMIC_ACQUIRE);
		if (took_flush(j, pthread_mutex_trylock(&j->ctl->flush)))
			return 1;
		if (!spin_until_flushed(j, seq, SYNCER_SPIN_NS))
			return took_flush(j, tracee_safe_lock(&j->ctl->flush)) ? 1 : -EDEADLK;
	}
}

int journal_sync(struct journal *j, uint64_t lsn)
{
	int err = 0;
	if (!lsn) {
		/* fsync, sync: everything staged by now must be durable, by
		 * this thread's flush or by one it saw end, and a stopped
		 * tracee holding the flush cannot let it. */
		struct jctl *c = j->ctl;
		sighold_enter(); /* the waits below are bounded (sighold.h) */
		int took = lock_flush_unless_durable(j, __atomic_load_n(&c->staged, __ATOMIC_ACQUIRE) + c->lsn_base);
		if (took <= 0) {
			sighold_leave();
			return took ? took : j->m->io_err ? -EIO : 0;
		}
		uint32_t me = (uint32_t)syscall(SYS_gettid);
		if (!j->sync_each_op)
			wait_for_fellow(j, me);
		/* Seals before staged: every seal counted is in the write. */
		uint64_t seals = __atomic_load_n(&c->seals, __ATOMIC_ACQUIRE);
		int flushes = __atomic_load_n(&c->staged, __ATOMIC_ACQUIRE) > c->durable;
		err = jn_write_pending(j);
		if (flushes && !err) {
			c->last_seals = seals - c->seals_flushed;
			c->seals_flushed = seals;
			c->last_flusher = me;
		}
		jn_unlock_flush(j);
	} else {
		sighold_enter();
		if (lock_flush_or_durable(j, lsn)) {
			if (!durable_past(j, lsn))
				err = jn_write_pending(j);
			jn_unlock_flush(j);
		} else {
			sighold_leave();
		}
	}
	return err ? err : j->m->io_err ? -EIO : 0;
}

int journal_sync_all(struct journal *j)
{
	return journal_sync(j, 0);
}

void journal_repair(struct journal *j, uint64_t undo_head_epoch)
{
	/* A holder that died mid-checkpoint holds the flush mutex too: finish
	 * its checkpoint now, before this holder stages anything in an epoch
	 * that finishing it would then discard. */
	jn_lock_flush(j);
	jn_unlock_flush(j);
	/* A sealer that died: if its record counts, its marks are finished (the
	 * pending list is still the one it sealed); if not, it set none. */
	if (__atomic_load_n(&j->ctl->marking, __ATOMIC_ACQUIRE)) {
		if (j->ctl->staged > j->ctl->marking_from)
			jn_mark_sealed(j);
		else
			__atomic_store_n(&j->ctl->marking, 0, __ATOMIC_RELEASE);
	}
	uint64_t pos = j->ctl->staged;
	const uint8_t *rec = media_ptr(j->m, j->rec_off + pos);
	struct kura_super sb = region_super(j);
	uint32_t len = jn_rec_check(&sb, rec, j->cap - pos, j->ctl->epoch, pos);
	if (!len)
		return;
	const struct kura_jrec *r = (const void *)rec;
	if (r->undo_epoch != SEAL_UNDO_EPOCH && r->undo_epoch + 1 == undo_head_epoch) {
		for (uint32_t at = sizeof *r; at < len;) {
			const struct kura_jitem *it = (const void *)(rec + at);
			mark_journaled(j, it->off, it->len);
			at += jn_item_stored(it);
		}
		__atomic_store_n(&j->ctl->staged, pos + len, __ATOMIC_RELEASE);
	} else {
		static const struct kura_jrec none;
		media_store(j->m, j->rec_off + pos, &none, sizeof none);
	}
}

