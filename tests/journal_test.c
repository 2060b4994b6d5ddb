/*
 * journal_test.c — the file back end's journal from the outside: how many
 * flushes an operation costs in each durability mode, that concurrent
 * committers share them, that a killed process's working copy is taken
 * over with nothing lost, and that a lost copy (a machine crash) recovers
 * from the pool file to what each mode promises.
 *
 * The pool lives in the working directory (the build tree, on a disk in
 * CI), so that journal writes are real direct I/O where the disk has it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "fs.h"
#include "journal.h"

static char pool[64];
static unsigned long syncs, writes, written;

static void count(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	(void)ctx, (void)off, (void)data, (void)len;
	if (ev == MEDIA_DISK_SYNC)
		__atomic_add_fetch(&syncs, 1, __ATOMIC_RELAXED);
	if (ev == MEDIA_DISK_WRITE) {
		__atomic_add_fetch(&writes, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&written, len, __ATOMIC_RELAXED);
	}
}

static kura_fs *mount_mode(enum kura_sync mode)
{
	struct kura_mount_opts o = { .persist = KURA_PERSIST_FILE, .sync = mode };
	kura_fs *fs = kura_mount(pool, &o, NULL);
	CHECK(fs != NULL, "mount: %s", kura_last_error());
	if (fs) {
		fs->m.tracer.event = count;
		fs->m.tracer.ctx = NULL;
	}
	return fs;
}

/* op: each change costs one flush; fsync: none until kura_fsync, one then. */
static void test_flushes_per_operation(void)
{
	char buf[4096];
	memset(buf, 'a', sizeof buf);
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	int fd = kura_open(fs, "/f", O_CREAT | O_RDWR, 0644);
	uint64_t ck = fs->j.ctl->checkpoints;
	syncs = writes = 0;
	for (int i = 0; i < 50; i++)
		kura_pwrite(fs, fd, buf, sizeof buf, (off_t)i * 8192);
	CHECK(fs->j.ctl->checkpoints == ck, "no checkpoint in 50 writes");
	CHECK(syncs == 50 && writes == 50, "op mode: 50 writes cost %lu syncs and %lu disk writes, want 50 each",
	      syncs, writes);
	syncs = 0;
	CHECK(kura_fsync(fs, fd) == 0 && syncs == 0, "op mode: fsync has nothing left to do (%lu syncs)", syncs);
	kura_close(fs, fd);
	kura_unmount(fs);

	fs = mount_mode(KURA_SYNC_FSYNC);
	if (!fs)
		return;
	fd = kura_open(fs, "/f", O_RDWR, 0);
	syncs = writes = 0;
	for (int i = 0; i < 50; i++)
		kura_pwrite(fs, fd, buf, sizeof buf, (off_t)i * 8192);
	kura_mkdir(fs, "/d", 0755);
	CHECK(syncs == 0 && writes == 0, "fsync mode: changes cost %lu syncs, %lu disk writes, want none", syncs,
	      writes);
	CHECK(kura_fsync(fs, fd) == 0 && syncs == 1 && writes == 1,
	      "fsync mode: one fsync is one write and one sync (%lu, %lu)", writes, syncs);
	int sfd = kura_open(fs, "/s", O_CREAT | O_RDWR | O_DSYNC, 0644);
	syncs = 0;
	CHECK(kura_pwrite(fs, sfd, buf, 100, 0) == 100 && syncs == 1, "fsync mode: an O_DSYNC write syncs (%lu)",
	      syncs);
	kura_close(fs, sfd);
	kura_close(fs, fd);
	kura_unmount(fs);
}

struct writer {
	kura_fs *fs;
	int fd, n;
	off_t base;
};

static void *write_loop(void *arg)
{
	struct writer *w = arg;
	char buf[512];
	memset(buf, 'w', sizeof buf);
	for (int i = 0; i < w->n; i++)
		kura_pwrite(w->fs, w->fd, buf, sizeof buf, w->base + (off_t)(i % 64) * 512);
	return NULL;
}

