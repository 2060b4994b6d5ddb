/*
 * reclaim_test — space given back: inode blocks emptied by unlink, directory
 * buckets emptied by unlink, whole directories removed.
 *
 * An 8 MiB pool: 10 rounds of creating and deleting 100,000 files, 10,000 at
 * a time (in the root and in a directory that stays); after each round the
 * free space must be within 1% of what it was at the start, and fsck clean.  A
 * 64 MiB pool: rounds of many directories, each with files, created and
 * removed; the space must come back the same way.  Before inode blocks and
 * buckets were freed, the first round alone lost about a fifth of the 8 MiB
 * pool.  A directory is listed while most of it is deleted: every entry
 * that stays is returned exactly once across bucket merges.  Last, space a
 * damaged pool holds on to (an extra empty inode block, two buckets that fit
 * in one) is found by fsck and given back by fsck --repair.  And a pool in
 * format 1 (free slots linked one way) is refused by a plain mount and
 * upgraded in place by one that asks, keeping every file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "check.h"
#include "crc.h"
#include "kura.h"
#include "layout.h"

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
	/* Each round creates and deletes 100,000 files, 10,000 at a time
	 * (what an 8 MiB pool holds at once, half in the root, half in /keep). */
	for (int round = 0; round < 10; round++) {
		int errs = 0;
		for (int batch = 0; batch < 10; batch++) {
			for (int i = 0; i < 10000; i++) {
				snprintf(name, sizeof name, "%s/file-%d-%d-%05d", i % 2 ? "/keep" : "", round, batch, i);
				errs += create(fs, name) != 0;
			}
			for (int i = 0; i < 10000; i++) {
				snprintf(name, sizeof name, "%s/file-%d-%d-%05d", i % 2 ? "/keep" : "", round, batch, i);
				kura_unlink(fs, name);
			}
		}
		CHECK(errs == 0, "round %d: %d of 100000 creates failed", round, errs);
		uint64_t now = free_bytes(fs);
		CHECK(within_one_percent(now, start, size), "round %d: %llu bytes free, %llu at the start", round,
		      (unsigned long long)now, (unsigned long long)start);
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

static uint64_t rd64(int fd, uint64_t off)
{
	uint64_t v = 0;
	if (pread(fd, &v, 8, (off_t)off) != 8)
		return 0;
	return v;
}

static void wr(int fd, const void *p, size_t n, uint64_t off)
{
	if (pwrite(fd, p, n, (off_t)off) != (ssize_t)n)
		perror("pwrite");
}

static void wr64(int fd, uint64_t v, uint64_t off) { wr(fd, &v, 8, off); }

#define INO(ino, field) ((ino) * INODE_SIZE + offsetof(struct kura_inode, field))

static uint64_t block_free_bytes(const char *pool)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs)
		return 0;
	uint64_t n = free_bytes(fs);
	kura_unmount(fs);
	return n;
}

/* An unused block made into an inode block of free slots and put at the
 * end of the free list, beside the block a pool may keep: one too many. */
static void leak_inode_block(const char *pool)
{
	int fd = open(pool, O_RDWR);
	struct kura_super sb;
	if (fd < 0 || pread(fd, &sb, sizeof sb, 0) != sizeof sb)
		return;
	uint64_t state = STATE_BLOCK * KURA_BLOCK, bm = sb.bitmap_block * KURA_BLOCK;
	uint64_t b = sb.nblocks - 1; /* the last block: the allocator reaches it last */
	uint8_t byte;
	if (pread(fd, &byte, 1, (off_t)(bm + b / 8)) != 1 || (byte >> (b % 8)) & 1)
		return;
	byte |= (uint8_t)(1u << (b % 8));
	wr(fd, &byte, 1, bm + b / 8);
	wr64(fd, rd64(fd, state + offsetof(struct kura_state, free_blocks)) - 1,
	     state + offsetof(struct kura_state, free_blocks));
	uint64_t tail = rd64(fd, state + offsetof(struct kura_state, inode_free));
	for (uint64_t n = tail; n; n = rd64(fd, INO(n, link)))
		tail = n;
	uint64_t first = b * (KURA_BLOCK / INODE_SIZE);
	static const char zero[KURA_BLOCK];
	wr(fd, zero, sizeof zero, b * KURA_BLOCK);
	for (uint64_t k = 0; k < KURA_BLOCK / INODE_SIZE; k++) {
		wr64(fd, k + 1 < KURA_BLOCK / INODE_SIZE ? first + k + 1 : 0, INO(first + k, link));
		wr64(fd, k ? first + k - 1 : tail, INO(first + k, prev));
	}
	wr64(fd, first, INO(tail, link));
	close(fd);
}

