/*
 * pool.h — api_test's checks of the pool as a whole: space accounting
 * (a 200 MiB file, statvfs and kura_info), a read-only mount, pools that
 * are missing, garbage or full.  Included once, by api_test.c
 * (api/common.h says why).
 */
#ifndef API_POOL_H
#define API_POOL_H

#include "api/common.h"

/* ---- big file and space accounting -------------------------------------- */

static void test_big_file(void)
{
	section = "200 MiB file";
	size_t n = 200u << 20;
	uint64_t *w = malloc(n), *r = malloc(n);
	if (!w || !r) {
		printf("FAIL [%s]: out of memory\n", section);
		nfail++;
		free(w);
		free(r);
		return;
	}
	for (size_t i = 0; i < n / 8; i++)
		w[i] = i * 0x9e3779b97f4a7c15ull;
	struct statvfs s0, s1, s2;
	EXPECT(kura_statvfs(fs, &s0), 0);
	int fd = EXPECT_OK(kura_open(fs, "/bigfile", O_CREAT | O_RDWR, 0644));
	EXPECT(kura_pwrite(fs, fd, w, n, 0), (long)n);
	EXPECT(kura_statvfs(fs, &s1), 0);
	uint64_t used = (s0.f_bfree - s1.f_bfree) * s0.f_frsize;
	CHECK(s1.f_bfree < s0.f_bfree && used >= n, "statvfs: %" PRIu64 " bytes accounted for a %zu-byte file",
	      used, n);
	remount();
	fd = EXPECT_OK(kura_open(fs, "/bigfile", O_RDONLY, 0));
	memset(r, 0, n);
	EXPECT(kura_pread(fs, fd, r, n, 0), (long)n);
	CHECK(!memcmp(w, r, n), "200 MiB file reads back different");
	memset(r, 0, n);
	size_t got = 0;
	for (;;) {
		ssize_t k = kura_read(fs, fd, (char *)r + got, 3 << 20);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	CHECK(got == n && !memcmp(w, r, n), "chunked read back: %zu bytes, contents %s", got,
	      memcmp(w, r, n) ? "differ" : "match");
	kura_close(fs, fd);
	EXPECT(kura_unlink(fs, "/bigfile"), 0);
	EXPECT(kura_statvfs(fs, &s2), 0);
	CHECK(s2.f_bfree >= s0.f_bfree - 4 && s2.f_bfree > s1.f_bfree,
	      "statvfs free blocks: %lu before, %lu with the file, %lu after unlink", (unsigned long)s0.f_bfree,
	      (unsigned long)s1.f_bfree, (unsigned long)s2.f_bfree);
	free(w);
	free(r);
}

static void test_statvfs_info(void)
{
	section = "statvfs/info";
	struct statvfs s0, s1, s2;
	struct kura_info i0, i1, i2;
	EXPECT(kura_statvfs(fs, &s0), 0);
	EXPECT(kura_info(fs, &i0), 0);
	CHECK(s0.f_blocks > 0 && s0.f_bfree <= s0.f_blocks && s0.f_bavail <= s0.f_bfree && s0.f_frsize > 0,
	      "statvfs: blocks %lu bfree %lu bavail %lu frsize %lu", (unsigned long)s0.f_blocks,
	      (unsigned long)s0.f_bfree, (unsigned long)s0.f_bavail, (unsigned long)s0.f_frsize);
	CHECK(s0.f_namemax == 255, "f_namemax %lu", (unsigned long)s0.f_namemax);
	CHECK(s0.f_blocks * s0.f_frsize <= POOL_SIZE, "statvfs claims %lu bytes in a %llu-byte pool",
	      (unsigned long)(s0.f_blocks * s0.f_frsize), (unsigned long long)POOL_SIZE);
	CHECK(i0.format_version > 0 && i0.pool_size == POOL_SIZE && i0.block_size > 0 &&
		  i0.blocks_free <= i0.blocks_total && i0.blocks_total * i0.block_size <= i0.pool_size,
	      "info: version %u pool %" PRIu64 " block %" PRIu64 " total %" PRIu64 " free %" PRIu64,
	      i0.format_version, i0.pool_size, i0.block_size, i0.blocks_total, i0.blocks_free);
	CHECK(i0.persist && (!strcmp(i0.persist, "pmem") || !strcmp(i0.persist, "file") || !strcmp(i0.persist, "memory")), "info.persist '%s'",
	      i0.persist ? i0.persist : "(null)");

	static unsigned char b[1 << 20];
	memset(b, 's', sizeof b);
	EXPECT(kura_mkdir(fs, "/sv", 0755), 0);
	EXPECT(create_file("/sv/one", b, sizeof b), 0);
	EXPECT(kura_symlink(fs, "one", "/sv/link"), 0);
	EXPECT(kura_statvfs(fs, &s1), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(s1.f_bfree + (sizeof b / s0.f_frsize) <= s0.f_bfree,
	      "free blocks %lu -> %lu after writing 1 MiB", (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree);
	CHECK(s0.f_files == 0 || s1.f_ffree < s0.f_ffree, "free inodes %lu -> %lu after creating 3 objects",
	      (unsigned long)s0.f_ffree, (unsigned long)s1.f_ffree);
	CHECK(i1.files == i0.files + 1 && i1.directories == i0.directories + 1 && i1.symlinks == i0.symlinks + 1,
	      "info counts files %" PRIu64 "->%" PRIu64 " dirs %" PRIu64 "->%" PRIu64 " symlinks %" PRIu64 "->%" PRIu64,
	      i0.files, i1.files, i0.directories, i1.directories, i0.symlinks, i1.symlinks);
	CHECK(i1.block_size && i1.blocks_free + sizeof b / i1.block_size <= i0.blocks_free, "info.blocks_free %" PRIu64 " -> %" PRIu64,
	      i0.blocks_free, i1.blocks_free);
	/* Hard links add no file. */
	EXPECT(kura_link(fs, "/sv/one", "/sv/two"), 0);
	EXPECT(kura_info(fs, &i2), 0);
	CHECK(i2.files == i1.files, "info.files %" PRIu64 " -> %" PRIu64 " after link", i1.files, i2.files);
	EXPECT(kura_unlink(fs, "/sv/one"), 0);
	EXPECT(kura_unlink(fs, "/sv/two"), 0);
	EXPECT(kura_unlink(fs, "/sv/link"), 0);
	EXPECT(kura_rmdir(fs, "/sv"), 0);
	EXPECT(kura_statvfs(fs, &s2), 0);
	EXPECT(kura_info(fs, &i2), 0);
	CHECK(s2.f_bfree > s1.f_bfree && s2.f_bfree + 4 >= s0.f_bfree, "free blocks %lu, %lu, then %lu after delete",
	      (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree, (unsigned long)s2.f_bfree);
	CHECK(s0.f_files == 0 || s2.f_ffree == s0.f_ffree, "free inodes %lu -> %lu after deleting everything",
	      (unsigned long)s0.f_ffree, (unsigned long)s2.f_ffree);
	CHECK(i2.files == i0.files && i2.directories == i0.directories && i2.symlinks == i0.symlinks,
	      "info counts did not return: files %" PRIu64 " dirs %" PRIu64 " symlinks %" PRIu64, i2.files,
	      i2.directories, i2.symlinks);
}

/* ---- mount options ------------------------------------------------------ */

static void test_read_only(void)
{
	section = "read-only mount";
	EXPECT(create_file("/ro-file", "data", 4), 0);
	EXPECT(kura_mkdir(fs, "/ro-dir", 0755), 0);
	EXPECT(kura_unmount(fs), 0);
	struct kura_mount_opts o = {.read_only = 1};
	int err = 0;
	fs = kura_mount(pool, &o, &err);
	if (!CHECK(fs != NULL, "read-only mount failed: %s (%s)", en(err), kura_last_error())) {
		mount_rw();
		return;
	}
	char b[8];
	struct stat st;
	int fd = EXPECT_OK(kura_open(fs, "/ro-file", O_RDONLY, 0));
	if (fd >= 0) {
		EXPECT(kura_read(fs, fd, b, sizeof b), 4);
		EXPECT_ERR(kura_write(fs, fd, "x", 1), EBADF);
		EXPECT_ERR(kura_fchmod(fs, fd, 0600), EROFS);
		kura_close(fs, fd);
	}
	EXPECT(kura_stat(fs, "/ro-file", &st), 0);
	EXPECT_ERR(kura_open(fs, "/ro-file", O_WRONLY, 0), EROFS);
	EXPECT_ERR(kura_open(fs, "/ro-file", O_RDWR, 0), EROFS);
	EXPECT_ERR(kura_open(fs, "/ro-new", O_CREAT | O_WRONLY, 0644), EROFS);
	EXPECT_ERR(kura_mkdir(fs, "/ro-new", 0755), EROFS);
	EXPECT_ERR(kura_rmdir(fs, "/ro-dir"), EROFS);
	EXPECT_ERR(kura_unlink(fs, "/ro-file"), EROFS);
	EXPECT_ERR(kura_rename(fs, "/ro-file", "/ro-2", 0), EROFS);
	EXPECT_ERR(kura_link(fs, "/ro-file", "/ro-2"), EROFS);
	EXPECT_ERR(kura_symlink(fs, "x", "/ro-2"), EROFS);
	EXPECT_ERR(kura_chmod(fs, "/ro-file", 0600), EROFS);
	EXPECT_ERR(kura_truncate(fs, "/ro-file", 0), EROFS);
	EXPECT_ERR(kura_mknod(fs, "/ro-2", S_IFREG | 0644, 0), EROFS);
	EXPECT_ERR(kura_utimens(fs, "/ro-file", NULL, 0), EROFS);
	EXPECT(kura_unmount(fs), 0);
	mount_rw();
	EXPECT(kura_stat(fs, "/ro-file", &st), 0);
	CHECK(st.st_size == 4, "file changed by read-only mount: size %lld", (long long)st.st_size);
	EXPECT(kura_unlink(fs, "/ro-file"), 0);
	EXPECT(kura_rmdir(fs, "/ro-dir"), 0);
}

static void quiet(void *ctx, const char *line)
{
	(void)ctx, (void)line;
}

static void test_pool_errors(void)
{
	section = "pool errors";
	int err = 0;
	/* mkfs refuses a non-empty existing file without force. */
	EXPECT_ERR(kura_mkfs(pool, POOL_SIZE, 0), EEXIST);
	char bad[300];
	snprintf(bad, sizeof bad, "%s.missing", pool);
	kura_fs *f = kura_mount(bad, NULL, &err);
	CHECK(!f && err < 0, "mount of a missing pool: %p err %d", (void *)f, err);
	const char *why = kura_last_error();
	CHECK(why && strstr(why, bad), "kura_last_error does not name the pool: '%s'", why ? why : "(null)");
	snprintf(bad, sizeof bad, "%s.garbage", pool);
	FILE *g = fopen(bad, "w");
	if (g) {
		for (int i = 0; i < (8 << 20) / 16; i++)
			fputs("not a kura pool\n", g);
		fclose(g);
		err = 0;
		f = kura_mount(bad, NULL, &err);
		CHECK(!f && err < 0, "mount of a garbage file: %p err %d", (void *)f, err);
		if (f)
			kura_unmount(f);
		CHECK(kura_fsck(bad, 0, quiet, NULL) != 0, "fsck of a garbage file reports nothing");
		unlink(bad);
	}
	EXPECT_ERR(kura_mkfs(bad, KURA_MIN_POOL_SIZE - 4096, 0), EINVAL);
	unlink(bad);
}

/* A small pool filled to the brim: ENOSPC, no partial state, space back. */
static void test_full_pool(void)
{
	section = "full pool";
	char small[300];
	snprintf(small, sizeof small, "%s.small", pool);
	if (EXPECT(kura_mkfs(small, 8u << 20, 1), 0) < 0)
		return;
	int err = 0;
	kura_fs *f = kura_mount(small, NULL, &err);
	if (!CHECK(f != NULL, "mount small pool: %s", en(err))) {
		unlink(small);
		return;
	}
	struct statvfs s0, s1;
	EXPECT(kura_statvfs(f, &s0), 0);
	static unsigned char chunk[64 << 10];
	int fd = EXPECT_OK(kura_open(f, "/fill", O_CREAT | O_RDWR, 0644));
	uint64_t total = 0;
	long last = 0;
	for (int i = 0; i < 1000; i++) {
		memset(chunk, (int)(i % 251) + 1, sizeof chunk);
		last = kura_write(f, fd, chunk, sizeof chunk);
		if (last > 0)
			total += (uint64_t)last;
		if (last != (long)sizeof chunk)
			break;
	}
	/* A write may come up short once space runs out; the next one fails. */
	if (last >= 0)
		last = kura_write(f, fd, chunk, sizeof chunk);
	CHECK(last == -ENOSPC, "filling an 8 MiB pool ended with %ld (%s), expected ENOSPC", last, en(last));
	struct stat st;
	EXPECT(kura_fstat(f, fd, &st), 0);
	CHECK((uint64_t)st.st_size == total, "size %lld after writes that returned %" PRIu64 " bytes in all",
	      (long long)st.st_size, total);
	int bad = 0;
	for (uint64_t off = 0; off < total; off += sizeof chunk) {
		size_t n = total - off < sizeof chunk ? (size_t)(total - off) : sizeof chunk;
		if (kura_pread(f, fd, chunk, n, (off_t)off) != (ssize_t)n ||
		    !all_bytes(chunk, n, (unsigned char)((off / sizeof chunk) % 251 + 1)))
			bad++;
	}
	CHECK(bad == 0, "%d chunks of the full file read back wrong", bad);
	long r = kura_mkdir(f, "/more", 0755);
	CHECK(r == 0 || r == -ENOSPC, "mkdir on a full pool: %ld (%s)", r, en(r));
	kura_close(f, fd);
	EXPECT(kura_unlink(f, "/fill"), 0);
	EXPECT(kura_statvfs(f, &s1), 0);
	CHECK(s1.f_bfree + 4 >= s0.f_bfree, "free blocks %lu before filling, %lu after deleting",
	      (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree);
	/* The space is usable again. */
	fd = EXPECT_OK(kura_open(f, "/again", O_CREAT | O_RDWR, 0644));
	uint64_t again = 0;
	while (again < total && kura_write(f, fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk)
		again += sizeof chunk;
	CHECK(again + sizeof chunk >= total, "after freeing, only %" PRIu64 " of %" PRIu64 " bytes fit again", again,
	      total);
	kura_close(f, fd);
	EXPECT(kura_unmount(f), 0);
	EXPECT(kura_fsck(small, 0, fsck_line, NULL), 0);
	unlink(small);
}

#endif
