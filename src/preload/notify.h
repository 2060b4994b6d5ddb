/*
 * notify.h — the per-pool event ring shared by notify.c (the ring and the
 * producers' side) and notify_inst.c (inotify instances, the watcher
 * thread, dnotify).  notify.c's opening comment explains the design.
 */
#ifndef KURA_PRELOAD_NOTIFY_H
#define KURA_PRELOAD_NOTIFY_H

#include <stdint.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "kp.h"

#define KN_MAGIC 0x6b6e7433u /* "kn" 3: changes with the layout */
#define KN_WATCHERS 128      /* processes watching one pool at once */
#define KN_RECS 4096u        /* a power of two: slots are seq % KN_RECS */
#define KN_NAME 256          /* NAME_MAX + its NUL */
#define KN_UNLINKED 0x100u   /* in kind: the object had no name left (IN_EXCL_UNLINK) */

struct kn_rec {
	uint64_t seq; /* position + 1 once complete; 0 while being written */
	uint64_t dir, obj;
	uint32_t mask, cookie;
	uint32_t kind, namelen; /* kind: KN_CHILD/BOTH/SELF (kp.h), | KN_UNLINKED */
	char name[KN_NAME];
};
#define KN_WORDS (sizeof(struct kn_rec) / sizeof(uint64_t))

/* A process watching the pool (pid 0: free), known dead by lktab.c's
 * test, so that a watcher killed with its watches in place does not keep
 * every other process reporting events for nobody. */
struct kn_watcher {
	int32_t pid;
	uint32_t pad;
	uint64_t started;
};

struct kn_ring {
	uint32_t magic;
	uint32_t watching;   /* kn_watcher slots in use: 0 means no one listens */
	uint64_t head;       /* next position to write */
	uint32_t cookie;     /* the last rename cookie handed out */
	uint32_t wake;       /* futex word: bumped after every record */
	uint32_t sleepers;   /* watcher threads waiting on it */
	uint32_t pad;
	uint64_t swept;      /* CLOCK_MONOTONIC second of the last look for dead watchers */
	uint64_t pad2[3];
	struct kn_watcher who[KN_WATCHERS];
	struct kn_rec rec[KN_RECS];
};

extern struct kn_ring *kn_rings[KP_MAX_MOUNTS];
/* Mount m's ring if this process mapped it (at mount), else NULL: threads
 * read kn_rings while a mount maps its ring. */
static inline struct kn_ring *kn_ring_of(int m)
{
	return __atomic_load_n(&kn_rings[m], __ATOMIC_ACQUIRE);
}
/* Mount m's ring, mapped (made if need be) on first use; NULL if it cannot be. */
struct kn_ring *kn_ring_get(int m);
/* This process starts or stops watching mount m's pool (its first pool
 * watch or dnotify registration, its last): 0, or -ENOSPC when
 * KN_WATCHERS live processes already watch it. */
int kn_watcher_add(int m);
void kn_watcher_drop(int m);
/* Copies the record at pos: 1 done, 0 not written yet, -1 overwritten
 * (the reader was lapped). */
int kn_fetch(struct kn_ring *r, uint64_t pos, struct kn_rec *out);

/* notify_inst.c's mutex, which the thread and every call below hold; this
 * process's pool watches and dnotify registrations per mount (the thread
 * reads those rings). */
extern pthread_mutex_t kn_mu;
extern int kn_pool_watches[KP_MAX_MOUNTS];
/* Under kn_mu: the thread started; 0 or -errno. */
int kn_start_thread(void);
#define EV_SZ sizeof(struct inotify_event)
#define EV_MAX (EV_SZ + KN_NAME + EV_SZ)

/* ---- notify_inst.c: this process's instances ---- */

struct watch {
	int wd, kwd; /* kwd: the kernel instance's wd, -1 for a pool watch */
	int mnt;
	uint64_t ino;
	uint32_t mask;
};

struct inst {
	dev_t dev;
	ino_t ino;   /* identity of the program's end of the socketpair */
	int ufd;     /* the program's descriptor when it became ours */
	int feeder;  /* dormant (after fork): a pidfd of the process feeding it */
	int my, kfd; /* our end; the kernel instance */
	struct watch *w;
	int nw, cap, nextwd;
	char *q; /* events not yet in the socket, back to back */
	size_t qhead, qlen, qcap, qn;
	char last[EV_MAX]; /* the last event queued or sent, for merging */
	size_t lastlen;
	struct inst *next;
};

extern struct inst *kn_insts;
/* The instance whose program end is the socket st, or NULL. */
struct inst *kn_find(const struct stat *st);
/* Under kn_mu: 1 if st is an instance another process feeds (after
 * fork), once any whose feeder has ended are taken over. */
int kn_inherited_here(const struct stat *st);
/* The thread looks again at its descriptors and timeout. */
void kn_kick(void);
/* notify_queue.c: an event packet made in b (its size); one queued for
 * the program, merged or overflowing as the kernel's; the queue sent as
 * far as the socket takes; the queue limit read. */
size_t kn_ev_make(char *b, int wd, uint32_t mask, uint32_t cookie, const char *name, size_t nl);
void kn_push(struct inst *in, const char *ev, size_t sz);
void kn_flush(struct inst *in);
void kn_queue_limit(void);
/* Watch slot i goes (its IN_IGNORED queued if ignored). */
void kn_drop_watch(struct inst *in, int i, int ignored);
int kn_new_wd(struct inst *in);
struct watch *kn_add_slot(struct inst *in);
/* Every ring this process reads, read up to its head. */
void kn_drain_all(void);
/* fd moved to the top of the descriptor range. */
int kn_high(int fd);

/* Under kn_mu: a pool watch or dnotify registration of mount m made
 * (0, or -ENOSPC: too many watchers) or gone.  The first makes this
 * process a watcher (kn_watcher_add) reading the ring from its head on. */
int kn_ref(int m);
void kn_unref(int m);
/* notify_dn.c, from the thread: a record to the dnotify registrations. */
void kn_dn_deliver(int m, const struct kn_rec *r);
/* In a fork child: the parent's registrations are not the child's. */
void kn_dn_child(void);

#endif