/* Removes the last entry of one bucket of the two a directory has, so that
 * they fit in one but were not merged (the entry is a link to `target`). */
static void unmerge_bucket(const char *pool, uint64_t dino, uint64_t target)
{
	int fd = open(pool, O_RDWR);
	if (fd < 0)
		return;
	uint64_t array = rd64(fd, INO(dino, root));
	uint64_t bk = rd64(fd, array * KURA_BLOCK) * KURA_BLOCK;
	struct kura_bucket h;
	if (pread(fd, &h, sizeof h, (off_t)bk) != sizeof h || !h.count)
		return;
	uint32_t pos = 0, last = 0;
	while (pos < h.used) {
		uint8_t len;
		if (pread(fd, &len, 1, (off_t)(bk + sizeof h + pos + 16)) != 1)
			return;
		last = pos;
		pos += dirent_reclen(len);
	}
	static const char zero[KURA_BLOCK];
	wr(fd, zero, h.used - last, bk + sizeof h + last);
	h.used = (uint16_t)last;
	h.count--;
	wr(fd, &h, sizeof h, bk);
	wr64(fd, rd64(fd, INO(dino, entries)) - 1, INO(dino, entries));
	uint32_t nlink;
	if (pread(fd, &nlink, 4, (off_t)INO(target, nlink)) == 4) {
		nlink--;
		wr(fd, &nlink, 4, INO(target, nlink));
	}
	close(fd);
}

static void say(void *ctx, const char *line)
{
	(void)ctx;
	printf("  fsck: %s\n", line);
}

