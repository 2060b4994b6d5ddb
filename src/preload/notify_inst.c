/*
 * notify_inst.c — the watchers' side of change notification (notify.c's
 * opening comment has the design): inotify instances that watch pool
 * paths, the thread that feeds them, and fcntl(F_NOTIFY) on pool
 * directories.
 *
 * An instance becomes ours when it is made (notify_api.c): the program's
 * descriptor number is then one end of a SOCK_SEQPACKET socketpair, the
 * kernel instance sits behind a close-on-exec descriptor of ours, and one
 * thread per process (all signals blocked) moves events into the socket:
 * records from the pools' rings that match a watch, and the kernel
 * instance's own events with their wds mapped; a second one sleeps on a
 * ring's futex and wakes the first.  Everything here, and the threads,
 * work under one mutex; the threads call no engine function.
 *
 * Each packet is one event (read() gathers them: notify_api.c).  Events wait in
 * a queue of ours while the socket is full, up to max_queued_events, then
 * IN_Q_OVERFLOW; an event equal to the last one not yet read is merged
 * into it, as the kernel does.
 *
 * fork: the child shares the socket (the same instance, as the kernel's),
 * fed by the parent's thread; watches cannot be added or removed through
 * it in the child (EOPNOTSUPP).  The child keeps the instance aside,
 * dormant, with a pidfd of the process feeding it, and takes it over when
 * that process ends: a daemon sets its watches up and forks, and its
 * parent exits (inotifywait -d).  A thread of the child waits for that,
 * and the child's own calls on the instance look first; the child's
 * thread then feeds it with the watches as they were at the fork, from
 * takeover_pos (pool events of the feeder's last second or two come
 * again rather than none being lost).  Without pidfds (Linux 5.3) the
 * child lets the instances go and they end with the parent.  exec: the new image has no thread and no
 * watches of ours; an instance's descriptor that stays open across the
 * exec (not close-on-exec) keeps our end of the pair open with it, so it
 * reads nothing (EAGAIN, or blocks) rather than end-of-file.  Its kernel
 * watches are gone too.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"

pthread_mutex_t kn_mu = PTHREAD_MUTEX_INITIALIZER;
struct inst *kn_insts;
int kn_pool_watches[KP_MAX_MOUNTS]; /* this process's pool watches and dnotify registrations */
static uint64_t rpos[KP_MAX_MOUNTS];
static int ctl = -1; /* eventfd: the thread's set of descriptors changed */
static int thread_on;
/* After fork: instances another process feeds (see the top), and
 * whether the thread waiting for their feeders runs.  Where a takeover
 * starts in each ring: at the fork, and then, while the feeder lives, the
 * head as the thread saw it a look (a second) before its last: the feeder,
 * which drains the rings every 100 ms, has delivered what lies before. */
static struct inst *dormant;
static int standby_on;
static uint64_t takeover_pos[KP_MAX_MOUNTS], seen_pos[KP_MAX_MOUNTS];

void kn_kick(void)
{
	uint64_t one = 1;
	if (ctl >= 0 && REAL(write)(ctl, &one, sizeof one) < 0) {
		/* the counter is full: the thread has plenty to wake for */
	}
}

/* One record against one instance: first the directory's watches (the
 * name), then the object's own, as fsnotify hands one event to a group
 * holding both marks. */
static void deliver(struct inst *in, int m, const struct kn_rec *r)
{
	uint32_t ev = r->mask & ~IN_ISDIR, kind = r->kind & ~KN_UNLINKED;
	char b[EV_MAX];
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < in->nw; i++) {
			struct watch *w = &in->w[i];
			if (w->kwd >= 0 || w->mnt != m)
				continue;
			if (pass == 0 ? kind == KN_SELF || w->ino != r->dir || !r->namelen
				      : kind == KN_CHILD || w->ino != r->obj)
				continue;
			if ((w->mask & IN_EXCL_UNLINK) && (r->kind & KN_UNLINKED))
				continue;
			int self_gone = pass == 1 && (ev & IN_DELETE_SELF);
			if (ev & w->mask) {
				size_t sz = kn_ev_make(b, w->wd, r->mask & (w->mask | IN_ISDIR), r->cookie,
						    pass == 0 ? r->name : NULL, pass == 0 ? r->namelen : 0);
				kn_push(in, b, sz);
				if (w->mask & IN_ONESHOT)
					self_gone = 1;
			}
			if (self_gone) {
				kn_drop_watch(in, i, 1);
				i--;
			}
		}
}

