/*
 * mount_race_test — a mount of a disk pool that finds no working copy makes
 * one; another process may attach as soon as the pool's flock is free again.
 * Whatever the first mount still does to the copy after that point races
 * with the second one's operations: formatting the undo log's head there
 * once reset the epoch under a process that had already committed, and the
 * first mount's own recovery then replayed that process's retired undo
 * records, undoing a create it had been told succeeded (stress_mp_test_file
 * saw it as EBADF on a file just created).
 *
 * The window is a few system calls wide, so the test makes it deterministic:
 * linked with -Wl,--wrap=flock, it stops the first mount at its first unlock
 * of the pool's flock and lets another process mount and commit there.
 * Every change that process made must survive the first mount's set-up, the
 * last unmount's checkpoint, fsck and a remount, and a file it holds open
 * after unlinking it must not be reclaimed as a dead mount's orphan.  How many transactions it
 * commits decides which epoch its last undo records carry, so every count
 * up to MAX_DIRS is tried, each on a new pool.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kura.h"

#include "check.h"

#define MAX_DIRS 8

int __real_flock(int fd, int op);

static char pool[128];
static int ndirs, with_orphan;
static int armed;                         /* set in the first mount's process only */
static int to_other[2], from_other[2]; /* pipes: go / done, both ways */

static void say(int fd, char c)
{
	while (write(fd, &c, 1) < 0 && errno == EINTR)
		;
}

static char hear(int fd)
{
	char c = 0;
	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
	return c;
}

static int is_pool(int fd)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && stat(pool, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The first unlock of the pool's flock in the armed process: the copy
 * exists and other mounts may attach.  Let one do its work here. */
int __wrap_flock(int fd, int op)
{
	int r = __real_flock(fd, op);
	if (armed && op == LOCK_UN && is_pool(fd)) {
		armed = 0;
		say(to_other[1], 'g');
		hear(from_other[0]);
	}
	return r;
}

static struct kura_mount_opts opts;

static void other_process(void)
{
	if (hear(to_other[0]) != 'g')
		_exit(3);
	int e = 0;
	kura_fs *fs = kura_mount(pool, &opts, &e);
	if (!fs) {
		fprintf(stderr, "second mount: %d (%s)\n", e, kura_last_error());
		say(from_other[1], 'x');
		_exit(2);
	}
	int bad = 0;
	for (int i = 0; i < ndirs; i++) {
		char d[32];
		snprintf(d, sizeof d, "/d%d", i);
		bad |= kura_mkdir(fs, d, 0755) != 0;
	}
	/* Open and unlinked: an orphan, but of a live mount, which the first
	 * mount (alone when it attached) must not reclaim as a dead one's. */
	int fd = -1;
	if (with_orphan) {
		fd = kura_open(fs, "/orphan", O_CREAT | O_EXCL | O_RDWR, 0644);
		bad |= fd < 0 || kura_write(fs, fd, "kept", 4) != 4 || kura_unlink(fs, "/orphan") != 0;
	}
	say(from_other[1], 'd');
	/* Stay mounted while the first mount finishes, then leave first. */
	hear(to_other[0]);
	char buf[8] = { 0 };
	if (with_orphan && (fd < 0 || kura_pread(fs, fd, buf, sizeof buf, 0) != 4 || memcmp(buf, "kept", 4))) {
		fprintf(stderr, "other mount: its open unlinked file reads \"%s\"\n", buf);
		bad = 1;
	}
	if (fd >= 0)
		kura_close(fs, fd);
	bad |= kura_unmount(fs) != 0;
	_exit(bad);
}

static void check_changes(kura_fs *fs, const char *when)
{
	struct stat st;
	for (int i = 0; i < ndirs; i++) {
		char d[32];
		snprintf(d, sizeof d, "/d%d", i);
		CHECK(kura_stat(fs, d, &st) == 0 && S_ISDIR(st.st_mode),
		      "%s: %s (mkdir %d of %d by the other mount) is gone", when, d, i + 1, ndirs);
	}
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("fsck: %s\n", line);
}

static void run_case(void)
{
	snprintf(pool, sizeof pool, "/dev/shm/kura-mount-race-%d.pool", (int)getpid());
	if (kura_mkfs(pool, 16ull << 20, 1) < 0 || pipe(to_other) || pipe(from_other)) {
		perror("set-up");
		exit(1);
	}
	pid_t pid = fork();
	if (pid == 0)
		other_process();
	armed = 1;
	int e = 0;
	kura_fs *fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "first mount: %d (%s)", e, kura_last_error());
	CHECK(!armed, "the first mount never unlocked the pool's flock");
	armed = 0;
	if (fs)
		check_changes(fs, "after the first mount");
	say(to_other[1], 'u');
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other mount failed: status %#x", st);
	if (fs)
		CHECK(kura_unmount(fs) == 0, "last unmount");
	CHECK(kura_fsck(pool, 0, fsck_line, NULL) == 0, "fsck after the last unmount (%d mkdirs)", ndirs);
	fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "remount: %d", e);
	if (fs) {
		check_changes(fs, "after a remount");
		kura_unmount(fs);
	}
	unlink(pool);
	for (int i = 0; i < 2; i++)
		close(to_other[i]), close(from_other[i]);
}

int main(void)
{
	/* The memory back end has no copy to make, but its first mount
	 * reclaims orphans all the same. */
	opts.persist = KURA_PERSIST_FILE;
	for (ndirs = 1; ndirs <= MAX_DIRS; ndirs++)
		run_case();
	with_orphan = 1;
	ndirs = 1;
	run_case();
	opts.persist = KURA_PERSIST_MEMORY;
	run_case();
	printf("mount_race_test: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
