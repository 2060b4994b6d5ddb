/*
 * reclaim_test — space given back: inode blocks emptied by unlink, directory
 * buckets emptied by unlink, whole directories removed.
 *
 * An 8 MiB pool: 10 rounds of creating 10,000 files (in the root and in a
 * directory that stays) and deleting them all; after each round the free
 * space must be within 1% of what it was at the start, and fsck clean.  A
 * 64 MiB pool: rounds of many directories, each with files, created and
 * removed; the space must come back the same way.  Before inode blocks and
 * buckets were freed, the first round alone lost about a fifth of the 8 MiB
 * pool.  Last, a directory is listed while most of it is deleted: every
 * entry that stays is returned exactly once across bucket merges.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "check.h"
#include "kura.h"

static uint64_t free_bytes(kura_fs *fs)
{
	struct statvfs v;
	kura_statvfs(fs, &v);
	return (uint64_t)v.f_bfree * v.f_frsize;
}

static int create(kura_fs *fs, const char *path)
{
	int fd = kura_open(fs, path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd < 0)
		return fd;
	kura_close(fs, fd);
	return 0;
}

static int within_one_percent(uint64_t now, uint64_t start, uint64_t pool_size)
{
	uint64_t lost = start > now ? start - now : 0;
	return lost * 100 <= pool_size;
}

static void files_rounds(const char *pool)
{
	const uint64_t size = 8u << 20;
	CHECK(kura_mkfs(pool, size, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	CHECK(fs != NULL, "mount %s", pool);
	if (!fs)
		return;
	CHECK(kura_mkdir(fs, "/keep", 0755) == 0, "mkdir /keep");
	uint64_t start = free_bytes(fs);
	char name[64];
	for (int round = 0; round < 10; round++) {
		int made = 0, errs = 0;
		for (int i = 0; i < 10000; i++) {
			snprintf(name, sizeof name, "%s/file-%d-%05d", i % 2 ? "/keep" : "", round, i);
			if (create(fs, name) == 0)
				made++;
			else
				errs++;
		}
		CHECK(errs == 0, "round %d: %d of 10000 creates failed", round, errs);
		for (int i = 0; i < 10000; i++) {
			snprintf(name, sizeof name, "%s/file-%d-%05d", i % 2 ? "/keep" : "", round, i);
			kura_unlink(fs, name);
		}
		uint64_t now = free_bytes(fs);
		CHECK(within_one_percent(now, start, size), "round %d: %llu bytes free, %llu at the start", round,
		      (unsigned long long)now, (unsigned long long)start);
		(void)made;
	}
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after the file rounds");
}

static void dir_rounds(const char *pool)
{
	const uint64_t size = 64u << 20;
	CHECK(kura_mkfs(pool, size, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs)
		return;
	uint64_t start = free_bytes(fs);
	char name[96];
	for (int round = 0; round < 3; round++) {
		int errs = 0;
		for (int d = 0; d < 2000; d++) {
			snprintf(name, sizeof name, "/dir-%d-%04d", round, d);
			errs += kura_mkdir(fs, name, 0755) != 0;
			for (int f = 0; f < 10; f++) {
				snprintf(name, sizeof name, "/dir-%d-%04d/%s-%d", round, d,
					 f % 2 ? "sub" : "file-with-a-longer-name", f);
				errs += (f % 2 ? kura_mkdir(fs, name, 0700) : create(fs, name)) != 0;
			}
		}
		CHECK(errs == 0, "round %d: %d creates failed", round, errs);
		for (int d = 0; d < 2000; d++) {
			for (int f = 0; f < 10; f++) {
				snprintf(name, sizeof name, "/dir-%d-%04d/%s-%d", round, d,
					 f % 2 ? "sub" : "file-with-a-longer-name", f);
				f % 2 ? kura_rmdir(fs, name) : kura_unlink(fs, name);
			}
			snprintf(name, sizeof name, "/dir-%d-%04d", round, d);
			kura_rmdir(fs, name);
		}
		uint64_t now = free_bytes(fs);
		CHECK(within_one_percent(now, start, size), "directory round %d: %llu bytes free, %llu at the start",
		      round, (unsigned long long)now, (unsigned long long)start);
	}
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after the directory rounds");
}

/* Entries that stay while the rest of a big directory goes (its buckets
 * merging under the listing) are each listed exactly once. */
static void readdir_across_merges(const char *pool)
{
	CHECK(kura_mkfs(pool, 16u << 20, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs)
		return;
	enum { N = 3000 };
	char name[64];
	kura_mkdir(fs, "/d", 0755);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "/d/entry-%05d", i);
		create(fs, name);
	}
	static int seen[N];
	int err, deleted = 0, bad = 0;
	kura_dir *d = kura_opendir(fs, "/d", &err);
	CHECK(d != NULL, "opendir /d");
	struct kura_dirent e;
	int got = 0;
	while (d && kura_readdir(d, &e) == 1) {
		int k;
		if (sscanf(e.name, "entry-%d", &k) == 1 && k >= 0 && k < N)
			seen[k]++;
		/* Every listed step removes 10 of the entries not divisible by 10. */
		for (int j = 0; j < 10 && deleted < N; deleted++) {
			if (deleted % 10 == 0)
				continue;
			snprintf(name, sizeof name, "/d/entry-%05d", deleted);
			kura_unlink(fs, name);
			j++;
		}
		got++;
	}
	if (d)
		kura_closedir(d);
	for (int i = 0; i < N; i += 10)
		bad += seen[i] != 1;
	for (int i = 0; i < N; i++)
		bad += seen[i] > 1;
	CHECK(bad == 0, "%d entries listed other than once (%d listed in all)", bad, got);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after the listing");
}

int main(void)
{
	char pool[256];
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(pool, sizeof pool, "%s/kura-reclaim-%d.pool", dir, (int)getpid());
	files_rounds(pool);
	dir_rounds(pool);
	readdir_across_merges(pool);
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
