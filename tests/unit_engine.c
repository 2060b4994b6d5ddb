/*
 * unit_engine.c — unit tests of the layers under the API: the undo log
 * (abort and crash recovery restore the pool byte for byte), directory
 * splits, and readers racing a writer (run under TSan in the thread build).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fs.h"
#include "kura.h"
#include "layout.h"
#include "tx.h"

#include "check.h"

static char pool[128];

static void test_tx_rollback(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	uint64_t off = (uint64_t)STATE_BLOCK * KURA_BLOCK + 2048;
	char before[256], after[256], junk[256];
	memcpy(before, media_ptr(&fs->m, off), sizeof before);
	memset(junk, 0x5a, sizeof junk);

	/* abort: the in-place change is undone from the log */
	fs_begin(fs);
	tx_write(&fs->tx, off, junk, sizeof junk);
	CHECK(!memcmp(media_ptr(&fs->m, off), junk, sizeof junk), "tx_write did not store");
	fs_end(fs, -EIO);
	memcpy(after, media_ptr(&fs->m, off), sizeof after);
	CHECK(!memcmp(before, after, sizeof before), "abort left the change in place");

	/* crash: a transaction never ended is undone by recovery */
	fs_begin(fs);
	tx_write(&fs->tx, off, junk, sizeof junk);
	int undone = tx_recover(&fs->tx);
	CHECK(undone > 0, "recovery found no records (%d)", undone);
	CHECK(!memcmp(media_ptr(&fs->m, off), before, sizeof before), "recovery did not restore");
	CHECK(tx_recover(&fs->tx) == 0, "recovery is not idempotent: records survived");
	fs->tx.active = 0;
	lock_write_end(&fs->lk);
	lock_release(&fs->lk);

	/* commit: the change stays and nothing is left to undo */
	fs_begin(fs);
	tx_write(&fs->tx, off, junk, sizeof junk);
	CHECK(fs_end(fs, 0) == 0, "commit failed");
	CHECK(tx_recover(&fs->tx) == 0, "records survived a commit");
	CHECK(!memcmp(media_ptr(&fs->m, off), junk, sizeof junk), "commit lost the change");
	fs_begin(fs);
	tx_write(&fs->tx, off, before, sizeof before);
	fs_end(fs, 0);
	kura_unmount(fs);
}

static void test_dir_splits(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	enum { N = 3000 };
	char name[300];
	CHECK(kura_mkdir(fs, "/big", 0755) == 0, "mkdir");
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "/big/%0*d", 1 + i % 200, i);
		int fd = kura_open(fs, name, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0) {
			CHECK(0, "create %s: %d", name, fd);
			break;
		}
		kura_close(fs, fd);
	}
	int found = 0;
	struct stat st;
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "/big/%0*d", 1 + i % 200, i);
		found += kura_stat(fs, name, &st) == 0;
	}
	CHECK(found == N, "found %d of %d names after splits", found, N);
	int err = 0, listed = 0;
	kura_dir *d = kura_opendir(fs, "/big", &err);
	struct kura_dirent e;
	while (d && kura_readdir(d, &e) == 1)
		listed++;
	if (d)
		kura_closedir(d);
	CHECK(listed == N + 2, "readdir listed %d, want %d", listed, N + 2);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof name, "/big/%0*d", 1 + i % 200, i);
		kura_unlink(fs, name);
	}
	CHECK(kura_rmdir(fs, "/big") == 0, "rmdir after unlinking everything");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after the directory test");
}

struct race {
	kura_fs *fs;
	int fd;
	int torn;
};

