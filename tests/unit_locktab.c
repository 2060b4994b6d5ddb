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
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
	lock_remove(&h);
	lock_detach(&h, pool_fd);
	close(pool_fd);
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
