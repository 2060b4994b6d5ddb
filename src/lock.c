/* lock.c — the shared lock table (see lock.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "lock.h"
#include "media.h"
#include "sighold.h"
#include "tracee.h"
#include "shm.h"

#define LOCKTAB_MAGIC 0x6b6c626174727573ull /* ...6b: open slots without map counts; 6c: no maps_total; 6d: no truncs; 6e: no owners; 6f: no binds; 70: slots hashed apart; 71: 32-byte ledger entries; 72: map state inside the open slots */

static int init_table(struct locktab *t)
{
	pthread_mutexattr_t a;
	/* The caller emptied the file: the table reads as zeros already, and
	 * touching all of it would fault in every page at each first mount. */
	if (pthread_mutexattr_init(&a) || pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) ||
	    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) || pthread_mutex_init(&t->mutex, &a))
		return -EINVAL;
	pthread_mutexattr_destroy(&a);
	__atomic_store_n(&t->magic, LOCKTAB_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int lock_attach(struct lockh *h, int pool_fd, int *alone)
{
	/* The pool's own flock serialises attach and detach, so "am I alone" and
	 * the initialisation that follows cannot interleave with another mount. */
	while (flock(pool_fd, LOCK_EX) && errno == EINTR)
		;
	int err = lock_attach_held(h, pool_fd, alone);
	flock(pool_fd, LOCK_UN);
	return err;
}

int lock_is_last(struct lockh *h)
{
	/* A failed conversion drops the shared lock: only for a detaching mount. */
	return h->t && flock(h->fd, LOCK_EX | LOCK_NB) == 0;
}

void lock_remove(struct lockh *h)
{
	shm_unlink(h->name);
}

int lock_fork_child(struct lockh *h)
{
	/* flock locks belong to open file descriptions, and fork shares ours:
	 * the child takes its own, or either process would count the other as
	 * itself when asking whether it is the last mount. */
	int fd = shm_open(h->name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return -errno;
	int err = 0;
	if (flock(fd, LOCK_SH) || dup3(fd, h->fd, O_CLOEXEC) < 0)
		err = -errno;
	close(fd);
	return err;
}

/* The first to attach empties the table, so that it reads as zeros
 * (init_table).  One of the right size is emptied in place, by a punched
 * hole, which grows nothing: a program under a small RLIMIT_FSIZE, exec'd
 * by one that set it, may still mount (media_limit.c). */
static int empty_table(int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == sizeof(struct locktab) &&
	    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size) == 0)
		return 0;
	int err = media_ftruncate(fd, 0);
	return err ? err : media_ftruncate(fd, sizeof(struct locktab));
}

int lock_attach_held(struct lockh *h, int pool_fd, int *alone)
{
	struct stat st;
	memset(h, 0, sizeof *h);
	h->fd = -1;
	h->owner_fd = -1;
	if (fstat(pool_fd, &st))
		return -errno;
	snprintf(h->name, sizeof h->name, "/kura-%llx-%llx", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	int err = 0;
	int fd = shm_open(h->name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0666);
	if (fd < 0) {
		err = -errno;
		snprintf(h->why, sizeof h->why, "/dev/shm%s: %s", h->name, strerror(errno));
		goto out;
	}
	/* Whoever made it first: someone who cannot use the pool could
	 * otherwise hold or reset its mutex. */
	if ((err = shm_trusted(fd, h->name, &st, h->why, sizeof h->why)))
		goto out;
	fchmod(fd, st.st_mode & 0666); /* umask must not lock out other users of the pool */
	*alone = flock(fd, LOCK_EX | LOCK_NB) == 0;
	if (*alone && (err = empty_table(fd)))
		goto out;
	struct stat ts;
	if (fstat(fd, &ts) || (uint64_t)ts.st_size < sizeof(struct locktab)) {
		err = -EIO;
		goto out;
	}
	void *p = mmap(NULL, sizeof(struct locktab), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		err = -errno;
		goto out;
	}
	h->t = p;
	if (*alone)
		err = init_table(h->t);
	else if (__atomic_load_n(&h->t->magic, __ATOMIC_ACQUIRE) != LOCKTAB_MAGIC)
		err = -EIO;
	if (!err && flock(fd, LOCK_SH))
		err = -errno;
out:
	if (err) {
		if (h->t)
			munmap(h->t, sizeof(struct locktab));
		if (fd >= 0)
			close(fd);
		h->t = NULL;
	} else {
		h->fd = fd;
	}
	return err;
}

void lock_detach(struct lockh *h, int pool_fd)
{
	if (!h->t)
		return;
	munmap(h->t, sizeof(struct locktab));
	/* The last one out removes the table; the next mount starts afresh.
	 * Under the pool's flock: an attacher that opened the table but has not
	 * yet taken its shared flock would otherwise go on with a removed table
	 * while later mounts make a new one, and nothing would serialise them. */
	if (pool_fd >= 0)
		while (flock(pool_fd, LOCK_EX) && errno == EINTR)
			;
	if (flock(h->fd, LOCK_EX | LOCK_NB) == 0)
		shm_unlink(h->name);
	close(h->fd);
	if (h->owner_fd >= 0)
		close(h->owner_fd); /* the family's other processes may hold it on */
	h->owner_fd = -1;
	h->owner = 0;
	if (pool_fd >= 0)
		flock(pool_fd, LOCK_UN);
	h->t = NULL;
	h->fd = -1;
}

/* The mutex taken within the spin (trylock's answer), or EBUSY.  glibc's
 * robust mutexes do not spin themselves; the lock word holds the owner's
 * thread id, 0 when free. */
static int spin_for(pthread_mutex_t *m)
{
	int r = pthread_mutex_trylock(m);
	for (int i = 0; r == EBUSY && i < LOCK_SPIN_PAUSES; i++) {
		lock_cpu_relax();
		if (!__atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED))
			r = pthread_mutex_trylock(m);
	}
	return r;
}

