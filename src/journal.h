/*
 * journal.h — the file back end: a working copy of the pool in shared
 * memory, and a redo journal on the pool file that makes it durable.
 *
 * Why a copy.  The kernel may write any dirty page of a shared mapping of
 * the pool file back to the disk at any moment and in any order, so nothing
 * may change the pool file's pages before the record that describes the
 * change is durable.  A read-write mount of a pool on a disk therefore maps
 * a copy of the pool kept in POSIX shared memory (named after the pool
 * file's device and inode, like the lock table), and every process that
 * mounts the pool maps the same copy: the engine runs on it exactly as on a
 * pool in tmpfs, undo log and all, so a process that dies mid-operation is
 * rolled back by the next locker as there.
 *
 * Durability.  In KURA_SYNC=op, when a transaction commits, the bytes it
 * changed in the copy (its dirty lines and the fresh blocks it filled) are
 * appended as one checksummed record to the journal's staging area, which
 * is the log region of the copy, at the offset the record will have in the
 * pool file.  In KURA_SYNC=fsync nothing needs to be durable before a sync,
 * so a commit only notes which lines it changed (the pending set: a mask of
 * lines per block and a list of the blocks); a sync, under the pool mutex
 * so that the copy sits between two operations, seals the pending set into
 * one record of those lines as they are now.  One record per sync keeps
 * every operation atomic and in order (a crash shows the state of some
 * sync), writes a line changed a thousand times once, and costs a commit
 * no copying.  A large seal writes its fresh blocks home instead (ordered
 * data, as ext4's data=ordered): a block that was free when the journal
 * last began (the checkpoint's bitmap) and that no record of this epoch
 * has touched is free in every state recovery can produce until the
 * record that links it in, so it may go home first, synced before that
 * record; the journal then carries only metadata, and data are written
 * once instead of twice.  Small seals journal everything: one flush, not
 * two.  So that data go that way, the allocator takes such blocks first
 * (journal_cheap_word), those the last write gave back before others:
 * rewriting a file, which replaces each block it overwrites whole, then
 * keeps to as many blocks instead of spreading the pending set over the
 * pool.  Since such a block may go home at any time before its record, a
 * growing pending set is written behind, 2 MiB at a time, by the
 * operations that grow it (journal_write_behind), so that a large seal
 * finds most of its blocks on their way to the disk and only syncs them.
 * A sync writes the staged records not yet on the disk with one pwrite and
 * makes them durable with one fdatasync: one flush, shared by every
 * transaction staged meanwhile, whichever thread or process committed it
 * (group commit: committers queue on one robust mutex and the first in
 * writes for all; see journal_commit.c for how a flush waits for more).
 * The pool file's other blocks are written only by a checkpoint,
 * when the journal is full or the last mount ends: the copy's dirty blocks
 * go to their homes, are synced, and a new journal head (epoch + 1) retires
 * the records.  After a crash of the machine the copy is gone; the first
 * mount replays the valid records of the head's epoch in order, stopping at
 * the first that is torn, so the pool shows a prefix of the commit history.
 *
 * Measured on this machine's ext4 disk (virtio): one pwrite + fdatasync of a
 * few KiB into the preallocated log region costs the same as an
 * O_DIRECT|O_DSYNC write of the same pages, and, unlike msync of the
 * mapping, causes no ext4 journal commit (no size or block change; only the
 * mtime, which fdatasync does not wait for).
 */
#ifndef KURA_JOURNAL_H
#define KURA_JOURNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include "layout.h"
#include "media.h"

/* Crash tests only: when set, the journal holds at most this many record
 * bytes, so that short workloads reach checkpoints and the large path;
 * journal_replayed counts the records the last recovery replayed. */
extern uint64_t kura_journal_cap;
extern int journal_replayed;
/* Crash tests only: when set, fsync mode writes pending blocks behind
 * (journal_write_behind) once this many have joined the pending set. */
extern uint64_t kura_write_behind_step;

