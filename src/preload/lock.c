/*
 * lock.c — POSIX record locks, OFD locks and flock() on kura files, kept
 * in the shared table of lktab.c (which says why a table and who holds
 * what).
 *
 * Waiting.  Waiters sleep on a futex word of the table that every change
 * bumps, with futex_waitv and an absolute deadline: the kernel restarts
 * that wait after a handler installed with SA_RESTART and fails it with
 * EINTR otherwise, which is exactly F_SETLKW's behaviour.  Signals are
 * blocked while the table is examined, and a pending one is judged before
 * sleeping, so no signal slips in between the checks.  The deadline (50 ms)
 * only serves to notice holders that died without unlocking.
 *
 * Deadlocks.  A POSIX waiter records the process it waits for; a new wait
 * whose chain of such records leads back to its own process fails with
 * EDEADLK, as Linux does (OFD and flock waits are not checked, as on Linux).
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

/* A POSIX owner gave something up: those waiting for it are no longer
 * blocked by it until they look again (as Linux detaches the waiters of a
 * changed lock), so a finished wait does not make a false cycle. */
static void unblock_waiters(struct lk_table *t, int32_t pid)
{
	for (uint32_t i = 0; i < t->whi && i < LK_WAITERS; i++)
		if (t->wait[i].on == pid)
			t->wait[i].on = 0;
}

static void drop(struct lk_table *t, struct lk *r)
{
	if (r->kind == K_POSIX)
		unblock_waiters(t, r->pid);
	r->type = 0;
	lk_dirty = 1;
}

static int flock_class(int kind)
{
	return kind == K_FLOCK;
}

static int same_owner(const struct lk *a, int kind, uint64_t tok, uint64_t id)
{
	return a->kind == kind && a->tok == tok && a->id == id;
}

/* Whether record r blocks request q. */
static int conflicts(const struct lk *r, const struct req *q)
{
	if (!r->type || r->ino != q->ino || flock_class(r->kind) != flock_class(q->kind))
		return 0;
	if (same_owner(r, q->kind, q->tok, q->id))
		return 0;
	if (r->end < q->s || r->start > q->e)
		return 0;
	return r->type == T_WR || q->type == T_WR;
}

/* The lowest free record, which keeps the used ones below t->hi. */
static struct lk *free_rec(struct lk_table *t)
{
	for (uint32_t i = 0; i < t->hi; i++)
		if (!t->rec[i].type)
			return &t->rec[i];
	return t->hi < LK_MAX ? &t->rec[t->hi++] : NULL;
}

static int free_recs(struct lk_table *t, int want)
{
	int n = (int)(LK_MAX - t->hi); /* not read: untouched pages stay unallocated */
	for (uint32_t i = 0; i < t->hi && n < want; i++)
		n += !t->rec[i].type;
	/* Full: the records of processes that died holding them (killed ones
	 * never unlock) go now, not only when someone conflicts with them. */
	for (uint32_t i = 0; i < t->hi && n < want; i++) {
		struct lk *r = &t->rec[i];
		if (r->type && !lk_rec_live(t, r)) {
			drop(t, r);
			n++;
		}
	}
	return n >= want;
}

/* Removes the owner's coverage of [s, e], splitting records at the edges
 * (the caller made sure a slot is free for the one split that can occur). */
static void carve(struct lk_table *t, const struct req *q)
{
	for (uint32_t i = 0; i < t->hi; i++) {
		struct lk *r = &t->rec[i];
		if (!r->type || r->ino != q->ino || !same_owner(r, q->kind, q->tok, q->id) || r->end < q->s ||
		    r->start > q->e)
			continue;
		lk_dirty = 1;
		if (q->kind == K_POSIX)
			unblock_waiters(t, r->pid);
		if (r->start < q->s && r->end > q->e) {
			struct lk *n = free_rec(t);
			*n = *r;
			n->start = q->e + 1;
			r->end = q->s - 1;
		} else if (r->start < q->s) {
			r->end = q->s - 1;
		} else if (r->end > q->e) {
			r->start = q->e + 1;
		} else {
			r->type = 0;
		}
	}
}

