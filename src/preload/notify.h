/*
 * notify.h — the per-pool event ring shared by notify.c (the ring and the
 * producers' side) and notify_inst.c (inotify instances, the watcher
 * thread, dnotify).  notify.c's opening comment explains the design.
 */
#ifndef KURA_PRELOAD_NOTIFY_H
#define KURA_PRELOAD_NOTIFY_H

#include <stdint.h>

#include "kp.h"

#define KN_MAGIC 0x6b6e7431u /* "kn" 1: changes with the layout */
#define KN_RECS 4096u        /* a power of two: slots are seq % KN_RECS */
#define KN_NAME 256          /* NAME_MAX + its NUL */

struct kn_rec {
	uint64_t seq; /* position + 1 once complete; 0 while being written */
	uint64_t dir, obj;
	uint32_t mask, cookie;
	uint32_t kind, namelen; /* kind: KN_CHILD/BOTH/SELF (kp.h) */
	char name[KN_NAME];
};
#define KN_WORDS (sizeof(struct kn_rec) / sizeof(uint64_t))

struct kn_ring {
	uint32_t magic;
	uint32_t watching; /* pool watches alive in all processes: 0 means no one listens */
	uint64_t head;     /* next position to write */
	uint32_t cookie;   /* the last rename cookie handed out */
	uint32_t pad[11];
	struct kn_rec rec[KN_RECS];
};

extern struct kn_ring *kn_rings[KP_MAX_MOUNTS];
/* Mount m's ring, mapped (made if need be) on first use; NULL if it cannot be. */
struct kn_ring *kn_ring_get(int m);
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
/* Under kn_mu: mount m's ring read from its head on (the first watch). */
void kn_set_rpos(int m);
/* notify_dn.c, from the thread: a record to the dnotify registrations. */
void kn_dn_deliver(int m, const struct kn_rec *r);
/* In a fork child: the parent's registrations are not the child's. */
void kn_dn_child(void);

#endif