/* Shared by every process using the copy; it lies after the pool image. */
struct jctl {
	uint64_t magic;
	uint8_t uuid[16];     /* the pool's */
	uint64_t nonce;       /* equals the disk head's while the copy is current */
	uint64_t epoch;       /* the disk head's epoch */
	uint64_t lsn_base;    /* log sequence number of the first record byte of this epoch */
	uint64_t staged;      /* record bytes committed in the copy */
	uint64_t durable;     /* record bytes known durable on the disk */
	uint64_t checkpoints, syncs;
	uint32_t committing;   /* the pool mutex's holder is inside an operation: a flush may wait for it */
	uint32_t pad;
	pthread_mutex_t flush; /* robust, process-shared: whoever holds it writes for all */
	uint32_t flush_seq;    /* bumped when a flush ends: the futex followers sleep on */
	uint32_t sleepers;     /* followers asleep on it (a dead one only costs a wake) */
	uint64_t pend_n;       /* blocks in the pending list (fsync mode; see above) */
	uint64_t pend_est;     /* record bytes sealing them may need: an upper bound */
	uint64_t home_unsynced; /* a seal wrote blocks home and may have died before syncing them */
	uint64_t seals, sealed_home; /* seals, and blocks they wrote home */
	uint64_t pend_since;   /* CLOCK_MONOTONIC ns when the pending set last became non-empty */
	uint64_t marking;      /* a seal's record counts; its blocks' journaled bits are being set */
	uint64_t marking_from; /* where that record starts */
	uint64_t published;    /* records published (op mode), and of them the ones a flush took */
	uint64_t flushed;
	uint64_t behind_n;     /* pending list entries journal_write_behind has passed */
	uint64_t written_behind; /* blocks it wrote */
	uint64_t last_batch;   /* records the last flush took (see wait_for_batch) */
	/* fsync mode's group commit (wait_for_fellow): the thread whose sync
	 * flushed last, the seals flushed by syncs, and how many the last
	 * such flush took */
	uint32_t last_flusher, pad2;
	uint64_t seals_flushed, last_seals;
};
_Static_assert(sizeof(struct jctl) <= KURA_BLOCK, "the control block has one pool block before the dirty map");

struct journal {
	struct media *m;
	struct jctl *ctl;
	uint64_t *dirty;           /* one bit per pool block changed since the last checkpoint */
	uint64_t *journaled;       /* one bit per block a record (or a seal's home write) set this epoch */
	uint64_t *home_used;       /* the bitmap as the last checkpoint left it (1: in use) */
	uint64_t *map_stores;      /* blocks a writable map has shown, until allocated again (see checkpoint) */
	uint64_t *behind;          /* pending blocks written home behind, unchanged since (journal_write_behind) */
	uint64_t *pend_mask;       /* per block: its lines changed since the last seal */
	uint64_t *pend_list;       /* the blocks with a pending mask (duplicates possible) */
	uint64_t pend_max, first_data, bitmap_off, map_words;
	uint64_t behind_step;      /* pending blocks between two writes behind */
	uint64_t home_min;         /* fresh blocks a seal needs to write them home instead */
	uint64_t head_off;         /* the pool's log region */
	uint64_t rec_off, cap;     /* where records go, and how many bytes fit */
	uint64_t nblocks;
	uint64_t pending_end;      /* staged position once the transaction being committed is published */
	int sync_each_op;          /* KURA_SYNC=op: fs_end waits for its record to be durable */
	int seal_first;            /* a map came to a pending block: seal before the next commit */
	uint8_t view[KURA_BLOCK];  /* a block as a seal records it (under the pool mutex) */
};

struct jrange {
	uint64_t off, len;
	int zero; /* the bytes are zeros (recorded without them) */
};

/* What a committing transaction hands the journal. */
struct jtx {
	const uint64_t *lines;     /* 64-byte lines it changed in place */
	size_t nlines;
	const struct jrange *fresh; /* bytes it copied into fresh blocks */
	size_t nfresh;
	uint64_t undo_epoch;       /* its undo epoch; the copy's undo head moves past it at commit */
	int (*is_fresh)(void *ctx, uint64_t block);
	/* Fills buf with block as the last committed transaction left it. */
	void (*committed)(void *ctx, uint64_t block, void *buf);
	/* 0 if this transaction changed no line of block in place (the copy
	 * then shows it as committed). */
	int (*touched)(void *ctx, uint64_t block);
	void *ctx;
};

/* The copy's layout: the pool image, this control block, the dirty map,
 * then the copy's own undo log (log_size bytes). */
uint64_t journal_ctl_off(uint64_t pool_size);
uint64_t journal_undo_off(const struct kura_super *sb);
uint64_t journal_copy_size(const struct kura_super *sb);

