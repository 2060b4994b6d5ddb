/*
 * notify.c — change notification for pool paths: the shared event ring and
 * the producers' side.  notify_inst.c is the watchers' side.
 *
 * The kernel never sees a pool operation, so it cannot tell an inotify
 * instance about one; and the process doing the operation is not the one
 * watching.  Design:
 *
 * - One ring of KN_RECS event records per pool, in /dev/shm
 *   ("/kura-notify-<dev>-<ino>" of the pool file), made and checked as
 *   lktab.c makes the lock table (O_NOFOLLOW, shm_trusted: owner and mode,
 *   magic for the layout, size).  A record says what happened as fsnotify
 *   says it: the event, the directory's and the object's inode numbers,
 *   the name, a rename cookie, and to whom it goes (KN_CHILD/BOTH/SELF).
 *   Every process of the pool maps the ring when it mounts the pool.
 * - Producers (every wrapper that changes or reads a pool object) append a
 *   record only when the ring's `watching` count is not 0: with no watcher
 *   anywhere the cost of an operation is that one load (KP_WATCHED in
 *   kp.h).  Appending takes a position with one atomic add; the slot's
 *   sequence word is cleared while the record is written and set to the
 *   position + 1 when it is complete, so a reader knows a record it copied
 *   is whole (it re-reads the word after the copy) and notices being
 *   lapped (the word has moved past the position it wanted).  No one waits
 *   on anyone without a time limit: a writer that died halfway leaves a
 *   slot a reader skips after a second or two.
 * - Each watching process keeps its own read position per ring.  A thread
 *   (notify_inst.c) reads new records, matches them against the process's
 *   watches, and turns them into struct inotify_event bytes; an instance
 *   that was lapped gets IN_Q_OVERFLOW.  A second thread sleeps on the
 *   ring's futex word, which every record bumps (a wake only when someone
 *   sleeps), with a timeout, and wakes the first.
 * - An inotify instance a process with pools makes (or, made elsewhere,
 *   at its first pool watch) is taken over: its descriptor number becomes
 *   one end of a SOCK_SEQPACKET socketpair (the kernel instance moves to a
 *   descriptor of ours), so read, poll, select, epoll, FIONREAD, O_NONBLOCK
 *   and close are the kernel's own calls on a socket.  The thread forwards
 *   the kernel instance's events too (its watches keep working, their wds
 *   mapped so that pool wds never collide), one event per packet; read()
 *   of such a descriptor gathers packets into the kernel's answer
 *   (notify_api.c).
 *
 * Which records a process may see: anyone who can open the ring can open
 * the pool itself.  Watches are checked as the kernel checks them, read
 * permission on the watched object at inotify_add_watch.
 *
 * Not seen: stores through shared maps (as on Linux for mmap writes, no
 * IN_MODIFY), operations of processes that are not preloaded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lktab.h"
#include "notify.h"
#include "shm.h"

static uint32_t nzero; /* what kp_nwatch points at without a ring: no one watches */
uint32_t *kp_nwatch[KP_MAX_MOUNTS] = { [0 ... KP_MAX_MOUNTS - 1] = &nzero };
struct kn_ring *kn_rings[KP_MAX_MOUNTS];
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool file, open and flock()ed (how: LOCK_SH, LOCK_EX), with the
 * name of its ring; -1 if it cannot be.  kura_release holds LOCK_EX while
 * it decides whether its process is the pool's last and removes the
 * engine's shared state: under the same lock the ring is made (shared)
 * and removed (exclusive), so a process mounting as the last one leaves
 * never keeps a ring that is no longer the pool's. */
