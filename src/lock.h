/*
 * lock.h — coordination between the threads and processes that share a pool.
 *
 * The pool holds all authoritative state; this table holds what must not
 * outlive the processes using it, in POSIX shared memory named after the pool
 * file's device and inode:
 *  - one robust, process-shared mutex serialising every change to the pool.
 *    If its holder dies mid-operation the next locker is told so and undoes
 *    the dead holder's transaction from the pool's log before going on.
 *  - a sequence counter, odd while a change is in progress, which lets
 *    readers run without the mutex and retry if a change overlapped them.
 *  - open counts per inode across all processes, so an unlinked file lives
 *    until its last descriptor anywhere is closed; a shared map counts as
 *    an open (the kernel's map holds its file too), and the slot also
 *    counts the maps alone, which change how the file is written (map.c),
 *    and names the orphan holding blocks cut off a mapped file.
 *
 * Every mounter holds a shared flock on the table's file.  A mounter that can
 * take it exclusively is alone: it (re)initialises the table, and may run
 * recovery and orphan reclamation knowing no one else has files open.
 */
#ifndef KURA_LOCK_H
#define KURA_LOCK_H

#include <pthread.h>
#include <stdint.h>

#define LOCK_OPEN_SLOTS 16384u
#define LOCK_OWNERS 1024u
#define LOCK_LEDGER_SLOTS 65536u
#define LOCK_BINDS 64u
/* Inode numbers are byte offsets of 128-byte slots in a pool below 256 TiB:
 * under 2^41, so the bits above 48 can name the owner. */
#define LOCK_LEDGER_OWNER_SHIFT 48

struct locktab {
	uint64_t magic;
	pthread_mutex_t mutex;
	uint64_t seq;
	uint64_t open_used;
	uint64_t maps_total;   /* shared maps of any inode: 0 lets writes skip the slot lookup */
	struct lock_open {
		uint64_t ino, count;
	} open[LOCK_OPEN_SLOTS];
	/* Beside each open slot, what only shared maps use, apart so that
	 * opening and closing unmapped files never touches these pages (each
	 * first touch of a page of this table is a fault); the bit says the
	 * slot's part may be non-zero, so emptying a slot need not look. */
	uint64_t mapped_used[LOCK_OPEN_SLOTS / 64];
	struct lock_mapped {
		uint64_t maps;                   /* of the slot's count, how many are shared maps */
		uint64_t holder, holder_gen;     /* see map.c; valid only if the inode still has that generation */
		uint64_t truncs;                 /* truncations that gave blocks to the holder (mapped.h) */
	} mapped[LOCK_OPEN_SLOTS];
	/* Who holds the counts above (see "Owners" below). */
	uint64_t owner_gen;                      /* the last generation handed out */
	uint64_t owners[LOCK_OWNERS];            /* slot k's generation; 0: free */
	uint32_t owner_entries[LOCK_OWNERS];     /* slot k's ledger entries: most owners die with none */
	uint64_t ledger_used;
	uint64_t ledger_displaced; /* entries not in their home slot (never fewer than counted) */
	/* 16 bytes an entry, on pages of their own: the entries of 256 inodes
	 * made together fill one page (lock_owner.c), which is all a program
	 * creating files one after another faults in per 256 files. */
	struct lock_ledger_slot {
		uint64_t key;                    /* inode | owner << LOCK_LEDGER_OWNER_SHIFT; 0: empty */
		uint32_t opens, maps;            /* what that owner added to the inode's slot */
	} ledger[LOCK_LEDGER_SLOTS] __attribute__((aligned(4096)));
	/* Bind mounts inside the pool (bind.c), changed with the mutex held
	 * and the sequence counter odd; 0 lets every walk skip them.  Each
	 * root counts as an open in its slot, attributed to no owner. */
	uint32_t nbinds;
	struct lock_bind {
		uint64_t point, root;
	} binds[LOCK_BINDS];
};

struct lockh {
	struct locktab *t;
	int fd;
	char name[64];
	char why[256]; /* why attaching failed, when there is more to say than an errno */
	/* This mount's owner (see "Owners"): slot + 1 (0: counts go unattributed),
	 * its generation, and the family's description of the table file
	 * whose lock keeps the owner alive (-1: none). */
	uint32_t owner;
	uint64_t owner_gen;
	int owner_fd;
};

/* Attaches to (creating if needed) the table of the pool open as pool_fd.
 * *alone is set when no other process has the pool mounted. */