/* Two threads committing at once share flushes. */
static void test_group_commit(void)
{
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	struct writer w[2] = { { fs, kura_open(fs, "/g1", O_CREAT | O_RDWR, 0644), 400, 0 },
			       { fs, kura_open(fs, "/g2", O_CREAT | O_RDWR, 0644), 400, 0 } };
	pthread_t t[2];
	syncs = 0;
	uint64_t ck = fs->j.ctl->checkpoints;
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, write_loop, &w[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	unsigned long extra = 3 * (unsigned long)(fs->j.ctl->checkpoints - ck);
	CHECK(syncs - extra < 800, "two committers: %lu syncs for 800 operations, want fewer", syncs - extra);
	printf("group commit: 800 operations, %lu flushes\n", syncs - extra);
	kura_close(fs, w[0].fd);
	kura_close(fs, w[1].fd);
	kura_unmount(fs);
}

static int copy_exists(void)
{
	struct stat st;
	char name[128];
	if (stat(pool, &st))
		return 0;
	snprintf(name, sizeof name, "/dev/shm/kura-copy-%llx-%llx", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	return access(name, F_OK) == 0;
}

static void remove_copy(void)
{
	int fd = open(pool, O_RDONLY);
	journal_remove_copy(fd);
	close(fd);
}

/* A child that ends itself by SIGKILL once all went as planned, and
 * exits with a code saying what did not otherwise. */
static void await_kill(pid_t pid, const char *plan)
{
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st), "%s: the child died by SIGKILL (exit %d)", plan, WIFEXITED(st) ? WEXITSTATUS(st) : 0);
}

/* A child writes in the given mode, fsyncs the first file only, then dies;
 * with lose_copy the machine "crashes" too: the copy is removed. */
static void crash_child(enum kura_sync mode, int lose_copy, const char *tag)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct kura_mount_opts o = { .persist = KURA_PERSIST_FILE, .sync = mode };
		kura_fs *fs = kura_mount(pool, &o, NULL);
		if (!fs)
			_exit(1);
		char name[64];
		snprintf(name, sizeof name, "/%s-synced", tag);
		int fd = kura_open(fs, name, O_CREAT | O_RDWR, 0644);
		kura_pwrite(fs, fd, "synced", 6, 0);
		kura_fsync(fs, fd);
		snprintf(name, sizeof name, "/%s-later", tag);
		fd = kura_open(fs, name, O_CREAT | O_RDWR, 0644);
		kura_pwrite(fs, fd, "later", 5, 0);
		if (lose_copy)
			remove_copy();
		kill(getpid(), SIGKILL);
	}
	await_kill(pid, tag);
}

static int exists(kura_fs *fs, const char *tag, const char *what)
{
	char name[64];
	struct stat st;
	snprintf(name, sizeof name, "/%s-%s", tag, what);
	return kura_stat(fs, name, &st) == 0;
}

static void test_killed_and_crashed(void)
{
	/* Killed: the copy outlives the process and the next mount takes it
	 * over; nothing is lost in either mode. */
	crash_child(KURA_SYNC_FSYNC, 0, "killed");
	CHECK(copy_exists(), "a killed process leaves its working copy");
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	CHECK(exists(fs, "killed", "synced") && exists(fs, "killed", "later"),
	      "after kill -9 everything the process did is there");
	kura_unmount(fs);
	CHECK(!copy_exists(), "the last unmount removes the copy");

	/* Crashed in op mode: every returned operation survives the copy. */
	crash_child(KURA_SYNC_OP, 1, "op");
	fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	CHECK(exists(fs, "op", "synced") && exists(fs, "op", "later"), "op mode: every returned change is durable");
	kura_unmount(fs);

	/* Crashed in fsync mode: what was fsynced survives; the rest may not
	 * (here nothing synced it, so it is gone), and the pool is clean. */
	crash_child(KURA_SYNC_FSYNC, 1, "fs");
	fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	CHECK(exists(fs, "fs", "synced"), "fsync mode: the fsynced file survives the crash");
	CHECK(!exists(fs, "fs", "later"), "fsync mode: nothing synced the later file");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the crashes");
}

/* Blocks of bytes that differ from block to block, as mul makes them. */
static void fill_blocks(char *data, size_t len, unsigned mul)
{
	for (size_t i = 0; i < len; i++)
		data[i] = (char)(i * mul + i / 4096);
}

