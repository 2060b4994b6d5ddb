/*
 * dir_index.h (api_test) — a thread's index of directory buckets
 * (src/dir_index.h) must stay exact: through this thread's adds, moves and
 * removals of every kind, through operations rolled back, and through
 * changes another thread or process makes, which it cannot see happen.
 * Each step is checked against a model of the directory kept here.
 */
#ifndef API_DIR_INDEX_H
#define API_DIR_INDEX_H

#include <pthread.h>
#include <sys/wait.h>
#include "common.h"

#define IX_NAMES 3000 /* ~60 buckets of 50 entries: indexed (DIR_INDEX_MIN_ENTRIES) */

static unsigned char ix_present[IX_NAMES];
static int ix_bad;

/* Names of several lengths, so that a removal both moves the last entry
 * into the hole (equal lengths) and shifts the tail (unequal ones). */
static void ix_name(char *p, size_t n, int i)
{
	snprintf(p, n, "/ix/%.*s%d", i % 5 * 7, "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn", i);
}

/* Every name's lookup agrees with the model; returns how many do not. */
static int ix_check_all(const char *when)
{
	char p[96];
	struct stat st;
	int wrong = 0;
	for (int i = 0; i < IX_NAMES; i++) {
		ix_name(p, sizeof p, i);
		int r = kura_stat(fs, p, &st);
		if ((ix_present[i] ? r != 0 : r != -ENOENT) && wrong++ < 3)
			printf("  %s: stat %s gave %s, the model says %s\n", when, p, en(r),
			       ix_present[i] ? "present" : "absent");
	}
	return wrong;
}

static int ix_apply(int i, int create)
{
	char p[96];
	ix_name(p, sizeof p, i);
	if (create) {
		int fd = kura_open(fs, p, O_CREAT | O_EXCL | O_WRONLY, 0600);
		if (fd >= 0)
			kura_close(fs, fd);
		return fd < 0 ? fd : 0;
	}
	return kura_unlink(fs, p);
}

static void *ix_other_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < IX_NAMES; i += 3)
		if (ix_apply(i, !ix_present[i]))
			ix_bad++;
		else
			ix_present[i] ^= 1;
	return NULL;
}

static void test_dir_index(void)
{
	section = "directory index";
	EXPECT(kura_mkdir(fs, "/ix", 0755), 0);
	for (int i = 0; i < IX_NAMES; i++)
		ix_present[i] = ix_apply(i, 1) == 0;
	EXPECT(ix_check_all("after creating"), 0);

	/* This thread's own changes, in a seeded random order, checked as it
	 * goes: adds, both kinds of removal, splits and merges. */
	unsigned seed = 12345;
	int wrong = 0;
	for (int step = 0; step < 20000; step++) {
		int i = (int)(rand_r(&seed) % IX_NAMES);
		int r = ix_apply(i, !ix_present[i]);
		if (r && wrong++ < 3)
			printf("  step %d: %s of #%d: %s\n", step, ix_present[i] ? "unlink" : "create", i, en(r));
		if (!r)
			ix_present[i] ^= 1;
		if (step % 2000 == 0)
			wrong += ix_check_all("mid-way");
	}
	EXPECT(wrong, 0);

	/* Rolled back: creating an existing name fails after the lookup, and a
	 * rename onto a directory fails after both were found. */
	char p[96], q[96];
	for (int i = 0; i < IX_NAMES; i++)
		if (ix_present[i]) {
			ix_name(p, sizeof p, i);
			EXPECT_ERR(kura_open(fs, p, O_CREAT | O_EXCL | O_WRONLY, 0600), EEXIST);
			EXPECT(kura_mkdir(fs, "/ix/sub", 0755), 0);
			EXPECT_ERR(kura_rename(fs, p, "/ix/sub", 0), EISDIR);
			EXPECT(kura_rmdir(fs, "/ix/sub"), 0);
			break;
		}
	EXPECT(ix_check_all("after failed calls"), 0);

	/* Renames inside the directory: a name goes, another comes. */
	for (int i = 0, done = 0; i < IX_NAMES && done < 200; i++) {
		int j = (i * 7 + 3) % IX_NAMES;
		if (!ix_present[i] || ix_present[j])
			continue;
		ix_name(p, sizeof p, i);
		ix_name(q, sizeof q, j);
		if (kura_rename(fs, p, q, 0) == 0) {
			ix_present[i] = 0;
			ix_present[j] = 1;
			done++;
		}
	}
	EXPECT(ix_check_all("after renames"), 0);

	/* Another thread's changes: this thread's index was exact before them. */
	pthread_t th;
	EXPECT(pthread_create(&th, NULL, ix_other_thread, NULL), 0);
	pthread_join(th, NULL);
	EXPECT(ix_bad, 0);
	EXPECT(ix_check_all("after another thread"), 0);

	/* Another process's: a child flips every fifth name. */
	fflush(stdout);
	kura_fork_prepare(fs);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fork_child(fs);
		int bad = 0;
		for (int i = 1; i < IX_NAMES; i += 5)
			bad += ix_apply(i, !ix_present[i]) != 0;
		_exit(bad ? 1 : 0);
	}
	kura_fork_parent(fs);
	int status = -1;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child changing the directory: status %d", status);
	for (int i = 1; i < IX_NAMES; i += 5)
		ix_present[i] ^= 1;
	EXPECT(ix_check_all("after another process"), 0);

	for (int i = 0; i < IX_NAMES; i++)
		if (ix_present[i] && ix_apply(i, 0) == 0)
			ix_present[i] = 0;
	EXPECT(ix_check_all("after emptying"), 0);
	EXPECT(kura_rmdir(fs, "/ix"), 0);
}

#endif
