/* lock_owner.c — who holds the lock table's open counts (see "Owners" in lock.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "lock.h"

/* An owner slot being reaped: no generation ever handed out. */
#define OWNER_REAPED UINT64_MAX

/* The byte an owner's family keeps read-locked.  Past anything the table
 * maps, though byte locks need no data under them. */
static off_t owner_byte(uint32_t owner)
{
	return (off_t)(1ull << 40) + (off_t)owner;
}

static int owner_lock(int fd, uint32_t owner, short type, int cmd)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = owner_byte(owner), .l_len = 1 };
	int r;
	while ((r = fcntl(fd, cmd, &fl)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return -errno;
	return cmd == F_OFD_GETLK ? fl.l_type != F_UNLCK : 0;
}

/* A description of the table of this process's own (h->fd may be shared
 * with the family through fork): the owner lock lives on it. */
static int own_description(const struct lockh *h)
{
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", h->fd);
	int fd = open(self, O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static uint64_t slot_gen(const struct lockh *h, uint32_t k)
{
	return __atomic_load_n(&h->t->owners[k], __ATOMIC_ACQUIRE);
}

static void adopt(struct lockh *h, int fd, uint32_t owner, uint64_t gen)
{
	if (h->owner_fd >= 0 && h->owner_fd != fd)
		close(h->owner_fd);
	h->owner = owner;
	h->owner_gen = gen;
	h->owner_fd = fd;
}

/* The slot is claimed by compare-and-swap, after its byte is locked: a
 * reaper that sees the generation also sees the lock.  No step needs the
 * pool's mutex, and none may hold it: each is a system call, a stop under
 * ptrace, and a tracer writing its log into the pool (strace -o) would
 * wait for the mutex on its own stopped tracee for ever. */
int lock_owner_new(struct lockh *h)
{
	struct locktab *t = h->t;
	int fd = own_description(h);
	if (fd < 0)
		return fd;
	for (uint32_t k = 0; k < LOCK_OWNERS; k++) {
		if (slot_gen(h, k) || owner_lock(fd, k + 1, F_RDLCK, F_OFD_SETLK))
			continue;
		uint64_t gen, free_slot = 0;
		do
			gen = __atomic_add_fetch(&t->owner_gen, 1, __ATOMIC_RELAXED);
		while (gen == 0 || gen == OWNER_REAPED);
		if (__atomic_compare_exchange_n(&t->owners[k], &free_slot, gen, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			adopt(h, fd, k + 1, gen);
			return 0;
		}
		owner_lock(fd, k + 1, F_UNLCK, F_OFD_SETLK); /* another family took it first */
	}
	close(fd);
	return -ENOSPC;
}

int lock_owner_join(struct lockh *h, int inherited_fd, uint32_t owner, uint64_t gen)
{
	/* The slot still has its generation only while no reaper has begun on
	 * it (lock_owner_dead), so every count the family took is still there
	 * even if, for a moment during the exec, no process held its lock.
	 * Locked first, then checked, as lock_owner_new does. */
	int err = -ESTALE;
	if (owner && owner <= LOCK_OWNERS && slot_gen(h, owner - 1) == gen) {
		int fd = own_description(h);
		err = fd < 0 ? fd : owner_lock(fd, owner, F_RDLCK, F_OFD_SETLK);
		if (!err && slot_gen(h, owner - 1) != gen)
			err = -ESTALE;
		if (!err)
			adopt(h, fd, owner, gen);
		else if (fd >= 0)
			close(fd);
	}
	int live = err != -ESTALE;
	struct stat a, b;
	if (inherited_fd < 0 || inherited_fd == h->owner_fd || inherited_fd == h->fd || fstat(inherited_fd, &a) ||
	    fstat(h->fd, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return err; /* not the table's: not ours to close */
	/* The bridge's flock (lock_owner_bridge) has done its work: this
	 * image holds the table itself now. */
	while (flock(inherited_fd, LOCK_UN) && errno == EINTR)
		;
	if (err && live) {
		/* No description of our own (out of descriptors, say): the
		 * old image's, which holds the lock, serves. */
		fcntl(inherited_fd, F_SETFD, FD_CLOEXEC);
		adopt(h, inherited_fd, owner, gen);
		return 0;
	}
	close(inherited_fd); /* replaced by ours, or a hold on nothing */
	return err;
}

void lock_owner_bridge(struct lockh *h, int on)
{
	if (h->owner_fd < 0)
		return;
	fcntl(h->owner_fd, F_SETFD, on ? 0 : FD_CLOEXEC);
	while (flock(h->owner_fd, on ? LOCK_SH : LOCK_UN) && errno == EINTR)
		;
}

uint32_t lock_owner_dead(struct lockh *h)
{
	for (uint32_t k = 0; k < LOCK_OWNERS; k++) {
		uint64_t gen = slot_gen(h, k);
		if (gen == OWNER_REAPED)
			return k + 1; /* a reaper stopped half-way: go on with it */
		/* Asked from h->fd, our own owner's lock (on owner_fd) conflicts
		 * too.  The generation is read before the lock is asked for and
		 * a claimer locks before it sets one, so a lock taken since
		 * belongs to another generation, which the swap then misses. */
		if (gen && k + 1 != h->owner && owner_lock(h->fd, k + 1, F_WRLCK, F_OFD_GETLK) == 0 &&
		    __atomic_compare_exchange_n(&h->t->owners[k], &gen, OWNER_REAPED, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return k + 1; /* dead for good: no exec'd image may adopt it any more */
	}
	return 0;
}

static int reaped(const struct lockh *h, uint32_t owner)
{
	return owner && owner <= LOCK_OWNERS && slot_gen(h, owner - 1) == OWNER_REAPED;
}

/* Only a slot marked reaped: between two reapers' transactions the slot
 * may have been freed and handed to a new family. */
void lock_owner_free(struct lockh *h, uint32_t owner)
{
	if (reaped(h, owner)) {
		h->t->owner_entries[owner - 1] = 0;
		__atomic_store_n(&h->t->owners[owner - 1], 0, __ATOMIC_RELEASE);
	}
}

uint32_t lock_owner_entries(const struct lockh *h, uint32_t owner)
{
	return owner && owner <= LOCK_OWNERS ? h->t->owner_entries[owner - 1] : 0;
}

/* ---- the ledger: an open-addressed table keyed by (inode, owner) ---------- */

static uint64_t key_of(uint64_t ino, uint64_t owner)
{
	return ino | owner << LOCK_LEDGER_OWNER_SHIFT;
}

static uint64_t owner_of(uint64_t key)
{
	return key >> LOCK_LEDGER_OWNER_SHIFT;
}

/* Near for nearby inodes of one owner, 256 at a time: one page of the
 * table holds the entries of the files made from eight inode blocks.  The
 * table is shared memory that each first touch of a page costs a fault
 * in (about 2 us here), and one made afresh at each first mount: with
 * groups of sixteen, a program creating 20,000 files touched all its
 * pages, and those faults were a tenth of the time it took. */
static size_t home(uint64_t key)
{
	uint64_t ino = key & ((1ull << LOCK_LEDGER_OWNER_SHIFT) - 1);
	uint64_t group = ((ino >> 8) ^ (owner_of(key) << 48)) * 0x9e3779b97f4a7c15ull;
	return (size_t)((group >> 40) << 8 | (ino & 255)) & (LOCK_LEDGER_SLOTS - 1);
}

static size_t next(size_t i)
{
	return (i + 1) & (LOCK_LEDGER_SLOTS - 1);
}

static size_t find(const struct locktab *t, uint64_t key)
{
	size_t i = home(key);
	for (size_t n = 0; n < LOCK_LEDGER_SLOTS; n++, i = next(i))
		if (t->ledger[i].key == key || t->ledger[i].key == 0)
			return i;
	return LOCK_LEDGER_SLOTS;
}

/* Backward-shift deletion, as the open slots do (lock.c).  Only entries
 * away from their home slot ever move back; with none, no slot after the
 * hole need be read, which at the end of a group would fault in a page of
 * someone else's.  The count may exceed the truth, never fall short (it
 * rises before an entry lands away from home and falls after one is back),
 * so a process killed between the two only costs reads. */
static void delete_at(struct locktab *t, size_t i)
{
	size_t hole = i;
	int away = home(t->ledger[i].key) != i;
	/* At most once round: a table with no empty slot (someone else's
	 * damage) must not keep the deleter here for ever. */
	for (size_t j = next(i), n = 1; n < LOCK_LEDGER_SLOTS && t->ledger_displaced > (uint64_t)away && t->ledger[j].key;
	     j = next(j), n++) {
		size_t h = home(t->ledger[j].key);
		if (((j - h) & (LOCK_LEDGER_SLOTS - 1)) >= ((j - hole) & (LOCK_LEDGER_SLOTS - 1))) {
			t->ledger[hole] = t->ledger[j];
			if (hole == h)
				t->ledger_displaced--; /* moved home */
			hole = j;
		}
	}
	memset(&t->ledger[hole], 0, sizeof t->ledger[hole]);
	if (away && t->ledger_displaced)
		t->ledger_displaced--;
	t->ledger_used--;
}

static void entry_gone(struct locktab *t, uint64_t owner)
{
	if (owner && owner <= LOCK_OWNERS && t->owner_entries[owner - 1])
		t->owner_entries[owner - 1]--;
}

/* count + delta, never below zero (a count taken before this owner existed:
 * none is, but a wrong subtraction here would later free a file in use);
 * -1 past what an entry holds. */
static int64_t moved(uint32_t count, int64_t delta)
{
	if (delta < 0 && (uint64_t)-delta > count)
		return 0;
	return (uint64_t)count + (uint64_t)delta > UINT32_MAX ? -1 : (int64_t)count + delta;
}

int lock_ledger_add(struct lockh *h, uint64_t ino, int64_t opens, int64_t maps)
{
	struct locktab *t = h->t;
	if (!h->owner)
		return 0;
	if (ino >> LOCK_LEDGER_OWNER_SHIFT)
		return opens > 0 ? -ENFILE : 0; /* no such inode in any pool */
	uint64_t key = key_of(ino, h->owner);
	size_t i = find(t, key);
	if (i == LOCK_LEDGER_SLOTS)
		return opens > 0 ? -ENFILE : 0;
	struct lock_ledger_slot *e = &t->ledger[i];
	if (!e->key) {
		if (opens <= 0)
			return 0; /* nothing recorded to take from */
		if (t->ledger_used >= LOCK_LEDGER_SLOTS / 4 * 3)
			return -ENFILE;
		if (i != home(key))
			t->ledger_displaced++;
		e->key = key;
		t->ledger_used++;
		t->owner_entries[h->owner - 1]++;
	}
	int64_t o = moved(e->opens, opens), m = moved(e->maps, maps);
	if (o < 0 || m < 0)
		return -ENFILE; /* four billion opens of one file by one family */
	e->opens = (uint32_t)o;
	e->maps = (uint32_t)m;
	if (!e->opens) {
		delete_at(t, i);
		entry_gone(t, h->owner);
	}
	return 0;
}

int lock_owner_take(struct lockh *h, uint32_t owner, struct lock_ledger *e, size_t *cursor)
{
	struct locktab *t = h->t;
	/* Scanning the ledger costs more than all else a mount does. */
	if (!reaped(h, owner) || !t->owner_entries[owner - 1])
		return 0;
	/* A deletion shifts later entries back into the hole, never before the
	 * cursor except across the wrap, so one pass and one more from the
	 * start find them all. */
	for (int pass = 0; pass < 2; pass++) {
		for (; *cursor < LOCK_LEDGER_SLOTS; (*cursor)++)
			if (t->ledger[*cursor].key && owner_of(t->ledger[*cursor].key) == owner) {
				const struct lock_ledger_slot *s = &t->ledger[*cursor];
				*e = (struct lock_ledger){ .ino = s->key & ((1ull << LOCK_LEDGER_OWNER_SHIFT) - 1),
							   .opens = s->opens, .maps = s->maps };
				delete_at(t, *cursor);
				entry_gone(t, owner);
				return 1;
			}
		*cursor = 0;
	}
	return 0;
}