int lock_attach(struct lockh *h, int pool_fd, int *alone);
/* The same, for a caller already holding the pool's flock (LOCK_EX). */
int lock_attach_held(struct lockh *h, int pool_fd, int *alone);
/* Unlinks the table's name (the last mount, leaving); the mapping stays. */
void lock_remove(struct lockh *h);
/* In a forked child: its own open file description of the table, with its
 * own shared flock, under the same descriptor number. */
int lock_fork_child(struct lockh *h);
/* With the pool's flock held, when detaching: no other mount remains. */
int lock_is_last(struct lockh *h);
/* pool_fd: the pool's file, whose flock serialises the last detach's
 * removal of the table with a concurrent attach; -1 when no other process
 * can be attaching. */
void lock_detach(struct lockh *h, int pool_fd);

/* Returns 1 if the previous holder died while holding it: the caller must
 * repair the pool, then call lock_mark_consistent(). */
int lock_acquire(struct lockh *h);
/* The same, or -EDEADLK when the holder is stopped under ptrace by the
 * calling thread, which would wait for ever (tracee.h). */
int lock_acquire_unless_tracee(struct lockh *h);
void lock_mark_consistent(struct lockh *h);
void lock_release(struct lockh *h);
/* Whether the calling thread holds the mutex (a signal handler may have
 * interrupted it there).  Reads glibc's owner field: robust mutexes keep
 * the owner's thread id there for the kernel's robust list. */
int lock_held_here(const struct lockh *h);

/* A change holds the mutex for a microsecond or so, while a thread that
 * sleeps on it pays a futex round trip and a wake-up, several times that:
 * a thread that finds the pool busy first waits this many pauses (about
 * 5 us here) for it to come free.  Only then does it sleep, so a holder
 * that is not running (more threads than cores) costs little more. */
#define LOCK_SPIN_PAUSES 200

static inline void lock_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Seqlock for readers. */
static inline uint64_t lock_read_begin(const struct lockh *h)
{
	return __atomic_load_n(&h->t->seq, __ATOMIC_ACQUIRE);
}
/* The counter once the change in progress has ended, or still odd if it
 * has not within the spin. */
static inline uint64_t lock_read_wait(const struct lockh *h)
{
	uint64_t seq = lock_read_begin(h);
	for (int i = 0; (seq & 1) && i < LOCK_SPIN_PAUSES; i++) {
		lock_cpu_relax();
		seq = lock_read_begin(h);
	}
	return seq;
}
static inline int lock_read_valid(const struct lockh *h, uint64_t seq)
{
#if !defined(__SANITIZE_THREAD__)
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
	return !(seq & 1) && __atomic_load_n(&h->t->seq, __ATOMIC_RELAXED) == seq;
}
/* Writers, with the mutex held. */
static inline void lock_write_begin(struct lockh *h)
{
	__atomic_store_n(&h->t->seq, (h->t->seq | 1), __ATOMIC_RELAXED);
#if !defined(__SANITIZE_THREAD__) /* TSan builds read under the mutex (fs.h) and cannot model fences */
	__atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}
static inline void lock_write_end(struct lockh *h)
{
	__atomic_store_n(&h->t->seq, (h->t->seq | 1) + 1, __ATOMIC_RELEASE);
}

/* Open counts; call with the mutex held.  open_inc fails with -ENFILE when
 * the table is full. */
int lock_open_inc(struct lockh *h, uint64_t ino);
uint64_t lock_open_dec(struct lockh *h, uint64_t ino);
uint64_t lock_open_count(const struct lockh *h, uint64_t ino);
/* The same slot: a map also counts as an open.  map_dec returns the maps
 * left and drops the open count with it. */
int lock_map_inc(struct lockh *h, uint64_t ino);
uint64_t lock_map_dec(struct lockh *h, uint64_t ino);
uint64_t lock_maps(const struct lockh *h, uint64_t ino);
/* The map state of a counted inode, NULL if it has no slot. */
struct lock_mapped *lock_slot(struct lockh *h, uint64_t ino);

/*
 * Binds (lock_bind.c): bind mounts inside the pool (bind.c says what they
 * are).  Changes with the mutex held, inside a change of the sequence
 * counter; lookups with the mutex held or under the counter.
 */
