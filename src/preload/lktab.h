/*
 * lktab.h — the lock table shared by lktab.c (the table, its processes and
 * their slots) and lock.c (the locks themselves, waiting, fork).
 */
#ifndef KURA_PRELOAD_LKTAB_H
#define KURA_PRELOAD_LKTAB_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "kp.h"

/* Live records; dead ones are reclaimed when it runs short
 * (tests/preload/dead_lockers.c passes it).  4096 ran out under stress-ng
 * --lockf 4 (8 processes, up to 1024 ranges each: F_ULOCK got ENOLCK);
 * scans stop at the highest record in use, and pages never used stay
 * unallocated. */
#define LK_MAX 16384
#define LK_WAITERS 256
#define LK_PROCS 512
#define LK_IDS 65536 /* description ids the bitmaps cover: the engine's table size */
#define LK_MAGIC 0x6b6c6f68u /* changes with the layout */
#define LK_INIT 1u
#define LK_POLL_NS 50000000L

enum { K_POSIX = 1, K_OFD = 2, K_FLOCK = 3 };
/* Lock types as stored: F_RDLCK is 0, which marks a free record. */
enum { T_RD = 1, T_WR = 2, T_UN = 3 };

static inline int lk_t_of(int f_type)
{
	return f_type == F_RDLCK ? T_RD : f_type == F_WRLCK ? T_WR : T_UN;
}

struct lk {
	uint64_t ino;
	int64_t start, end; /* inclusive; INT64_MAX: to end of file and beyond */
	uint64_t tok, id;   /* owner: (0, pid) for POSIX, (table, description) otherwise */
	int32_t pid;        /* the process that took it */
	uint8_t kind, type; /* type: T_RD or T_WR; 0: free slot */
	uint64_t started;   /* pid's start time (clock ticks after boot): a reused pid is another process */
};

struct lk_waiter {
	int32_t pid, tid;
	int32_t on; /* the process owning the POSIX lock this one waits for, 0 if none */
	int32_t pad;
};

struct lk_proc {
	int32_t pid;    /* 0 with parent set: filled by parent for a child not yet running */
	int32_t parent;
	uint64_t tok;   /* the description table the bitmap's ids belong to */
};

struct lk_table {
	uint32_t magic;
	uint32_t seq;      /* futex word: bumped on every change */
	uint32_t sleepers; /* waiters inside the futex wait */
	uint32_t hi;       /* records at and above this index are free: scans stop there */
	uint32_t phi;      /* the same for holder slots */
	uint32_t whi;      /* and for waiter slots: every unlock looks through them */
	pthread_mutex_t mu;
	struct lk rec[LK_MAX];
	struct lk_waiter wait[LK_WAITERS];
	struct lk_proc proc[LK_PROCS];
	uint64_t held[LK_PROCS][LK_IDS / 64];
	struct kp_exec_table exec; /* txtbsy.c's: pool files being executed */
};

/* One lock request, in absolute offsets. */
struct req {
	uint64_t ino, tok, id;
	int64_t s, e;
	int kind, type;
};


extern struct lk_table *lk_tables[KP_MAX_MOUNTS];
extern int lk_probed[KP_MAX_MOUNTS];  /* this image looked for an existing table */
extern int lk_my_slot[KP_MAX_MOUNTS]; /* 1 + index of this process's slot, 0: unknown */
extern __thread int lk_dirty;         /* the table changed under our lock: wake the waiters */

/* Mount m's table, mapped (made if create) on first use; NULL if it cannot be. */
struct lk_table *lk_table_get(int m, int create);
/* Its mutex; unlocking wakes the waiters if lk_dirty. */
void lk_tlock(struct lk_table *t);
void lk_tunlock(struct lk_table *t);
/* Processes: this one's start time; whether pid (started then) still runs. */
uint64_t lk_my_start(void);
int lk_alive_since(pid_t pid, uint64_t started);
int lk_alive(pid_t pid);
/* The identity of this process's description table for mount m. */
uint64_t lk_table_token(int m);
/* Holder slots (see lktab.c). */
int lk_slot_alive(const struct lk_proc *p);
int lk_slot_free(const struct lk_proc *p);
int lk_slot_new(struct lk_table *t, int not);
int lk_slot_mine(struct lk_table *t, int m, uint64_t tok, int create);
void lk_bit_set(struct lk_table *t, int i, uint64_t id);
int lk_desc_held(struct lk_table *t, uint64_t tok, uint64_t id);
/* Whether a record's owner still holds it. */
int lk_rec_live(struct lk_table *t, const struct lk *r);

#endif