/* A child's mount in fsync mode and path opened in it; -1 if either fails. */
static int open_in_fsync_mode(kura_fs **fs, const char *path, int flags)
{
	*fs = mount_mode(KURA_SYNC_FSYNC);
	return *fs ? kura_open(*fs, path, flags, 0644) : -1;
}

/* After a child's crash: path holds data, unsynced (when given) is gone,
 * and the pool is clean.  path is removed after. */
static void reads_back_after_crash(const char *path, const char *data, size_t len, const char *unsynced)
{
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	char *back = malloc(len);
	int fd = kura_open(fs, path, O_RDONLY, 0);
	CHECK(back && fd >= 0 && kura_pread(fs, fd, back, len, 0) == (ssize_t)len && !memcmp(back, data, len),
	      "after the crash %s reads back as it was at the fsync", path);
	free(back);
	struct stat sb;
	CHECK(!unsynced || kura_stat(fs, unsynced, &sb) == -ENOENT, "nothing synced %s", unsynced);
	kura_close(fs, fd);
	kura_unlink(fs, path);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the crash");
}

/* Two processes of one pool in different modes (here two mounts of one
 * child): what the fsync-mode one left pending comes before the op-mode
 * one's changes in any crash, and an fsync in op mode makes another's
 * pending writes to the file durable, as an fsync on ext4 does. */
static void test_mixed_modes(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct kura_mount_opts lazy = { .persist = KURA_PERSIST_FILE, .sync = KURA_SYNC_FSYNC };
		struct kura_mount_opts eager = { .persist = KURA_PERSIST_FILE, .sync = KURA_SYNC_OP };
		kura_fs *a = kura_mount(pool, &lazy, NULL), *b = kura_mount(pool, &eager, NULL);
		if (!a || !b)
			_exit(1);
		kura_mkdir(a, "/mixed", 0755);
		int fd = kura_open(a, "/mixed/first", O_CREAT | O_RDWR, 0644);
		kura_pwrite(a, fd, "first", 5, 0);
		kura_mkdir(b, "/mixed/second", 0755);
		fd = kura_open(a, "/mixed/third", O_CREAT | O_RDWR, 0644);
		kura_pwrite(a, fd, "third", 5, 0);
		int bfd = kura_open(b, "/mixed/third", O_RDWR, 0);
		kura_fsync(b, bfd);
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st), "mixed modes: the child died by SIGKILL");
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	struct stat sb;
	CHECK(kura_stat(fs, "/mixed/second", &sb) == 0, "mixed modes: the op-mode change survives the crash");
	char buf[8] = "";
	int fd = kura_open(fs, "/mixed/first", O_RDONLY, 0);
	CHECK(fd >= 0 && kura_pread(fs, fd, buf, 5, 0) == 5 && !memcmp(buf, "first", 5),
	      "mixed modes: the fsync-mode write before the op-mode change survives with it");
	fd = kura_open(fs, "/mixed/third", O_RDONLY, 0);
	CHECK(fd >= 0 && kura_pread(fs, fd, buf, 5, 0) == 5 && !memcmp(buf, "third", 5),
	      "mixed modes: an op-mode fsync makes the fsync-mode write durable");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the mixed-mode crash");
}

/* More records than the journal holds, and one write larger than it,
 * then a crash: the pool file alone has it all. */
static void test_full_journal(void)
{
	static char big[6 << 20];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)(i * 7 + i / 4096);
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	int fd = kura_open(fs, "/big", O_CREAT | O_RDWR, 0644);
	uint64_t ck = fs->j.ctl->checkpoints;
	for (int i = 0; i < 600; i++)
		kura_pwrite(fs, fd, big + i * 4096, 4096, (off_t)i * 4096);
	CHECK(fs->j.ctl->checkpoints > ck, "600 writes filled the journal (%llu checkpoints)",
	      (unsigned long long)(fs->j.ctl->checkpoints - ck));
	kura_close(fs, fd);
	kura_unmount(fs);
	pid_t pid = fork();
	if (pid == 0) {
		fs = mount_mode(KURA_SYNC_OP);
		fd = fs ? kura_open(fs, "/big", O_RDWR, 0) : -1;
		if (fd < 0 || kura_pwrite(fs, fd, big, sizeof big, 0) != (ssize_t)sizeof big)
			_exit(1);
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st), "the large write returned before the crash");
	fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	char back[4096];
	fd = kura_open(fs, "/big", O_RDONLY, 0);
	int same = 1;
	for (size_t off = 0; off < sizeof big && same; off += sizeof back)
		same = kura_pread(fs, fd, back, sizeof back, (off_t)off) == (ssize_t)sizeof back &&
		       !memcmp(back, big + off, sizeof back);
	CHECK(same, "after the crash the file reads back whole");
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean after the large write");
}