int lock_acquire(struct lockh *h)
{
	sighold_enter();
	int r = spin_for(&h->t->mutex);
	if (r == EBUSY)
		r = tracee_robust_lock(&h->t->mutex);
	return r == EOWNERDEAD;
}

int lock_acquire_unless_tracee(struct lockh *h)
{
	sighold_enter();
	int r = spin_for(&h->t->mutex);
	if (r == EBUSY)
		r = tracee_safe_lock(&h->t->mutex);
	if (r == EDEADLK) {
		sighold_leave();
		return -EDEADLK;
	}
	return r == EOWNERDEAD;
}

void lock_mark_consistent(struct lockh *h)
{
	pthread_mutex_consistent(&h->t->mutex);
}

int lock_held_here(const struct lockh *h)
{
	return __atomic_load_n(&h->t->mutex.__data.__owner, __ATOMIC_RELAXED) == gettid();
}

void lock_release(struct lockh *h)
{
	pthread_mutex_unlock(&h->t->mutex);
	sighold_leave();
}

/* Inode numbers made together are close (slots of one inode block), and
 * so are their slots here, sixteen at a time: a program creating files one
 * after another probes lines it just used instead of a cold one per file.
 * The groups of sixteen are scattered, so that many files open with
 * consecutive numbers do not make one long run for others to probe
 * through. */
static size_t open_slot(uint64_t ino)
{
	return (size_t)((((ino >> 4) * 0x9e3779b97f4a7c15ull) >> 40) << 4 | (ino & 15)) & (LOCK_OPEN_SLOTS - 1);
}

static size_t find(const struct locktab *t, uint64_t ino)
{
	size_t i = open_slot(ino);
	for (size_t n = 0; n < LOCK_OPEN_SLOTS; n++, i = (i + 1) & (LOCK_OPEN_SLOTS - 1))
		if (t->open[i].ino == ino || t->open[i].ino == 0)
			return i;
	return LOCK_OPEN_SLOTS;
}

/* The slot counting ino, or LOCK_OPEN_SLOTS if it has none. */
static size_t slot_of(const struct locktab *t, uint64_t ino)
{
	size_t i = find(t, ino);
	return i < LOCK_OPEN_SLOTS && t->open[i].ino == ino ? i : LOCK_OPEN_SLOTS;
}

/* One more count for ino: its slot, or LOCK_OPEN_SLOTS when full. */
static size_t slot_inc(struct locktab *t, uint64_t ino)
{
	size_t i = find(t, ino);
	if (i == LOCK_OPEN_SLOTS)
		return i;
	if (t->open[i].ino == 0) {
		/* Keep a quarter free so probes stay short and always terminate. */
		if (t->open_used >= LOCK_OPEN_SLOTS / 4 * 3)
			return LOCK_OPEN_SLOTS;
		t->open[i].ino = ino;
		t->open_used++;
	}
	t->open[i].count++;
	return i;
}

static int has_mapped(const struct locktab *t, size_t i)
{
	return t->mapped_used[i / 64] >> (i % 64) & 1;
}

static struct lock_mapped *mapped_part(struct locktab *t, size_t i)
{
	t->mapped_used[i / 64] |= 1ull << (i % 64);
	return &t->mapped[i];
}

