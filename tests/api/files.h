/*
 * files.h — api_test's checks of descriptors and of one file's life:
 * contents, holes and sizes, special files, modes and times, unlink while
 * open, reopen and O_TMPFILE, generations.  Included once, by api_test.c
 * (api/common.h says why).
 */
#ifndef API_FILES_H
#define API_FILES_H

#include "api/common.h"

/* ---- descriptors -------------------------------------------------------- */

static void test_descriptors(void)
{
	section = "descriptors";
	char b[64];
	struct stat st;
	EXPECT(kura_mkdir(fs, "/fd", 0755), 0);
	int fd = EXPECT_OK(kura_open(fs, "/fd/f", O_CREAT | O_RDWR, 0644));
	EXPECT(kura_close(fs, fd), 0);
	EXPECT_ERR(kura_close(fs, fd), EBADF);
	EXPECT_ERR(kura_read(fs, fd, b, 1), EBADF);
	EXPECT_ERR(kura_write(fs, fd, "x", 1), EBADF);
	EXPECT_ERR(kura_fstat(fs, fd, &st), EBADF);
	EXPECT_ERR(kura_lseek(fs, fd, 0, SEEK_SET), EBADF);
	EXPECT_ERR(kura_ftruncate(fs, fd, 0), EBADF);
	EXPECT_ERR(kura_dup(fs, fd), EBADF);
	EXPECT_ERR(kura_read(fs, -1, b, 1), EBADF);
	EXPECT_ERR(kura_read(fs, 1000000, b, 1), EBADF);
	EXPECT_ERR(kura_close(fs, -5), EBADF);

	fd = EXPECT_OK(kura_open(fs, "/fd/f", O_RDONLY, 0));
	EXPECT_ERR(kura_write(fs, fd, "x", 1), EBADF);
	EXPECT_ERR(kura_pwrite(fs, fd, "x", 1, 0), EBADF);
	EXPECT_ERR(kura_fallocate(fs, fd, 0, 0, 4096), EBADF);
	/* POSIX allows EBADF or EINVAL for ftruncate of a read-only descriptor;
	 * Linux says EINVAL. */
	long r = kura_ftruncate(fs, fd, 0);
	CHECK(r == -EINVAL || r == -EBADF, "ftruncate on O_RDONLY: %ld (%s), expected EINVAL or EBADF", r, en(r));
	kura_close(fs, fd);
	fd = EXPECT_OK(kura_open(fs, "/fd/f", O_WRONLY, 0));
	EXPECT_ERR(kura_read(fs, fd, b, 1), EBADF);
	EXPECT_ERR(kura_pread(fs, fd, b, 1, 0), EBADF);
	CHECK((kura_fd_flags(fs, fd) & O_ACCMODE) == O_WRONLY, "fd_flags %#x", kura_fd_flags(fs, fd));
	EXPECT_ERR(kura_pwrite(fs, fd, "x", 1, -1), EINVAL);
	EXPECT_ERR(kura_lseek(fs, fd, -1, SEEK_SET), EINVAL);
	EXPECT_ERR(kura_lseek(fs, fd, 0, 12345), EINVAL);
	EXPECT_ERR(kura_lseek(fs, fd, 0, SEEK_DATA), ENXIO);
	EXPECT_ERR(kura_fallocate(fs, fd, 0, 0, 0), EINVAL);
	EXPECT_ERR(kura_fallocate(fs, fd, 0, -1, 10), EINVAL);
	kura_close(fs, fd);

	/* dup shares one offset and status flags. */
	fd = EXPECT_OK(kura_open(fs, "/fd/f", O_RDWR | O_APPEND, 0));
	int fd2 = EXPECT_OK(kura_dup(fs, fd));
	CHECK(fd2 != fd, "dup returned the same number %d", fd2);
	EXPECT(kura_write(fs, fd, "abc", 3), 3);
	EXPECT(kura_lseek(fs, fd2, 0, SEEK_CUR), 3);
	EXPECT(kura_write(fs, fd2, "de", 2), 2);
	EXPECT(kura_lseek(fs, fd, 0, SEEK_CUR), 5);
	CHECK(kura_fd_flags(fs, fd2) & O_APPEND, "dup lost O_APPEND: %#x", kura_fd_flags(fs, fd2));
	EXPECT(kura_close(fs, fd), 0);
	EXPECT(kura_lseek(fs, fd2, 1, SEEK_SET), 1);
	EXPECT(kura_read(fs, fd2, b, 10), 4);
	CHECK(!memcmp(b, "bcde", 4), "read after close of twin: '%.4s'", b);
	EXPECT(kura_close(fs, fd2), 0);

	/* O_TRUNC empties; O_EXCL without O_CREAT is ignored on an existing file. */
	fd = EXPECT_OK(kura_open(fs, "/fd/f", O_RDWR | O_TRUNC, 0));
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 0, "size after O_TRUNC %lld", (long long)st.st_size);
	kura_close(fs, fd);
}

