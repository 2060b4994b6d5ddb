/* group_test: atomic groups (kura_atomic_begin … commit/abort) through the
 * engine's API, on the memory and file back ends (fsync mode).
 *
 * A random walk of group writes, truncations and fallocates is checked
 * against two models: the view the group's description must read, and the
 * file every other description must still read until the commit; then a
 * commit (or an abort, or a close) must leave the file equal to the view
 * (or to what it was).  Fixed cases: errors, a full group, a killed
 * process's group gone at the next lone mount, maps refused, fsck clean and
 * no block or inode kept afterwards. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "kura.h"

#define MAXSZ (96 * 1024)

static struct kura_mount_opts opts;

static kura_fs *mount_pool(const char *pool)
{
	kura_fs *fs = kura_mount(pool, &opts, NULL);
	CHECK(fs != NULL, "mount %s: %s", pool, kura_last_error());
	return fs;
}

/* Bytes [0, len) of model m as the file should read through fd. */
static int reads_as(kura_fs *fs, int fd, const unsigned char *m, size_t len)
{
	static unsigned char buf[MAXSZ + 8192];
	struct stat st;
	if (kura_fstat(fs, fd, &st) || (size_t)st.st_size != len)
		return 0;
	ssize_t n = kura_pread(fs, fd, buf, sizeof buf, 0);
	return n == (ssize_t)len && !memcmp(buf, m, len);
}

static unsigned long long free_blocks(kura_fs *fs)
{
	struct kura_info in;
	kura_info(fs, &in);
	return in.blocks_free;
}

/* One random group on description fd over a file whose bytes are
 * file[0, fsize); other is another description of it.  ending: 0 commits,
 * 1 aborts, 2 closes fd (which aborts).  fresh: fd has had no group (a
 * description keeps its last commit's emptied shadow for the next group,
 * which an abort then frees).  Returns the file's size after. */
static size_t group_round(kura_fs *fs, int fd, int other, unsigned char *file, size_t fsize, const unsigned char *data,
			  unsigned seed, int ending, int fresh)
{
	static unsigned char view[MAXSZ + 8192];
	size_t vsize;
	unsigned long long free0 = free_blocks(fs);
	CHECK(kura_atomic_begin(fs, fd) == 0, "begin (seed %u)", seed);
	memcpy(view, file, fsize);
	vsize = fsize;
	int steps = 1 + rand() % 12;
	for (int s = 0; s < steps; s++) {
		size_t at = (size_t)rand() % MAXSZ, len = (size_t)rand() % 9000;
		if (at + len > MAXSZ)
			len = MAXSZ - at;
		switch (rand() % 5) {
		case 0:
		case 1:
			if (!len)
				break;
		{
			size_t src = (size_t)rand() % 1000;
			CHECK(kura_pwrite(fs, fd, data + src, len, (off_t)at) == (ssize_t)len, "write");
			if (at > vsize)
				memset(view + vsize, 0, at - vsize);
			memcpy(view + at, data + src, len);
			if (at + len > vsize)
				vsize = at + len;
			break;
		}
		case 2:
			at = (size_t)rand() % (vsize + 1);
			CHECK(kura_ftruncate(fs, fd, (off_t)at) == 0, "truncate");
			if (at > vsize)
				memset(view + vsize, 0, at - vsize);
			vsize = at;
			break;
		case 3:
			if (!len)
				break;
			CHECK(kura_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE, (off_t)at, (off_t)len) == 0, "zero range");
			if (at > vsize)
				memset(view + vsize, 0, at - vsize);
			memset(view + at, 0, len);
			if (at + len > vsize)
				vsize = at + len;
			break;
		default:
			if (!len)
				break;
			CHECK(kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)len) == 0,
			      "punch");
			if (at < vsize)
				memset(view + at, 0, (at + len < vsize ? at + len : vsize) - at);
			break;
		}
		CHECK(reads_as(fs, fd, view, vsize), "seed %u step %d: the group's description reads the group", seed, s);
		CHECK(reads_as(fs, other, file, fsize), "seed %u step %d: another description reads the file", seed, s);
	}
	if (ending == 0) {
		CHECK(kura_fsync(fs, fd) == 0, "commit by fsync");
		CHECK(reads_as(fs, other, view, vsize), "seed %u: committed, everyone reads the group", seed);
		CHECK(reads_as(fs, fd, view, vsize), "seed %u: and its own description too", seed);
		memcpy(file, view, vsize);
		return vsize;
	}
	if (ending == 1)
		CHECK(kura_atomic_abort(fs, fd) == 0, "abort");
	else
		kura_close(fs, fd); /* the close aborts */
	CHECK(reads_as(fs, other, file, fsize), "seed %u: aborted, the file is as it was", seed);
	if (fresh)
		CHECK(free_blocks(fs) == free0, "seed %u: the group's blocks went back (%llu free, %llu before)", seed,
		      free_blocks(fs), free0);
	return fsize;
}