static void repair_gives_back(const char *pool)
{
	CHECK(kura_mkfs(pool, 8u << 20, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs)
		return;
	char name[256];
	struct stat d, t;
	kura_mkdir(fs, "/d", 0755);
	create(fs, "/target");
	/* 35 entries of 120 bytes split one bucket; cut back to 26 they stay two. */
	for (int i = 0; i < 35; i++) {
		snprintf(name, sizeof name, "/d/%0100d", i);
		kura_link(fs, "/target", name);
	}
	for (int i = 34; i >= 26; i--) {
		snprintf(name, sizeof name, "/d/%0100d", i);
		kura_unlink(fs, name);
	}
	kura_stat(fs, "/d", &d);
	kura_stat(fs, "/target", &t);
	CHECK(d.st_blocks == 3 * 8, "the directory has two buckets and its slot array (%ld sectors)",
	      (long)d.st_blocks);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck before the damage");
	uint64_t before = block_free_bytes(pool);
	leak_inode_block(pool);
	unmerge_bucket(pool, (uint64_t)d.st_ino, (uint64_t)t.st_ino);
	int found = kura_fsck(pool, 0, say, NULL);
	CHECK(found >= 2, "fsck finds the extra inode block and the unmerged buckets (%d problems)", found);
	kura_fsck(pool, 1, NULL, NULL);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after --repair");
	uint64_t after = block_free_bytes(pool);
	CHECK(after == before + KURA_BLOCK, "repair gave back the bucket (%llu free before, %llu after)",
	      (unsigned long long)before, (unsigned long long)after);
}

/* A pool of an older format `from`: a plain mount refuses it naming the
 * way, a mount that asks for it upgrades it.  The upgraded mount, or NULL. */
static kura_fs *upgrading_mount(const char *pool, unsigned from)
{
	int err = 0;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	CHECK(!fs && err == -EPROTONOSUPPORT && strstr(kura_last_error(), "older") &&
		      strstr(kura_last_error(), "kura upgrade"),
	      "a plain mount of format %u says how to upgrade: %d, %s", from, err, kura_last_error());
	if (fs)
		kura_unmount(fs);
	struct kura_mount_opts opts = { .upgrade = 1 };
	fs = kura_mount(pool, &opts, &err);
	CHECK(fs != NULL, "upgrading mount of format %u: %s", from, kura_last_error());
	if (!fs)
		return NULL;
	struct kura_info in;
	kura_info(fs, &in);
	CHECK(in.format_version == KURA_VERSION, "format version %u after the upgrade from %u", in.format_version,
	      from);
	return fs;
}

/* A pool as format 1 left it (free slots linked one way) is brought up to
 * date by a mount that asks for it: plain mounts refuse it and name the
 * way, the upgrade keeps every file and leaves fsck clean. */
static void old_format_upgraded(const char *pool)
{
	CHECK(kura_mkfs(pool, 8u << 20, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	CHECK(fs != NULL, "mount %s", pool);
	if (!fs)
		return;
	char path[64];
	CHECK(kura_mkdir(fs, "/d", 0755) == 0, "mkdir /d");
	for (int i = 0; i < 150; i++) {
		snprintf(path, sizeof path, i < 100 ? "/f%d" : "/d/f%d", i);
		int fd = kura_open(fs, path, O_CREAT | O_WRONLY, 0644);
		CHECK(fd >= 0 && kura_write(fs, fd, path, strlen(path)) == (ssize_t)strlen(path), "write %s", path);
		kura_close(fs, fd);
	}
	for (int i = 0; i < 100; i += 3) {
		snprintf(path, sizeof path, "/f%d", i);
		CHECK(kura_unlink(fs, path) == 0, "unlink %s", path);
	}
	kura_unmount(fs);

	int fd = open(pool, O_RDWR);
	struct kura_super sb;
	struct kura_state st;
	if (fd < 0 || pread(fd, &sb, sizeof sb, 0) != sizeof sb ||
	    pread(fd, &st, sizeof st, STATE_BLOCK * KURA_BLOCK) != sizeof st)
		return;
	unsigned slots = 0;
	for (uint64_t ino = st.inode_free; ino && slots < 100000; slots++) {
		wr64(fd, 0, INO(ino, prev));
		if (pread(fd, &ino, sizeof ino, (off_t)INO(ino, link)) != sizeof ino)
			break;
	}
	CHECK(slots > 30, "format 1 made: %u free slots unlinked backwards", slots);
	sb.version = 1;
	sb.crc = crc32c(0, &sb, offsetof(struct kura_super, crc));
	wr(fd, &sb, sizeof sb, 0);
	wr(fd, &sb, sizeof sb, KURA_BLOCK);
	close(fd);

	int err = 0;
	fs = upgrading_mount(pool, 1);
	if (!fs)
		return;
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the upgrade");
	fs = kura_mount(pool, NULL, &err);
	CHECK(fs != NULL, "a plain mount after the upgrade: %s", kura_last_error());
	if (!fs)
		return;
	int kept = 0, gone = 0;
	for (int i = 0; i < 150; i++) {
		char buf[64] = { 0 };
		snprintf(path, sizeof path, i < 100 ? "/f%d" : "/d/f%d", i);
		int f = kura_open(fs, path, O_RDONLY, 0);
		if (f < 0) {
			gone += i < 100 && i % 3 == 0;
			continue;
		}
		kept += kura_read(fs, f, buf, sizeof buf - 1) == (ssize_t)strlen(path) && !strcmp(buf, path);
		kura_close(fs, f);
	}
	CHECK(kept == 116 && gone == 34, "files after the upgrade: %d of 116 intact, %d of 34 removed ones gone", kept,
	      gone);
	/* The back links hold: the free list is used both ways now. */
	for (int i = 0; i < 60; i++) {
		snprintf(path, sizeof path, "/n%d", i);
		CHECK(create(fs, path) == 0, "create %s", path);
	}
	for (int i = 0; i < 60; i += 2) {
		snprintf(path, sizeof path, "/n%d", i);
		kura_unlink(fs, path);
	}
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after using the upgraded pool");
}

/* Sets the pool's format version in both superblocks (unmounted). */
static int set_version(const char *pool, uint32_t version)
{
	int fd = open(pool, O_RDWR);
	struct kura_super sb;
	if (fd < 0 || pread(fd, &sb, sizeof sb, 0) != sizeof sb)
		return -1;
	sb.version = version;
	sb.crc = crc32c(0, &sb, offsetof(struct kura_super, crc));
	wr(fd, &sb, sizeof sb, 0);
	wr(fd, &sb, sizeof sb, KURA_BLOCK);
	return close(fd);
}

/* A format 2 pool (no attribute directory) is refused by a plain mount,
 * upgraded to 3 in place, and then takes extended attributes. */
static void format2_upgraded(const char *pool)
{
	CHECK(kura_mkfs(pool, 8u << 20, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs)
		return;
	CHECK(create(fs, "/kept") == 0, "create /kept");
	kura_unmount(fs);
	if (set_version(pool, 2))
		return;
	fs = upgrading_mount(pool, 2);
	if (!fs)
		return;
	struct stat st;
	CHECK(kura_stat(fs, "/kept", &st) == 0, "the file is kept");
	CHECK(kura_setxattrat(fs, KURA_AT_ROOT, "/kept", "user.a", "1", 1, 0, 0) == 0,
	      "extended attributes after the upgrade");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the upgrade from format 2");
}

/* Format 3 is mounted as it is (it is 4 without unwritten blocks), and
 * stays 3 until a fallocate leaves such a block: then it is 4, which a
 * kura that reads only 3 refuses. */
static void format3_marked_by_fallocate(const char *pool)
{
	CHECK(kura_mkfs(pool, 8u << 20, 1) == 0, "mkfs %s", pool);
	CHECK(set_version(pool, 3) == 0, "make it format 3");
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	CHECK(fs != NULL, "a plain mount of format 3: %s", fs ? "" : kura_last_error());
	if (!fs)
		return;
	struct kura_info in;
	CHECK(create(fs, "/f") == 0, "create /f");
	kura_info(fs, &in);
	CHECK(in.format_version == 3, "still format %u after a create", in.format_version);
	int fd = kura_open(fs, "/f", O_RDWR, 0);
	CHECK(kura_fallocate(fs, fd, 0, 0, 64 << 10) == 0, "fallocate 64 KiB");
	kura_info(fs, &in);
	CHECK(in.format_version == 4, "format %u after it, as the mount that marked it says", in.format_version);
	kura_close(fs, fd);
	kura_unmount(fs);
	int sfd = open(pool, O_RDONLY);
	struct kura_super sb[2];
	CHECK(sfd >= 0 && pread(sfd, &sb[0], sizeof sb[0], 0) == sizeof sb[0] &&
	      pread(sfd, &sb[1], sizeof sb[1], KURA_BLOCK) == sizeof sb[1] && sb[0].version == 4 && sb[1].version == 4 &&
	      sb[0].crc == crc32c(0, &sb[0], offsetof(struct kura_super, crc)),
	      "both superblocks say format 4 (%u, %u), checksummed", sb[0].version, sb[1].version);
	if (sfd >= 0)
		close(sfd);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean");
}

int main(void)
{
	char pool[256];
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(pool, sizeof pool, "%s/kura-reclaim-%d.pool", dir, (int)getpid());
	files_rounds(pool);
	dir_rounds(pool);
	readdir_across_merges(pool);
	repair_gives_back(pool);
	old_format_upgraded(pool);
	format2_upgraded(pool);
	format3_marked_by_fallocate(pool);
	if (getenv("RECLAIM_KEEP"))
		return 0;
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