uint64_t lock_bind_cross_slow(const struct lockh *h, uint64_t ino);
/* Whether no bind exists, so no walk crosses one. */
static inline int lock_no_binds(const struct lockh *h)
{
	return !h->t || __atomic_load_n(&h->t->nbinds, __ATOMIC_ACQUIRE) == 0;
}
/* What a walk that reaches ino goes on in: the root bound over it, or ino. */
static inline uint64_t lock_bind_cross(const struct lockh *h, uint64_t ino)
{
	return __builtin_expect(lock_no_binds(h), 1) ? ino : lock_bind_cross_slow(h, ino);
}
/* Whether ino is covered by a bind (a mount point: not to be removed). */
int lock_bind_point(const struct lockh *h, uint64_t ino);
/* Binds root over point, counting root as open: -ENOSPC when the table is
 * full, or open_inc's error. */
int lock_bind_add(struct lockh *h, uint64_t point, uint64_t root);
/* Removes the topmost bind over point ino (by_root: the latest whose root
 * is ino), its root in *root: -EINVAL if there is none, else 1 when the
 * root is open nowhere else any more, 0 when it still is. */
int lock_bind_remove(struct lockh *h, uint64_t ino, int by_root, uint64_t *root);

/*
 * Owners (lock_owner.c).  A process killed with files open never closes
 * them, so its counts would stay until the pool's last mount left: an
 * unlinked file it held kept its space, and enough dead processes filled
 * the table (every open then failed with ENFILE).  So each table of open
 * file descriptions (ofile.h) — one per process family: fork shares it,
 * exec hands it over — registers as an owner, and a ledger beside the
 * slots records what each owner added to each inode's counts.
 *
 * An owner lives while its family does.  Each image of the family holds a
 * read lock (OFD) on byte k of owner slot k, on an open file description
 * of this table's file which fork shares; across an exec the old image's
 * descriptor stays open until the new image has locked its own.  The
 * kernel drops a lock when the last process holding its description
 * closes it or dies, so no pid, which could be reused, is trusted.  A mount that finds a slot's byte unlocked takes the dead
 * owner's ledger entries back out of the counts (ofile.c frees what only
 * they held open).  Owner slots are freed only so: a mount that leaves
 * with its family alive just closes its descriptor.
 *
 * Slots are claimed and marked reaped by compare-and-swap, without the
 * mutex: their steps are system calls, and a process stopped at one under
 * ptrace must not hold the mutex its tracer may need.  Ledger entries,
 * counts and freeing a reaped slot take the mutex.
 */
/* Registers a new owner for this mount: -ENOSPC when every slot is taken
 * (reap, then retry), or -errno. */
int lock_owner_new(struct lockh *h);
/* Adopts the owner an exec handed over, slot owner with generation gen,
 * taking its lock on a description of this process's own: -ESTALE if a
 * reaper has begun on it (its counts may be gone: see ofile.c).  The old
 * image's descriptor, inherited_fd (or -1), is closed either way. */
int lock_owner_join(struct lockh *h, int inherited_fd, uint32_t owner, uint64_t gen);
/* Around an exec that hands the family over (on: before it; off: after
 * it failed).  The owner's descriptor stays open across it, so that the
 * family does not look dead, and holds a shared flock on the table, so
 * that no mount in between finds itself alone: it would rebuild the table
 * and reclaim every orphan, the files the new image is about to adopt
 * among them.  lock_owner_join lets go of the flock. */
void lock_owner_bridge(struct lockh *h, int on);
/* A dead owner (slot + 1), marked so that no exec'd image adopts it any
 * more; 0 if none.  Its counts are still in the table. */
uint32_t lock_owner_dead(struct lockh *h);
/* How many ledger entries an owner has. */
uint32_t lock_owner_entries(const struct lockh *h, uint32_t owner);
/* Takes one of a dead owner's ledger entries out (1), or finds none (0);
 * *cursor starts at 0 and carries the scan from call to call.  The counts
 * stay in the inode's slot: lock_drop takes them. */
struct lock_ledger {
	uint64_t ino, opens, maps;
};
int lock_owner_take(struct lockh *h, uint32_t owner, struct lock_ledger *e, size_t *cursor);
/* Frees a dead owner's slot (one lock_owner_dead marked; no other). */
void lock_owner_free(struct lockh *h, uint32_t owner);
/* Subtracts a dead owner's counts from ino's slot (maps are also opens). */
void lock_drop(struct lockh *h, uint64_t ino, uint64_t opens, uint64_t maps);
/* Records a change of this mount's owner's counts; -ENFILE when the
 * ledger is full (only when adding). */
int lock_ledger_add(struct lockh *h, uint64_t ino, int64_t opens, int64_t maps);

#endif