/* A file that starts with random bytes (and maybe a hole), into file;
 * returns its size. */
static size_t random_file(kura_fs *fs, int fd, unsigned char *file, const unsigned char *data)
{
	size_t fsize = (size_t)(rand() % MAXSZ);
	memcpy(file, data, fsize);
	kura_pwrite(fs, fd, file, fsize, 0);
	if (rand() % 3 == 0) { /* a hole in the file */
		size_t at = (size_t)rand() % (fsize + 1), len = (size_t)rand() % 20000;
		if (at + len > fsize)
			len = fsize - at;
		if (len && kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, (off_t)len) == 0)
			memset(file + at, 0, len);
	}
	return fsize;
}

static unsigned char model_file[MAXSZ + 8192], model_data[MAXSZ];

/* One random group over a new file, on a new description. */
static void random_group(kura_fs *fs, unsigned seed, int ending)
{
	srand(seed);
	for (size_t i = 0; i < sizeof model_data; i++)
		model_data[i] = (unsigned char)rand();
	int fd = kura_open(fs, "/g", O_CREAT | O_TRUNC | O_RDWR, 0644);
	int other = kura_open(fs, "/g", O_RDWR, 0);
	size_t fsize = random_file(fs, fd, model_file, model_data);
	group_round(fs, fd, other, model_file, fsize, model_data, seed, ending, 1);
	if (ending != 2)
		kura_close(fs, fd);
	kura_close(fs, other);
}

/* Groups one after another on one description (each commit leaves its
 * shadow to the next group, group.c), committed or aborted at random; after
 * the close nothing of them is left. */
static void successive_groups(kura_fs *fs, unsigned seed)
{
	srand(seed);
	for (size_t i = 0; i < sizeof model_data; i++)
		model_data[i] = (unsigned char)rand();
	unsigned long long free0 = free_blocks(fs);
	int fd = kura_open(fs, "/h", O_CREAT | O_TRUNC | O_RDWR, 0644);
	int other = kura_open(fs, "/h", O_RDWR, 0);
	size_t fsize = random_file(fs, fd, model_file, model_data);
	for (int round = 0; round < 40; round++)
		fsize = group_round(fs, fd, other, model_file, fsize, model_data, seed * 1000 + (unsigned)round,
				    rand() % 4 == 0, round == 0);
	kura_close(fs, fd);
	kura_close(fs, other);
	kura_unlink(fs, "/h");
	struct kura_info in;
	kura_info(fs, &in);
	CHECK(in.blocks_free == free0 && in.orphans == 0, "seed %u: nothing left of the groups (%llu free, %llu before; %llu orphans)",
	      seed, (unsigned long long)in.blocks_free, free0, (unsigned long long)in.orphans);
}