/* ---- file contents ------------------------------------------------------ */

static void test_append(void)
{
	section = "O_APPEND";
	unsigned char b[64];
	EXPECT(create_file("/app", "0123456789", 10), 0);
	int a = EXPECT_OK(kura_open(fs, "/app", O_WRONLY | O_APPEND, 0));
	int w = EXPECT_OK(kura_open(fs, "/app", O_RDWR, 0));
	EXPECT(kura_lseek(fs, a, 0, SEEK_SET), 0);
	EXPECT(kura_write(fs, a, "AB", 2), 2);
	EXPECT(kura_lseek(fs, a, 0, SEEK_CUR), 12);
	/* Another descriptor extends the file; the appender follows the new end. */
	EXPECT(kura_pwrite(fs, w, "xyz", 3, 20), 3);
	EXPECT(kura_write(fs, a, "C", 1), 1);
	EXPECT(kura_lseek(fs, a, 0, SEEK_CUR), 24);
	EXPECT(kura_pread(fs, w, b, sizeof b, 0), 24);
	CHECK(!memcmp(b, "0123456789AB\0\0\0\0\0\0\0\0xyzC", 24), "contents after appends differ");
	/* Like Linux (pwrite(2), BUGS), pwrite on an O_APPEND descriptor appends
	 * and leaves the descriptor's offset alone. */
	EXPECT(kura_lseek(fs, a, 3, SEEK_SET), 3);
	EXPECT(kura_pwrite(fs, a, "P", 1, 0), 1);
	EXPECT(kura_pread(fs, w, b, sizeof b, 0), 25);
	CHECK(b[0] == '0' && b[24] == 'P', "pwrite with O_APPEND: first byte '%c', byte 24 '%c'", b[0], b[24]);
	EXPECT(kura_lseek(fs, a, 0, SEEK_CUR), 3);
	/* A zero-length write changes nothing, not even an appender's offset. */
	EXPECT(kura_write(fs, a, "", 0), 0);
	EXPECT(kura_lseek(fs, a, 0, SEEK_CUR), 3);
	kura_close(fs, a);
	kura_close(fs, w);
}