static void clear_mapped(struct locktab *t, size_t i)
{
	if (has_mapped(t, i)) {
		memset(&t->mapped[i], 0, sizeof t->mapped[i]);
		t->mapped_used[i / 64] &= ~(1ull << (i % 64));
	}
}

/* Slot from's count and map state into slot to. */
static void move_slot(struct locktab *t, size_t to, size_t from)
{
	t->open[to] = t->open[from];
	if (has_mapped(t, from))
		*mapped_part(t, to) = t->mapped[from];
	else
		clear_mapped(t, to);
}

/* One count fewer in slot i; returns those left, emptying the slot at 0. */
static uint64_t dec_at(struct locktab *t, size_t i)
{
	if (--t->open[i].count)
		return t->open[i].count;
	/* Backward-shift deletion keeps every remaining key reachable without tombstones. */
	size_t hole = i;
	/* At most once round, as the ledger's deletion (lock_owner.c). */
	for (size_t j = (i + 1) & (LOCK_OPEN_SLOTS - 1), n = 1; n < LOCK_OPEN_SLOTS && t->open[j].ino;
	     j = (j + 1) & (LOCK_OPEN_SLOTS - 1), n++) {
		size_t home = open_slot(t->open[j].ino);
		if (((j - home) & (LOCK_OPEN_SLOTS - 1)) >= ((j - hole) & (LOCK_OPEN_SLOTS - 1))) {
			move_slot(t, hole, j);
			hole = j;
		}
	}
	memset(&t->open[hole], 0, sizeof t->open[hole]);
	clear_mapped(t, hole);
	t->open_used--;
	return 0;
}

/* An open (map 0) or a shared map (map 1, also an open), in the slot and
 * in this owner's ledger entry, or in neither. */
static int count_in(struct lockh *h, uint64_t ino, int map)
{
	struct locktab *t = h->t;
	size_t i = slot_inc(t, ino);
	if (i == LOCK_OPEN_SLOTS)
		return -ENFILE;
	int err = lock_ledger_add(h, ino, 1, map);
	if (err) {
		dec_at(t, i);
		return err;
	}
	if (map) {
		mapped_part(t, i)->maps++;
		t->maps_total++;
	}
	return 0;
}

int lock_open_inc(struct lockh *h, uint64_t ino)
{
	return count_in(h, ino, 0);
}

uint64_t lock_open_count(const struct lockh *h, uint64_t ino)
{
	if (!__atomic_load_n(&h->t->open_used, __ATOMIC_RELAXED))
		return 0; /* nothing is open: no probe into a cold table */
	size_t i = slot_of(h->t, ino);
	return i < LOCK_OPEN_SLOTS ? h->t->open[i].count : 0;
}

uint64_t lock_open_dec(struct lockh *h, uint64_t ino)
{
	size_t i = slot_of(h->t, ino);
	if (i == LOCK_OPEN_SLOTS)
		return 0;
	lock_ledger_add(h, ino, -1, 0);
	return dec_at(h->t, i);
}

void lock_drop(struct lockh *h, uint64_t ino, uint64_t opens, uint64_t maps)
{
	struct locktab *t = h->t;
	size_t i = slot_of(t, ino);
	if (i == LOCK_OPEN_SLOTS)
		return;
	if (maps && has_mapped(t, i)) {
		struct lock_mapped *s = &t->mapped[i];
		uint64_t m = maps < s->maps ? maps : s->maps;
		s->maps -= m;
		t->maps_total -= m;
	}
	uint64_t n = opens < t->open[i].count ? opens : t->open[i].count;
	if (n) {
		t->open[i].count -= n - 1;
		dec_at(t, i);
	}
}

struct lock_mapped *lock_slot(struct lockh *h, uint64_t ino)
{
	size_t i = slot_of(h->t, ino);
	return i < LOCK_OPEN_SLOTS ? mapped_part(h->t, i) : NULL;
}

int lock_map_inc(struct lockh *h, uint64_t ino)
{
	return count_in(h, ino, 1);
}

uint64_t lock_map_dec(struct lockh *h, uint64_t ino)
{
	struct locktab *t = h->t;
	size_t i = slot_of(t, ino);
	if (i == LOCK_OPEN_SLOTS || !has_mapped(t, i) || !t->mapped[i].maps)
		return 0;
	uint64_t left = --t->mapped[i].maps;
	t->maps_total--;
	lock_ledger_add(h, ino, -1, -1);
	dec_at(t, i);
	return left;
}

uint64_t lock_maps(const struct lockh *h, uint64_t ino)
{
	size_t i = slot_of(h->t, ino);
	return i < LOCK_OPEN_SLOTS && has_mapped(h->t, i) ? h->t->mapped[i].maps : 0;
}