static void fixed_cases(kura_fs *fs, const char *pool)
{
	int fd = kura_open(fs, "/f", O_CREAT | O_RDWR, 0644);
	kura_pwrite(fs, fd, "hello world", 11, 0);
	int ro = kura_open(fs, "/f", O_RDONLY, 0);
	CHECK(kura_atomic_begin(fs, ro) == -EBADF, "a read-only description: EBADF");
	kura_mkdir(fs, "/d", 0755);
	int dfd = kura_open(fs, "/d", O_RDONLY | O_DIRECTORY, 0);
	CHECK(kura_atomic_begin(fs, dfd) == -EBADF, "a directory (read-only): EBADF");
	kura_close(fs, dfd);
	CHECK(kura_atomic_begin(fs, 12345) == -EBADF, "no such descriptor: EBADF");
	CHECK(kura_atomic_abort(fs, fd) == 0, "abort without a group: nothing");
	CHECK(kura_atomic_commit(fs, fd) == 0, "commit without a group: a sync");
	CHECK(kura_atomic_begin(fs, fd) == 0, "begin");
	CHECK(kura_atomic_begin(fs, fd) == -EBUSY, "a second begin: EBUSY");
	uint64_t ino;
	CHECK(kura_map_pin(fs, fd, 1, &ino) == -ENODEV, "a map of the group's description: ENODEV");
	/* A dup shares the description, so the group; O_APPEND appends to the view. */
	int dup = kura_dup(fs, fd);
	CHECK(kura_pwrite(fs, dup, "HELLO", 5, 0) == 5, "write through a dup");
	char buf[32] = {0};
	CHECK(kura_pread(fs, fd, buf, sizeof buf, 0) == 11 && !memcmp(buf, "HELLO world", 11), "the dup wrote to the group");
	CHECK(kura_pread(fs, ro, buf, sizeof buf, 0) == 11 && !memcmp(buf, "hello world", 11), "others read the old bytes");
	CHECK(kura_lseek(fs, fd, 0, SEEK_END) == 11, "SEEK_END: the group's size");
	CHECK(kura_write(fs, fd, "!", 1) == 1, "write at the end");
	CHECK(kura_atomic_commit(fs, dup) == 0, "commit through the dup");
	CHECK(kura_pread(fs, ro, buf, sizeof buf, 0) == 12 && !memcmp(buf, "HELLO world!", 12), "committed: %.12s", buf);
	CHECK(kura_atomic_begin(fs, fd) == 0, "a new group after the commit");
	CHECK(kura_atomic_abort(fs, fd) == 0, "abort it");
	kura_close(fs, dup);

	/* A group larger than a commit can carry fails at the write that
	 * overflows it, and stays usable. */
	struct kura_info in;
	kura_info(fs, &in);
	uint64_t limit = in.log_size / 512, free0 = free_blocks(fs);
	CHECK(kura_atomic_begin(fs, fd) == 0, "begin a large group");
	static char block[4096];
	ssize_t r = 0;
	uint64_t n;
	for (n = 0; n < limit + 16 && r >= 0; n++)
		r = kura_pwrite(fs, fd, block, sizeof block, (off_t)(n * 4096));
	CHECK(r == -ENOSPC && n > limit - 16, "past the group's limit (%llu blocks): ENOSPC after %llu writes, got %zd",
	      (unsigned long long)limit, (unsigned long long)n, r);
	CHECK(kura_pwrite(fs, fd, "x", 1, 0) == 1, "a write inside the group still works");
	CHECK(kura_atomic_abort(fs, fd) == 0, "abort the large group");
	CHECK(free_blocks(fs) == free0, "its blocks went back");
	CHECK(kura_pread(fs, ro, buf, sizeof buf, 0) == 12 && !memcmp(buf, "HELLO world!", 12), "the file kept its bytes");
	kura_close(fs, ro);
	kura_close(fs, fd);

	/* A process that dies in a group leaves an orphan, freed by the next
	 * mount that is alone; the file is as it was. */
	kura_info(fs, &in);
	uint64_t orphans0 = in.orphans;
	kura_unmount(fs);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *c = kura_mount(pool, &opts, NULL);
		int cfd = c ? kura_open(c, "/f", O_RDWR, 0) : -1;
		if (cfd < 0 || kura_atomic_begin(c, cfd) || kura_pwrite(c, cfd, "DEAD", 4, 0) != 4 ||
		    kura_ftruncate(c, cfd, 2) != 0)
			_exit(2);
		_exit(0); /* no close, no unmount */
	}
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child in a group");
	fs = mount_pool(pool);
	if (!fs)
		return;
	fd = kura_open(fs, "/f", O_RDONLY, 0);
	CHECK(kura_pread(fs, fd, buf, sizeof buf, 0) == 12 && !memcmp(buf, "HELLO world!", 12),
	      "a dead process's group left no trace");
	kura_close(fs, fd);
	kura_info(fs, &in);
	CHECK(in.orphans == orphans0, "its shadow was reclaimed (%llu orphans)", (unsigned long long)in.orphans);
	kura_unmount(fs);
}