/* A crash with more records in the journal than a mount reads at first
 * (journal.c reads the log region only as far as its records go), one of
 * them cut off by that first read: all of them are replayed. */
static void test_long_replay(void)
{
	static char data[1 << 20];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (char)(i * 13 + i / 4093);
	kura_fs *fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	int fd = kura_open(fs, "/replay", O_CREAT | O_RDWR | O_TRUNC, 0644);
	kura_close(fs, fd);
	kura_unmount(fs);
	pid_t pid = fork();
	if (pid == 0) {
		fs = mount_mode(KURA_SYNC_OP);
		fd = fs ? kura_open(fs, "/replay", O_RDWR, 0) : -1;
		if (fd < 0)
			_exit(1);
		uint64_t ck = fs->j.ctl->checkpoints, at = 0;
		/* about 85 KiB of records, one of 384 KiB across the first
		 * read's end (256 KiB), then about 250 KiB more */
		for (int i = 0; i < 20; i++, at += 4096)
			kura_pwrite(fs, fd, data + at, 4096, (off_t)at);
		kura_pwrite(fs, fd, data + at, 384 << 10, (off_t)at);
		at += 384 << 10;
		for (int i = 0; i < 60; i++, at += 4096)
			kura_pwrite(fs, fd, data + at, 4096, (off_t)at);
		if (fs->j.ctl->checkpoints != ck)
			_exit(2); /* a checkpoint emptied the journal: nothing left to test */
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st), "the writes returned before the crash, with no checkpoint (exit %d)",
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	size_t len = 20 * 4096 + (384 << 10) + 60 * 4096;
	static char back[1 << 20];
	fd = kura_open(fs, "/replay", O_RDONLY, 0);
	CHECK(kura_pread(fs, fd, back, sizeof back, 0) == (ssize_t)len && !memcmp(back, data, len),
	      "after the crash every record was replayed");
	kura_close(fs, fd);
	kura_unlink(fs, "/replay");
	kura_unmount(fs);
}

/* fsync mode, a sync after many new blocks: the data go home once (two
 * flushes: homes, then the record), the record carries only metadata, and
 * after a crash the pool file alone has it all, rewrites included. */
static void test_seal_writes_home(void)
{
	enum { BLOCKS = 300 };
	static char data[BLOCKS * 4096];
	fill_blocks(data, sizeof data, 13);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *fs;
		int fd = open_in_fsync_mode(&fs, "/home-data", O_CREAT | O_RDWR);
		if (fd < 0 || kura_pwrite(fs, fd, data, sizeof data, 0) != (ssize_t)sizeof data)
			_exit(10);
		/* Rewrites of blocks the disk has not seen stay where they are. */
		for (int i = 0; i < BLOCKS; i += 3) {
			memset(data + i * 4096, 'r', 4096);
			if (kura_pwrite(fs, fd, data + i * 4096, 4096, (off_t)i * 4096) != 4096)
				_exit(11);
		}
		uint64_t home = fs->j.ctl->sealed_home, staged = fs->j.ctl->staged;
		syncs = 0;
		if (kura_fsync(fs, fd))
			_exit(12);
		if (syncs != 2)
			_exit(13);
		if (fs->j.ctl->sealed_home - home < BLOCKS)
			_exit(14);
		if (fs->j.ctl->staged - staged > BLOCKS * 4096 / 8)
			_exit(15);
		int later = kura_open(fs, "/home-later", O_CREAT | O_RDWR, 0644);
		kura_pwrite(fs, later, "x", 1, 0);
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	await_kill(pid, "the seal went as planned (13 two flushes, 14 blocks home, 15 record small)");
	for (int i = 0; i < BLOCKS; i += 3)
		memset(data + i * 4096, 'r', 4096);
	reads_back_after_crash("/home-data", data, sizeof data, "/home-later");
}

