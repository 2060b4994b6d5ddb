/*
 * lktab.c — the shared table that lock.c keeps its locks in, and who is
 * alive to hold them.
 *
 * Placeholders are duplicates of one memfd, so kernel locks on them would
 * never conflict between two opens of one file.  Locks live instead in a
 * table in POSIX shared memory, one per pool ("/kura-locks-<dev>-<ino>" of
 * the pool file), keyed by inode number and guarded by a robust
 * process-shared mutex.  Owners: a POSIX lock belongs to a process (pid);
 * an OFD lock or a flock() to an open file description, named by the
 * engine's description id and the identity (inode) of the description
 * table it lives in, which forked and exec'd processes share.
 *
 * Lifetimes.  A POSIX lock lives while its process does (and until it
 * closes any descriptor of the file).  An OFD/flock lock lives while any
 * process still holds a descriptor of its description.  The engine's
 * reference counts cannot answer that: a process that exits without
 * closing (the usual case, and every killed one) never drops its
 * references.  So each process that may share descriptions publishes, in a
 * per-process slot of the table, a bitmap of the description ids it holds:
 * at fork (parent and child: the parent also fills the child's slot before
 * the fork, so no window exists in which the child holds descriptions
 * nobody knows of) and when it locks through a description.  A process
 * clears its bit when it closes its last descriptor of a description; a
 * dead process's slot counts for nothing.  A description is held while a
 * live slot has its bit, and its locks go when none has.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lktab.h"
#include "shm.h"
#include "tracee.h"

struct lk_table *lk_tables[KP_MAX_MOUNTS];
int lk_probed[KP_MAX_MOUNTS];
int lk_my_slot[KP_MAX_MOUNTS];
__thread int lk_dirty;
static uint64_t lk_tokens[KP_MAX_MOUNTS]; /* cached lk_table_token(), 0: not yet */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

static void init_table(struct lk_table *t)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&t->mu, &a);
	pthread_mutexattr_destroy(&a);
	__atomic_store_n(&t->magic, LK_MAGIC, __ATOMIC_RELEASE);
}

/* Waits (boundedly) for the table's maker to finish initialising it.  A
 * maker that died halfway leaves LK_INIT for good: after a second one
 * waiter takes over (LK_INIT to LK_REINIT, so only one does) and starts
 * it afresh.  0 if it never became ready. */
#define LK_REINIT 2u
static int table_ready(struct lk_table *t)
{
	for (int round = 0; round < 2; round++) {
		struct timespec start, now;
		clock_gettime(CLOCK_MONOTONIC, &start);
		do {
			if (__atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) == LK_MAGIC)
				return 1;
			sched_yield();
			clock_gettime(CLOCK_MONOTONIC, &now);
		} while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 1000000000L);
		uint32_t was = LK_INIT;
		if (__atomic_compare_exchange_n(&t->magic, &was, LK_REINIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			memset((char *)t + sizeof t->magic, 0, sizeof *t - sizeof t->magic);
			init_table(t);
			return 1;
		}
	}
	return __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) == LK_MAGIC;
}