/* Joins n with the owner's adjacent records of the same type, as Linux
 * does (F_GETLK then reports the whole range).  Records of one owner never
 * overlap after carve(), so one pass finds both neighbours. */
static void merge(struct lk_table *t, struct lk *n)
{
	for (uint32_t i = 0; i < t->hi; i++) {
		struct lk *r = &t->rec[i];
		if (r == n || r->type != n->type || r->ino != n->ino || !same_owner(r, n->kind, n->tok, n->id))
			continue;
		if ((r->end != INT64_MAX && r->end + 1 < n->start) || (n->end != INT64_MAX && n->end + 1 < r->start))
			continue;
		if (r->start < n->start)
			n->start = r->start;
		if (r->end > n->end)
			n->end = r->end;
		r->type = 0;
	}
}

/* Whether the chain "process waits for the owner of a POSIX lock" starting
 * at holder leads back to this process. */
static int deadlock(struct lk_table *t, int32_t holder)
{
	for (int depth = 0; depth < 64 && holder > 0; depth++) {
		if (holder == kp_pid)
			return 1;
		int32_t next = 0;
		for (uint32_t i = 0; i < t->whi && i < LK_WAITERS && !next; i++)
			if (t->wait[i].pid == holder && t->wait[i].on)
				next = t->wait[i].on;
		if (!next || !lk_alive(holder))
			return 0;
		holder = next;
	}
	return 0;
}

/* One attempt, table locked: 0 done, -EAGAIN conflict (*who: the
 * conflicting record with the lowest start), -EDEADLK, -ENOLCK.  With
 * `on` (a blocking request) the POSIX owner waited for goes to *on. */
static int try_lock(struct lk_table *t, int m, const struct req *q, struct lk *who, int test, int32_t *on)
{
	if (q->kind == K_FLOCK && !test) {
		/* Linux converts a flock by removing the old lock first: when the
		 * new one cannot be had, the description is left with none. */
		for (uint32_t i = 0; i < t->hi; i++) {
			struct lk *r = &t->rec[i];
			if (!r->type || r->ino != q->ino || !same_owner(r, q->kind, q->tok, q->id))
				continue;
			if (r->type == q->type)
				return 0;
			drop(t, r);
		}
		if (q->type == T_UN)
			return 0;
	}
	int r = 0;
	/* Unlocking never conflicts: only the caller's own records change. */
	for (uint32_t i = 0; i < t->hi && q->type != T_UN; i++) {
		struct lk *x = &t->rec[i];
		if (!conflicts(x, q))
			continue;
		if (!lk_rec_live(t, x)) {
			drop(t, x);
			continue;
		}
		if (who && (r == 0 || x->start < who->start))
			*who = *x;
		r = -EAGAIN;
		if (!who && !on)
			break;
		if (on && q->kind == K_POSIX && x->kind == K_POSIX) {
			if (!*on)
				*on = x->pid;
			if (deadlock(t, x->pid))
				return -EDEADLK;
		}
	}
	if (r || test)
		return r;
	if (q->type != T_UN && q->kind != K_POSIX) {
		int i = lk_slot_mine(t, m, q->tok, 1);
		if (i < 0)
			return -ENOLCK;
		lk_bit_set(t, i, q->id);
	}
	/* carve() may split one record and the new lock takes another. */
	if (!free_recs(t, q->type == T_UN ? 1 : 2))
		return -ENOLCK;
	carve(t, q);
	if (q->type == T_UN)
		return 0;
	struct lk *n = free_rec(t);
	n->ino = q->ino;
	n->start = q->s;
	n->end = q->e;
	n->tok = q->tok;
	n->id = q->id;
	n->pid = kp_pid;
	n->started = lk_my_start();
	n->kind = (uint8_t)q->kind;
	n->type = (uint8_t)q->type;
	merge(t, n);
	lk_dirty = 1;
	return 0;
}

/* ---- waiting ----------------------------------------------------------- */