static void overflow(int m)
{
	char b[EV_SZ];
	for (struct inst *in = kn_insts; in; in = in->next)
		for (int i = 0; i < in->nw; i++)
			if (in->w[i].kwd < 0 && in->w[i].mnt == m) {
				kn_push(in, b, kn_ev_make(b, -1, IN_Q_OVERFLOW, 0, NULL, 0));
				break;
			}
}

/* New records of mount m's ring.  A slot still being written is waited
 * for a second at most: its writer may have died. */
static void drain(int m)
{
	static struct timespec stuck_since[KP_MAX_MOUNTS];
	struct kn_ring *ring = kn_ring_of(m);
	uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
	if (head - rpos[m] > KN_RECS) {
		overflow(m);
		rpos[m] = head - KN_RECS;
	}
	struct kn_rec r;
	while (rpos[m] < head) {
		int k = kn_fetch(ring, rpos[m], &r);
		if (k == 0) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (!stuck_since[m].tv_sec) {
				stuck_since[m] = now;
				return;
			}
			if (now.tv_sec - stuck_since[m].tv_sec < 2)
				return;
		}
		stuck_since[m].tv_sec = 0;
		rpos[m]++;
		if (k < 0) {
			overflow(m);
			continue;
		}
		if (k == 0)
			continue;
		for (struct inst *in = kn_insts; in; in = in->next)
			deliver(in, m, &r);
		kn_dn_deliver(m, &r);
	}
}

/* Every ring this process reads.  Records already in the rings belong before what a call queues now
 * (IN_IGNORED), and are not for a watch made now. */
void kn_drain_all(void)
{
	for (int m = 0; m < KP_MAX_MOUNTS; m++)
		if (kn_pool_watches[m] && kn_ring_of(m))
			drain(m);
}

/* Events from the kernel instance, their wds mapped to ours. */
static void forward_kernel(struct inst *in)
{
	char buf[64 * EV_MAX];
	ssize_t n;
	while ((n = REAL(read)(in->kfd, buf, sizeof buf)) > 0)
		for (ssize_t off = 0; off + (ssize_t)EV_SZ <= n;) {
			struct inotify_event *ev = (void *)(buf + off);
			size_t sz = EV_SZ + ev->len;
			off += (ssize_t)sz;
			int i = 0;
			while (i < in->nw && !(in->w[i].kwd >= 0 && in->w[i].kwd == ev->wd))
				i++;
			if (ev->wd == -1 || i < in->nw) {
				if (i < in->nw)
					ev->wd = in->w[i].wd;
				kn_push(in, (char *)ev, sz);
				if (i < in->nw && (ev->mask & IN_IGNORED))
					kn_drop_watch(in, i, 0);
			}
		}
}

static void free_inst(struct inst *in)
{
	REAL(close)(in->my);
	if (in->kfd >= 0)
		REAL(close)(in->kfd);
	free(in->w);
	free(in->q);
	free(in);
}

static void destroy(struct inst *in)
{
	for (struct inst **p = &kn_insts; *p; p = &(*p)->next)
		if (*p == in) {
			*p = in->next;
			break;
		}
	while (in->nw)
		kn_drop_watch(in, 0, 0);
	free_inst(in);
}

static pthread_cond_t watched = PTHREAD_COND_INITIALIZER; /* a first pool watch was made */

/* The second thread: sleeps on the futex of the first ring this process
 * reads (a pool's processes wake it with each record: notify.c emit) and
 * wakes the first thread.  Other rings, and a wake lost to a sleeper that
 * died, are looked at every 100 ms by the first thread. */
static void *waiter_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&kn_mu);
	for (;;) {
		int m = 0;
		while (m < KP_MAX_MOUNTS && !(kn_pool_watches[m] && kn_ring_of(m)))
			m++;
		if (m == KP_MAX_MOUNTS) {
			pthread_cond_wait(&watched, &kn_mu);
			continue;
		}
		struct kn_ring *r = kn_ring_of(m);
		uint32_t seen = __atomic_load_n(&r->wake, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&kn_mu);
		__atomic_add_fetch(&r->sleepers, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&r->wake, __ATOMIC_SEQ_CST) == seen) {
			struct timespec t = { 0, 100000000 };
			kp_syscall(SYS_futex, &r->wake, FUTEX_WAIT, seen, &t, NULL, 0);
		}
		__atomic_sub_fetch(&r->sleepers, 1, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&kn_mu);
		if (__atomic_load_n(&r->wake, __ATOMIC_SEQ_CST) != seen)
			kn_kick();
	}
	return NULL;
}