static int reads_bytes(kura_fs *fs, const char *path, const char *want, size_t len)
{
	char buf[64] = {0};
	int fd = kura_open(fs, path, O_RDONLY, 0);
	ssize_t n = fd < 0 ? -1 : kura_pread(fs, fd, buf, sizeof buf - 1, 0);
	if (fd >= 0)
		kura_close(fs, fd);
	return n == (ssize_t)len && !memcmp(buf, want, len);
}

static int reads_str(kura_fs *fs, const char *path, const char *want)
{
	return reads_bytes(fs, path, want, strlen(want));
}

/* kura_group_commit: two files' groups and name changes in one commit,
 * all or nothing. */
static void set_cases(kura_fs *fs)
{
	unsigned long long free0 = free_blocks(fs);
	kura_mkdir(fs, "/s", 0755);
	int a = kura_open(fs, "/s/a", O_CREAT | O_RDWR, 0644), b = kura_open(fs, "/s/b", O_CREAT | O_RDWR, 0644);
	kura_pwrite(fs, a, "aaaa", 4, 0);
	kura_pwrite(fs, b, "bbbb", 4, 0);
	kura_close(fs, kura_open(fs, "/s/old", O_CREAT | O_RDWR, 0644));
	CHECK(kura_atomic_begin(fs, a) == 0 && kura_atomic_begin(fs, b) == 0, "begin two groups");
	kura_pwrite(fs, a, "AA", 2, 0);
	kura_ftruncate(fs, b, 2);
	kura_pwrite(fs, b, "BBBBBB", 6, 2);
	int tmp = kura_openat(fs, KURA_AT_ROOT, "/s", O_TMPFILE | O_RDWR, 0644);
	CHECK(tmp >= 0 && kura_pwrite(fs, tmp, "new", 3, 0) == 3, "an unnamed file: %d", tmp);

	/* A failing op (its source is missing) undoes the groups' commit too. */
	struct kura_group_file files[2] = { { .fd = a }, { .fd = b } };
	struct kura_group_op ops[3] = {
		{ KURA_GROUP_LINK, tmp, NULL, KURA_AT_ROOT, "/s/new", 0 },
		{ KURA_GROUP_RENAME, KURA_AT_ROOT, "/s/missing", KURA_AT_ROOT, "/s/b2", 0 },
		{ KURA_GROUP_UNLINK, KURA_AT_ROOT, "/s/old", 0, NULL, 0 },
	};
	int entry = 0;
	CHECK(kura_group_commit(fs, files, 2, ops, 3, &entry) == -ENOENT && entry == 3,
	      "a missing rename source: ENOENT at entry 3 (got %d)", entry);
	CHECK(reads_str(fs, "/s/a", "aaaa") && reads_str(fs, "/s/b", "bbbb"), "neither group took effect");
	struct stat st;
	CHECK(kura_stat(fs, "/s/new", &st) == -ENOENT && kura_stat(fs, "/s/old", &st) == 0, "no name changed");
	char buf[16] = {0};
	CHECK(kura_pread(fs, a, buf, sizeof buf, 0) == 4 && !memcmp(buf, "AAaa", 4), "the groups are still open");

	/* The same with a rename that works: everything at once. */
	ops[1].oldpath = "/s/b";
	ops[1].newpath = "/s/b2";
	CHECK(kura_group_commit(fs, files, 2, ops, 3, &entry) == 0 && entry == -1, "commit two groups and three names");
	CHECK(reads_str(fs, "/s/a", "AAaa") && reads_str(fs, "/s/b2", "bbBBBBBB") && reads_str(fs, "/s/new", "new"),
	      "both groups and the new file");
	CHECK(kura_stat(fs, "/s/b", &st) == -ENOENT && kura_stat(fs, "/s/old", &st) == -ENOENT, "renamed and unlinked");
	CHECK(kura_atomic_abort(fs, a) == 0 && kura_pwrite(fs, a, "x", 1, 9) == 1 && reads_bytes(fs, "/s/a", "AAaa\0\0\0\0\0x", 10),
	      "the groups are over: writes go to the file");

	/* Arguments. */
	CHECK(kura_group_commit(fs, files, -1, NULL, 0, NULL) == -EINVAL, "a negative count: EINVAL");
	struct kura_group_file twice[2] = { { .fd = a }, { .fd = a } };
	CHECK(kura_group_commit(fs, twice, 2, NULL, 0, &entry) == -EINVAL && entry == 1, "one description twice: EINVAL");
	struct kura_group_file bad = { .fd = 9999 };
	CHECK(kura_group_commit(fs, &bad, 1, NULL, 0, NULL) == -EBADF, "no such descriptor: EBADF");
	struct kura_group_op odd = { 77, 0, "/s/a", 0, NULL, 0 };
	CHECK(kura_group_commit(fs, NULL, 0, &odd, 1, NULL) == -EINVAL, "an unknown op: EINVAL");
	struct kura_group_op nopath = { KURA_GROUP_UNLINK, KURA_AT_ROOT, NULL, 0, NULL, 0 };
	CHECK(kura_group_commit(fs, NULL, 0, &nopath, 1, NULL) == -EFAULT, "no path: EFAULT");
	CHECK(kura_group_commit(fs, NULL, 0, NULL, 0, NULL) == 0, "nothing: a sync");

	/* Two groups each near the limit of one: their blocks move (map
	 * entries in the log, not the data), so one commit carries both. */
	struct kura_info in;
	kura_info(fs, &in);
	uint64_t each = in.log_size / 512 * 3 / 4;
	static char block[4096];
	CHECK(kura_atomic_begin(fs, a) == 0 && kura_atomic_begin(fs, b) == 0, "begin two large groups");
	for (uint64_t i = 0; i < each; i++) {
		memset(block, (int)(i & 0xff), 8);
		kura_pwrite(fs, a, block, sizeof block, (off_t)(i * 4096));
		kura_pwrite(fs, b, block, sizeof block, (off_t)(i * 4096));
	}
	CHECK(kura_group_commit(fs, files, 2, NULL, 0, &entry) == 0, "two large groups in one commit");
	kura_pread(fs, b, buf, 8, (off_t)((each - 1) * 4096));
	CHECK((unsigned char)buf[0] == ((each - 1) & 0xff), "the second file's last block");
	kura_close(fs, a);
	kura_close(fs, b);
	kura_close(fs, tmp);
	kura_unlink(fs, "/s/a");
	kura_unlink(fs, "/s/b2");
	kura_unlink(fs, "/s/new");
	kura_rmdir(fs, "/s");
	CHECK(free_blocks(fs) == free0, "the blocks came back (%llu, %llu before)", free_blocks(fs), free0);
}

