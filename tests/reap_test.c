/*
 * reap_test — what killed processes held open comes back while other
 * processes keep the pool mounted (lock.h, "Owners"; reap.h).
 *
 * Dead families: 30 processes in turn each hold 600 unlinked files open
 * (4 KiB each) and are killed, while the test keeps the pool mounted
 * throughout.  Their open counts add up to more than the lock table holds
 * (12,288 inodes): before dead owners were reaped, a later process's
 * opens failed with ENFILE, and the space stayed taken until the last
 * mount left.  Every open must succeed, and after one more mount the
 * free space must be back within 1% of where it started.
 *
 * A live family member: A holds an unlinked file open, forks B (which
 * shares A's description) and is killed.  Other processes then mount and
 * write files of their own, which would reuse the file's blocks had its
 * count been taken back: B must still read what A wrote.  Once B is
 * killed as well, the next mount frees the file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kura.h"

#define ROUNDS 30
#define HELD 600
#define FILE_BYTES 4096

static char pool[256];

static uint64_t free_bytes(kura_fs *fs)
{
	struct statvfs v;
	kura_statvfs(fs, &v);
	return (uint64_t)v.f_bfree * v.f_frsize;
}

static kura_fs *mount_or_exit(void)
{
	int err = 0;
	kura_fs *fs = kura_mount(pool, NULL, &err);
	if (!fs) {
		printf("mount %s: %s\n", pool, kura_last_error());
		_exit(3);
	}
	return fs;
}

/* A new pool of size bytes, mounted by the test for the whole case. */
static kura_fs *fresh_pool(uint64_t size, uint64_t *free_at_start)
{
	CHECK(kura_mkfs(pool, size, 1) == 0, "mkfs %s", pool);
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	CHECK(fs != NULL, "mount %s: %s", pool, kura_last_error());
	if (fs)
		*free_at_start = free_bytes(fs);
	return fs;
}

