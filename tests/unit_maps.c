/* unit_maps: the engine's side of shared maps (kura_map_*), without the
 * interposition layer, so that the sanitizer builds run it too: a map of
 * the pool's blocks and kura_pread/kura_pwrite see each other's bytes, also
 * a whole-block write (in place while mapped); another process's map of
 * the same file sees this one's stores; blocks truncated off a mapped file
 * stay allocated (and keep their bytes) until the last unpin, then come
 * back, fsck clean; an unlinked mapped file lives until its unpin.  On a
 * memory pool and on a disk pool (whose map stores reach the pool file
 * only through kura_map_sync's journal record).  And a file's blocks lie
 * side by side, however it was written, so its map takes few mappings.
 * A map shows what a fresh write filled (on memory, through the file),
 * and zeros where fallocate left blocks unwritten. */
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

/* Runs of side-by-side pool blocks in file blocks [0, n) of path: the
 * kernel mappings a shared map of the whole file takes. */
static int runs_of(kura_fs *fs, const char *path, uint64_t n)
{
	static uint64_t offs[1024];
	uint64_t ino;
	int fd = kura_open(fs, path, O_RDWR, 0), runs = -1;
	if (n <= 1024 && fd >= 0 && !kura_map_pin(fs, fd, 1, &ino)) {
		if (kura_map_blocks(fs, ino, 0, n, 0, offs) >= 0) {
			runs = 1;
			for (uint64_t i = 1; i < n; i++)
				runs += !offs[i] || offs[i] != offs[i - 1] + PG;
		}
		kura_map_unpin(fs, ino);
	}
	kura_close(fs, fd);
	return runs;
}

/* fallocate's unwritten blocks, over blocks a file filled and freed: a
 * map of them shows zeros, not the old bytes, and they come back when the
 * file goes (fsck, run after, finds none leaked). */
static void unwritten_mapped(kura_fs *fs)
{
	static char old[16 * PG];
	memset(old, 'o', sizeof old);
	int fd = kura_open(fs, "/old", O_CREAT | O_RDWR, 0644);
	CHECK(kura_pwrite(fs, fd, old, sizeof old, 0) == (ssize_t)sizeof old, "fill 16 blocks");
	kura_close(fs, fd);
	kura_unlink(fs, "/old");
	uint64_t before = free_blocks(fs), ino;
	fd = kura_open(fs, "/u", O_CREAT | O_RDWR, 0644);
	CHECK(kura_fallocate(fs, fd, 0, 0, 16 * PG) == 0, "fallocate 16 blocks");
	CHECK(kura_map_pin(fs, fd, 1, &ino) == 0, "pin");
	char *m = map_blocks(fs, ino, 4, 4);
	CHECK(m != NULL, "map 4 unwritten blocks");
	if (m) {
		size_t nonzero = 0;
		for (size_t i = 0; i < 4 * PG; i++)
			nonzero += m[i] != 0;
		CHECK(nonzero == 0, "the map shows zeros (%zu bytes not)", nonzero);
		memcpy(m + PG + 5, "mapped", 6);
		char buf[8];
		CHECK(kura_pread(fs, fd, buf, 6, 5 * PG + 5) == 6 && !memcmp(buf, "mapped", 6), "pread sees the store");
		munmap(m, 4 * PG);
	}
	kura_map_unpin(fs, ino);
	kura_close(fs, fd);
	CHECK(kura_unlink(fs, "/u") == 0, "unlink");
	CHECK(free_blocks(fs) == before, "every block back: %llu free, %llu before", (unsigned long long)free_blocks(fs),
	      (unsigned long long)before);
}

/* Where blocks land: a file written in random order, and two files
 * appended a block at a time in turn, each lie in few runs (a block per
 * run before placement by neighbour: 1,024 and 512 mappings); a file
 * rewritten in 1 MiB writes, each taking new blocks and freeing the old,
 * stays in few (69 to 100 before a write took the blocks the one before it
 * had freed, in their order). */
static void placement(kura_fs *fs)
{
	char blk[PG];
	memset(blk, 'p', sizeof blk);
	int r = kura_open(fs, "/random", O_CREAT | O_RDWR, 0644);
	int a = kura_open(fs, "/a", O_CREAT | O_RDWR, 0644), b = kura_open(fs, "/b", O_CREAT | O_RDWR, 0644);
	int ok = r >= 0 && a >= 0 && b >= 0;
	/* 1024 blocks in the order of i * 389 mod 1024 (389 odd: a permutation). */
	for (uint64_t i = 0; i < 1024 && ok; i++)
		ok = kura_pwrite(fs, r, blk, PG, (off_t)((i * 389) % 1024) * PG) == PG;
	for (off_t i = 0; i < 512 && ok; i++)
		ok = kura_pwrite(fs, a, blk, PG, i * PG) == PG && kura_pwrite(fs, b, blk, PG, i * PG) == PG;
	CHECK(ok, "placement files written");
	kura_close(fs, r);
	kura_close(fs, a);
	kura_close(fs, b);
	int rr = runs_of(fs, "/random", 1024), ra = runs_of(fs, "/a", 512), rb = runs_of(fs, "/b", 512);
	CHECK(rr > 0 && rr <= 64, "a file written in random order lies in %d runs of blocks (at most 64)", rr);
	CHECK(ra > 0 && ra <= 32 && rb > 0 && rb <= 32, "files appended in turn lie in %d and %d runs (at most 32)",
	      ra, rb);
	kura_unlink(fs, "/random");
	kura_unlink(fs, "/a");
	kura_unlink(fs, "/b");

	static char mib[256 * PG];
	memset(mib, 'r', sizeof mib);
	int s = kura_open(fs, "/rewritten", O_CREAT | O_RDWR, 0644);
	ssize_t w = s;
	for (int pass = 0; pass < 3 && w >= 0; pass++)
		for (off_t at = 0; at < 1024 * PG && w >= 0; at += sizeof mib)
			if ((w = kura_pwrite(fs, s, mib, sizeof mib, at)) >= 0 && w != (ssize_t)sizeof mib)
				w = -EIO;
	CHECK(w >= 0, "a file written, then rewritten twice in 1 MiB writes: %s", strerror((int)-w));
	kura_close(fs, s);
	int rs = runs_of(fs, "/rewritten", 1024);
	CHECK(rs > 0 && rs <= 32, "a file rewritten twice in 1 MiB writes lies in %d runs (at most 32)", rs);
	kura_unlink(fs, "/rewritten");
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
	/* On memory a fresh block is filled through the file (pwrite), not
	 * the map: the map must show it all the same. */
	CHECK(m[0] == 'x' && m[4 * PG - 1] == 'x', "a map shows what a fresh write filled");
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
		int ok = cm && cm[PG - 1] == 'x'; /* this process never mapped it */
		if (cm)
			memcpy(cm, "child", 5);
		ok = ok && !kura_map_sync(cfs, cino, 2, 1, KURA_MAP_RECORD | KURA_MAP_DURABLE);
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
	placement(fs);
	unwritten_mapped(fs);
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