static int any_pool_watch(void)
{
	for (int m = 0; m < KP_MAX_MOUNTS; m++)
		if (kn_pool_watches[m])
			return 1;
	return 0;
}

static void *thread_main(void *arg)
{
	(void)arg;
	struct pollfd *pf = NULL;
	struct inst **who = NULL;
	int cap = 0;
	pthread_mutex_lock(&kn_mu);
	for (;;) {
		int n = 0, need = 1;
		for (struct inst *in = kn_insts; in; in = in->next)
			need += 2;
		if (need > cap) {
			cap = need * 2;
			pf = realloc(pf, (size_t)cap * sizeof *pf);
			who = realloc(who, (size_t)cap * sizeof *who);
			if (!pf || !who)
				abort();
		}
		pf[n++] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		for (struct inst *in = kn_insts; in; in = in->next) {
			who[n] = in;
			pf[n++] = (struct pollfd){ .fd = in->my, .events = in->qlen ? POLLOUT : 0 };
			who[n] = in;
			pf[n++] = (struct pollfd){ .fd = in->kfd, .events = POLLIN };
		}
		/* Rings cannot wake a poll: waiter_main does, and while pool
		 * paths are watched it looks every 100 ms anyway. */
		int timeout = any_pool_watch() ? 100 : -1;
		pthread_mutex_unlock(&kn_mu);
		poll(pf, (nfds_t)n, timeout);
		pthread_mutex_lock(&kn_mu);
		uint64_t c;
		if (pf[0].revents && REAL(read)(ctl, &c, sizeof c) < 0) {
			/* EAGAIN: another look already took it */
		}
		for (int i = 1; i < n; i += 2)
			if (pf[i + 1].revents & POLLIN)
				forward_kernel(who[i]);
		kn_drain_all();
		for (int i = 1; i < n; i += 2) {
			if (pf[i].revents & (POLLHUP | POLLERR))
				destroy(who[i]);
			else
				kn_flush(who[i]);
		}
	}
	return NULL;
}

/* The forking process's own pidfd, made before the fork: the child's
 * getppid() may already name a reaper, its parent having exited and been
 * reaped before the child ran at all. */
static int fork_pidfd = -1;

static void at_prepare(void)
{
	pthread_mutex_lock(&kn_mu);
	if (kn_insts)
		fork_pidfd = kn_high((int)kp_syscall(SYS_pidfd_open, getpid(), 0));
}

static void at_parent(void)
{
	if (fork_pidfd >= 0)
		REAL(close)(fork_pidfd);
	fork_pidfd = -1;
	pthread_mutex_unlock(&kn_mu);
}
/* Under kn_mu: dormant instances whose feeder has ended become this
 * process's own.  One whose pidfd is no longer one (the program closed
 * it) can no longer tell: it is let go, and ends with its feeder. */
static void take_over_orphans(void)
{
	for (struct inst **p = &dormant; *p;) {
		struct inst *in = *p;
		struct pollfd pf = { .fd = in->feeder, .events = POLLIN };
		if (poll(&pf, 1, 0) <= 0) {
			p = &in->next;
			continue;
		}
		*p = in->next;
		if (pf.revents & POLLNVAL) {
			free_inst(in);
			continue;
		}
		REAL(close)(in->feeder);
		in->next = kn_insts;
		kn_insts = in;
		for (int i = 0; i < in->nw; i++) {
			int m = in->w[i].mnt;
			if (in->w[i].kwd >= 0)
				continue;
			int first = !kn_pool_watches[m];
			if (kn_ref(m)) {
				kn_drop_watch(in, i--, 1);
				continue;
			}
			if (first)
				rpos[m] = takeover_pos[m];
		}
		kn_start_thread();
		kn_kick();
	}
}

/* The child's thread that waits for the feeders of its dormant instances
 * to end.  A feeder's pidfd closed by a takeover in between may have its
 * number reused: the poll times out and looks again. */