static int waiter_set(struct lk_table *t, int w, int32_t on)
{
	if (w < 0) {
		for (int i = 0; i < LK_WAITERS && w < 0; i++)
			if (!t->wait[i].pid || !lk_alive(t->wait[i].pid))
				w = i;
		if (w < 0)
			return -1; /* no room: this wait goes unseen by deadlock detection */
		t->wait[w].pid = kp_pid;
		t->wait[w].tid = (int32_t)kp_syscall(SYS_gettid);
		if ((uint32_t)w >= t->whi)
			t->whi = (uint32_t)w + 1;
	}
	t->wait[w].on = on;
	return w;
}

static void waiter_clear(struct lk_table *t, int w)
{
	if (w >= 0)
		memset(&t->wait[w], 0, sizeof t->wait[w]);
}

/* Whether a signal of `set` the caller does not block has a handler
 * installed without SA_RESTART: one arriving must end the wait (EINTR). */
static int intr_among(const sigset_t *set, const sigset_t *caller_mask)
{
	for (int s = 1; s < NSIG; s++) {
		if (s == SIGKILL || s == SIGSTOP || (set && sigismember(set, s) != 1) || sigismember(caller_mask, s) == 1)
			continue;
		struct sigaction sa;
		if (sigaction(s, NULL, &sa) < 0)
			continue;
		if (!(sa.sa_flags & SA_SIGINFO) && (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN))
			continue;
		if (!(sa.sa_flags & SA_RESTART))
			return 1;
	}
	return 0;
}

static int pending_intr(const sigset_t *caller_mask)
{
	sigset_t p;
	return sigpending(&p) == 0 && intr_among(&p, caller_mask);
}

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
struct kp_futex_waitv {
	uint64_t val, uaddr;
	uint32_t flags, reserved;
};

/* Sleeps until *word != val, a signal, or the poll deadline: 0 or -EINTR. */
static int lk_sleep(uint32_t *word, uint32_t val, const sigset_t *caller_mask)
{
	static int no_waitv;
	if (!__atomic_load_n(&no_waitv, __ATOMIC_RELAXED)) {
		/* An absolute deadline makes the kernel restart the wait after an
		 * SA_RESTART handler (ERESTARTSYS), and only then. */
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_nsec += LK_POLL_NS;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		struct kp_futex_waitv w = { val, (uintptr_t)word, 2 /* FUTEX2_SIZE_U32, shared */, 0 };
		if (kp_syscall(SYS_futex_waitv, &w, 1, 0, &dl, CLOCK_MONOTONIC) >= 0 || errno == EAGAIN ||
		    errno == ETIMEDOUT)
			return 0;
		if (errno == EINTR)
			return -EINTR;
		__atomic_store_n(&no_waitv, 1, __ATOMIC_RELAXED); /* before 5.16, or filtered */
	}
	/* A relative FUTEX_WAIT fails with EINTR after any handler, even an
	 * SA_RESTART one, and which signal came is unknown: EINTR if any
	 * handler could have asked for it (old kernels only). */
	struct timespec rel = { 0, LK_POLL_NS };
	if (kp_syscall(SYS_futex, word, FUTEX_WAIT, val, &rel, NULL, 0) < 0 && errno == EINTR &&
	    intr_among(NULL, caller_mask))
		return -EINTR;
	return 0;
}