static void *reader(void *arg)
{
	struct race *r = arg;
	char buf[KURA_BLOCK];
	for (int i = 0; i < 2000; i++) {
		if (kura_pread(r->fs, r->fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf)
			continue;
		for (size_t k = 1; k < sizeof buf; k++)
			if (buf[k] != buf[0]) {
				__atomic_add_fetch(&r->torn, 1, __ATOMIC_RELAXED);
				break;
			}
	}
	return NULL;
}

static void test_readers_vs_writer(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	int fd = kura_open(fs, "/race", O_CREAT | O_RDWR, 0644);
	char block[KURA_BLOCK];
	memset(block, 'a', sizeof block);
	kura_pwrite(fs, fd, block, sizeof block, 0);
	struct race r = { fs, fd, 0 };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, reader, &r);
	for (int i = 0; i < 2000; i++) {
		memset(block, 'a' + i % 26, sizeof block);
		kura_pwrite(fs, fd, block, sizeof block, 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK(r.torn == 0, "%d reads saw a torn block", r.torn);
	kura_close(fs, fd);
	kura_unlink(fs, "/race");
	kura_unmount(fs);
}

/* A child dies inside a transaction, holding the pool lock: the next locker
 * must find its half-done change undone. */
static void test_dead_holder(void)
{
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	struct stat before;
	CHECK(kura_mkdir(fs, "/keep", 0755) == 0, "mkdir /keep");
	kura_stat(fs, "/keep", &before);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fs *cfs = kura_mount(pool, NULL, NULL);
		if (!cfs)
			_exit(2);
		fs_begin(cfs);
		/* Scribble over the root inode and the state block, then die. */
		char junk[256];
		memset(junk, 0xee, sizeof junk);
		tx_write(&cfs->tx, (uint64_t)STATE_BLOCK * KURA_BLOCK, junk, sizeof junk);
		tx_write(&cfs->tx, cfs->sb->root_ino << INODE_SHIFT, junk, 128);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed to set up (status %d)", status);
	struct stat after;
	CHECK(kura_mkdir(fs, "/after", 0755) == 0, "an operation after the holder died");
	CHECK(kura_stat(fs, "/keep", &after) == 0 && after.st_ino == before.st_ino, "/keep lost");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck after a dead holder's rollback");
}

/* Children killed at random instants while creating, writing and renaming:
 * every kill leaves a pool the parent keeps using, and fsck stays clean. */
static void test_sigkill(void)
{
	/* Odd rounds keep this mount across the kill, so the dead child's
	 * transaction is undone online by the next locker, not by a fresh mount. */
	kura_fs *held = NULL;
	for (int round = 0; round < 12; round++) {
		if (round % 2 && !held)
			held = kura_mount(pool, NULL, NULL);
		if (round % 2 == 0 && held) {
			kura_unmount(held);
			held = NULL;
		}
		pid_t pid = fork();
		if (pid == 0) {
			kura_fs *cfs = kura_mount(pool, NULL, NULL);
			char name[64], buf[10000];
			memset(buf, 'k', sizeof buf);
			for (unsigned i = 0;; i++) {
				snprintf(name, sizeof name, "/k%u", i % 50);
				int fd = kura_open(cfs, name, O_CREAT | O_RDWR | O_TRUNC, 0644);
				if (fd >= 0) {
					kura_pwrite(cfs, fd, buf, 1 + i % sizeof buf, i % 7000);
					kura_close(cfs, fd);
				}
				kura_rename(cfs, name, "/k-renamed", 0);
			}
		}
		usleep(2000 + 1500 * round);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		kura_fs *fs = held ? held : kura_mount(pool, NULL, NULL);
		CHECK(fs != NULL, "mount after SIGKILL round %d", round);
		if (!fs)
			return;
		CHECK(kura_mkdir(fs, "/alive", 0755) == 0 && kura_rmdir(fs, "/alive") == 0,
		      "the pool is usable after SIGKILL round %d", round);
		if (!held)
			kura_unmount(fs);
		int problems = kura_fsck(pool, 0, NULL, NULL);
		CHECK(problems == 0, "fsck after SIGKILL round %d: %d problems", round, problems);
	}
	if (held)
		kura_unmount(held);
}

int main(void)
{
	snprintf(pool, sizeof pool, "/dev/shm/kura-unit-%d.pool", getpid());
	if (kura_mkfs(pool, 64 << 20, 1)) {
		printf("mkfs: %s\n", kura_last_error());
		return 1;
	}
	test_tx_rollback();
	test_dir_splits();
	test_readers_vs_writer();
	test_dead_holder();
	test_sigkill();
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "final fsck");
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
