/*
 * ioerr_test.c — a failed write or sync of the journal, the file back end's
 * durability point, is never acknowledged: the operation during which it
 * failed returns -EIO, and so does every change and fsync after it on that
 * mount, while reads go on.  A new mount (the disk healthy again) works and
 * the pool is clean.
 *
 * The engine is linked statically into this program, so its pwrite and
 * fdatasync calls land in the ones below: the kernel's, unless a failure is
 * wanted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "check.h"
#include "kura.h"

static int fail_io;

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (fail_io) {
		errno = EIO;
		return -1;
	}
	return syscall(SYS_pwrite64, fd, buf, len, off);
}

int fdatasync(int fd)
{
	if (fail_io) {
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}

int main(void)
{
	char pool[64];
	snprintf(pool, sizeof pool, "ioerr-%d.pool", (int)getpid());
	CHECK(kura_mkfs(pool, 16 << 20, 1) == 0, "mkfs: %s", kura_last_error());
	struct kura_mount_opts o = { .persist = KURA_PERSIST_FILE, .sync = KURA_SYNC_OP };
	int err = 0;
	kura_fs *fs = kura_mount(pool, &o, &err);
	CHECK(fs != NULL, "mount: %s", kura_last_error());
	if (!fs)
		return 1;
	int fd = kura_open(fs, "/f", O_CREAT | O_RDWR, 0644);
	CHECK(fd >= 0, "create: %d", fd);
	CHECK(kura_pwrite(fs, fd, "before", 6, 0) == 6, "write while healthy");

	fail_io = 1;
	long r = kura_pwrite(fs, fd, "after!", 6, 0);
	CHECK(r == -EIO, "write whose journal write fails: %ld, want -EIO", r);
	fail_io = 0;
	/* The disk answers again, but what was written meanwhile is unknown. */
	r = kura_pwrite(fs, fd, "later", 5, 0);
	CHECK(r == -EIO, "write after a failed journal write: %ld, want -EIO", r);
	r = kura_mkdir(fs, "/d", 0755);
	CHECK(r == -EIO, "mkdir after a failed journal write: %ld", r);
	r = kura_fsync(fs, fd);
	CHECK(r == -EIO, "fsync after a failed journal write: %ld", r);
	char buf[8] = { 0 };
	r = kura_pread(fs, fd, buf, 6, 0);
	CHECK(r == 6, "reads go on: %ld", r);
	CHECK(kura_close(fs, fd) == 0, "close");
	kura_unmount(fs);

	fs = kura_mount(pool, &o, &err);
	CHECK(fs != NULL, "remount: %s", kura_last_error());
	if (fs) {
		fd = kura_open(fs, "/f", O_RDWR, 0);
		CHECK(kura_pwrite(fs, fd, "again", 5, 0) == 5, "write after remount");
		CHECK(kura_fsync(fs, fd) == 0, "fsync after remount");
		kura_close(fs, fd);
		CHECK(kura_mkdir(fs, "/d", 0755) == 0, "mkdir after remount");
		kura_unmount(fs);
	}
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean");

	/* KURA_SYNC=fsync: writes need no disk, so the failure shows at fsync. */
	o.sync = KURA_SYNC_FSYNC;
	fs = kura_mount(pool, &o, &err);
	CHECK(fs != NULL, "mount in fsync mode: %s", kura_last_error());
	if (fs) {
		fd = kura_open(fs, "/f", O_RDWR, 0);
		CHECK(kura_pwrite(fs, fd, "staged", 6, 0) == 6, "write in fsync mode");
		fail_io = 1;
		r = kura_fsync(fs, fd);
		CHECK(r == -EIO, "fsync whose journal write fails: %ld, want -EIO", r);
		fail_io = 0;
		r = kura_pwrite(fs, fd, "later", 5, 0);
		CHECK(r == -EIO, "write after a failed fsync: %ld, want -EIO", r);
		kura_close(fs, fd);
		kura_unmount(fs);
	}
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the fsync-mode failure");
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