/* fsync mode: a large pending set is written home behind as it grows, and
 * the seal writes again only what was not, or what changed since: here
 * every fifth block, rewritten in place after it went.  A crash after the
 * fsync shows the rewrites, not the bytes written behind. */
static void test_write_behind(void)
{
	enum { BLOCKS = 2000, CHUNK = 64 };
	static char data[BLOCKS * 4096];
	fill_blocks(data, sizeof data, 7);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *fs;
		int fd = open_in_fsync_mode(&fs, "/behind-data", O_CREAT | O_RDWR);
		for (int i = 0; fd >= 0 && i < BLOCKS; i += CHUNK) {
			size_t len = (BLOCKS - i < CHUNK ? BLOCKS - i : CHUNK) * 4096;
			if (kura_pwrite(fs, fd, data + (size_t)i * 4096, len, (off_t)i * 4096) != (ssize_t)len)
				_exit(10);
		}
		if (fd < 0 || fs->j.ctl->written_behind < BLOCKS / 2)
			_exit(11);
		for (int i = 0; i < BLOCKS; i += 5) {
			memset(data + (size_t)i * 4096, 'w', 4096);
			if (kura_pwrite(fs, fd, data + (size_t)i * 4096, 4096, (off_t)i * 4096) != 4096)
				_exit(12);
		}
		written = 0;
		if (kura_fsync(fs, fd))
			_exit(13);
		if (written > BLOCKS / 2 * 4096ul)
			_exit(14);
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	await_kill(pid, "write-behind went as planned (11 too few blocks written behind, 14 the seal wrote them again)");
	for (int i = 0; i < BLOCKS; i += 5)
		memset(data + (size_t)i * 4096, 'w', 4096);
	reads_back_after_crash("/behind-data", data, sizeof data, NULL);
}

/* fsync mode: blocks fallocate took before the last checkpoint would cross
 * the disk twice (journal, then home); a write into them takes blocks that
 * go home once instead, and leaves the pool's free space as fallocate left
 * it.  After a crash the file reads back as written. */
static void test_fallocated_goes_home(void)
{
	enum { BLOCKS = 256, CHUNK = 16 }; /* writes the journal would take whole, not the large path's */
	static char data[BLOCKS * 4096];
	fill_blocks(data, sizeof data, 11);
	kura_fs *fs = mount_mode(KURA_SYNC_FSYNC);
	if (!fs)
		return;
	int fd = kura_open(fs, "/falloc-data", O_CREAT | O_RDWR, 0644);
	CHECK(fd >= 0 && kura_fallocate(fs, fd, 0, 0, sizeof data) == 0, "fallocate");
	kura_close(fs, fd);
	kura_unmount(fs); /* the last unmount checkpoints: the blocks were in use then */
	pid_t pid = fork();
	if (pid == 0) {
		fd = open_in_fsync_mode(&fs, "/falloc-data", O_RDWR);
		struct statvfs before, after;
		if (fd < 0 || kura_statvfs(fs, &before))
			_exit(10);
		uint64_t staged = fs->j.ctl->staged;
		for (size_t at = 0; at < sizeof data; at += CHUNK * 4096)
			if (kura_pwrite(fs, fd, data + at, CHUNK * 4096, (off_t)at) != CHUNK * 4096)
				_exit(11);
		if (kura_fsync(fs, fd))
			_exit(11);
		if (fs->j.ctl->staged - staged > sizeof data / 8)
			_exit(12);
		if (kura_statvfs(fs, &after) || after.f_bfree != before.f_bfree)
			_exit(13);
		remove_copy();
		kill(getpid(), SIGKILL);
	}
	await_kill(pid, "fallocated blocks went as planned (12 their data went through the journal, 13 free space "
			"changed)");
	reads_back_after_crash("/falloc-data", data, sizeof data, NULL);
}