static int pool_locked(int m, int how, char *name, size_t nl, struct stat *st)
{
	int fd = REAL(open)(kp_mounts[m].pool, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while (REAL(flock)(fd, how) < 0)
		if (errno != EINTR) {
			REAL(close)(fd);
			return -1;
		}
	if (REAL(fstat)(fd, st) < 0) {
		REAL(close)(fd);
		return -1;
	}
	snprintf(name, nl, "/kura-notify-%llx-%llx", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
	return fd;
}

static struct kn_ring *map_ring(int m)
{
	struct stat st;
	char name[96];
	int pfd = pool_locked(m, LOCK_SH, name, sizeof name, &st);
	if (pfd < 0)
		return NULL;
	int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_CREAT, st.st_mode & 0666);
	/* Ours now: the last process to leave removes the name only when the
	 * engine's state, which our mount has made, is gone. */
	REAL(close)(pfd);
	if (fd < 0)
		return NULL;
	char why[256];
	struct stat ts;
	if (shm_trusted(fd, name, &st, why, sizeof why)) {
		kp_debug("%s", why); /* pool paths are then not watchable, and report nothing */
		REAL(close)(fd);
		return NULL;
	}
	fchmod(fd, st.st_mode & 0666); /* shm_open applied our umask; a no-op if it is not ours */
	if (REAL(fstat)(fd, &ts) < 0 ||
	    ((size_t)ts.st_size < sizeof(struct kn_ring) && kura_own_ftruncate(fd, sizeof(struct kn_ring)) < 0)) {
		REAL(close)(fd);
		return NULL;
	}
	void *p = mmap(NULL, sizeof(struct kn_ring), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	REAL(close)(fd);
	if (p == MAP_FAILED)
		return NULL;
	/* All zeros is a valid empty ring, so there is nothing to initialise
	 * and no maker to wait for: the first to look claims the magic. */
	struct kn_ring *r = p;
	uint32_t old = 0;
	if (!__atomic_compare_exchange_n(&r->magic, &old, KN_MAGIC, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
	    old != KN_MAGIC &&
	    __atomic_compare_exchange_n(&r->magic, &old, KN_MAGIC, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		/* Left by another version of this file, with another layout:
		 * emptied, as lktab.c does with a lock table. */
		memset((char *)r + sizeof r->magic, 0, sizeof *r - sizeof r->magic);
	return r;
}

struct kn_ring *kn_ring_get(int m)
{
	struct kn_ring *r = __atomic_load_n(&kn_rings[m], __ATOMIC_ACQUIRE);
	if (r || !kp_mounts[m].fs)
		return r;
	sighold_lock(&attach_lock);
	if (!kn_rings[m] && (r = map_ring(m))) {
		__atomic_store_n(&kn_rings[m], r, __ATOMIC_RELEASE);
		__atomic_store_n(&kp_nwatch[m], &r->watching, __ATOMIC_RELEASE);
	}
	sighold_unlock(&attach_lock);
	return kn_ring_of(m);
}

void kp_notify_fini(int m)
{
	struct stat st;
	char name[96], state[96];
	if (!kn_ring_of(m))
		return;
	int pfd = pool_locked(m, LOCK_EX, name, sizeof name, &st);
	if (pfd < 0)
		return;
	snprintf(state, sizeof state, "/dev/shm/kura-%llx-%llx", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	if (REAL(access)(state, F_OK) < 0 && errno == ENOENT)
		shm_unlink(name);
	REAL(close)(pfd);
}

void kp_notify_attach(int m)
{
	int er = errno;
	kn_ring_get(m);
	errno = er;
}

/* ---- who watches ---- */

static int my_watcher_slot[KP_MAX_MOUNTS]; /* 1 + index, 0: none */

/* Frees the slots of watchers that died (SIGKILL, exit with watches in
 * place), at most once a second per pool, by whoever reports an event. */
static void sweep(struct kn_ring *r)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	uint64_t was = __atomic_load_n(&r->swept, __ATOMIC_RELAXED);
	if ((uint64_t)now.tv_sec <= was ||
	    !__atomic_compare_exchange_n(&r->swept, &was, (uint64_t)now.tv_sec, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	for (int i = 0; i < KN_WATCHERS; i++) {
		int32_t pid = __atomic_load_n(&r->who[i].pid, __ATOMIC_ACQUIRE);
		uint64_t started = __atomic_load_n(&r->who[i].started, __ATOMIC_RELAXED);
		if (pid > 0 && !lk_alive_since(pid, started) &&
		    __atomic_compare_exchange_n(&r->who[i].pid, &pid, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			__atomic_sub_fetch(&r->watching, 1, __ATOMIC_RELAXED);
	}
}

int kn_watcher_add(int m)
{
	struct kn_ring *r = kn_ring_of(m);
	if (!r)
		return -ENOSPC;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < KN_WATCHERS; i++) {
			int32_t free_ = 0;
			/* A slot is counted before it is claimed: a sweeper that sees
			 * it claimed may take it away, never below zero. */
			__atomic_add_fetch(&r->watching, 1, __ATOMIC_SEQ_CST);
			if (__atomic_compare_exchange_n(&r->who[i].pid, &free_, (int32_t)kp_pid, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED)) {
				__atomic_store_n(&r->who[i].started, lk_my_start(), __ATOMIC_RELAXED);
				my_watcher_slot[m] = i + 1;
				return 0;
			}
			__atomic_sub_fetch(&r->watching, 1, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&r->swept, 0, __ATOMIC_RELAXED);
		sweep(r);
	}
	return -ENOSPC;
}

void kn_watcher_drop(int m)
{
	struct kn_ring *r = kn_ring_of(m);
	int i = my_watcher_slot[m] - 1;
	my_watcher_slot[m] = 0;
	int32_t me = (int32_t)kp_pid;
	if (r && i >= 0 && __atomic_compare_exchange_n(&r->who[i].pid, &me, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		__atomic_sub_fetch(&r->watching, 1, __ATOMIC_RELAXED);
}

/* A watcher that exits stops counting at once; one killed waits for a
 * sweep.  (A fork child's copy of the slot numbers names its parent's
 * slots, which kn_watcher_drop leaves alone.) */
__attribute__((destructor)) static void watchers_exit(void)
{
	for (int m = 0; m < KP_MAX_MOUNTS; m++)
		if (my_watcher_slot[m])
			kn_watcher_drop(m);
}

/* ---- reporting ---- */

/* The ring is written and read by other processes while we copy: word by
 * word with atomic accesses, and the sequence word says whether the copy
 * is whole. */
static void emit(int m, int kind, uint32_t mask, uint32_t cookie, uint64_t dir, uint64_t obj, const char *name,
		 size_t nl)
{
	struct kn_ring *r = kn_ring_of(m);
	if (!r)
		return;
	union {
		struct kn_rec rec;
		uint64_t w[KN_WORDS];
	} u;
	memset(&u, 0, sizeof u);
	if (nl >= KN_NAME)
		nl = KN_NAME - 1;
	u.rec = (struct kn_rec){ .dir = dir, .obj = obj, .mask = mask, .cookie = cookie, .kind = (uint32_t)kind,
				 .namelen = (uint32_t)nl };
	if (nl)
		memcpy(u.rec.name, name, nl);
	uint64_t pos = __atomic_fetch_add(&r->head, 1, __ATOMIC_ACQ_REL);
	uint64_t *slot = (uint64_t *)&r->rec[pos % KN_RECS];
	__atomic_store_n(&slot[0], 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (size_t i = 1; i < KN_WORDS; i++)
		__atomic_store_n(&slot[i], u.w[i], __ATOMIC_RELAXED);
	__atomic_store_n(&slot[0], pos + 1, __ATOMIC_RELEASE);
	/* A sleeper counts itself before it reads wake, so it sees the new
	 * value or is woken (both sides sequentially consistent). */
	__atomic_add_fetch(&r->wake, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->sleepers, __ATOMIC_SEQ_CST))
		kp_syscall(SYS_futex, &r->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	sweep(r);
}

int kn_fetch(struct kn_ring *r, uint64_t pos, struct kn_rec *out)
{
	uint64_t *slot = (uint64_t *)&r->rec[pos % KN_RECS];
	uint64_t s = __atomic_load_n(&slot[0], __ATOMIC_ACQUIRE);
	if (s > pos + 1)
		return -1;
	if (s != pos + 1)
		return 0;
	uint64_t *w = (uint64_t *)out;
	w[0] = s;
	for (size_t i = 1; i < KN_WORDS; i++)
		w[i] = __atomic_load_n(&slot[i], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&slot[0], __ATOMIC_RELAXED) != s)
		return -1;
	if (out->namelen >= KN_NAME) /* another user's bytes: bounded before use */
		out->namelen = KN_NAME - 1;
	out->name[out->namelen] = 0;
	return 1;
}

/* ---- what the wrappers report ---- */

/* p split into its directory (into dir, "." or "/" for none) and its last
 * component (*name, *nl); trailing slashes are not part of it. */
static void split(const char *p, char *dir, size_t dl, const char **name, size_t *nl)
{
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		n--;
	size_t s = n;
	while (s > 0 && p[s - 1] != '/')
		s--;
	*name = p + s;
	*nl = n - s;
	if (s == 0)
		snprintf(dir, dl, ".");
	else if (s == 1)
		snprintf(dir, dl, "/");
	else
		snprintf(dir, dl, "%.*s", (int)(s - 1), p);
}

static uint64_t dir_ino(kura_fs *fs, int kdirfd, const char *dir)
{
	struct stat st;
	return kura_fstatat(fs, kdirfd, dir, &st, 0) == 0 ? (uint64_t)st.st_ino : 0;
}

void kp_notify_pre(int m, int kdirfd, const char *p, struct kp_nstat *ns)
{
	struct stat st;
	ns->ok = kura_fstatat(kp_mounts[m].fs, kdirfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0;
	ns->ino = ns->ok ? (uint64_t)st.st_ino : 0;
	ns->nlink = ns->ok ? (uint64_t)st.st_nlink : 0;
	ns->isdir = ns->ok && S_ISDIR(st.st_mode);
}

/* Records one event about the name (kdirfd, p), whose object is ns. */
static void name_event(int m, int kdirfd, const char *p, uint32_t mask, int kind, const struct kp_nstat *ns,
		       uint32_t cookie)
{
	char dir[PATH_MAX];
	const char *name;
	size_t nl;
	split(p, dir, sizeof dir, &name, &nl);
	uint64_t d = dir_ino(kp_mounts[m].fs, kdirfd, dir);
	emit(m, kind, mask | (ns->isdir ? IN_ISDIR : 0), cookie, d, ns->ino, name, nl);
}

void kp_notify_at(int m, int kdirfd, const char *p, uint32_t mask, int kind)
{
	struct kp_nstat ns;
	int er = errno;
	kp_notify_pre(m, kdirfd, p, &ns);
	if (ns.ok)
		name_event(m, kdirfd, p, mask, kind, &ns, 0);
	errno = er;
}

/* As vfs_unlink/vfs_rmdir: the link count's IN_ATTRIB on a file that keeps
 * other names, the object's IN_DELETE_SELF when its last name went, then
 * the directory's IN_DELETE.  (Linux reports IN_DELETE_SELF of a file still
 * open at its last close; here it comes with the unlink.) */
void kp_notify_unlinked(int m, int kdirfd, const char *p, const struct kp_nstat *ns)
{
	if (!ns->ok)
		return;
	int er = errno;
	if (!ns->isdir)
		emit(m, KN_SELF, IN_ATTRIB, 0, 0, ns->ino, NULL, 0);
	if (ns->isdir || ns->nlink <= 1)
		emit(m, KN_SELF, IN_DELETE_SELF | (ns->isdir ? IN_ISDIR : 0), 0, 0, ns->ino, NULL, 0);
	name_event(m, kdirfd, p, IN_DELETE, KN_CHILD, ns, 0);
	errno = er;
}

static void one_move(int m, int od, const char *op, int nd, const char *np, const struct kp_nstat *src,
		     const struct kp_nstat *dst)
{
	struct kn_ring *r = kn_ring_of(m);
	uint32_t cookie = r ? __atomic_add_fetch(&r->cookie, 1, __ATOMIC_RELAXED) : 0;
	if (!cookie && r)
		cookie = __atomic_add_fetch(&r->cookie, 1, __ATOMIC_RELAXED); /* 0 means "no cookie" */
	name_event(m, od, op, IN_MOVED_FROM, KN_CHILD, src, cookie);
	name_event(m, nd, np, IN_MOVED_TO, KN_CHILD, src, cookie);
	if (dst && dst->ok && !dst->isdir)
		emit(m, KN_SELF, IN_ATTRIB, 0, 0, dst->ino, NULL, 0);
	emit(m, KN_SELF, IN_MOVE_SELF | (src->isdir ? IN_ISDIR : 0), 0, 0, src->ino, NULL, 0);
}

/* As fsnotify_move, once per direction for RENAME_EXCHANGE; a replaced
 * target that lost its last name is deleted afterwards. */
void kp_notify_renamed(int m, int od, const char *op, int nd, const char *np, const struct kp_nstat *src,
		       const struct kp_nstat *dst, unsigned flags)
{
	if (!src->ok)
		return;
	int er = errno;
	if (flags & RENAME_EXCHANGE) {
		one_move(m, od, op, nd, np, src, NULL);
		if (dst->ok)
			one_move(m, nd, np, od, op, dst, NULL);
	} else {
		one_move(m, od, op, nd, np, src, dst);
		if (dst->ok && dst->ino != src->ino && (dst->isdir || dst->nlink <= 1))
			emit(m, KN_SELF, IN_DELETE_SELF | (dst->isdir ? IN_ISDIR : 0), 0, 0, dst->ino, NULL, 0);
	}
	errno = er;
}

void kp_notify_linked(int m, int nd, const char *np)
{
	struct kp_nstat ns;
	int er = errno;
	kp_notify_pre(m, nd, np, &ns);
	if (ns.ok) {
		emit(m, KN_SELF, IN_ATTRIB, 0, 0, ns.ino, NULL, 0);
		name_event(m, nd, np, IN_CREATE, KN_CHILD, &ns, 0);
	}
	errno = er;
}

void kp_notify_fd(struct kp_fd *e, uint32_t mask)
{
	kura_fs *fs = kp_mounts[e->mnt].fs;
	struct stat st;
	int er = errno;
	if (kura_fstat(fs, e->kfd, &st) < 0) {
		errno = er;
		return;
	}
	if (e->isdir)
		mask |= IN_ISDIR;
	/* The directory the file was opened in, by the path it was opened
	 * by: Linux's is the dentry's parent, which follows renames. */
	uint64_t d = 0;
	const char *name = NULL;
	size_t nl = 0;
	const char *path = e->path;
	size_t plen = kp_mounts[e->mnt].plen;
	if (path && !strncmp(path, kp_mounts[e->mnt].prefix, plen) && path[plen] == '/' && path[plen + 1]) {
		char dir[PATH_MAX];
		split(path + plen, dir, sizeof dir, &name, &nl);
		d = dir_ino(fs, KURA_AT_ROOT, dir);
	}
	emit(e->mnt, KN_BOTH | (st.st_nlink ? 0 : KN_UNLINKED), mask, 0, d, (uint64_t)st.st_ino, name, nl);
	errno = er;
}

static void same_desc(int fd, struct kp_fd *o, void *arg)
{
	long *a = arg; /* {fd, mnt, description id, found} */
	if (fd != a[0] && o->mnt == a[1] && kura_fd_export(kp_mounts[o->mnt].fs, o->kfd) == a[2])
		a[3] = 1;
}

/* Descriptors of the description in other processes (fork) are not seen:
 * each process's last close reports. */
void kp_notify_closing(int fd, struct kp_fd *e)
{
	kura_fs *fs = kp_mounts[e->mnt].fs;
	long a[4] = { fd, e->mnt, kura_fd_export(fs, e->kfd), 0 };
	kp_foreach(same_desc, a);
	if (a[3])
		return;
	int fl = kura_fd_flags(fs, e->kfd);
	kp_notify_fd(e, fl >= 0 && (fl & O_ACCMODE) != O_RDONLY ? IN_CLOSE_WRITE : IN_CLOSE_NOWRITE);
}
