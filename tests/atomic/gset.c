/* gset — a group over several files and names (kura_gbegin … kura_gcommit)
 * as a preloaded program sees it; run by tests/test_atomic.py.
 *
 *   gset DIR              the checks; prints "N checks, M failed"
 *   gset DIR --fallback   DIR is not kura's: the calls must fall back
 *
 * Other processes (forked children, which have no group of their own) must
 * see nothing of an open group; the commit shows all of it; a failed commit
 * and an abort none; a process killed anywhere in a loop of groups leaves
 * the last committed state whole. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kura_atomic.h"

#include "check.h"

static const char *dir;

static const char *at(const char *name)
{
	static char buf[8][4096];
	static int k;
	char *p = buf[k++ % 8];
	snprintf(p, 4096, "%s/%s", dir, name);
	return p;
}

static void put(const char *name, const char *text)
{
	int fd = open(at(name), O_CREAT | O_TRUNC | O_WRONLY, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd))
		printf("FAIL setting up %s\n", name), failures++;
}

/* The file's contents as a string ("" if missing: exists() tells). */
static const char *get(const char *name)
{
	static char buf[8][256];
	static int k;
	char *b = buf[k++ % 8];
	int fd = open(at(name), O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, b, 255);
	b[n > 0 ? n : 0] = 0;
	if (fd >= 0)
		close(fd);
	return b;
}

static int exists(const char *name)
{
	struct stat st;
	return lstat(at(name), &st) == 0;
}

/* What another process sees: runs fn in a forked child, which has no
 * group, and returns its verdict. */
static int seen_by_other(int (*fn)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(fn() ? 0 : 1);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int old_state(void)
{
	return !strcmp(get("a"), "a0") && !strcmp(get("b"), "b0") && exists("old") && !exists("old2") &&
	       exists("gone") && !exists("new");
}

static int new_state(void)
{
	return !strcmp(get("a"), "a1") && !strcmp(get("b"), "b0b1") && !exists("old") && exists("old2") &&
	       !exists("gone") && !strcmp(get("new"), "n1");
}

static void set_up(void)
{
	put("a", "a0");
	put("b", "b0");
	put("old", "o");
	put("gone", "g");
	unlink(at("new"));
	unlink(at("old2"));
}

/* The changes of one group: a rewrite, an append, a new file, a rename,
 * an unlink. */
static int changes(void)
{
	int a = open(at("a"), O_WRONLY), b = open(at("b"), O_WRONLY | O_APPEND);
	int n = open(at("new"), O_CREAT | O_EXCL | O_WRONLY, 0640);
	int ok = a >= 0 && b >= 0 && n >= 0;
	ok = ok && pwrite(a, "a1", 2, 0) == 2 && write(b, "b1", 2) == 2 && write(n, "n1", 2) == 2;
	ok = ok && rename(at("old"), at("old2")) == 0 && unlink(at("gone")) == 0;
	close(a);
	close(b);
	close(n);
	return ok;
}

static void basics(void)
{
	set_up();
	CHECK(kura_atomic_gbegin() == 1, "gbegin");
	CHECK(kura_atomic_gbegin() == -1 && errno == EBUSY, "a second gbegin: EBUSY");
	CHECK(changes(), "the group's changes");
	/* This process reaches its new file by descriptor only, and sees
	 * names as they were; its writes it sees. */
	CHECK(exists("old") && !exists("new"), "names change at the commit");
	CHECK(!strcmp(get("a"), "a0"), "a new description reads the file as committed");
	CHECK(seen_by_other(old_state), "another process sees nothing of the group");
	CHECK(kura_atomic_gcommit() == 0, "gcommit");
	CHECK(new_state(), "all of it after the commit: a=%s b=%s new=%s", get("a"), get("b"), get("new"));
	CHECK(seen_by_other(new_state), "another process sees all of it");
	struct stat st;
	CHECK(stat(at("new"), &st) == 0 && (st.st_mode & 0777) == (0640 & ~umask(022)), "the new file's mode %o",
	      st.st_mode & 0777);
	umask(022);
	CHECK(kura_atomic_gcommit() == -1 && errno == EINVAL, "gcommit without a group: EINVAL");
	CHECK(kura_atomic_gabort() == -1 && errno == EINVAL, "gabort without a group: EINVAL");

	/* Abort: nothing of it, the unnamed file gone. */
	set_up();
	CHECK(kura_atomic_gbegin() == 1 && changes(), "a group to abort");
	CHECK(kura_atomic_gabort() == 0, "gabort");
	CHECK(old_state(), "nothing after the abort");

	/* A name that changed meanwhile fails the commit whole; the group
	 * stays open until aborted. */
	set_up();
	CHECK(kura_atomic_gbegin() == 1 && changes(), "a group whose rename will fail");
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(unlink(at("old")) == 0 ? 0 : 1);
	int wst;
	waitpid(pid, &wst, 0);
	CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "another process removed the rename's source");
	CHECK(kura_atomic_gcommit() == -1 && errno == ENOENT, "the commit fails with ENOENT");
	CHECK(!strcmp(get("a"), "a0") && !strcmp(get("b"), "b0") && exists("gone") && !exists("new"),
	      "and changed nothing");
	CHECK(kura_atomic_gcommit() == -1 && errno == ENOENT, "still open: the same answer again");
	CHECK(kura_atomic_gabort() == 0 && !strcmp(get("a"), "a0"), "aborted");

	/* fsync of a member commits the whole group. */
	set_up();
	CHECK(kura_atomic_gbegin() == 1, "gbegin");
	int a = open(at("a"), O_WRONLY), b = open(at("b"), O_WRONLY);
	CHECK(pwrite(a, "A", 1, 0) == 1 && pwrite(b, "B", 1, 0) == 1 && unlink(at("gone")) == 0, "writes");
	CHECK(fsync(b) == 0, "fsync of a member");
	CHECK(!strcmp(get("a"), "A0") && !strcmp(get("b"), "B0") && !exists("gone"), "committed all: %s %s", get("a"),
	      get("b"));
	CHECK(kura_atomic_gabort() == -1 && errno == EINVAL, "the group is over");
	close(a);
	close(b);

	/* A member closed before the commit stays in the group. */
	set_up();
	CHECK(kura_atomic_gbegin() == 1, "gbegin");
	a = open(at("a"), O_WRONLY);
	CHECK(pwrite(a, "Z", 1, 1) == 1 && close(a) == 0, "write and close");
	CHECK(!strcmp(get("a"), "a0"), "not yet");
	CHECK(kura_atomic_gcommit() == 0 && !strcmp(get("a"), "aZ"), "the closed member committed: %s", get("a"));

	/* A name made in the group: opened again, renamed, all at the commit. */
	set_up();
	CHECK(kura_atomic_gbegin() == 1, "gbegin");
	int n1 = open(at("new"), O_CREAT | O_RDWR, 0644), n2 = open(at("new"), O_CREAT | O_RDWR, 0644);
	CHECK(n1 >= 0 && n2 >= 0 && write(n1, "xy", 2) == 2, "created twice");
	char two[4] = { 0 };
	CHECK(pread(n2, two, 2, 0) == 2 && !memcmp(two, "xy", 2), "the second open is the same file: %s", two);
	CHECK(open(at("new"), O_CREAT | O_EXCL | O_RDWR, 0644) == -1 && errno == EEXIST, "O_EXCL: EEXIST");
	CHECK(open(at("a"), O_CREAT | O_EXCL | O_RDWR, 0644) == -1 && errno == EEXIST, "O_EXCL of a file: EEXIST");
	CHECK(rename(at("new"), at("new2")) == 0, "rename of a name the group makes");
	close(n1);
	close(n2);
	CHECK(kura_atomic_gcommit() == 0 && !exists("new") && !strcmp(get("new2"), "xy"), "made, then renamed");
	unlink(at("new2"));

	/* kura_fbegin names a member; a rmdir is deferred too. */
	set_up();
	mkdir(at("d"), 0755);
	CHECK(kura_atomic_gbegin() == 1, "gbegin");
	a = open(at("a"), O_RDWR);
	CHECK(kura_atomic_fbegin(a) == 1, "fbegin joins the group");
	CHECK(rmdir(at("d")) == 0 && exists("d"), "rmdir deferred");
	CHECK(rmdir(at("nodir")) == -1 && errno == ENOENT, "a missing name: ENOENT at once");
	CHECK(kura_atomic_fcommit(a) == 0 && !exists("d"), "fcommit of a member commits the group");
	close(a);
}