static void one_pool(const char *pool, enum kura_persist persist, enum kura_sync sync)
{
	opts = (struct kura_mount_opts){ .persist = persist, .sync = sync };
	CHECK(kura_mkfs(pool, 64u << 20, 1) == 0, "mkfs %s: %s", pool, kura_last_error());
	kura_fs *fs = mount_pool(pool);
	if (!fs)
		return;
	struct kura_info before, after;
	kura_close(fs, kura_open(fs, "/g", O_CREAT | O_RDWR, 0644));
	kura_info(fs, &before);
	for (unsigned seed = 1; seed <= 300; seed++)
		random_group(fs, seed, (int)(seed % 3));
	for (unsigned seed = 1; seed <= 10; seed++)
		successive_groups(fs, seed);
	kura_truncate(fs, "/g", 0);
	kura_info(fs, &after);
	CHECK(after.blocks_free == before.blocks_free && after.orphans == 0 && after.files == before.files,
	      "nothing kept: %llu/%llu free, %llu orphans", (unsigned long long)after.blocks_free,
	      (unsigned long long)before.blocks_free, (unsigned long long)after.orphans);
	set_cases(fs);
	fixed_cases(fs, pool);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean (%s)", pool);
	unlink(pool);
}

int main(void)
{
	char pool[128];
	snprintf(pool, sizeof pool, "/dev/shm/kura-group-%d.pool", (int)getpid());
	one_pool(pool, KURA_PERSIST_MEMORY, KURA_SYNC_OP);
	snprintf(pool, sizeof pool, "kura-group-%d.pool", (int)getpid()); /* the scratch directory: a disk */
	one_pool(pool, KURA_PERSIST_FILE, KURA_SYNC_FSYNC);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
