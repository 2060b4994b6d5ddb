/* unit_maps: the engine's side of shared maps (kura_map_*), without the
 * interposition layer, so that the sanitizer builds run it too: a map of
 * the pool's blocks and kura_pread/kura_pwrite see each other's bytes, also
 * a whole-block write (in place while mapped); another process's map of
 * the same file sees this one's stores; blocks truncated off a mapped file
 * stay allocated (and keep their bytes) until the last unpin, then come
 * back, fsck clean; an unlinked mapped file lives until its unpin.  On a
 * memory pool and on a disk pool (whose map stores reach the pool file
 * only through kura_map_sync's journal record). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "kura.h"

#define PG 4096

/* Maps n file blocks of ino from first, each block where the pool has it. */
static char *map_blocks(kura_fs *fs, uint64_t ino, uint64_t first, int n)
{
	uint64_t offs[8];
	int writable, fd = kura_map_fd(fs, &writable);
	if (n > 8 || kura_map_blocks(fs, ino, first, (uint64_t)n, 1, offs) < 0)
		return NULL;
	char *base = mmap(NULL, (size_t)n * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (int i = 0; base != MAP_FAILED && i < n; i++)
		if (!offs[i] || mmap(base + i * PG, PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
				     (off_t)offs[i]) == MAP_FAILED)
			return NULL;
	return base == MAP_FAILED ? NULL : base;
}

static uint64_t free_blocks(kura_fs *fs)
{
	struct kura_info in;
	kura_info(fs, &in);
	return in.blocks_free;
}

static void one_pool(const char *pool, enum kura_persist persist)
{
	struct kura_mount_opts o = { .persist = persist };
	CHECK(kura_mkfs(pool, 16u << 20, 1) == 0, "mkfs %s: %s", pool, kura_last_error());
	kura_fs *fs = kura_mount(pool, &o, NULL);
	CHECK(fs != NULL, "mount %s: %s", pool, kura_last_error());
	if (!fs)
		return;
	static char big[64 * PG];
	memset(big, 'x', sizeof big);
	int fd = kura_open(fs, "/m", O_CREAT | O_RDWR, 0644);
	CHECK(kura_pwrite(fs, fd, big, sizeof big, 0) == (ssize_t)sizeof big, "write 64 blocks");
	uint64_t ino;
	CHECK(kura_map_pin(fs, fd, 1, &ino) == 0, "pin");
	char *m = map_blocks(fs, ino, 0, 4);
	CHECK(m != NULL, "map 4 blocks");
	if (!m)
		return;
	memcpy(m + 10, "stored", 6);
	char buf[PG];
	CHECK(kura_pread(fs, fd, buf, 6, 10) == 6 && !memcmp(buf, "stored", 6), "pread sees a map store");
	memset(buf, 'w', sizeof buf);
	CHECK(kura_pwrite(fs, fd, buf, PG, PG) == PG, "whole-block write");
	CHECK(m[PG] == 'w' && m[2 * PG - 1] == 'w', "the map sees a whole-block write (made in place)");

	/* Another process maps the same file and stores. */
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *cfs = kura_mount(pool, &o, NULL);
		int cfd = cfs ? kura_open(cfs, "/m", O_RDWR, 0) : -1;
		uint64_t cino;
		char *cm = cfd >= 0 && !kura_map_pin(cfs, cfd, 1, &cino) ? map_blocks(cfs, cino, 2, 1) : NULL;
		if (cm)
			memcpy(cm, "child", 5);
		int ok = cm && !kura_map_sync(cfs, cino, 2, 1, KURA_MAP_RECORD | KURA_MAP_DURABLE);
		/* A process that dies holding a pin keeps the blocks pinned
		 * until the pool is next mounted alone: let go. */
		if (cm)
			kura_map_unpin(cfs, cino);
		if (cfs) {
			kura_close(cfs, cfd);
			kura_unmount(cfs);
		}
		_exit(ok ? 0 : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child mapped and stored");
	CHECK(!memcmp(m + 2 * PG, "child", 5), "this map sees the child's store");

	/* Truncation while mapped: the blocks stay, with their bytes. */
	uint64_t before = free_blocks(fs);
	CHECK(kura_ftruncate(fs, fd, 0) == 0, "truncate while mapped");
	CHECK(free_blocks(fs) <= before, "blocks held while mapped: %llu free, %llu before",
	      (unsigned long long)free_blocks(fs), (unsigned long long)before);
	CHECK(m[PG] == 'w', "the map keeps its bytes after a truncation");
	CHECK(kura_map_sync(fs, ino, 0, 4, KURA_MAP_RECORD | KURA_MAP_DURABLE) == 0, "sync of a truncated range");
	munmap(m, 4 * PG);
	kura_close(fs, fd);
	CHECK(kura_unlink(fs, "/m") == 0, "unlink while pinned");
	struct stat st;
	CHECK(kura_stat(fs, "/m", &st) == -ENOENT, "gone by name");
	CHECK(kura_map_unpin(fs, ino) == 0, "unpin");
	CHECK(free_blocks(fs) >= before + 64, "all blocks back after the last unpin: %llu free, %llu before",
	      (unsigned long long)free_blocks(fs), (unsigned long long)before);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean (%s)", pool);
	unlink(pool);
}

int main(void)
{
	char pool[128];
	snprintf(pool, sizeof pool, "/dev/shm/kura-maps-%d.pool", (int)getpid());
	one_pool(pool, KURA_PERSIST_MEMORY);
	snprintf(pool, sizeof pool, "kura-maps-%d.pool", (int)getpid()); /* the scratch directory: a disk */
	one_pool(pool, KURA_PERSIST_FILE);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