struct lk_table *lk_table_get(int m, int create)
{
	struct lk_table *t = __atomic_load_n(&lk_tables[m], __ATOMIC_ACQUIRE);
	if (t)
		return t;
	sighold_lock(&attach_lock);
	if (!lk_tables[m]) {
		struct stat st;
		char name[96];
		if (REAL(stat)(kp_mounts[m].pool, &st) < 0)
			goto out;
		snprintf(name, sizeof name, "/kura-locks-%llx-%llx", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), st.st_mode & 0666);
		if (fd < 0)
			goto out;
		char why[256];
		if (shm_trusted(fd, name, &st, why, sizeof why)) {
			kp_debug("%s", why); /* lock calls on the pool then fail with ENOLCK */
			REAL(close)(fd);
			goto out;
		}
		if (create)
			fchmod(fd, st.st_mode & 0666); /* shm_open applied our umask */
		struct stat ts;
		if (REAL(fstat)(fd, &ts) < 0 ||
		    ((size_t)ts.st_size < sizeof(struct lk_table) && kura_own_ftruncate(fd, sizeof(struct lk_table)) < 0)) {
			REAL(close)(fd);
			goto out;
		}
		void *p = mmap(NULL, sizeof(struct lk_table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		REAL(close)(fd);
		if (p == MAP_FAILED)
			goto out;
		t = p;
		uint32_t old = 0;
		int won = __atomic_compare_exchange_n(&t->magic, &old, LK_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		if (!won && old != LK_INIT && old != LK_MAGIC &&
		    __atomic_compare_exchange_n(&t->magic, &old, LK_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			/* Left by another version of this file, with another layout. */
			memset((char *)t + sizeof t->magic, 0, sizeof *t - sizeof t->magic);
			won = 1;
		}
		if (won)
			init_table(t);
		if (!table_ready(t)) {
			munmap(t, sizeof *t);
			goto out;
		}
		__atomic_store_n(&lk_tables[m], t, __ATOMIC_RELEASE);
	}
out:
	sighold_unlock(&attach_lock);
	return lk_tables[m];
}

void lk_tlock(struct lk_table *t)
{
	if (tracee_robust_lock(&t->mu) == EOWNERDEAD) /* a lost wake cannot strand the waiters (tracee.c) */
		pthread_mutex_consistent(&t->mu); /* records are independent; a dead holder's is dropped by pid */
}

void lk_tunlock(struct lk_table *t)
{
	while (t->hi > 0 && !t->rec[t->hi - 1].type)
		t->hi--;
	int changed = lk_dirty;
	lk_dirty = 0;
	if (changed)
		__atomic_add_fetch(&t->seq, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&t->mu);
	/* A sleeper counted itself under the mutex before reading seq, so it
	 * either sees the new value or is inside the wait and gets woken. */
	if (changed && __atomic_load_n(&t->sleepers, __ATOMIC_ACQUIRE))
		kp_syscall(SYS_futex, &t->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* From /proc/PID/stat: 1 if the process runs (not a zombie, whose
 * descriptors and so locks the kernel has already dropped), 0 if not, -1 if
 * it cannot be read; its start time to *started. */
static int proc_stat(pid_t pid, uint64_t *started)
{
	char path[48], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = REAL(open)(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = REAL(read)(fd, buf, sizeof buf - 1);
	REAL(close)(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *c = strrchr(buf, ')');
	if (!c || c[1] != ' ')
		return -1;
	/* The state is the third field, the start time the twenty-second. */
	char *f = c + 2;
	int running = *f != 'Z' && *f != 'X';
	for (int field = 3; field < 22 && f; field++)
		f = strchr(f, ' ') ? strchr(f, ' ') + 1 : NULL;
	*started = f ? strtoull(f, NULL, 10) : 0;
	return running;
}

/* This process's start time, read once per process. */
uint64_t lk_my_start(void)
{
	static pid_t for_pid;
	static uint64_t started;
	if (for_pid != kp_pid) {
		if (proc_stat(kp_pid, &started) < 0)
			started = 0;
		for_pid = kp_pid;
	}
	return started;
}

/* Whether the process that took a lock still runs: kill(0) also succeeds
 * for a zombie, and for another process that got the pid since (started,
 * when known, tells them apart). */
int lk_alive_since(pid_t pid, uint64_t started)
{
	if (pid == kp_pid)
		return 1;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return 0;
	uint64_t now;
	int r = proc_stat(pid, &now);
	if (r < 0)
		return 1;
	return r && (!started || !now || now == started);
}

int lk_alive(pid_t pid)
{
	return lk_alive_since(pid, 0);
}

uint64_t lk_table_token(int m)
{
	uint64_t tok = __atomic_load_n(&lk_tokens[m], __ATOMIC_RELAXED);
	if (tok)
		return tok;
	struct stat st;
	int sfd = kura_state_fd(kp_mounts[m].fs);
	if (sfd < 0 || REAL(fstat)(sfd, &st) < 0)
		return 1;
	tok = (uint64_t)st.st_ino | 1ull << 63;
	__atomic_store_n(&lk_tokens[m], tok, __ATOMIC_RELAXED); /* racing threads store the same value */
	return tok;
}

/* ---- holder slots ------------------------------------------------------ */

int lk_slot_alive(const struct lk_proc *p)
{
	if (p->pid)
		return lk_alive(p->pid);
	return p->parent && lk_alive(p->parent);
}

int lk_slot_free(const struct lk_proc *p)
{
	return !p->pid && !p->parent;
}

/* A free slot, or -1.  A dead process's slot is reused before a slot
 * never used: shared memory pages are only spent on the ones touched, and
 * the table outlives the processes (and, see README, its pool). */
int lk_slot_new(struct lk_table *t, int not)
{
	for (int i = 0; i < (int)t->phi; i++)
		if (i != not && lk_slot_free(&t->proc[i]))
			return i;
	for (int i = 0; i < (int)t->phi; i++)
		if (i != not && !lk_slot_alive(&t->proc[i]))
			return i;
	if (t->phi < LK_PROCS)
		return (int)t->phi++;
	return -1;
}

/* This process's slot for description table tok, made if `create`. */
int lk_slot_mine(struct lk_table *t, int m, uint64_t tok, int create)
{
	int i = lk_my_slot[m] - 1;
	if (i >= 0 && t->proc[i].pid == kp_pid && t->proc[i].tok == tok)
		return i;
	lk_my_slot[m] = 0;
	for (i = 0; i < (int)t->phi; i++)
		if (t->proc[i].pid == kp_pid && t->proc[i].tok == tok)
			break;
	if (i == (int)t->phi) {
		if (!create || (i = lk_slot_new(t, -1)) < 0)
			return -1;
		memset(t->held[i], 0, sizeof t->held[i]);
		t->proc[i].pid = kp_pid;
		t->proc[i].parent = 0;
		t->proc[i].tok = tok;
	}
	lk_my_slot[m] = i + 1;
	return i;
}

void lk_bit_set(struct lk_table *t, int i, uint64_t id)
{
	if (id < LK_IDS)
		t->held[i][id / 64] |= 1ull << (id % 64);
}

int lk_desc_held(struct lk_table *t, uint64_t tok, uint64_t id)
{
	for (int i = 0; i < (int)t->phi; i++) {
		struct lk_proc *p = &t->proc[i];
		if (lk_slot_free(p) || p->tok != tok || !(t->held[i][id / 64] >> (id % 64) & 1))
			continue;
		if (lk_slot_alive(p))
			return 1;
		p->pid = p->parent = 0;
	}
	return 0;
}

/* ---- records ----------------------------------------------------------- */

int lk_rec_live(struct lk_table *t, const struct lk *r)
{
	if (r->kind == K_POSIX || r->id >= LK_IDS)
		return lk_alive_since(r->pid, r->started);
	return lk_desc_held(t, r->tok, r->id);
}

/* ---- for txtbsy.c ------------------------------------------------------ */

struct kp_exec_table *kp_lock_exec_table(int m)
{
	struct lk_table *t = lk_table_get(m, 1);
	return t ? &t->exec : NULL;
}

void kp_lock_exec_lock(int m)
{
	lk_tlock(lk_tables[m]);
}

void kp_lock_exec_unlock(int m)
{
	lk_tunlock(lk_tables[m]);
}

/* ---- fork (lock.c's kp_lock_fork_*: the slots the description bitmaps live in) ---- */

static __thread int fork_slot[KP_MAX_MOUNTS]; /* 1 + index of the slot prepared for the child */
static __thread pid_t fork_parent_pid;

struct publish {
	struct lk_table *t;
	int mnt, slot, n;
};

static void publish_desc(int fd, struct kp_fd *e, void *arg)
{
	(void)fd;
	struct publish *p = arg;
	if (e->mnt != p->mnt)
		return;
	long id = kura_fd_export(kp_mounts[e->mnt].fs, e->kfd);
	if (id >= 0)
		lk_bit_set(p->t, p->slot, (uint64_t)id);
	p->n++;
}

static void count_desc(int fd, struct kp_fd *e, void *arg)
{
	(void)fd;
	struct publish *p = arg;
	p->n += e->mnt == p->mnt;
}

/* Before fork (descriptor table locked): publish every description this
 * process holds, for itself and, in a slot the child will claim, for the
 * child, so that the descriptions are known held from the fork on. */
void kp_lock_fork_prepare(void)
{
	fork_parent_pid = kp_pid;
	for (int m = 0; m < kp_nmounts; m++) {
		fork_slot[m] = 0;
		if (!kp_mounts[m].fs)
			continue;
		struct publish p = { NULL, m, -1, 0 };
		kp_foreach(count_desc, &p);
		if (!p.n || !(p.t = lk_table_get(m, 1)))
			continue;
		uint64_t tok = lk_table_token(m);
		lk_tlock(p.t);
		p.slot = lk_slot_mine(p.t, m, tok, 1);
		if (p.slot >= 0) {
			kp_foreach(publish_desc, &p);
			int c = lk_slot_new(p.t, p.slot);
			if (c >= 0) {
				memcpy(p.t->held[c], p.t->held[p.slot], sizeof p.t->held[c]);
				p.t->proc[c].pid = 0;
				p.t->proc[c].parent = kp_pid;
				p.t->proc[c].tok = tok;
				fork_slot[m] = c + 1;
			}
		}
		lk_tunlock(p.t);
	}
}

/* In the parent after fork: the child's slot is the child's to claim (a
 * failed fork leaves it counted for as long as the parent lives). */
void kp_lock_fork_parent(void)
{
	for (int m = 0; m < KP_MAX_MOUNTS; m++)
		fork_slot[m] = 0;
}

/* In the child, kp_pid already refreshed. */
void kp_lock_fork_child(void)
{
	for (int m = 0; m < KP_MAX_MOUNTS; m++) {
		lk_my_slot[m] = 0;
		int c = fork_slot[m] - 1;
		fork_slot[m] = 0;
		struct lk_table *t = lk_tables[m];
		if (c < 0 || !t)
			continue;
		lk_tlock(t);
		if (!t->proc[c].pid && t->proc[c].parent == fork_parent_pid) {
			t->proc[c].pid = kp_pid;
			t->proc[c].parent = 0;
			lk_my_slot[m] = c + 1;
		}
		lk_tunlock(t);
	}
}
