/*
 * lock.c — POSIX record locks, OFD locks and flock() on kura files.
 *
 * Placeholders are one memfd per open, so kernel locks on them would never
 * conflict between two opens of one file.  Locks live instead in a table in
 * POSIX shared memory, one per pool ("/kura-locks-<dev>-<ino>" of the pool
 * file), keyed by inode number and guarded by a robust process-shared
 * mutex.  Owners: a POSIX lock belongs to a process (pid); an OFD lock or a
 * flock() to an open file description, named by the engine's description
 * id and the identity (inode) of the description table it lives in, which
 * forked and exec'd processes share.  A record whose process is gone is
 * dropped when it is met, so a killed process never wedges the others.
 *
 * Known approximations: no EDEADLK detection; an OFD/flock lock is dropped
 * when its last descriptor in the locking process closes or that process
 * dies, even if a forked child still shares the description.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kp.h"

#define LK_MAX 4096
#define LK_MAGIC 0x6b6c6f63u
#define LK_INIT 1u

enum { K_POSIX = 1, K_OFD = 2, K_FLOCK = 3 };

struct lk {
	uint64_t ino;
	int64_t start, end; /* inclusive; INT64_MAX: to end of file and beyond */
	uint64_t tok, id;   /* owner: (0, pid) for POSIX, (table, description) otherwise */
	int32_t pid;        /* the process that took it */
	uint8_t kind, type; /* type: F_RDLCK or F_WRLCK; 0: free slot */
};

struct lk_table {
	uint32_t magic;
	pthread_mutex_t mu;
	struct lk rec[LK_MAX];
};

static struct lk_table *tables[KP_MAX_MOUNTS];
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int used_locks; /* this process has taken a POSIX lock: closes must look */