/* A process killed at random moments in a loop of groups that each write
 * the round into two files, make a third and rename it over a fourth:
 * the state left is one round's, whole. */
static void kills(void)
{
	for (int k = 0; k < 12; k++) {
		put("x", "0");
		put("y", "0");
		put("z", "0");
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			for (int round = 1;; round++) {
				char v[32];
				int len = snprintf(v, sizeof v, "%d", round);
				if (kura_atomic_gbegin() != 1)
					_exit(2);
				int x = open(at("x"), O_WRONLY | O_TRUNC), y = open(at("y"), O_WRONLY | O_TRUNC);
				int t = open(at("t"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
				if (x < 0 || y < 0 || t < 0 || write(x, v, len) != len || write(y, v, len) != len ||
				    write(t, v, len) != len || rename(at("t"), at("z")))
					_exit(3);
				close(x);
				close(y);
				close(t);
				if (kura_atomic_gcommit())
					_exit(4);
			}
		}
		struct timespec d = { 0, 2000000 + (k * 1700000) % 9000000 };
		nanosleep(&d, NULL);
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st), "the looping process died by the signal (status %x)", st);
		CHECK(!strcmp(get("x"), get("y")) && !strcmp(get("x"), get("z")) && !exists("t"),
		      "kill %d: one round whole: x=%s y=%s z=%s t:%d", k, get("x"), get("y"), get("z"), exists("t"));
	}
	unlink(at("x"));
	unlink(at("y"));
	unlink(at("z"));
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	dir = argv[1];
	umask(022);
	if (argc > 2 && !strcmp(argv[2], "--fallback")) {
		CHECK(kura_atomic_gbegin() == 0, "no kura: no group");
		CHECK(kura_atomic_gcommit() == 0, "gcommit falls back to sync");
		CHECK(kura_atomic_gabort() == -1 && errno == ENOTSUP, "gabort: ENOTSUP");
	} else {
		basics();
		kills();
		const char *names[] = { "a", "b", "old", "old2", "gone", "new" };
		for (size_t i = 0; i < sizeof names / sizeof *names; i++)
			unlink(at(names[i]));
	}
	printf("%d checks, %d failed\n", checks, failures);
	return failures != 0;
}
