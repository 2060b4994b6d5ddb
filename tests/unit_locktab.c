/*
 * unit_locktab — the shared lock table's open counts against a model.
 *
 * Random opens, shared maps and closes of inodes whose numbers come both in
 * runs (files made together, whose slots and ledger entries sit side by
 * side) and scattered (so groups collide and entries land away from home,
 * which deletion must shift back): after every batch each inode's counts
 * must be the model's, and once everything is closed the table must be
 * empty to the last word: no slot, no ledger entry, no displaced-entry
 * count, no map state left behind for the next file to inherit.
 *
 * And a waiter for the pool mutex whose wake is lost (tracee.c) takes the
 * mutex all the same.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "lock.h"

#define FILES 6000

static uint64_t ino_of(int i)
{
	return i < FILES / 3 ? 1000 + (uint64_t)i : (uint64_t)i * 4099 + 777;
}

static uint64_t opens[FILES], maps[FILES];

static int counts_match(struct lockh *h)
{
	int bad = 0;
	for (int i = 0; i < FILES; i++)
		if (lock_open_count(h, ino_of(i)) != opens[i] || lock_maps(h, ino_of(i)) != maps[i])
			bad++;
	return bad;
}

static int waiter_done;

static void *waiter(void *arg)
{
	struct lockh *h = arg;
	lock_acquire(h);
	lock_release(h);
	__atomic_store_n(&waiter_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A lost wake, made on purpose: another process holds the mutex while a
 * thread here sleeps on it, then frees it as an unlock does but wakes no
 * one, as when the waiter an unlock woke is killed before it takes the
 * mutex.  A wait that only sleeps would never end. */
static void test_lost_wake(struct lockh *h)
{
	int held[2], go[2];
	if (pipe(held) || pipe(go)) {
		CHECK(0, "pipes");
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		lock_acquire(h);
		if (write(held[1], "h", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(1);
		h->t->mutex.__data.__owner = 0;
		__atomic_store_n(&h->t->mutex.__data.__lock, 0, __ATOMIC_RELEASE);
		_exit(0);
	}
	char c;
	CHECK(pid > 0 && read(held[0], &c, 1) == 1, "the other process holds the mutex");
	pthread_t t;
	CHECK(pthread_create(&t, NULL, waiter, h) == 0, "waiter thread");
	struct timespec pause = { 0, 300 * 1000 * 1000 }; /* the waiter is asleep on the mutex by then */
	nanosleep(&pause, NULL);
	CHECK(write(go[1], "g", 1) == 1, "go");
	int status;
	waitpid(pid, &status, 0);
	struct timespec tick = { 0, 10 * 1000 * 1000 };
	for (int i = 0; i < 3000 && !__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE); i++)
		nanosleep(&tick, NULL);
	CHECK(__atomic_load_n(&waiter_done, __ATOMIC_ACQUIRE), "a waiter whose wake was lost took the mutex within 30 s");
	if (waiter_done)
		pthread_join(t, NULL);
	close(held[0]), close(held[1]), close(go[0]), close(go[1]);
}

int main(void)
{
	char pool[64];
	snprintf(pool, sizeof pool, "/dev/shm/kura-locktab-%d", getpid());
	int pool_fd = open(pool, O_RDWR | O_CREAT | O_EXCL, 0600);
	struct lockh h;
	int alone = 0;
	if (pool_fd < 0 || lock_attach(&h, pool_fd, &alone) || lock_owner_new(&h)) {
		printf("cannot set up a lock table for %s\n", pool);
		return 1;
	}
	CHECK(alone, "a fresh table has no other mount");
	srand(7);
	uint64_t truncs_set = 0;
	for (int batch = 0; batch < 30; batch++) {
		for (int round = 0; round < 20000; round++) {
			int i = rand() % FILES, what = rand() % 4;
			uint64_t ino = ino_of(i);
			lock_acquire(&h);
			if (what == 0 && lock_open_inc(&h, ino) == 0) {
				opens[i]++;
			} else if (what == 1 && lock_map_inc(&h, ino) == 0) {
				opens[i]++;
				maps[i]++;
			} else if (what == 2 && opens[i] > maps[i]) {
				CHECK(lock_open_dec(&h, ino) == opens[i] - 1, "close of inode %llu", (unsigned long long)ino);
				opens[i]--;
			} else if (what == 3 && maps[i]) {
				CHECK(lock_map_dec(&h, ino) == maps[i] - 1, "unmap of inode %llu", (unsigned long long)ino);
				maps[i]--;
				opens[i]--;
			}
			if (maps[i] && round % 997 == 0) {
				struct lock_mapped *m = lock_slot(&h, ino);
				CHECK(m != NULL, "a mapped inode has a slot");
				if (m) {
					m->truncs++;
					truncs_set++;
				}
			}
			lock_release(&h);
		}
		CHECK(counts_match(&h) == 0, "batch %d: %d inodes' counts differ from the model", batch,
		      counts_match(&h));
	}
	CHECK(truncs_set > 0, "some map state was set");
	for (int i = 0; i < FILES; i++) {
		for (; maps[i]; maps[i]--, opens[i]--)
			lock_map_dec(&h, ino_of(i));
		for (; opens[i]; opens[i]--)
			lock_open_dec(&h, ino_of(i));
	}
	const struct locktab *t = h.t;
	CHECK(t->open_used == 0 && t->maps_total == 0, "%llu slots, %llu maps left", (unsigned long long)t->open_used,
	      (unsigned long long)t->maps_total);
	CHECK(t->ledger_used == 0 && t->ledger_displaced == 0, "%llu ledger entries, %llu displaced left",
	      (unsigned long long)t->ledger_used, (unsigned long long)t->ledger_displaced);
	CHECK(lock_owner_entries(&h, h.owner) == 0, "the owner still counts entries");
	int stale = 0, bits = 0;
	static const struct lock_mapped zero;
	for (size_t i = 0; i < LOCK_OPEN_SLOTS; i++)
		stale += memcmp(&t->mapped[i], &zero, sizeof zero) != 0 || t->open[i].ino || t->open[i].count;
	for (size_t i = 0; i < LOCK_OPEN_SLOTS / 64; i++)
		bits += __builtin_popcountll(t->mapped_used[i]);
	CHECK(stale == 0 && bits == 0, "%d slots keep state, %d say they may", stale, bits);
	test_lost_wake(&h);
	if (!waiter_done) { /* the waiter still sleeps on the table: leave it mapped */
		printf("%d passed, %d failed\n", passed, failed);
		fflush(stdout);
		unlink(pool);
		_exit(1);
	}
	lock_remove(&h);
	lock_detach(&h, pool_fd);
	close(pool_fd);
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