static struct lk_table *table(int m)
{
	struct lk_table *t = __atomic_load_n(&tables[m], __ATOMIC_ACQUIRE);
	if (t)
		return t;
	pthread_mutex_lock(&attach_lock);
	if (!tables[m]) {
		struct stat st;
		char name[96];
		if (REAL(stat)(kp_mounts[m].pool, &st) < 0)
			goto out;
		snprintf(name, sizeof name, "/kura-locks-%llx-%llx", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, st.st_mode & 0666);
		if (fd < 0)
			goto out;
		fchmod(fd, st.st_mode & 0666); /* shm_open applied our umask */
		if (ftruncate(fd, sizeof(struct lk_table)) < 0) {
			REAL(close)(fd);
			goto out;
		}
		void *p = mmap(NULL, sizeof(struct lk_table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		REAL(close)(fd);
		if (p == MAP_FAILED)
			goto out;
		t = p;
		uint32_t zero = 0;
		if (__atomic_compare_exchange_n(&t->magic, &zero, LK_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			pthread_mutexattr_t a;
			pthread_mutexattr_init(&a);
			pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
			pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
			pthread_mutex_init(&t->mu, &a);
			pthread_mutexattr_destroy(&a);
			__atomic_store_n(&t->magic, LK_MAGIC, __ATOMIC_RELEASE);
		}
		while (__atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != LK_MAGIC)
			sched_yield();
		__atomic_store_n(&tables[m], t, __ATOMIC_RELEASE);
	}
out:
	pthread_mutex_unlock(&attach_lock);
	return tables[m];
}

static void tlock(struct lk_table *t)
{
	if (pthread_mutex_lock(&t->mu) == EOWNERDEAD)
		pthread_mutex_consistent(&t->mu); /* records are independent; a dead holder's is dropped by pid */
}

static int alive(pid_t pid)
{
	return pid == kp_pid || kill(pid, 0) == 0 || errno != ESRCH;
}

static uint64_t table_token(int m)
{
	struct stat st;
	int sfd = kura_state_fd(kp_mounts[m].fs);
	if (sfd < 0 || REAL(fstat)(sfd, &st) < 0)
		return 1;
	return (uint64_t)st.st_ino | 1ull << 63;
}

static int flock_class(int kind)
{
	return kind == K_FLOCK;
}

static int same_owner(const struct lk *a, int kind, uint64_t tok, uint64_t id)
{
	return a->kind == kind && a->tok == tok && a->id == id;
}

/* Whether record r blocks a lock of (kind, owner, type) over [s, e]. */
static int conflicts(const struct lk *r, uint64_t ino, int kind, uint64_t tok, uint64_t id, int type, int64_t s,
		     int64_t e)
{
	if (!r->type || r->ino != ino || flock_class(r->kind) != flock_class(kind))
		return 0;
	if (same_owner(r, kind, tok, id))
		return 0;
	if (r->end < s || r->start > e)
		return 0;
	return r->type == F_WRLCK || type == F_WRLCK;
}

static struct lk *free_slot(struct lk_table *t)
{
	for (int i = 0; i < LK_MAX; i++)
		if (!t->rec[i].type)
			return &t->rec[i];
	return NULL;
}

/* Removes the owner's coverage of [s, e], splitting records at the edges.
 * Returns -ENOLCK if a split needs a slot that is not there. */
static int carve(struct lk_table *t, uint64_t ino, int kind, uint64_t tok, uint64_t id, int64_t s, int64_t e)
{
	for (int i = 0; i < LK_MAX; i++) {
		struct lk *r = &t->rec[i];
		if (!r->type || r->ino != ino || !same_owner(r, kind, tok, id) || r->end < s || r->start > e)
			continue;
		if (r->start < s && r->end > e) {
			struct lk *n = free_slot(t);
			if (!n)
				return -ENOLCK;
			*n = *r;
			n->start = e + 1;
			r->end = s - 1;
		} else if (r->start < s) {
			r->end = s - 1;
		} else if (r->end > e) {
			r->start = e + 1;
		} else {
			r->type = 0;
		}
	}
	return 0;
}

/* One attempt: 0 done, -EAGAIN conflict (with *who filled), other -errno. */
static int try_lock(struct lk_table *t, uint64_t ino, int kind, uint64_t tok, uint64_t id, int type, int64_t s,
		    int64_t e, struct lk *who, int test)
{
	tlock(t);
	int r = 0;
	for (int i = 0; i < LK_MAX; i++) {
		struct lk *x = &t->rec[i];
		if (!conflicts(x, ino, kind, tok, id, type, s, e))
			continue;
		if (!alive(x->pid)) {
			x->type = 0;
			continue;
		}
		if (who)
			*who = *x;
		r = -EAGAIN;
		break;
	}
	if (r == 0 && !test) {
		r = carve(t, ino, kind, tok, id, s, e);
		if (r == 0 && type != F_UNLCK) {
			struct lk *n = free_slot(t);
			if (!n) {
				r = -ENOLCK;
			} else {
				n->ino = ino;
				n->start = s;
				n->end = e;
				n->tok = tok;
				n->id = id;
				n->pid = kp_pid;
				n->kind = (uint8_t)kind;
				n->type = (uint8_t)type;
			}
		}
	}
	pthread_mutex_unlock(&t->mu);
	return r;
}

static int lock_wait(struct lk_table *t, uint64_t ino, int kind, uint64_t tok, uint64_t id, int type, int64_t s,
		     int64_t e, int wait)
{
	long ns = 200000;
	for (;;) {
		int r = try_lock(t, ino, kind, tok, id, type, s, e, NULL, 0);
		if (r != -EAGAIN || !wait)
			return r;
		/* Polling keeps the table free of per-waiter state a dead
		 * waiter could leave behind; the backoff caps at 10 ms. */
		struct timespec ts = { 0, ns };
		nanosleep(&ts, NULL);
		if (ns < 10000000)
			ns *= 2;
	}
}

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
	int64_t s = base + fl->l_start, en;
	if (fl->l_len > 0) {
		en = s + fl->l_len - 1;
	} else if (fl->l_len == 0) {
		en = INT64_MAX;
	} else {
		en = s - 1;
		s += fl->l_len;
	}
	if (s < 0)
		return (int)kp_ret(-EINVAL);
	struct lk_table *t = table(e->mnt);
	if (!t)
		return (int)kp_ret(-ENOLCK);
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return (int)kp_ret(ino);
	int kind = ofd ? K_OFD : K_POSIX;
	uint64_t tok = ofd ? table_token(e->mnt) : 0;
	uint64_t id = ofd ? (uint64_t)kura_fd_export(fs, e->kfd) : (uint64_t)kp_pid;
	if (getlk) {
		struct lk who;
		int r = try_lock(t, (uint64_t)ino, kind, tok, id, fl->l_type, s, en, &who, 1);
		if (r == 0) {
			fl->l_type = F_UNLCK;
			return 0;
		}
		if (r != -EAGAIN)
			return (int)kp_ret(r);
		fl->l_type = who.type;
		fl->l_whence = SEEK_SET;
		fl->l_start = who.start;
		fl->l_len = who.end == INT64_MAX ? 0 : who.end - who.start + 1;
		fl->l_pid = who.kind == K_POSIX ? who.pid : -1;
		return 0;
	}
	if (!ofd)
		__atomic_store_n(&used_locks, 1, __ATOMIC_RELAXED);
	return (int)kp_ret(lock_wait(t, (uint64_t)ino, kind, tok, id, fl->l_type, s, en, wait));
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
	struct lk_table *t = table(e->mnt);
	if (!t)
		return (int)kp_ret(-ENOLCK);
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return (int)kp_ret(ino);
	int r = lock_wait(t, (uint64_t)ino, K_FLOCK, table_token(e->mnt), (uint64_t)kura_fd_export(fs, e->kfd), type, 0,
			  INT64_MAX, !(op & LOCK_NB));
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
	struct lk_table *t = __atomic_load_n(&tables[e->mnt], __ATOMIC_ACQUIRE);
	if (!t)
		return;
	kura_fs *fs = kp_mounts[e->mnt].fs;
	int64_t ino = kura_fd_ino(fs, e->kfd);
	if (ino < 0)
		return;
	long id = kura_fd_export(fs, e->kfd);
	struct same_desc sd = { id, e->mnt, fd, 0 };
	kp_foreach(find_desc, &sd);
	uint64_t tok = sd.found ? 0 : table_token(e->mnt);
	tlock(t);
	for (int i = 0; i < LK_MAX; i++) {
		struct lk *r = &t->rec[i];
		if (!r->type || r->ino != (uint64_t)ino)
			continue;
		/* POSIX: any close of the file drops the process's locks on it. */
		if (r->kind == K_POSIX && r->id == (uint64_t)kp_pid)
			r->type = 0;
		/* OFD and flock: the last descriptor of the description here. */
		else if (!sd.found && r->kind != K_POSIX && r->tok == tok && r->id == (uint64_t)id)
			r->type = 0;
	}
	pthread_mutex_unlock(&t->mu);
}