static void test_sparse_truncate(void)
{
	section = "sparse/truncate";
	struct stat st;
	static unsigned char b[1 << 20];
	int fd = EXPECT_OK(kura_open(fs, "/sparse", O_CREAT | O_RDWR, 0644));
	EXPECT(kura_pwrite(fs, fd, "tail", 4, (5 << 20) + 7), 4);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == (5 << 20) + 11, "sparse size %lld", (long long)st.st_size);
	memset(b, 0xee, sizeof b);
	EXPECT(kura_pread(fs, fd, b, sizeof b, 1 << 20), sizeof b);
	CHECK(all_bytes(b, sizeof b, 0), "hole does not read as zeros");
	EXPECT(kura_pread(fs, fd, b, 100, (5 << 20) + 7), 4);
	CHECK(!memcmp(b, "tail", 4), "data after hole '%.4s'", b);
	EXPECT(kura_pread(fs, fd, b, 100, 10 << 20), 0);
	/* A hole reported by SEEK_HOLE starts at or after the offset and the data
	 * at the end is found by SEEK_DATA from inside the hole. */
	off_t d = kura_lseek(fs, fd, 4096, SEEK_DATA);
	CHECK(d >= 4096 && d <= (5 << 20) + 7, "SEEK_DATA from 4096 gave %lld", (long long)d);
	off_t h = kura_lseek(fs, fd, 0, SEEK_HOLE);
	CHECK(h >= 0 && h <= (5 << 20) + 11, "SEEK_HOLE from 0 gave %lld", (long long)h);
	EXPECT_ERR(kura_lseek(fs, fd, (5 << 20) + 11, SEEK_DATA), ENXIO);
	EXPECT_ERR(kura_lseek(fs, fd, (5 << 20) + 11, SEEK_HOLE), ENXIO);

	/* Old bytes must not come back when a file shrinks and grows again. */
	memset(b, 'y', 8192);
	EXPECT(kura_pwrite(fs, fd, b, 8192, 0), 8192);
	EXPECT(kura_ftruncate(fs, fd, 5000), 0);
	EXPECT(kura_ftruncate(fs, fd, 3 * 4096 + 5), 0);
	memset(b, 0xee, 3 * 4096 + 100);
	EXPECT(kura_pread(fs, fd, b, 3 * 4096 + 100, 0), 3 * 4096 + 5);
	CHECK(all_bytes(b, 5000, 'y') && all_bytes(b + 5000, 3 * 4096 + 5 - 5000, 0),
	      "truncate down then up does not read zeros beyond the cut");
	EXPECT(kura_truncate(fs, "/sparse", 1), 0);
	EXPECT(kura_truncate(fs, "/sparse", 100000), 0);
	EXPECT(kura_pread(fs, fd, b, 100000, 0), 100000);
	CHECK(b[0] == 'y' && all_bytes(b + 1, 99999, 0), "truncate(path) to 1 and up");
	EXPECT_ERR(kura_truncate(fs, "/sparse", -1), EINVAL);
	EXPECT_ERR(kura_ftruncate(fs, fd, -1), EINVAL);

	/* fallocate modes. */
	memset(b, 'a', 16384);
	EXPECT(kura_pwrite(fs, fd, b, 16384, 0), 16384);
	EXPECT(kura_ftruncate(fs, fd, 16384), 0);
	EXPECT(kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 9000), 0);
	EXPECT(kura_pread(fs, fd, b, 16384, 0), 16384);
	CHECK(all_bytes(b, 100, 'a') && all_bytes(b + 100, 9000, 0) && all_bytes(b + 9100, 16384 - 9100, 'a'),
	      "punch hole contents");
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 16384, "size after punch %lld", (long long)st.st_size);
	memset(b, 'c', 16384);
	EXPECT(kura_pwrite(fs, fd, b, 16384, 0), 16384);
	EXPECT(kura_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE, 4000, 5000), 0);
	EXPECT(kura_pread(fs, fd, b, 16384, 0), 16384);
	CHECK(all_bytes(b, 4000, 'c') && all_bytes(b + 4000, 5000, 0) && all_bytes(b + 9000, 16384 - 9000, 'c'),
	      "zero range contents");
	EXPECT(kura_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 16000, 10000), 0);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 16384, "size after zero range keep-size %lld", (long long)st.st_size);
	EXPECT(kura_fallocate(fs, fd, FALLOC_FL_ZERO_RANGE, 16000, 10000), 0);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 26000, "size after zero range %lld", (long long)st.st_size);
	EXPECT(kura_fallocate(fs, fd, FALLOC_FL_KEEP_SIZE, 26000, 100000), 0);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 26000, "size after keep-size allocate %lld", (long long)st.st_size);
	EXPECT(kura_fallocate(fs, fd, 0, 26000, 100000), 0);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 126000, "size after allocate %lld", (long long)st.st_size);
	EXPECT(kura_pread(fs, fd, b, 100000, 26000), 100000);
	CHECK(all_bytes(b, 100000, 0), "allocated range is not zero");
	EXPECT_ERR(kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE, 0, 4096), EOPNOTSUPP);
	EXPECT_ERR(kura_fallocate(fs, fd, FALLOC_FL_COLLAPSE_RANGE, 0, 4096), EOPNOTSUPP);
	EXPECT_ERR(kura_fallocate(fs, fd, FALLOC_FL_INSERT_RANGE, 0, 4096), EOPNOTSUPP);
	EXPECT_ERR(kura_fallocate(fs, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096),
		   EOPNOTSUPP);
	/* Far offsets: deep block maps, still sparse; beyond the documented
	 * limit of the engine (64 TiB) EFBIG, as for any too-large file. */
	struct statvfs sv0, sv1;
	EXPECT(kura_ftruncate(fs, fd, 0), 0);
	EXPECT(kura_statvfs(fs, &sv0), 0);
	const off_t tib = (off_t)1 << 40;
	EXPECT(kura_pwrite(fs, fd, "far", 3, tib - 1), 3);
	EXPECT(kura_pwrite(fs, fd, "near", 4, 2 * tib + 12345), 4);
	EXPECT(kura_pwrite(fs, fd, "away", 4, 37 * tib + 12345), 4);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 37 * tib + 12349, "size after far writes %lld", (long long)st.st_size);
	memset(b, 0xee, 16);
	EXPECT(kura_pread(fs, fd, b, 16, tib - 2), 16);
	CHECK(b[0] == 0 && !memcmp(b + 1, "far", 3) && all_bytes(b + 4, 12, 0), "read around 1 TiB");
	EXPECT(kura_pread(fs, fd, b, 16, 37 * tib + 12345), 4);
	CHECK(!memcmp(b, "away", 4), "read at 37 TiB");
	EXPECT(kura_pread(fs, fd, b, 4096, 20 * tib), 4096);
	CHECK(all_bytes(b, 4096, 0), "hole at 20 TiB");
	/* (The hole searched is kept to 1 TiB: this engine walks holes block by
	 * block, about 0.7 s per TiB.) */
	d = kura_lseek(fs, fd, tib + 4096, SEEK_DATA);
	CHECK(d > tib && d <= 2 * tib + 12345, "SEEK_DATA from 1 TiB + 4 KiB gave %lld", (long long)d);
	EXPECT(kura_statvfs(fs, &sv1), 0);
	CHECK(sv0.f_bfree - sv1.f_bfree < 64, "two tiny far writes used %lu blocks", (unsigned long)(sv0.f_bfree - sv1.f_bfree));
	EXPECT_ERR(kura_ftruncate(fs, fd, ((off_t)1 << 46) + 1), EFBIG);
	EXPECT_ERR(kura_pwrite(fs, fd, "x", 1, (off_t)1 << 46), EFBIG);
	EXPECT(kura_ftruncate(fs, fd, 0), 0);
	EXPECT(kura_statvfs(fs, &sv1), 0);
	CHECK(sv1.f_bfree >= sv0.f_bfree, "free blocks %lu before far writes, %lu after truncating to 0",
	      (unsigned long)sv0.f_bfree, (unsigned long)sv1.f_bfree);
	kura_close(fs, fd);
	EXPECT(kura_unlink(fs, "/sparse"), 0);

	EXPECT(kura_mknod(fs, "/node", S_IFREG | 0640, 0), 0);
	EXPECT(kura_stat(fs, "/node", &st), 0);
	CHECK(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0640 && st.st_size == 0, "mknod S_IFREG: mode %o",
	      st.st_mode);
	/* Special files: names and attributes; their opens fail as on a nodev
	 * mount with no pipes. */
	EXPECT(kura_mknod(fs, "/fifo", S_IFIFO | 0644, 0), 0);
	EXPECT(kura_stat(fs, "/fifo", &st), 0);
	CHECK(S_ISFIFO(st.st_mode) && (st.st_mode & 07777) == 0644 && st.st_rdev == 0, "mknod S_IFIFO: mode %o",
	      st.st_mode);
	EXPECT_ERR(kura_open(fs, "/fifo", O_RDONLY | O_NONBLOCK, 0), EOPNOTSUPP);
	EXPECT_ERR(kura_open(fs, "/fifo", O_WRONLY | O_NONBLOCK, 0), ENXIO);
	EXPECT(kura_mknod(fs, "/sock", S_IFSOCK | 0600, 0), 0);
	EXPECT_ERR(kura_open(fs, "/sock", O_RDWR, 0), ENXIO);
	dev_t dev = makedev(1, 3);
	if (geteuid() == 0) {
		EXPECT(kura_mknod(fs, "/chr", S_IFCHR | 0644, dev), 0);
		EXPECT(kura_stat(fs, "/chr", &st), 0);
		CHECK(S_ISCHR(st.st_mode) && st.st_rdev == dev, "mknod S_IFCHR: mode %o rdev %lx", st.st_mode,
		      (unsigned long)st.st_rdev);
		EXPECT_ERR(kura_open(fs, "/chr", O_RDWR, 0), EACCES);
		EXPECT(kura_rename(fs, "/chr", "/chr2", 0), 0);
		EXPECT(kura_link(fs, "/chr2", "/chr3"), 0);
		EXPECT(kura_lstat(fs, "/chr3", &st), 0);
		CHECK(st.st_nlink == 2 && st.st_rdev == dev, "a linked device node: nlink %lu", (unsigned long)st.st_nlink);
		EXPECT(kura_unlink(fs, "/chr2"), 0);
		EXPECT(kura_unlink(fs, "/chr3"), 0);
	}
	EXPECT_ERR(kura_mknod(fs, "/bad", S_IFMT | 0644, 0), EINVAL);
	EXPECT(kura_unlink(fs, "/fifo"), 0);
	EXPECT(kura_unlink(fs, "/sock"), 0);

	/* Modes are stored as given (& 07777): no umask in the engine. */
	EXPECT(kura_chmod(fs, "/node", 07755), 0);
	EXPECT(kura_stat(fs, "/node", &st), 0);
	CHECK((st.st_mode & 07777) == 07755, "chmod 07755 gave %o", st.st_mode & 07777);
	EXPECT(kura_mkdir(fs, "/m777", 0777), 0);
	EXPECT(kura_stat(fs, "/m777", &st), 0);
	CHECK((st.st_mode & 07777) == 0777, "mkdir 0777 gave %o", st.st_mode & 07777);

	struct timespec ts[2] = {{1000000, 5}, {2000000, 7}};
	EXPECT(kura_utimens(fs, "/node", ts, 0), 0);
	EXPECT(kura_stat(fs, "/node", &st), 0);
	CHECK(st.st_atim.tv_sec == 1000000 && st.st_atim.tv_nsec == 5 && st.st_mtim.tv_sec == 2000000 &&
		  st.st_mtim.tv_nsec == 7,
	      "utimens: atime %lld.%ld mtime %lld.%ld", (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
	      (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	EXPECT(kura_unlink(fs, "/node"), 0);
}

static void test_unlink_open(void)
{
	section = "unlink while open";
	struct stat st;
	struct kura_info i0, i1, i2;
	unsigned char b[70000];
	memset(b, 'u', sizeof b);
	EXPECT(create_file("/orph", b, sizeof b), 0);
	int fd = EXPECT_OK(kura_open(fs, "/orph", O_RDWR, 0));
	EXPECT(kura_info(fs, &i0), 0);
	EXPECT(kura_unlink(fs, "/orph"), 0);
	EXPECT_ERR(kura_stat(fs, "/orph", &st), ENOENT);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_nlink == 0 && st.st_size == (off_t)sizeof b, "fstat of unlinked: nlink %lu size %lld",
	      (unsigned long)st.st_nlink, (long long)st.st_size);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans + 1, "orphans %" PRIu64 " -> %" PRIu64 ", expected +1", i0.orphans,
	      i1.orphans);
	CHECK(i1.files == i0.files - 1 || i1.files == i0.files,
	      "files %" PRIu64 " -> %" PRIu64 " after unlinking an open file", i0.files, i1.files);
	memset(b, 0, sizeof b);
	EXPECT(kura_pread(fs, fd, b, sizeof b, 0), sizeof b);
	CHECK(all_bytes(b, sizeof b, 'u'), "unlinked file lost its data");
	EXPECT(kura_pwrite(fs, fd, "more", 4, sizeof b), 4);
	EXPECT(kura_pread(fs, fd, b, 10, sizeof b), 4);
	CHECK(!memcmp(b, "more", 4), "write to unlinked file");
	/* A new file of the same name is a different file. */
	EXPECT(create_file("/orph", "new", 3), 0);
	EXPECT(kura_pread(fs, fd, b, 4, 0), 4);
	CHECK(!memcmp(b, "uuuu", 4), "old descriptor sees the new file");
	EXPECT(kura_unlink(fs, "/orph"), 0);
	EXPECT(kura_close(fs, fd), 0);
	EXPECT(kura_info(fs, &i2), 0);
	CHECK(i2.orphans == i0.orphans, "orphans after close %" PRIu64 ", before %" PRIu64, i2.orphans, i0.orphans);
	CHECK(i0.block_size && i2.blocks_free + 2 >= i0.blocks_free + sizeof b / i0.block_size,
	      "blocks_free %" PRIu64 " before, %" PRIu64 " after the orphan was closed", i0.blocks_free,
	      i2.blocks_free);
}