static void *standby_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&kn_mu);
	while (dormant) {
		struct pollfd pf[16];
		nfds_t n = 0;
		for (struct inst *in = dormant; in && n < 16; in = in->next)
			pf[n++] = (struct pollfd){ .fd = in->feeder, .events = POLLIN };
		pthread_mutex_unlock(&kn_mu);
		int ended = poll(pf, n, 1000);
		pthread_mutex_lock(&kn_mu);
		for (int m = 0; !ended && m < KP_MAX_MOUNTS; m++)
			if (kn_ring_of(m)) {
				takeover_pos[m] = seen_pos[m];
				seen_pos[m] = __atomic_load_n(&kn_ring_of(m)->head, __ATOMIC_ACQUIRE);
			}
		take_over_orphans();
	}
	standby_on = 0;
	pthread_mutex_unlock(&kn_mu);
	return NULL;
}

static void start_standby(void)
{
	sigset_t all, old;
	pthread_t t;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&t, NULL, standby_main, NULL) == 0) {
		pthread_detach(t);
		standby_on = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void at_child(void)
{
	/* The parent's thread feeds the instances this process shares with
	 * it: they wait, dormant, for it to end (see the top).  Events queued
	 * here are the parent's to send.  dnotify registrations are not
	 * inherited. */
	while (kn_insts) {
		struct inst *in = kn_insts;
		kn_insts = in->next;
		in->feeder = fork_pidfd < 0 ? -1 : kn_high(REAL(fcntl)(fork_pidfd, F_DUPFD_CLOEXEC, 3));
		if (in->feeder < 0) {
			free_inst(in);
			continue;
		}
		in->qhead = in->qlen = in->qn = in->lastlen = 0;
		in->next = dormant;
		dormant = in;
	}
	if (fork_pidfd >= 0)
		REAL(close)(fork_pidfd);
	fork_pidfd = -1;
	memcpy(takeover_pos, rpos, sizeof rpos);
	memcpy(seen_pos, rpos, sizeof rpos);
	kn_dn_child();
	memset(kn_pool_watches, 0, sizeof kn_pool_watches); /* the parent's slots in the rings stay its own */
	watched = (pthread_cond_t)PTHREAD_COND_INITIALIZER; /* the parent's waiter may have been waiting on it */
	thread_on = 0;
	standby_on = 0;
	if (ctl >= 0)
		REAL(close)(ctl);
	ctl = -1;
	if (dormant)
		start_standby();
	pthread_mutex_unlock(&kn_mu);
}

/* Our descriptors live at the top of the range, out of the program's way. */
int kn_high(int fd)
{
	kp_inside++;
	fd = kp_relocate(fd);
	kp_inside--;
	return fd;
}

/* Under kn_mu: the thread running in this process. */
int kn_start_thread(void)
{
	if (thread_on)
		return 0;
	static int atfork_done;
	if (!atfork_done && pthread_atfork(at_prepare, at_parent, at_child) == 0)
		atfork_done = 1;
	kn_queue_limit();
	if (ctl < 0 && (ctl = kn_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK))) < 0)
		return -errno;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t, w;
	int r = pthread_create(&t, NULL, thread_main, NULL);
	if (!r) {
		pthread_detach(t);
		thread_on = 1;
		if (!(r = pthread_create(&w, NULL, waiter_main, NULL)))
			pthread_detach(w);
		else
			r = 0; /* the first thread's 100 ms looks serve */
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -r;
}

int kn_ref(int m)
{
	if (!kn_pool_watches[m]) {
		int r = kn_watcher_add(m);
		if (r)
			return r;
		rpos[m] = __atomic_load_n(&kn_ring_of(m)->head, __ATOMIC_ACQUIRE);
		kn_kick();
		pthread_cond_signal(&watched);
	}
	kn_pool_watches[m]++;
	return 0;
}

void kn_unref(int m)
{
	if (!--kn_pool_watches[m])
		kn_watcher_drop(m);
}

struct inst *kn_find(const struct stat *st)
{
	for (struct inst *in = kn_insts; in; in = in->next)
		if (in->dev == st->st_dev && in->ino == st->st_ino)
			return in;
	return NULL;
}

int kn_inherited_here(const struct stat *st)
{
	take_over_orphans();
	for (struct inst *in = dormant; in; in = in->next)
		if (in->dev == st->st_dev && in->ino == st->st_ino)
			return 1;
	return 0;
}