static int lock_wait(struct lk_table *t, int m, const struct req *q, int wait)
{
	sigset_t all, caller;
	if (wait) {
		/* Blocked while the table is examined: a signal arriving then is
		 * judged by pending_intr() instead of being lost. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &caller);
	}
	int w = -1, r;
	for (;;) {
		lk_tlock(t);
		int32_t on = 0;
		r = try_lock(t, m, q, NULL, 0, wait ? &on : NULL);
		if (r != -EAGAIN || !wait) {
			waiter_clear(t, w);
			lk_tunlock(t);
			break;
		}
		if (q->kind == K_POSIX)
			w = waiter_set(t, w, on);
		uint32_t seq = __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE);
		__atomic_add_fetch(&t->sleepers, 1, __ATOMIC_ACQ_REL);
		lk_tunlock(t);
		if (pending_intr(&caller)) {
			r = -EINTR;
		} else {
			pthread_sigmask(SIG_SETMASK, &caller, NULL);
			r = lk_sleep(&t->seq, seq, &caller);
			pthread_sigmask(SIG_BLOCK, &all, NULL);
		}
		__atomic_sub_fetch(&t->sleepers, 1, __ATOMIC_ACQ_REL);
		if (r == -EINTR) {
			lk_tlock(t);
			waiter_clear(t, w);
			lk_tunlock(t);
			break;
		}
	}
	if (wait)
		pthread_sigmask(SIG_SETMASK, &caller, NULL); /* a pending handler runs now */
	return r;
}

/* ---- entry points ------------------------------------------------------ */

int kp_lock_fcntl(int fd, struct kp_fd *e, int cmd, struct flock *fl)
{
	(void)fd;
	kura_fs *fs = kp_mounts[e->mnt].fs;
	if (!fl)
		return (int)kp_ret(-EFAULT);
	int ofd = cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
	int getlk = cmd == F_GETLK || cmd == F_OFD_GETLK;
	int wait = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
	if (ofd && fl->l_pid != 0)
		return (int)kp_ret(-EINVAL);
	if (fl->l_type != F_RDLCK && fl->l_type != F_WRLCK && fl->l_type != F_UNLCK)
		return (int)kp_ret(-EINVAL);
	if (getlk && fl->l_type == F_UNLCK)
		return (int)kp_ret(-EINVAL);
	int acc = kura_fd_flags(fs, e->kfd) & O_ACCMODE;
	if (!getlk && ((fl->l_type == F_RDLCK && acc == O_WRONLY) || (fl->l_type == F_WRLCK && acc == O_RDONLY)))
		return (int)kp_ret(-EBADF);
	int64_t base;
	switch (fl->l_whence) {
	case SEEK_SET:
		base = 0;
		break;
	case SEEK_CUR:
		base = kura_lseek(fs, e->kfd, 0, SEEK_CUR);
		break;
	case SEEK_END: {
		struct stat st;
		int r = kura_fstat(fs, e->kfd, &st);
		if (r < 0)
			return (int)kp_ret(r);
		base = st.st_size;
		break;
	}
	default:
		return (int)kp_ret(-EINVAL);
	}
	if (base < 0)
		return (int)kp_ret(base);
	/* Linux's checks and errors (flock_to_posix_lock). */
	if (fl->l_start > INT64_MAX - base)
		return (int)kp_ret(-EOVERFLOW);
	int64_t s = base + fl->l_start, en;
	if (s < 0)
		return (int)kp_ret(-EINVAL);
	if (fl->l_len > 0) {
		if (fl->l_len - 1 > INT64_MAX - s)
			return (int)kp_ret(-EOVERFLOW);
		en = s + fl->l_len - 1;
	} else if (fl->l_len == 0) {
		en = INT64_MAX;
	} else {
		en = s - 1;
		s += fl->l_len;
		if (s < 0)
			return (int)kp_ret(-EINVAL);
	}
	struct lk_table *t = lk_table_get(e->mnt, 1);
	if (!t)
		return (int)kp_ret(-ENOLCK);
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return (int)kp_ret(ino);
	long id = ofd ? kura_fd_export(fs, e->kfd) : (long)kp_pid;
	if (id < 0)
		return (int)kp_ret(id);
	struct req q = { (uint64_t)ino, ofd ? lk_table_token(e->mnt) : 0, (uint64_t)id, s, en, ofd ? K_OFD : K_POSIX,
			 lk_t_of(fl->l_type) };
	if (getlk) {
		struct lk who;
		lk_tlock(t);
		int r = try_lock(t, e->mnt, &q, &who, 1, NULL);
		lk_tunlock(t);
		if (r == 0) {
			fl->l_type = F_UNLCK;
			return 0;
		}
		if (r != -EAGAIN)
			return (int)kp_ret(r);
		fl->l_type = who.type == T_WR ? F_WRLCK : F_RDLCK;
		fl->l_whence = SEEK_SET;
		fl->l_start = who.start;
		fl->l_len = who.end == INT64_MAX ? 0 : who.end - who.start + 1;
		fl->l_pid = who.kind == K_POSIX ? who.pid : -1;
		return 0;
	}
	return (int)kp_ret(lock_wait(t, e->mnt, &q, wait));
}

int kp_lock_flock(int fd, struct kp_fd *e, int op)
{
	(void)fd;
	kura_fs *fs = kp_mounts[e->mnt].fs;
	int type;
	switch (op & ~LOCK_NB) {
	case LOCK_SH: type = F_RDLCK; break;
	case LOCK_EX: type = F_WRLCK; break;
	case LOCK_UN: type = F_UNLCK; break;
	default: return (int)kp_ret(-EINVAL);
	}
	struct lk_table *t = lk_table_get(e->mnt, 1);
	if (!t)
		return (int)kp_ret(-ENOLCK);
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return (int)kp_ret(ino);
	long id = kura_fd_export(fs, e->kfd);
	if (id < 0)
		return (int)kp_ret(id);
	struct req q = { (uint64_t)ino, lk_table_token(e->mnt), (uint64_t)id, 0, INT64_MAX, K_FLOCK, lk_t_of(type) };
	int r = lock_wait(t, e->mnt, &q, !(op & LOCK_NB));
	return (int)kp_ret(r == -EAGAIN ? -EWOULDBLOCK : r);
}

struct same_desc {
	long id;
	int mnt, fd, found;
};

static void find_desc(int fd, struct kp_fd *e, void *arg)
{
	struct same_desc *sd = arg;
	if (fd != sd->fd && e->mnt == sd->mnt && kura_fd_export(kp_mounts[e->mnt].fs, e->kfd) == sd->id)
		sd->found = 1;
}

/* Called with the descriptor about to close (table lock held). */
void kp_lock_close(int fd, struct kp_fd *e)
{
	int m = e->mnt;
	struct lk_table *t = __atomic_load_n(&lk_tables[m], __ATOMIC_ACQUIRE);
	if (!t) {
		/* A new image may hold locks (or a holder slot) from before its
		 * exec without having mapped the table yet: look once. */
		if (lk_probed[m])
			return;
		lk_probed[m] = 1;
		if (!(t = lk_table_get(m, 0)))
			return;
	}
	kura_fs *fs = kp_mounts[m].fs;
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return;
	long id = kura_fd_export(fs, e->kfd);
	uint64_t tok = lk_table_token(m);
	lk_tlock(t);
	int mine = id >= 0 && id < LK_IDS ? lk_slot_mine(t, m, tok, 0) : -1, ours = 0;
	for (uint32_t i = 0; i < t->hi; i++) {
		struct lk *r = &t->rec[i];
		if (!r->type || r->ino != (uint64_t)ino)
			continue;
		/* POSIX: any close of the file drops the process's locks on it. */
		if (r->kind == K_POSIX && r->id == (uint64_t)kp_pid)
			drop(t, r);
		else if (r->kind != K_POSIX && r->tok == tok && r->id == (uint64_t)id)
			ours = 1;
	}
	if (!ours && (mine < 0 || !(t->held[mine][id / 64] >> (id % 64) & 1))) {
		lk_tunlock(t); /* the common case: no lock and no holder bit to look after */
		return;
	}
	/* Whether this was our last descriptor of the description.  (Engine
	 * calls under the table's mutex: the engine never calls back here.) */
	struct same_desc sd = { id, m, fd, 0 };
	kp_foreach(find_desc, &sd);
	if (sd.found) {
		lk_tunlock(t);
		return;
	}
	if (mine >= 0)
		t->held[mine][id / 64] &= ~(1ull << (id % 64));
	/* OFD and flock: gone with the last descriptor of the description anywhere. */
	if (ours && (id >= LK_IDS || !lk_desc_held(t, tok, (uint64_t)id)))
		for (uint32_t i = 0; i < t->hi; i++) {
			struct lk *r = &t->rec[i];
			if (r->type && r->kind != K_POSIX && r->tok == tok && r->id == (uint64_t)id)
				drop(t, r);
		}
	lk_tunlock(t);
}