/* ---- reopen and O_TMPFILE ---------------------------------------------- */

static void test_reopen_tmpfile(void)
{
	section = "reopen/O_TMPFILE";
	struct stat st;
	struct kura_info i0, i1;
	char b[16];
	EXPECT(kura_mkdir(fs, "/ro", 0755), 0);
	EXPECT(create_file("/ro/f", "0123456789", 10), 0);
	EXPECT(kura_info(fs, &i0), 0);

	/* A new description: own offset, own flags, the new open's access mode. */
	int fd = EXPECT_OK(kura_open(fs, "/ro/f", O_RDONLY, 0));
	EXPECT(kura_lseek(fs, fd, 4, SEEK_SET), 4);
	int r1 = EXPECT_OK(kura_reopen(fs, fd, O_RDONLY));
	EXPECT(kura_lseek(fs, r1, 0, SEEK_CUR), 0);
	EXPECT(kura_read(fs, r1, b, 2), 2);
	EXPECT(kura_lseek(fs, fd, 0, SEEK_CUR), 4);
	int w1 = EXPECT_OK(kura_reopen(fs, fd, O_WRONLY | O_APPEND));
	CHECK((kura_fd_flags(fs, w1) & (O_ACCMODE | O_APPEND)) == (O_WRONLY | O_APPEND), "reopen flags %#x",
	      kura_fd_flags(fs, w1));
	CHECK((kura_fd_flags(fs, fd) & (O_ACCMODE | O_APPEND)) == O_RDONLY, "source flags changed: %#x",
	      kura_fd_flags(fs, fd));
	EXPECT(kura_write(fs, w1, "ab", 2), 2);
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 12, "size after append through the reopened fd: %lld", (long long)st.st_size);
	EXPECT_ERR(kura_read(fs, w1, b, 1), EBADF);
	EXPECT_ERR(kura_reopen(fs, fd, O_RDONLY | O_DIRECTORY), ENOTDIR);
	EXPECT_ERR(kura_reopen(fs, fd, O_CREAT | O_EXCL | O_RDWR), EEXIST);
	EXPECT_ERR(kura_reopen(fs, fd, O_ACCMODE), EINVAL);
	EXPECT_ERR(kura_reopen(fs, 999999, O_RDONLY), EBADF);
	int t1 = EXPECT_OK(kura_reopen(fs, fd, O_RDWR | O_TRUNC | O_CREAT));
	EXPECT(kura_fstat(fs, fd, &st), 0);
	CHECK(st.st_size == 0, "O_TRUNC through reopen left %lld bytes", (long long)st.st_size);
	/* Permissions come from the inode, not from the source descriptor. */
	EXPECT(kura_chmod(fs, "/ro/f", 0444), 0);
	kura_set_creds(fs, 1000, 1000);
	EXPECT_ERR(kura_reopen(fs, fd, O_WRONLY), EACCES);
	EXPECT_OK(kura_close(fs, EXPECT_OK(kura_reopen(fs, fd, O_RDONLY))));
	kura_set_creds(fs, 0, 0);
	EXPECT(kura_chmod(fs, "/ro/f", 0644), 0);
	/* A directory: read-only only. */
	int d = EXPECT_OK(kura_open(fs, "/ro", O_RDONLY | O_DIRECTORY, 0));
	EXPECT_ERR(kura_reopen(fs, d, O_RDWR), EISDIR);
	EXPECT_ERR(kura_reopen(fs, d, O_RDONLY | O_CREAT), EISDIR);
	EXPECT_OK(kura_close(fs, EXPECT_OK(kura_reopen(fs, d, O_RDONLY | O_DIRECTORY))));

	/* Unlinked meanwhile: still reopens, and the file lives until the last
	 * of all the descriptions closes. */
	EXPECT(kura_pwrite(fs, t1, "xyz", 3, 0), 3);
	EXPECT(kura_unlink(fs, "/ro/f"), 0);
	int r2 = EXPECT_OK(kura_reopen(fs, fd, O_RDWR));
	EXPECT(kura_close(fs, fd), 0);
	EXPECT(kura_close(fs, r1), 0);
	EXPECT(kura_close(fs, w1), 0);
	EXPECT(kura_close(fs, t1), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans + 1, "orphans %" PRIu64 ", expected %" PRIu64, i1.orphans, i0.orphans + 1);
	EXPECT(kura_pread(fs, r2, b, 3, 0), 3);
	CHECK(!memcmp(b, "xyz", 3), "unlinked file through the reopened fd: '%.3s'", b);
	int r3 = EXPECT_OK(kura_reopen(fs, r2, O_RDONLY));
	EXPECT(kura_close(fs, r2), 0);
	EXPECT(kura_close(fs, r3), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans && i1.files == i0.files - 1, "after the last close: orphans %" PRIu64
	      " (was %" PRIu64 "), files %" PRIu64 " (was %" PRIu64 ")", i1.orphans, i0.orphans, i1.files, i0.files);

	/* O_TMPFILE: argument checks as Linux. */
	EXPECT_ERR(kura_open(fs, "/ro", O_TMPFILE | O_RDONLY, 0600), EINVAL);
	EXPECT_ERR(kura_open(fs, "/ro", O_TMPFILE | O_CREAT | O_RDWR, 0600), EINVAL);
	EXPECT_ERR(kura_open(fs, "/ro/missing", O_TMPFILE | O_RDWR, 0600), ENOENT);
	EXPECT(create_file("/ro/plain", "p", 1), 0);
	EXPECT_ERR(kura_open(fs, "/ro/plain", O_TMPFILE | O_RDWR, 0600), ENOTDIR);
	kura_set_creds(fs, 1000, 1000);
	EXPECT_ERR(kura_open(fs, "/ro", O_TMPFILE | O_RDWR, 0600), EACCES);
	kura_set_creds(fs, 0, 0);

	/* An unnamed file, counted as an orphan, named once by AT_EMPTY_PATH. */
	EXPECT(kura_info(fs, &i0), 0);
	int tf = EXPECT_OK(kura_open(fs, "/ro", O_TMPFILE | O_RDWR, 0640));
	EXPECT(kura_write(fs, tf, "tmp", 3), 3);
	EXPECT(kura_fstat(fs, tf, &st), 0);
	CHECK(S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0640 && st.st_nlink == 0 && st.st_size == 3,
	      "tmpfile: mode %o nlink %lu size %lld", st.st_mode, (unsigned long)st.st_nlink, (long long)st.st_size);
	CHECK(!(kura_fd_flags(fs, tf) & O_DIRECTORY), "tmpfile description flags %#x", kura_fd_flags(fs, tf));
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans + 1, "tmpfile not an orphan: %" PRIu64, i1.orphans);
	int dirfd = EXPECT_OK(kura_open(fs, "/ro", O_RDONLY | O_DIRECTORY, 0));
	EXPECT_ERR(kura_linkat(fs, tf, "", dirfd, "plain", AT_EMPTY_PATH), EEXIST);
	int tr = EXPECT_OK(kura_reopen(fs, tf, O_RDONLY));
	EXPECT(kura_linkat(fs, tr, "", dirfd, "named", AT_EMPTY_PATH), 0);
	EXPECT(kura_close(fs, tr), 0);
	EXPECT(kura_stat(fs, "/ro/named", &st), 0);
	CHECK(st.st_nlink == 1 && st.st_size == 3, "linked tmpfile: nlink %lu size %lld", (unsigned long)st.st_nlink,
	      (long long)st.st_size);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans, "orphans after linking %" PRIu64 ", before %" PRIu64, i1.orphans, i0.orphans);
	/* Once named it is an ordinary file: unlinked again, it cannot come back. */
	EXPECT_ERR(kura_linkat(fs, tf, "", dirfd, "named", AT_EMPTY_PATH), EEXIST);
	EXPECT(kura_unlink(fs, "/ro/named"), 0);
	EXPECT_ERR(kura_linkat(fs, tf, "", dirfd, "again", AT_EMPTY_PATH), ENOENT);
	EXPECT(kura_close(fs, tf), 0);
	/* O_EXCL: never linkable; closing frees it. */
	tf = EXPECT_OK(kura_open(fs, "/ro", O_TMPFILE | O_WRONLY | O_EXCL, 0600));
	EXPECT_ERR(kura_linkat(fs, tf, "", KURA_AT_ROOT, "/ro/excl", AT_EMPTY_PATH), ENOENT);
	EXPECT(kura_close(fs, tf), 0);
	/* Relative to a directory descriptor, and closed without a name. */
	tf = EXPECT_OK(kura_openat(fs, dirfd, ".", O_TMPFILE | O_WRONLY, 0600));
	EXPECT(kura_write(fs, tf, "gone", 4), 4);
	EXPECT(kura_close(fs, tf), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans && i1.files == i0.files && i1.blocks_free == i0.blocks_free,
	      "after closing unnamed tmpfiles: orphans %" PRIu64 "/%" PRIu64 " files %" PRIu64 "/%" PRIu64
	      " free %" PRIu64 "/%" PRIu64, i1.orphans, i0.orphans, i1.files, i0.files, i1.blocks_free, i0.blocks_free);
	/* In a removed directory (reached through its descriptor): ENOENT. */
	EXPECT(kura_mkdir(fs, "/ro/sub", 0755), 0);
	int sd = EXPECT_OK(kura_open(fs, "/ro/sub", O_RDONLY | O_DIRECTORY, 0));
	EXPECT(kura_rmdir(fs, "/ro/sub"), 0);
	EXPECT_ERR(kura_openat(fs, sd, ".", O_TMPFILE | O_RDWR, 0600), ENOENT);
	EXPECT(kura_close(fs, sd), 0);
	EXPECT(kura_close(fs, dirfd), 0);
	EXPECT(kura_unlink(fs, "/ro/plain"), 0);

	/* A crash with a tmpfile and an unlinked file open: fsck is clean (the
	 * orphan list holds them) and the next lone mount reclaims both. */
	EXPECT(create_file("/ro/doomed", "d", 1), 0);
	EXPECT(kura_info(fs, &i0), 0);
	EXPECT(kura_unmount(fs), 0);
	pid_t c = fork();
	if (c == 0) {
		mount_rw();
		int a = kura_open(fs, "/ro", O_TMPFILE | O_RDWR, 0600);
		int o = kura_open(fs, "/ro/doomed", O_RDWR, 0);
		int ro = kura_reopen(fs, o, O_RDONLY);
		static char big[1 << 16];
		int ok = a >= 0 && o >= 0 && ro >= 0 && kura_write(fs, a, big, sizeof big) == (ssize_t)sizeof big &&
			 kura_unlink(fs, "/ro/doomed") == 0 && kura_close(fs, o) == 0;
		_exit(ok ? 0 : 1); /* no unmount: the descriptors die with the process */
	}
	int status = -1;
	waitpid(c, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "crash child status %#x", status);
	EXPECT(kura_fsck(pool, 0, fsck_line, NULL), 0);
	mount_rw();
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.orphans == i0.orphans && i1.files == i0.files - 1 && i1.blocks_free == i0.blocks_free + 1,
	      "after the crash: orphans %" PRIu64 "/%" PRIu64 " files %" PRIu64 "/%" PRIu64 " free %" PRIu64
	      "/%" PRIu64, i1.orphans, i0.orphans, i1.files, i0.files, i1.blocks_free, i0.blocks_free);
	EXPECT(kura_rmdir(fs, "/ro"), 0);
}

