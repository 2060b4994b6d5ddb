/*
 * walk_memo.h (api_test) — a thread remembers where a path's leading
 * directories led (src/dir_index.h, "Walks"), and every change that can
 * send them elsewhere must be seen: a directory renamed, removed and made
 * again, replaced by a rename, a symlink put in its place or retargeted,
 * its search permission taken away, another process's rename; and walks
 * relative to a descriptor.  Each check names the file it must reach by
 * its inode number, so a stale walk that finds some file is still caught.
 */
#ifndef API_WALK_MEMO_H
#define API_WALK_MEMO_H

#include <sys/wait.h>
#include "common.h"

/* The inode path names (0 when stat fails, and then err holds why). */
static uint64_t wm_ino(const char *path, int *err)
{
	struct stat st;
	int r = kura_stat(fs, path, &st);
	*err = r;
	return r ? 0 : (uint64_t)st.st_ino;
}

static uint64_t wm_make(const char *path)
{
	int fd = kura_open(fs, path, O_CREAT | O_EXCL | O_WRONLY, 0644);
	if (fd >= 0)
		kura_close(fs, fd);
	int err;
	return wm_ino(path, &err);
}

#define WM_EXPECT_INO(path, want)                                                                  \
	do {                                                                                       \
		int e_;                                                                            \
		uint64_t got_ = wm_ino(path, &e_);                                                 \
		CHECK(got_ == (want), "%s: inode %llu (%s), expected %llu", path,                  \
		      (unsigned long long)got_, en(e_), (unsigned long long)(want));                \
	} while (0)

#define WM_EXPECT_ERR(path, errno_)                                                                \
	do {                                                                                       \
		int e_;                                                                            \
		uint64_t got_ = wm_ino(path, &e_);                                                 \
		CHECK(e_ == -(errno_), "%s: inode %llu (%s), expected %s", path,                   \
		      (unsigned long long)got_, en(e_), en(-(errno_)));                             \
	} while (0)