/* fsync mode: changes that waited longer than the commit interval are made
 * durable by the next operation, as ext4 commits every 5 s. */
static void test_commit_interval(void)
{
	kura_fs *fs = mount_mode(KURA_SYNC_FSYNC);
	if (!fs)
		return;
	int fd = kura_open(fs, "/interval", O_CREAT | O_RDWR, 0644);
	syncs = 0;
	kura_pwrite(fs, fd, "a", 1, 0);
	kura_pwrite(fs, fd, "b", 1, 1);
	CHECK(syncs == 0 && fs->j.ctl->pend_n > 0, "fresh changes wait for a sync (%lu syncs)", syncs);
	fs->j.ctl->pend_since -= JOURNAL_COMMIT_NS + 1000000000ull; /* as if they were made 6 s ago */
	kura_pwrite(fs, fd, "c", 1, 2);
	CHECK(syncs >= 1 && fs->j.ctl->pend_n == 0, "the next operation after the interval syncs them (%lu syncs, "
	      "%llu blocks pending)", syncs, (unsigned long long)fs->j.ctl->pend_n);
	kura_close(fs, fd);
	kura_unmount(fs);
}

/* Stores of a map that nobody synced, after records of the same page: the
 * last unmount's checkpoint rebuilds the page from the records and then
 * carries the map's version in a record of its own, which must reach the
 * disk before the copy goes. */
static void test_map_stores_at_unmount(enum kura_sync mode)
{
	static char want[8192];
	for (size_t i = 0; i < sizeof want; i++)
		want[i] = (char)('a' + i % 23);
	kura_fs *fs = mount_mode(mode);
	if (!fs)
		return;
	int fd = kura_open(fs, "/mapped", O_CREAT | O_RDWR | O_TRUNC, 0644);
	uint64_t ino = 0, offs[2] = { 0, 0 };
	int writable = 0, mfd = kura_map_fd(fs, &writable);
	int ok = fd >= 0 && kura_pwrite(fs, fd, want, sizeof want, 0) == (ssize_t)sizeof want && !kura_fsync(fs, fd) &&
		 !kura_map_pin(fs, fd, 1, &ino) && kura_map_blocks(fs, ino, 0, 2, 1, offs) == (int64_t)sizeof want;
	for (int i = 0; i < 2 && ok; i++) {
		char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, (off_t)offs[i]);
		if (p == MAP_FAILED) {
			ok = 0;
			break;
		}
		for (int k = 100; k < 3000; k++)
			p[k] = want[i * 4096 + k] = (char)('A' + k % 19);
		munmap(p, 4096);
	}
	ok = ok && !kura_map_sync(fs, ino, 0, 2, 0);
	if (ino)
		kura_map_unpin(fs, ino);
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(ok, "the map's stores were made (%s mode)", mode == KURA_SYNC_OP ? "op" : "fsync");
	remove_copy();
	fs = mount_mode(KURA_SYNC_OP);
	if (!fs)
		return;
	static char back[sizeof want];
	fd = kura_open(fs, "/mapped", O_RDONLY, 0);
	CHECK(fd >= 0 && kura_pread(fs, fd, back, sizeof back, 0) == (ssize_t)sizeof back && !memcmp(back, want, sizeof want),
	      "after the last unmount the disk holds the map's unsynced stores (%s mode)",
	      mode == KURA_SYNC_OP ? "op" : "fsync");
	kura_close(fs, fd);
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck clean");
}

int main(void)
{
	snprintf(pool, sizeof pool, "journal-%d.pool", (int)getpid());
	CHECK(kura_mkfs(pool, 64 << 20, 1) == 0, "mkfs: %s", kura_last_error());
	test_flushes_per_operation();
	test_group_commit();
	test_killed_and_crashed();
	test_mixed_modes();
	test_full_journal();
	test_long_replay();
	test_seal_writes_home();
	test_write_behind();
	test_fallocated_goes_home();
	test_commit_interval();
	test_map_stores_at_unmount(KURA_SYNC_OP);
	test_map_stores_at_unmount(KURA_SYNC_FSYNC);
	remove_copy();
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