/* kura_fstatat_gen: one generation per inode for its life; a reused
 * inode number comes with another. */
static int ts_before(struct timespec a, struct timespec b)
{
	return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

/* Each change must move the times past the last change's, through this
 * mount or another (a second mount of the pool shares its lock table, as a
 * second process does), and stay within a tick or so of the clock: what a
 * coarser or per-process clock for the stamps would break. */
static void test_change_times(void)
{
	section = "change times";
	struct stat a, b;
	int err = 0;
	kura_fs *other = kura_mount(pool, NULL, &err);
	CHECK(other != NULL, "a second mount: %s", en(err));
	if (!other)
		return;
	int fd = kura_open(fs, "/stamps", O_CREAT | O_RDWR, 0644);
	int ofd = kura_open(other, "/stamps", O_RDWR, 0);
	EXPECT_OK(fd);
	EXPECT_OK(ofd);
	int backwards = 0;
	EXPECT(kura_fstat(fs, fd, &a), 0);
	for (int i = 0; i < 2000 && fd >= 0 && ofd >= 0; i++) {
		kura_fs *by = i % 3 ? fs : other;
		if (kura_pwrite(by, by == fs ? fd : ofd, "x", 1, i) != 1 || kura_fstat(fs, fd, &b))
			break;
		backwards += !ts_before(a.st_mtim, b.st_mtim) || !ts_before(a.st_ctim, b.st_ctim);
		a = b;
	}
	CHECK(backwards == 0, "%d of 2000 writes did not move mtime and ctime forward", backwards);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	CHECK(llabs((long long)now.tv_sec - (long long)a.st_mtim.tv_sec) <= 1, "mtime %lld, clock %lld",
	      (long long)a.st_mtim.tv_sec, (long long)now.tv_sec);
	EXPECT(kura_close(other, ofd), 0);
	EXPECT(kura_close(fs, fd), 0);
	EXPECT(kura_unmount(other), 0);
	EXPECT(kura_unlink(fs, "/stamps"), 0);
}

static void test_generation(void)
{
	section = "generation";
	struct stat st, st2;
	uint32_t g1 = 0, g2 = 0, g3 = 0;
	int fd = kura_open(fs, "/gen1", O_CREAT | O_WRONLY, 0644);
	EXPECT_OK(fd);
	EXPECT(kura_close(fs, fd), 0);
	EXPECT(kura_fstatat_gen(fs, KURA_AT_ROOT, "/gen1", &st, &g1, AT_SYMLINK_NOFOLLOW), 0);
	EXPECT(kura_rename(fs, "/gen1", "/gen1b", 0), 0);
	EXPECT(kura_fstatat_gen(fs, KURA_AT_ROOT, "gen1b", &st2, &g2, 0), 0);
	EXPECT(st2.st_ino == st.st_ino && g1 == g2 && g1 != 0, 1);
	EXPECT(kura_unlink(fs, "/gen1b"), 0);
	/* A new inode, in the freed slot or not, has another generation. */
	EXPECT(kura_mkdir(fs, "/gen2", 0755), 0);
	EXPECT(kura_fstatat_gen(fs, KURA_AT_ROOT, "/gen2", &st2, &g3, 0), 0);
	EXPECT(g3 != g1, 1);
	EXPECT(kura_rmdir(fs, "/gen2"), 0);
	EXPECT_ERR(kura_fstatat_gen(fs, KURA_AT_ROOT, "/gen2", &st2, &g3, 0), ENOENT);
	fd = kura_open(fs, "/", O_RDONLY, 0);
	EXPECT_OK(fd);
	EXPECT_ERR(kura_fstatat_gen(fs, fd, "", &st2, &g3, AT_EMPTY_PATH), EINVAL);
	EXPECT(kura_close(fs, fd), 0);
}

#endif