static void test_walk_memo(void)
{
	section = "remembered walks";
	EXPECT(kura_mkdir(fs, "/wm", 0755), 0);
	EXPECT(kura_mkdir(fs, "/wm/a", 0755), 0);
	EXPECT(kura_mkdir(fs, "/wm/a/b", 0755), 0);
	uint64_t f = wm_make("/wm/a/b/f");
	CHECK(f != 0, "creating /wm/a/b/f");
	WM_EXPECT_INO("/wm/a/b/f", f);

	/* Renamed away and back. */
	EXPECT(kura_rename(fs, "/wm/a", "/wm/x", 0), 0);
	WM_EXPECT_ERR("/wm/a/b/f", ENOENT);
	WM_EXPECT_INO("/wm/x/b/f", f);
	EXPECT(kura_rename(fs, "/wm/x", "/wm/a", 0), 0);
	WM_EXPECT_INO("/wm/a/b/f", f);

	/* Removed and made again: the same names, other directories. */
	EXPECT(kura_unlink(fs, "/wm/a/b/f"), 0);
	EXPECT(kura_rmdir(fs, "/wm/a/b"), 0);
	WM_EXPECT_ERR("/wm/a/b/f", ENOENT);
	EXPECT(kura_mkdir(fs, "/wm/a/b", 0755), 0);
	uint64_t g = wm_make("/wm/a/b/g");
	WM_EXPECT_ERR("/wm/a/b/f", ENOENT);
	WM_EXPECT_INO("/wm/a/b/g", g);

	/* Replaced by a rename onto it (an empty directory). */
	EXPECT(kura_mkdir(fs, "/wm/e", 0755), 0);
	WM_EXPECT_ERR("/wm/e/h", ENOENT); /* remembers /wm/e/ */
	EXPECT(kura_mkdir(fs, "/wm/n", 0755), 0);
	uint64_t h = wm_make("/wm/n/h");
	EXPECT(kura_rename(fs, "/wm/n", "/wm/e", 0), 0);
	WM_EXPECT_INO("/wm/e/h", h);

	/* A symlink in a directory's place, then pointed elsewhere. */
	WM_EXPECT_INO("/wm/a/b/g", g);
	EXPECT(kura_rename(fs, "/wm/a", "/wm/real", 0), 0);
	EXPECT(kura_symlink(fs, "real", "/wm/a"), 0);
	WM_EXPECT_INO("/wm/a/b/g", g);
	EXPECT(kura_mkdir(fs, "/wm/other", 0755), 0);
	EXPECT(kura_mkdir(fs, "/wm/other/b", 0755), 0);
	uint64_t g2 = wm_make("/wm/other/b/g");
	EXPECT(kura_unlink(fs, "/wm/a"), 0);
	EXPECT(kura_symlink(fs, "other", "/wm/a"), 0);
	WM_EXPECT_INO("/wm/a/b/g", g2);
	EXPECT(kura_unlink(fs, "/wm/a"), 0);
	EXPECT(kura_rename(fs, "/wm/real", "/wm/a", 0), 0);
	WM_EXPECT_INO("/wm/a/b/g", g);

	/* Search permission taken away, for a caller it then stops. */
	struct kura_creds user = { .uid = 4242, .fsuid = 4242, .gid = 4242, .fsgid = 4242 };
	kura_set_thread_creds(&user);
	WM_EXPECT_INO("/wm/a/b/g", g);
	kura_set_thread_creds(NULL);
	EXPECT(kura_chmod(fs, "/wm/a", 0700), 0);
	kura_set_thread_creds(&user);
	WM_EXPECT_ERR("/wm/a/b/g", EACCES);
	kura_set_thread_creds(NULL);
	WM_EXPECT_INO("/wm/a/b/g", g); /* root searches anyway */
	EXPECT(kura_chmod(fs, "/wm/a", 0755), 0);

	/* Relative to a descriptor, then the directory renamed under it. */
	int dfd = kura_open(fs, "/wm", O_RDONLY | O_DIRECTORY, 0);
	CHECK(dfd >= 0, "open /wm: %s", en(dfd));
	struct stat st;
	EXPECT(kura_fstatat(fs, dfd, "a/b/g", &st, 0), 0);
	CHECK((uint64_t)st.st_ino == g, "a/b/g from /wm: inode %llu", (unsigned long long)st.st_ino);
	EXPECT(kura_rename(fs, "/wm/a", "/wm/y", 0), 0);
	EXPECT_ERR(kura_fstatat(fs, dfd, "a/b/g", &st, 0), ENOENT);
	EXPECT(kura_rename(fs, "/wm/y", "/wm/a", 0), 0);
	EXPECT(kura_fstatat(fs, dfd, "a/b/g", &st, 0), 0);
	kura_close(fs, dfd);

	/* Another process renames: this thread cannot see it happen. */
	WM_EXPECT_INO("/wm/a/b/g", g);
	fflush(stdout);
	kura_fork_prepare(fs);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fork_child(fs);
		_exit(kura_rename(fs, "/wm/a", "/wm/z", 0) ? 1 : 0);
	}
	kura_fork_parent(fs);
	int status = -1;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child renaming /wm/a: status %d", status);
	WM_EXPECT_ERR("/wm/a/b/g", ENOENT);
	WM_EXPECT_INO("/wm/z/b/g", g);

	/* A file where a directory was: ENOTDIR, not the old walk. */
	WM_EXPECT_INO("/wm/e/h", h);
	EXPECT(kura_unlink(fs, "/wm/e/h"), 0);
	EXPECT(kura_rmdir(fs, "/wm/e"), 0);
	uint64_t ef = wm_make("/wm/e");
	CHECK(ef != 0, "creating the file /wm/e");
	WM_EXPECT_ERR("/wm/e/h", ENOTDIR);
}

#endif
