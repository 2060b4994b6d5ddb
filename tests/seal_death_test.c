/*
 * seal_death_test — a process dies in the middle of a seal on a disk pool
 * in fsync mode, after writing pending blocks home (they were free at the
 * last checkpoint, so they go home rather than through the journal) and
 * before the record that links them in.  The pending set then still holds
 * those blocks, with an estimate that counted them as going home.  The
 * next seal must still fit: once a dead seal's home writes marked them as
 * "journaled", the next one had to put them in the journal instead, which
 * could exceed the journal; the seal failed with ENOSPC, every later
 * commit of every process too, and the last unmount's checkpoint, so the
 * pool stayed wedged across mounts (stress_mp_test's victims met it).
 *
 * Linked with -Wl,--wrap=fdatasync: the victim dies at the seal's sync of
 * its home writes.  The survivor then changes the pool, syncs, unmounts;
 * everything must succeed, fsck find the pool whole and a remount show
 * both processes' files.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kura.h"

#include "check.h"

/* Four times the journal's whole size for this pool, so that a seal that
 * had to journal it all could never fit. */
#define POOL_SIZE (16ull << 20)
#define BIG (1u << 20)

int __real_fdatasync(int fd);

static int die_at_sync;

int __wrap_fdatasync(int fd)
{
	if (die_at_sync)
		raise(SIGKILL);
	return __real_fdatasync(fd);
}

static const struct kura_mount_opts opts = { .persist = KURA_PERSIST_FILE, .sync = KURA_SYNC_FSYNC };
static char pool[160];

static unsigned char pattern(size_t i, int which)
{
	return (unsigned char)(i * 31 + (i >> 12) + which * 101);
}

static int write_file(kura_fs *fs, const char *path, size_t len, int which)
{
	unsigned char *b = malloc(len);
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(i, which);
	int fd = kura_open(fs, path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	ssize_t n = fd >= 0 ? kura_write(fs, fd, b, len) : fd;
	free(b);
	if (fd >= 0)
		kura_close(fs, fd);
	return n == (ssize_t)len ? 0 : n < 0 ? (int)n : -EIO;
}

static void check_file(kura_fs *fs, const char *path, size_t len, int which, const char *when)
{
	unsigned char *b = malloc(len + 1);
	int fd = kura_open(fs, path, O_RDONLY, 0);
	ssize_t n = fd >= 0 ? kura_pread(fs, fd, b, len + 1, 0) : fd;
	size_t bad = 0;
	while (n == (ssize_t)len && bad < len && b[bad] == pattern(bad, which))
		bad++;
	CHECK(n == (ssize_t)len && bad == len, "%s: %s: read %zd of %zu bytes, first wrong byte at %zu", when, path, n,
	      len, bad);
	if (fd >= 0)
		kura_close(fs, fd);
	free(b);
}

static void victim(void)
{
	int e = 0;
	kura_fs *fs = kura_mount(pool, &opts, &e);
	if (!fs)
		_exit(2);
	/* Fresh blocks, pending: the seal writes them home. */
	if (write_file(fs, "/victim", BIG, 1))
		_exit(3);
	int fd = kura_open(fs, "/victim", O_RDONLY, 0);
	die_at_sync = 1;
	kura_fsync(fs, fd);
	_exit(4); /* the seal never synced */
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("fsck: %s\n", line);
}

int main(void)
{
	snprintf(pool, sizeof pool, "seal-death-%d.pool", (int)getpid());
	if (kura_mkfs(pool, POOL_SIZE, 1) < 0) {
		fprintf(stderr, "mkfs %s: %s\n", pool, kura_last_error());
		return 1;
	}
	int e = 0;
	/* Mounted through the victim's death, as a process of a busy pool is. */
	kura_fs *fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "mount: %d (%s)", e, kura_last_error());
	if (!fs)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		/* Not the parent's mount: its memory is the parent's. */
		victim();
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim did not die in its seal: status %#x", st);

	int err = write_file(fs, "/after", 64 * 1024, 2);
	CHECK(err == 0, "a write after the victim's death: %d", err);
	int fd = kura_open(fs, "/after", O_RDONLY, 0);
	err = kura_fsync(fs, fd);
	CHECK(err == 0, "fsync after the victim's death: %d", err);
	if (fd >= 0)
		kura_close(fs, fd);
	check_file(fs, "/victim", BIG, 1, "before unmount");
	err = kura_unmount(fs);
	CHECK(err == 0, "the last unmount's checkpoint: %d", err);
	CHECK(kura_fsck(pool, 0, fsck_line, NULL) == 0, "fsck after the last unmount");
	fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "remount: %d", e);
	if (fs) {
		check_file(fs, "/victim", BIG, 1, "after a remount");
		check_file(fs, "/after", 64 * 1024, 2, "after a remount");
		kura_unmount(fs);
	}
	unlink(pool);
	printf("seal_death_test: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