/* Creates path with FILE_BYTES of fill, opens it, unlinks it: 0 or -errno. */
static int hold_unlinked(kura_fs *fs, const char *path, int fill)
{
	char buf[FILE_BYTES];
	memset(buf, fill, sizeof buf);
	int fd = kura_open(fs, path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	if (fd < 0)
		return fd;
	if (kura_write(fs, fd, buf, sizeof buf) != (ssize_t)sizeof buf)
		return -EIO;
	return kura_unlink(fs, path);
}

/* Tells the parent how it went (a byte: 0 ok), then waits to be killed. */
static void report_and_wait(int wfd, unsigned char status)
{
	if (write(wfd, &status, 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

static void killed_families(void)
{
	uint64_t start;
	kura_fs *fs = fresh_pool(128u << 20, &start);
	if (!fs)
		return;
	int failures = 0;
	for (int round = 0; round < ROUNDS; round++) {
		int p[2];
		if (pipe(p))
			return;
		fflush(NULL);
		pid_t c = fork();
		if (c == 0) {
			close(p[0]);
			kura_fs *cfs = mount_or_exit();
			for (int i = 0; i < HELD; i++) {
				char path[64];
				snprintf(path, sizeof path, "/r%d-%d", round, i);
				int err = hold_unlinked(cfs, path, round);
				if (err) {
					printf("round %d, file %d: %s\n", round, i, strerror(-err));
					report_and_wait(p[1], 1);
				}
			}
			report_and_wait(p[1], 0);
		}
		close(p[1]);
		unsigned char status = 2;
		if (read(p[0], &status, 1) != 1)
			status = 2;
		close(p[0]);
		kill(c, SIGKILL);
		waitpid(c, NULL, 0);
		failures += status != 0;
	}
	CHECK(failures == 0, "%d of %d killed processes could not hold %d files open", failures, ROUNDS, HELD);
	/* The last one's files go at the next mount. */
	pid_t c = fork();
	if (c == 0) {
		kura_unmount(mount_or_exit());
		_exit(0);
	}
	waitpid(c, NULL, 0);
	uint64_t end = free_bytes(fs);
	CHECK(end + (128u << 20) / 100 >= start, "free space %llu, was %llu at the start: the dead held on to it",
	      (unsigned long long)end, (unsigned long long)start);
	kura_unmount(fs);
}

static void live_member_keeps(void)
{
	uint64_t start;
	kura_fs *fs = fresh_pool(16u << 20, &start);
	if (!fs)
		return;
	int a_ready[2], b_ready[2], b_go[2];
	if (pipe(a_ready) || pipe(b_ready) || pipe(b_go))
		return;
	fflush(NULL);
	pid_t b = -1;
	pid_t a = fork();
	if (a == 0) {
		kura_fs *afs = mount_or_exit();
		char buf[FILE_BYTES];
		int fd = kura_open(afs, "/held", O_CREAT | O_RDWR, 0644);
		memset(buf, 0x5a, sizeof buf);
		for (int i = 0; i < 256 && fd >= 0; i++)
			kura_write(afs, fd, buf, sizeof buf);
		if (fd < 0 || kura_unlink(afs, "/held"))
			report_and_wait(a_ready[1], 1);
		kura_fork_prepare(afs);
		pid_t bb = fork();
		if (bb == 0) {
			kura_fork_child(afs);
			char go;
			if (read(b_go[0], &go, 1) != 1)
				_exit(5);
			int bad = 0;
			for (int i = 0; i < 256; i++)
				if (kura_pread(afs, fd, buf, sizeof buf, (off_t)i * FILE_BYTES) != (ssize_t)sizeof buf ||
				    memchr(buf, 0x5a, 1) != buf || memcmp(buf, buf + 1, sizeof buf - 1))
					bad++;
			report_and_wait(b_ready[1], bad != 0);
		}
		kura_fork_parent(afs);
		if (write(a_ready[1], &bb, sizeof bb) != sizeof bb)
			_exit(4);
		for (;;)
			pause();
	}
	if (read(a_ready[0], &b, sizeof b) != sizeof b || b <= 0) {
		CHECK(0, "A could not hold /held open and fork B");
		kill(a, SIGKILL);
		waitpid(a, NULL, 0);
		return;
	}
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	/* Others mount (reaping what is dead) and fill blocks of their own. */
	for (int round = 0; round < 4; round++) {
		pid_t c = fork();
		if (c == 0) {
			kura_fs *cfs = mount_or_exit();
			char path[64];
			for (int i = 0; i < 64; i++) {
				snprintf(path, sizeof path, "/other%d-%d", round, i);
				hold_unlinked(cfs, path, 0x11);
			}
			kura_unmount(cfs);
			_exit(0);
		}
		waitpid(c, NULL, 0);
	}
	unsigned char bad = 1;
	if (write(b_go[1], "g", 1) != 1 || read(b_ready[0], &bad, 1) != 1)
		bad = 2;
	CHECK(bad == 0, "B read back %s after A died and others mounted",
	      bad == 1 ? "something else than A wrote" : "nothing (B is gone)");
	CHECK(free_bytes(fs) + (1u << 20) <= start, "the file B holds open was freed while B lived");
	kill(b, SIGKILL);
	waitpid(b, NULL, 0); /* ours since A died: we are a subreaper */
	pid_t c = fork();
	if (c == 0) {
		kura_unmount(mount_or_exit());
		_exit(0);
	}
	waitpid(c, NULL, 0);
	CHECK(free_bytes(fs) + (16u << 20) / 100 >= start, "once B died too, the next mount did not free /held");
	kura_unmount(fs);
}

int main(void)
{
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(pool, sizeof pool, "%s/kura-reap-%d.pool", dir, (int)getpid());
	prctl(PR_SET_CHILD_SUBREAPER, 1); /* B outlives its parent A */
	killed_families();
	live_member_keeps();
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