/* Opens the copy of the pool open read-write as pool_fd, creating it from
 * the pool (after replaying the disk journal) when this mount is alone and
 * there is no current copy.  The caller holds the pool's flock, so no other
 * mount is deciding the same.  Returns the copy's fd or -errno, with why
 * filled. *created says the copy is new (its undo log must be formatted). */
int journal_open_copy(int pool_fd, const struct kura_super *sb, int alone, int *created, char *why,
		      size_t whylen);
/* Removes the copy of the pool (the last mount, after journal_checkpoint). */
void journal_remove_copy(int pool_fd);

void journal_init(struct journal *j, struct media *m, const struct kura_super *sb, int created);

/* Around an operation that will wait for its record (KURA_SYNC=op): a
 * flush about to start waits briefly for operations in between, so that
 * one flush carries them all. */
void journal_enter(struct journal *j);
void journal_leave(struct journal *j);

/* Under the pool mutex: stages t's record (checkpointing first if it does
 * not fit), or in fsync mode adds its lines to the pending set.  0 or
 * -errno; on error nothing is staged. */
int journal_commit(struct journal *j, const struct jtx *t);
/* The blocks of bitmap word w that would be written to the disk once if
 * allocated now (fsync mode: free at the last checkpoint, carried by no
 * record since); all of them in op mode, where every block costs the same. */
uint64_t journal_cheap_word(const struct journal *j, uint64_t w);
/* fsync mode: changes have waited in the pending set longer than ext4's
 * commit interval, so the operation that notices makes them durable (there
 * is no thread to do it while the pool is idle).  Racy by design: a hint. */
#define JOURNAL_COMMIT_NS 5000000000ull
int journal_sync_due(const struct journal *j);
/* fsync mode, under the pool mutex: block's bytes need no record (they
 * are garbage to every state a crash may show: an atomic group's copy
 * whose bytes went into the file's own block), so the next seal leaves its
 * pending lines out.  The caller re-notes the block if it is ever to be
 * linked into a file. */
void journal_forget_contents(struct journal *j, uint64_t block);
/* Under the pool mutex, no transaction open: turns the pending set into a
 * staged record (nothing to do when no process in fsync mode left changes
 * pending).  0 or -errno. */
int journal_seal(struct journal *j);
/* fsync mode, under the pool mutex, after a commit (no transaction open):
 * once behind_step blocks have joined the pending set, writes those of
 * them that the next seal would write home, and asks the kernel to start
 * writing them to the disk, so that the seal finds them there. */
void journal_write_behind(struct journal *j);
/* Whether changes of a process in fsync mode wait in the pending set. */
int journal_pending(const struct journal *j);
/* Blocks a writable shared map shows: a checkpoint writes them home, as
 * the records rebuild them and then, in the new epoch's first record, as
 * the map left them; a pending one is sealed before the map can store. */
void journal_mark_dirty(struct journal *j, uint64_t off, uint64_t len);
/* A block just allocated, which no map can show: it loses the care a
 * checkpoint takes of map-shown blocks until a map shows it again. */
void journal_forget_map(struct journal *j, uint64_t block);
/* After the undo log retired the transaction: the record counts.  Returns
 * the log sequence number that journal_sync must reach for it. */
uint64_t journal_publish(struct journal *j);
/* Makes every record up to lsn durable (all staged ones with lsn 0 ... use
 * journal_sync_all).  Needs no pool mutex.  0 or -errno. */
int journal_sync(struct journal *j, uint64_t lsn);
int journal_sync_all(struct journal *j);
/* Under the pool mutex, no transaction open: writes every dirty block home
 * and retires the records. */
int journal_checkpoint(struct journal *j);
/* Under the pool mutex, after its holder died: a record the dead holder
 * staged counts if its transaction committed in the copy (undo head moved
 * past it), else it is erased.  Before the undo log is rolled back. */
void journal_repair(struct journal *j, uint64_t undo_head_epoch);

/* Pools whose log region holds a journal (written by the file back end),
 * mounted by another back end, or checked: replays the valid records into
 * the mapping m (durable there with m's own fences).  Returns the number of
 * records replayed, 0 when the region is not a journal, or -EUCLEAN. */
int journal_replay_mapped(struct media *m, const struct kura_super *sb);
int journal_is_journal(const struct media *m, const struct kura_super *sb);

#endif
