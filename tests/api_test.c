/*
 * api_test — deterministic checks of kura.h's POSIX edge cases.
 *
 * Every check states the expected value and prints expected vs got when it
 * differs; the test goes on after a failure so one run shows them all, and
 * exits 1 if any failed.  Where Linux and POSIX allow more than one answer,
 * the check accepts exactly the documented alternatives and says so.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kura.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define POOL_SIZE (1ull << 30) /* holds the 200 MiB file and the 50k directory */

static kura_fs *fs;
static char pool[256];
static int npass, nfail;
static const char *section = "";

static const char *en(long r)
{
	if (r >= 0)
		return "ok";
	const char *n = strerrorname_np((int)-r);
	return n ? n : "E?";
}

static void report_fail(int line, const char *expr, const char *fmt, long want, long got)
{
	nfail++;
	printf("FAIL [%s] line %d: %s\n      expected ", section, line, expr);
	printf(fmt, want, en(want));
	printf(", got %ld (%s)\n", got, en(got));
}

/* Exact return value (an -errno or a count). */
#define EXPECT(expr, want)                                                                 \
	({                                                                                     \
		long _g = (long)(expr), _w = (long)(want);                                         \
		if (_g == _w)                                                                      \
			npass++;                                                                       \
		else                                                                               \
			report_fail(__LINE__, #expr, "%ld (%s)", _w, _g);                              \
		_g;                                                                                \
	})
#define EXPECT_ERR(expr, e) EXPECT(expr, -(e))
/* Any success (>= 0). */
#define EXPECT_OK(expr)                                                                    \
	({                                                                                     \
		long _g = (long)(expr);                                                            \
		if (_g >= 0)                                                                       \
			npass++;                                                                       \
		else                                                                               \
			report_fail(__LINE__, #expr, ">= %ld%.0s", 0, _g);                             \
		_g;                                                                                \
	})
/* A plain condition, with a printf-style explanation on failure. */
#define CHECK(cond, ...)                                                                   \
	({                                                                                     \
		int _c = !!(cond);                                                                 \
		if (_c)                                                                            \
			npass++;                                                                       \
		else {                                                                             \
			nfail++;                                                                       \
			printf("FAIL [%s] line %d: %s: ", section, __LINE__, #cond);                   \
			printf(__VA_ARGS__);                                                           \
			printf("\n");                                                                  \
		}                                                                                  \
		_c;                                                                                \
	})

static void mount_rw(void)
{
	struct kura_mount_opts o = {0};
	int err = 0;
	fs = kura_mount(pool, &o, &err);
	if (!fs) {
		printf("FATAL: kura_mount(%s): %s (%s)\n", pool, en(err), kura_last_error());
		unlink(pool);
		exit(1);
	}
}

static void remount(void)
{
	EXPECT(kura_unmount(fs), 0);
	mount_rw();
}

static int create_file(const char *path, const void *data, size_t n)
{
	int fd = kura_open(fs, path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd < 0)
		return fd;
	ssize_t w = n ? kura_write(fs, fd, data, n) : 0;
	kura_close(fs, fd);
	return w < 0 ? (int)w : (size_t)w == n ? 0 : -EIO;
}

static int all_bytes(const unsigned char *b, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

/* ---- name errors -------------------------------------------------------- */

static void test_name_errors(void)
{
	section = "name errors";
	char n255[300], n256[300], p[600];
	memset(n255, 'a', 255), n255[255] = 0;
	memset(n256, 'b', 256), n256[256] = 0;

	EXPECT(kura_mkdir(fs, "/ne", 0755), 0);
	EXPECT(create_file("/ne/file", "hello", 5), 0);
	EXPECT_ERR(kura_open(fs, "/ne/missing", O_RDONLY, 0), ENOENT);
	EXPECT_ERR(kura_open(fs, "/ne/nodir/x", O_CREAT | O_RDWR, 0644), ENOENT);
	EXPECT_ERR(kura_stat(fs, "/ne/missing", &(struct stat){0}), ENOENT);
	EXPECT_ERR(kura_unlink(fs, "/ne/missing"), ENOENT);
	EXPECT_ERR(kura_rmdir(fs, "/ne/missing"), ENOENT);
	EXPECT_ERR(kura_rename(fs, "/ne/missing", "/ne/x", 0), ENOENT);
	EXPECT_ERR(kura_access(fs, "/ne/missing", F_OK), ENOENT);
	/* Linux rejects an empty path with ENOENT. */
	EXPECT_ERR(kura_stat(fs, "", &(struct stat){0}), ENOENT);

	EXPECT_ERR(kura_open(fs, "/ne/file", O_CREAT | O_EXCL | O_RDWR, 0644), EEXIST);
	EXPECT_ERR(kura_mkdir(fs, "/ne/file", 0755), EEXIST);
	EXPECT_ERR(kura_mkdir(fs, "/ne", 0755), EEXIST);
	EXPECT_ERR(kura_symlink(fs, "x", "/ne/file"), EEXIST);
	EXPECT_ERR(kura_link(fs, "/ne/file", "/ne/file"), EEXIST);

	EXPECT_ERR(kura_open(fs, "/ne/file/x", O_RDONLY, 0), ENOTDIR);
	EXPECT_ERR(kura_open(fs, "/ne/file/x", O_CREAT | O_RDWR, 0644), ENOTDIR);
	EXPECT_ERR(kura_mkdir(fs, "/ne/file/x", 0755), ENOTDIR);
	EXPECT_ERR(kura_open(fs, "/ne/file", O_RDONLY | O_DIRECTORY, 0), ENOTDIR);
	EXPECT_ERR(kura_rmdir(fs, "/ne/file"), ENOTDIR);
	struct kura_dir *d;
	int err = 0;
	d = kura_opendir(fs, "/ne/file", &err);
	CHECK(!d && err == -ENOTDIR, "opendir of a file: dir %p err %d (%s), expected NULL, ENOTDIR", (void *)d, err,
	      en(err));
	if (d)
		kura_closedir(d);

	EXPECT_ERR(kura_open(fs, "/ne", O_WRONLY, 0), EISDIR);
	EXPECT_ERR(kura_open(fs, "/ne", O_RDWR, 0), EISDIR);
	EXPECT_ERR(kura_open(fs, "/ne", O_CREAT | O_WRONLY, 0644), EISDIR);
	/* POSIX says EPERM for unlink of a directory; Linux says EISDIR. */
	EXPECT_ERR(kura_unlink(fs, "/ne"), EISDIR);
	EXPECT_ERR(kura_truncate(fs, "/ne", 0), EISDIR);
	int dfd = EXPECT_OK(kura_open(fs, "/ne", O_RDONLY | O_DIRECTORY, 0));
	if (dfd >= 0) {
		char b[8];
		EXPECT_ERR(kura_read(fs, dfd, b, sizeof b), EISDIR);
		EXPECT_ERR(kura_pread(fs, dfd, b, sizeof b, 0), EISDIR);
		EXPECT_ERR(kura_write(fs, dfd, b, sizeof b), EBADF);
		EXPECT(kura_close(fs, dfd), 0);
	}

	EXPECT(kura_mkdir(fs, "/ne/full", 0755), 0);
	EXPECT(create_file("/ne/full/x", "", 0), 0);
	EXPECT_ERR(kura_rmdir(fs, "/ne/full"), ENOTEMPTY);
	EXPECT(kura_mkdir(fs, "/ne/empty", 0755), 0);
	/* Linux prefers ENOTEMPTY to EEXIST for a rename over a non-empty dir. */
	EXPECT_ERR(kura_rename(fs, "/ne/empty", "/ne/full", 0), ENOTEMPTY);
	EXPECT(kura_rename(fs, "/ne/full", "/ne/empty", 0), 0);
	EXPECT(kura_stat(fs, "/ne/empty/x", &(struct stat){0}), 0);
	EXPECT_ERR(kura_stat(fs, "/ne/full", &(struct stat){0}), ENOENT);

	snprintf(p, sizeof p, "/ne/%s", n255);
	EXPECT(create_file(p, "x", 1), 0);
	EXPECT(kura_stat(fs, p, &(struct stat){0}), 0);
	EXPECT(kura_unlink(fs, p), 0);
	EXPECT(kura_mkdir(fs, p, 0755), 0);
	EXPECT(kura_rmdir(fs, p), 0);
	snprintf(p, sizeof p, "/ne/%s", n256);
	EXPECT_ERR(kura_open(fs, p, O_CREAT | O_RDWR, 0644), ENAMETOOLONG);
	EXPECT_ERR(kura_mkdir(fs, p, 0755), ENAMETOOLONG);
	EXPECT_ERR(kura_stat(fs, p, &(struct stat){0}), ENAMETOOLONG);
	EXPECT_ERR(kura_symlink(fs, "x", p), ENAMETOOLONG);
	EXPECT_ERR(kura_rename(fs, "/ne/file", p, 0), ENAMETOOLONG);
	snprintf(p, sizeof p, "/ne/%s/x", n256);
	EXPECT_ERR(kura_stat(fs, p, &(struct stat){0}), ENAMETOOLONG);

	/* Directory into its own subtree. */
	EXPECT(kura_mkdir(fs, "/ne/a", 0755), 0);
	EXPECT(kura_mkdir(fs, "/ne/a/b", 0755), 0);
	EXPECT_ERR(kura_rename(fs, "/ne/a", "/ne/a/b/c", 0), EINVAL);
	EXPECT_ERR(kura_rename(fs, "/ne/a", "/ne/a/c", 0), EINVAL);
	EXPECT_ERR(kura_rename(fs, "/ne/a", "/ne/a/b", RENAME_EXCHANGE), EINVAL);
	/* Linux returns ENOTEMPTY for a rename onto an ancestor directory. */
	EXPECT_ERR(kura_rename(fs, "/ne/a/b", "/ne/a", 0), ENOTEMPTY);
	/* Renaming a name onto itself (or a hard link onto its twin) is a no-op. */
	EXPECT(kura_rename(fs, "/ne/a", "/ne/a", 0), 0);
	EXPECT(kura_link(fs, "/ne/file", "/ne/twin"), 0);
	EXPECT(kura_rename(fs, "/ne/file", "/ne/twin", 0), 0);
	EXPECT(kura_stat(fs, "/ne/file", &(struct stat){0}), 0);
	EXPECT(kura_unlink(fs, "/ne/twin"), 0);

	/* Types across rename. */
	EXPECT_ERR(kura_rename(fs, "/ne/file", "/ne/a", 0), EISDIR);
	EXPECT_ERR(kura_rename(fs, "/ne/a", "/ne/file", 0), ENOTDIR);
	EXPECT(create_file("/ne/other", "o", 1), 0);
	EXPECT_ERR(kura_rename(fs, "/ne/file", "/ne/other", RENAME_NOREPLACE), EEXIST);
	EXPECT_ERR(kura_rename(fs, "/ne/file", "/ne/nothere", RENAME_EXCHANGE), ENOENT);
	EXPECT_ERR(kura_rename(fs, "/ne/file", "/ne/other", RENAME_NOREPLACE | RENAME_EXCHANGE), EINVAL);
	EXPECT(kura_rename(fs, "/ne/file", "/ne/a", RENAME_EXCHANGE), 0);
	struct stat st;
	EXPECT(kura_stat(fs, "/ne/file/b", &st), 0);
	CHECK(S_ISDIR(st.st_mode), "after exchange /ne/file/b has mode %o", st.st_mode);
	EXPECT(kura_stat(fs, "/ne/a", &st), 0);
	CHECK(S_ISREG(st.st_mode) && st.st_size == 5, "after exchange /ne/a: mode %o size %lld", st.st_mode,
	      (long long)st.st_size);
	EXPECT(kura_rename(fs, "/ne/file", "/ne/a", RENAME_EXCHANGE), 0);

	/* Cross-directory moves are never EXDEV inside one pool. */
	EXPECT(kura_mkdir(fs, "/ne/x1", 0755), 0);
	EXPECT(kura_mkdir(fs, "/ne/x1/x2", 0755), 0);
	EXPECT(kura_rename(fs, "/ne/file", "/ne/x1/x2/moved", 0), 0);
	EXPECT(kura_rename(fs, "/ne/x1/x2", "/ne/x2", 0), 0);
	EXPECT(kura_link(fs, "/ne/x2/moved", "/ne/x1/linked"), 0);
	EXPECT(kura_stat(fs, "/ne/x1/linked", &st), 0);
	CHECK(st.st_nlink == 2, "nlink after link: %lu", (unsigned long)st.st_nlink);
	EXPECT(kura_rename(fs, "/ne/x2/moved", "/ne/file", 0), 0);
	EXPECT(kura_unlink(fs, "/ne/x1/linked"), 0);

	/* Hard links to directories are refused. */
	EXPECT_ERR(kura_link(fs, "/ne/a", "/ne/alink"), EPERM);

	/* ".." at the root stays at the root; relative paths start at the root. */
	EXPECT(kura_stat(fs, "/../../ne/file", &st), 0);
	EXPECT(kura_stat(fs, "ne/file", &st), 0);
	EXPECT(kura_stat(fs, "ne/./x1/../file", &st), 0);
	CHECK(st.st_size == 5, "size via relative path %lld", (long long)st.st_size);
}

/* ---- symlinks ----------------------------------------------------------- */

static void test_symlinks(void)
{
	section = "symlinks";
	char buf[300];
	struct stat st;
	EXPECT(kura_mkdir(fs, "/sl", 0755), 0);
	EXPECT(create_file("/sl/target", "abcdef", 6), 0);
	EXPECT(kura_symlink(fs, "target", "/sl/rel"), 0);
	EXPECT(kura_symlink(fs, "/sl/target", "/sl/abs"), 0);
	EXPECT(kura_symlink(fs, "nowhere", "/sl/dangling"), 0);
	EXPECT(kura_symlink(fs, "loop2", "/sl/loop1"), 0);
	EXPECT(kura_symlink(fs, "loop1", "/sl/loop2"), 0);
	EXPECT(kura_symlink(fs, "self", "/sl/self"), 0);
	EXPECT(kura_symlink(fs, "/sl", "/sl/dirlink"), 0);

	EXPECT(kura_stat(fs, "/sl/rel", &st), 0);
	CHECK(S_ISREG(st.st_mode) && st.st_size == 6, "stat through relative link: mode %o size %lld", st.st_mode,
	      (long long)st.st_size);
	EXPECT(kura_stat(fs, "/sl/abs", &st), 0);
	CHECK(S_ISREG(st.st_mode), "stat through absolute link: mode %o", st.st_mode);
	EXPECT(kura_lstat(fs, "/sl/abs", &st), 0);
	CHECK(S_ISLNK(st.st_mode) && st.st_size == 10, "lstat of link: mode %o size %lld (want 10)", st.st_mode,
	      (long long)st.st_size);
	EXPECT(kura_stat(fs, "/sl/dirlink/dirlink/target", &st), 0);
	EXPECT(kura_readlink(fs, "/sl/abs", buf, sizeof buf), 10);
	CHECK(!memcmp(buf, "/sl/target", 10), "readlink: '%.10s'", buf);
	EXPECT(kura_readlink(fs, "/sl/abs", buf, 3), 3);
	CHECK(!memcmp(buf, "/sl", 3), "truncated readlink: '%.3s'", buf);
	EXPECT_ERR(kura_readlink(fs, "/sl/target", buf, sizeof buf), EINVAL);
	EXPECT_ERR(kura_readlink(fs, "/sl/none", buf, sizeof buf), ENOENT);

	EXPECT_ERR(kura_stat(fs, "/sl/dangling", &st), ENOENT);
	EXPECT(kura_lstat(fs, "/sl/dangling", &st), 0);
	EXPECT_ERR(kura_open(fs, "/sl/loop1", O_RDONLY, 0), ELOOP);
	EXPECT_ERR(kura_stat(fs, "/sl/self", &st), ELOOP);
	EXPECT_ERR(kura_stat(fs, "/sl/loop1/x", &st), ELOOP);
	EXPECT_ERR(kura_open(fs, "/sl/rel", O_RDONLY | O_NOFOLLOW, 0), ELOOP);
	EXPECT_ERR(kura_open(fs, "/sl/dangling", O_RDWR | O_CREAT | O_NOFOLLOW, 0644), ELOOP);
	/* O_NOFOLLOW only concerns the last component. */
	int fd = EXPECT_OK(kura_open(fs, "/sl/dirlink/target", O_RDONLY | O_NOFOLLOW, 0));
	if (fd >= 0)
		kura_close(fs, fd);
	/* O_CREAT through a dangling link creates its target... */
	fd = EXPECT_OK(kura_open(fs, "/sl/dangling", O_RDWR | O_CREAT, 0600));
	if (fd >= 0)
		kura_close(fs, fd);
	EXPECT(kura_stat(fs, "/sl/nowhere", &st), 0);
	/* ...but O_EXCL never follows. */
	EXPECT_ERR(kura_open(fs, "/sl/rel", O_RDWR | O_CREAT | O_EXCL, 0600), EEXIST);
	/* Linux rejects an empty target. */
	EXPECT_ERR(kura_symlink(fs, "", "/sl/empty"), ENOENT);
	/* unlink and rename act on the link itself. */
	EXPECT(kura_rename(fs, "/sl/rel", "/sl/rel2", 0), 0);
	EXPECT(kura_lstat(fs, "/sl/rel2", &st), 0);
	CHECK(S_ISLNK(st.st_mode), "renamed link mode %o", st.st_mode);
	EXPECT(kura_unlink(fs, "/sl/rel2"), 0);
	EXPECT(kura_stat(fs, "/sl/target", &st), 0);
	/* rmdir of a link to a directory is ENOTDIR. */
	EXPECT_ERR(kura_rmdir(fs, "/sl/dirlink"), ENOTDIR);
	/* chmod follows the link. */
	EXPECT(kura_chmod(fs, "/sl/abs", 0600), 0);
	EXPECT(kura_stat(fs, "/sl/target", &st), 0);
	CHECK((st.st_mode & 07777) == 0600, "chmod through link: %o", st.st_mode & 07777);
}

/* ---- trailing slashes --------------------------------------------------- */

/* A trailing slash asks for a directory; as on Linux, operations that act
 * on a name (mkdir, rmdir, rename, unlink, symlink) never follow a final
 * symlink because of it, while lookups (stat, open) do. */
static void test_trailing_slash(void)
{
	section = "trailing slash";
	struct stat st;
	EXPECT(kura_mkdir(fs, "/ts", 0755), 0);
	EXPECT(kura_mkdir(fs, "/ts/dir/", 0755), 0);
	EXPECT(kura_mkdir(fs, "/ts/empty", 0755), 0);
	EXPECT(create_file("/ts/file", "x", 1), 0);
	EXPECT(kura_symlink(fs, "empty", "/ts/link"), 0);
	EXPECT(kura_symlink(fs, "missing", "/ts/dangling"), 0);

	EXPECT(kura_stat(fs, "/ts/dir/", &st), 0);
	EXPECT(kura_stat(fs, "/ts//dir//", &st), 0);
	EXPECT(kura_stat(fs, "/ts/link/", &st), 0);
	CHECK(S_ISDIR(st.st_mode), "stat through link/ gave mode %o", st.st_mode);
	EXPECT(kura_lstat(fs, "/ts/link/", &st), 0);
	CHECK(S_ISDIR(st.st_mode), "lstat of link/ must follow: mode %o", st.st_mode);
	EXPECT_ERR(kura_stat(fs, "/ts/file/", &st), ENOTDIR);
	EXPECT_ERR(kura_open(fs, "/ts/file/", O_RDONLY, 0), ENOTDIR);
	EXPECT_ERR(kura_open(fs, "/ts/new/", O_CREAT | O_RDWR, 0644), EISDIR);
	EXPECT_ERR(kura_stat(fs, "/ts/new", &st), ENOENT);

	/* mkdir of a dangling symlink's name fails: it must not create the target. */
	EXPECT_ERR(kura_mkdir(fs, "/ts/dangling/", 0755), EEXIST);
	EXPECT_ERR(kura_stat(fs, "/ts/missing", &st), ENOENT);
	EXPECT_ERR(kura_mkdir(fs, "/ts/dir/", 0755), EEXIST);
	/* rmdir and rename of link/ refuse instead of acting on the target. */
	EXPECT_ERR(kura_rmdir(fs, "/ts/link/"), ENOTDIR);
	EXPECT(kura_stat(fs, "/ts/empty", &st), 0);
	EXPECT_ERR(kura_rename(fs, "/ts/link/", "/ts/moved", 0), ENOTDIR);
	EXPECT(kura_lstat(fs, "/ts/link", &st), 0);
	CHECK(S_ISLNK(st.st_mode), "link changed type: %o", st.st_mode);
	EXPECT_ERR(kura_stat(fs, "/ts/moved", &st), ENOENT);
	EXPECT_ERR(kura_rename(fs, "/ts/file", "/ts/newname/", 0), ENOTDIR);
	EXPECT_ERR(kura_rename(fs, "/ts/file/", "/ts/newname", 0), ENOTDIR);
	EXPECT_ERR(kura_unlink(fs, "/ts/file/"), ENOTDIR);
	EXPECT_ERR(kura_symlink(fs, "x", "/ts/new2/"), ENOENT);
	EXPECT(kura_rename(fs, "/ts/dir/", "/ts/dir2/", 0), 0);
	EXPECT(kura_rmdir(fs, "/ts/dir2/"), 0);
	/* RENAME_EXCHANGE judges each trailing slash by its own object. */
	EXPECT(kura_rename(fs, "/ts/file", "/ts/empty/", RENAME_EXCHANGE), 0);
	EXPECT(kura_stat(fs, "/ts/file", &st), 0);
	CHECK(S_ISDIR(st.st_mode), "exchange with a slashed directory: /ts/file mode %o", st.st_mode);
	EXPECT(kura_rename(fs, "/ts/empty", "/ts/file/", RENAME_EXCHANGE), 0);
	EXPECT(kura_stat(fs, "/ts/empty/", &st), 0);
}

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

static void fsck_line(void *ctx, const char *line);

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

/* ---- directories -------------------------------------------------------- */

struct seen {
	char **names;
	int *count;
	size_t n;
};

static int find_name(char **names, size_t n, const char *name)
{
	/* names are "e<number>": index directly. */
	if (name[0] != 'e')
		return -1;
	char *end;
	long i = strtol(name + 1, &end, 10);
	if (*end || i < 0 || (size_t)i >= n || strcmp(names[i], name))
		return -1;
	return (int)i;
}

static void test_readdir_cookies(void)
{
	section = "readdir cookies";
	enum { N = 5000 };
	char p[300];
	EXPECT(kura_mkdir(fs, "/rd", 0755), 0);
	int made = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/rd/e%d", i);
		made += kura_mknod(fs, p, S_IFREG | 0644, 0) == 0;
	}
	CHECK(made == N, "created %d of %d entries", made, N);

	int err = 0;
	kura_dir *d = kura_opendir(fs, "/rd", &err);
	if (!CHECK(d != NULL, "opendir /rd: %s", en(err)))
		return;
	struct kura_dirent e;
	char (*first)[256] = calloc(N + 2, 256);
	int n = 0;
	while (n < N + 2 && kura_readdir(d, &e) == 1)
		memcpy(first[n++], e.name, 256);
	CHECK(n == N + 2, "readdir returned %d entries, expected %d", n, N + 2);
	CHECK(n >= 2 && !strcmp(first[0], ".") && !strcmp(first[1], ".."), "'.' and '..' are not first: '%s' '%s'",
	      first[0], first[1]);

	/* telldir/seekdir resume at the same place. */
	kura_rewinddir(d);
	for (int i = 0; i < 100; i++)
		kura_readdir(d, &e);
	long pos = kura_telldir(d);
	char after[50][256];
	int ok = 1;
	for (int i = 0; i < 50; i++) {
		ok &= kura_readdir(d, &e) == 1;
		memcpy(after[i], e.name, 256);
	}
	kura_seekdir(d, pos);
	for (int i = 0; i < 50; i++) {
		ok &= kura_readdir(d, &e) == 1;
		ok &= !strcmp(after[i], e.name);
	}
	CHECK(ok, "seekdir(telldir) does not resume at the same entry");
	CHECK(!strcmp(after[0], first[100]), "after rewinddir + 100 entries got '%s', first pass had '%s'", after[0],
	      first[100]);
	/* rewinddir shows the directory as it is now: not an entry removed
	 * after the stream read past it into its batch (dirstream.c). */
	kura_rewinddir(d);
	for (int i = 0; i < 3; i++)
		kura_readdir(d, &e);
	snprintf(p, sizeof p, "/rd/%s", first[3]);
	EXPECT(kura_unlink(fs, p), 0);
	kura_rewinddir(d);
	int gone_seen = 0, listed = 0;
	while (kura_readdir(d, &e) == 1) {
		gone_seen += !strcmp(e.name, first[3]);
		listed++;
	}
	CHECK(!gone_seen && listed == N + 1, "after an unlink and rewinddir: '%s' listed %d times, %d entries", first[3],
	      gone_seen, listed);
	EXPECT(kura_mknod(fs, p, S_IFREG | 0644, 0), 0);
	/* next_cookie resumes right after its entry. */
	kura_rewinddir(d);
	uint64_t cookie = 0;
	for (int i = 0; i < 300; i++) {
		kura_readdir(d, &e);
		if (i == 199)
			cookie = e.next_cookie;
	}
	kura_seekdir(d, (long)cookie);
	CHECK(kura_readdir(d, &e) == 1 && !strcmp(e.name, first[200]), "seekdir(next_cookie of #199) gave '%s', want '%s'",
	      e.name, first[200]);
	/* A cookie taken then used on a fresh handle works too. */
	kura_closedir(d);
	d = kura_opendir(fs, "/rd", &err);
	if (d) {
		kura_seekdir(d, (long)cookie);
		CHECK(kura_readdir(d, &e) == 1 && !strcmp(e.name, first[200]),
		      "cookie on a new handle gave '%s', want '%s'", e.name, first[200]);
		kura_closedir(d);
	}
	free(first);

	/* Stable entries e0..e4999 stay; v<k> entries come and go between
	 * readdir calls.  Every stable entry must appear exactly once and no
	 * name twice. */
	enum { V = 20000 };
	char **names = malloc(N * sizeof *names);
	int *cnt = calloc(N, sizeof *cnt);
	for (int i = 0; i < N; i++) {
		names[i] = malloc(16);
		snprintf(names[i], 16, "e%d", i);
	}
	int nextv = 0, oldestv = 0, vseen = 0, dup_v = 0, bad = 0;
	unsigned char *vcnt = calloc(V, 1);
	for (; nextv < 500; nextv++) {
		snprintf(p, sizeof p, "/rd/v%d", nextv);
		kura_mknod(fs, p, S_IFREG | 0644, 0);
	}
	d = kura_opendir(fs, "/rd", &err);
	if (!CHECK(d != NULL, "opendir /rd: %s", en(err)))
		return;
	int calls = 0, r;
	while ((r = kura_readdir(d, &e)) == 1) {
		if (!strcmp(e.name, ".") || !strcmp(e.name, ".."))
			continue;
		int i = find_name(names, N, e.name);
		if (i >= 0)
			cnt[i]++;
		else if (e.name[0] == 'v') {
			long v = strtol(e.name + 1, NULL, 10);
			if (v >= 0 && v < V && vcnt[v]++)
				dup_v++;
			vseen++;
		} else
			bad++;
		if (++calls % 7 == 0 && nextv + 4 < V) {
			/* Churn: two removals and four additions. */
			for (int k = 0; k < 2 && oldestv < nextv; k++, oldestv++) {
				snprintf(p, sizeof p, "/rd/v%d", oldestv);
				kura_unlink(fs, p);
			}
			for (int k = 0; k < 4; k++, nextv++) {
				snprintf(p, sizeof p, "/rd/v%d", nextv);
				kura_mknod(fs, p, S_IFREG | 0644, 0);
			}
		}
	}
	CHECK(r == 0, "readdir ended with %d (%s)", r, en(r));
	kura_closedir(d);
	int missing = 0, twice = 0, first_missing = -1, first_twice = -1;
	for (int i = 0; i < N; i++) {
		if (cnt[i] == 0 && missing++ == 0)
			first_missing = i;
		if (cnt[i] > 1 && twice++ == 0)
			first_twice = i;
	}
	CHECK(missing == 0, "%d stable entries skipped during churn (first: e%d)", missing, first_missing);
	CHECK(twice == 0, "%d stable entries returned twice during churn (first: e%d)", twice, first_twice);
	CHECK(dup_v == 0, "%d churned entries returned twice", dup_v);
	CHECK(bad == 0, "%d unknown names returned", bad);
	printf("  readdir churn: %d calls, %d churned names seen, %d added, %d removed\n", calls, vseen, nextv - 500,
	       oldestv);

	/* Clean up through a fresh listing: it must hold exactly what's left. */
	d = kura_opendir(fs, "/rd", &err);
	int left = 0;
	while (d && kura_readdir(d, &e) == 1)
		if (strcmp(e.name, ".") && strcmp(e.name, ".."))
			left++;
	if (d)
		kura_closedir(d);
	CHECK(left == N + (nextv - oldestv), "listing after churn has %d entries, expected %d", left,
	      N + (nextv - oldestv));
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/rd/e%d", i);
		kura_unlink(fs, p);
		free(names[i]);
	}
	for (int v = oldestv; v < nextv; v++) {
		snprintf(p, sizeof p, "/rd/v%d", v);
		kura_unlink(fs, p);
	}
	EXPECT(kura_rmdir(fs, "/rd"), 0);
	free(names);
	free(cnt);
	free(vcnt);
}

static void test_big_dir(void)
{
	section = "50k directory";
	enum { N = 50000 };
	char p[64];
	struct stat st;
	struct kura_info i0, i1;
	EXPECT(kura_mkdir(fs, "/big", 0755), 0);
	EXPECT(kura_info(fs, &i0), 0);
	int fails = 0, first = -1;
	long ferr = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int fd = kura_open(fs, p, O_CREAT | O_EXCL | O_WRONLY, 0600);
		if (fd >= 0 && i % 1000 == 0)
			kura_write(fs, fd, p, strlen(p));
		if (fd < 0 && fails++ == 0)
			first = i, ferr = fd;
		if (fd >= 0)
			kura_close(fs, fd);
	}
	CHECK(fails == 0, "%d creates failed (first #%d: %s)", fails, first, en(ferr));
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.files == i0.files + N, "info.files %" PRIu64 " -> %" PRIu64 ", expected +%d", i0.files, i1.files, N);
	remount();
	fails = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int r = kura_stat(fs, p, &st);
		if ((r != 0 || !S_ISREG(st.st_mode) || st.st_size != (i % 1000 ? 0 : (off_t)strlen(p))) && fails++ == 0)
			first = i, ferr = r;
	}
	CHECK(fails == 0, "%d stats wrong (first #%d: %s)", fails, first, en(ferr));
	EXPECT_ERR(kura_stat(fs, "/big/file-9999999", &st), ENOENT);
	int err = 0, n = 0;
	kura_dir *d = kura_opendir(fs, "/big", &err);
	struct kura_dirent e;
	while (d && kura_readdir(d, &e) == 1)
		n++;
	if (d)
		kura_closedir(d);
	CHECK(n == N + 2, "readdir of the big directory: %d entries, expected %d", n, N + 2);
	EXPECT_ERR(kura_rmdir(fs, "/big"), ENOTEMPTY);
	fails = 0;
	for (int i = 0; i < N; i++) {
		snprintf(p, sizeof p, "/big/file-%07d", i);
		int r = kura_unlink(fs, p);
		if (r != 0 && fails++ == 0)
			first = i, ferr = r;
	}
	CHECK(fails == 0, "%d unlinks failed (first #%d: %s)", fails, first, en(ferr));
	n = 0;
	d = kura_opendir(fs, "/big", &err);
	while (d && kura_readdir(d, &e) == 1)
		n++;
	if (d)
		kura_closedir(d);
	CHECK(n == 2, "emptied big directory lists %d entries", n);
	EXPECT(kura_rmdir(fs, "/big"), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(i1.files == i0.files, "info.files %" PRIu64 " after deleting all, was %" PRIu64, i1.files, i0.files);
}

/* ---- big file and space accounting -------------------------------------- */

static void test_big_file(void)
{
	section = "200 MiB file";
	size_t n = 200u << 20;
	uint64_t *w = malloc(n), *r = malloc(n);
	if (!w || !r) {
		printf("FAIL [%s]: out of memory\n", section);
		nfail++;
		free(w);
		free(r);
		return;
	}
	for (size_t i = 0; i < n / 8; i++)
		w[i] = i * 0x9e3779b97f4a7c15ull;
	struct statvfs s0, s1, s2;
	EXPECT(kura_statvfs(fs, &s0), 0);
	int fd = EXPECT_OK(kura_open(fs, "/bigfile", O_CREAT | O_RDWR, 0644));
	EXPECT(kura_pwrite(fs, fd, w, n, 0), (long)n);
	EXPECT(kura_statvfs(fs, &s1), 0);
	uint64_t used = (s0.f_bfree - s1.f_bfree) * s0.f_frsize;
	CHECK(s1.f_bfree < s0.f_bfree && used >= n, "statvfs: %" PRIu64 " bytes accounted for a %zu-byte file",
	      used, n);
	remount();
	fd = EXPECT_OK(kura_open(fs, "/bigfile", O_RDONLY, 0));
	memset(r, 0, n);
	EXPECT(kura_pread(fs, fd, r, n, 0), (long)n);
	CHECK(!memcmp(w, r, n), "200 MiB file reads back different");
	memset(r, 0, n);
	size_t got = 0;
	for (;;) {
		ssize_t k = kura_read(fs, fd, (char *)r + got, 3 << 20);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	CHECK(got == n && !memcmp(w, r, n), "chunked read back: %zu bytes, contents %s", got,
	      memcmp(w, r, n) ? "differ" : "match");
	kura_close(fs, fd);
	EXPECT(kura_unlink(fs, "/bigfile"), 0);
	EXPECT(kura_statvfs(fs, &s2), 0);
	CHECK(s2.f_bfree >= s0.f_bfree - 4 && s2.f_bfree > s1.f_bfree,
	      "statvfs free blocks: %lu before, %lu with the file, %lu after unlink", (unsigned long)s0.f_bfree,
	      (unsigned long)s1.f_bfree, (unsigned long)s2.f_bfree);
	free(w);
	free(r);
}

static void test_statvfs_info(void)
{
	section = "statvfs/info";
	struct statvfs s0, s1, s2;
	struct kura_info i0, i1, i2;
	EXPECT(kura_statvfs(fs, &s0), 0);
	EXPECT(kura_info(fs, &i0), 0);
	CHECK(s0.f_blocks > 0 && s0.f_bfree <= s0.f_blocks && s0.f_bavail <= s0.f_bfree && s0.f_frsize > 0,
	      "statvfs: blocks %lu bfree %lu bavail %lu frsize %lu", (unsigned long)s0.f_blocks,
	      (unsigned long)s0.f_bfree, (unsigned long)s0.f_bavail, (unsigned long)s0.f_frsize);
	CHECK(s0.f_namemax == 255, "f_namemax %lu", (unsigned long)s0.f_namemax);
	CHECK(s0.f_blocks * s0.f_frsize <= POOL_SIZE, "statvfs claims %lu bytes in a %llu-byte pool",
	      (unsigned long)(s0.f_blocks * s0.f_frsize), (unsigned long long)POOL_SIZE);
	CHECK(i0.format_version > 0 && i0.pool_size == POOL_SIZE && i0.block_size > 0 &&
		  i0.blocks_free <= i0.blocks_total && i0.blocks_total * i0.block_size <= i0.pool_size,
	      "info: version %u pool %" PRIu64 " block %" PRIu64 " total %" PRIu64 " free %" PRIu64,
	      i0.format_version, i0.pool_size, i0.block_size, i0.blocks_total, i0.blocks_free);
	CHECK(i0.persist && (!strcmp(i0.persist, "pmem") || !strcmp(i0.persist, "file") || !strcmp(i0.persist, "memory")), "info.persist '%s'",
	      i0.persist ? i0.persist : "(null)");

	static unsigned char b[1 << 20];
	memset(b, 's', sizeof b);
	EXPECT(kura_mkdir(fs, "/sv", 0755), 0);
	EXPECT(create_file("/sv/one", b, sizeof b), 0);
	EXPECT(kura_symlink(fs, "one", "/sv/link"), 0);
	EXPECT(kura_statvfs(fs, &s1), 0);
	EXPECT(kura_info(fs, &i1), 0);
	CHECK(s1.f_bfree + (sizeof b / s0.f_frsize) <= s0.f_bfree,
	      "free blocks %lu -> %lu after writing 1 MiB", (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree);
	CHECK(s0.f_files == 0 || s1.f_ffree < s0.f_ffree, "free inodes %lu -> %lu after creating 3 objects",
	      (unsigned long)s0.f_ffree, (unsigned long)s1.f_ffree);
	CHECK(i1.files == i0.files + 1 && i1.directories == i0.directories + 1 && i1.symlinks == i0.symlinks + 1,
	      "info counts files %" PRIu64 "->%" PRIu64 " dirs %" PRIu64 "->%" PRIu64 " symlinks %" PRIu64 "->%" PRIu64,
	      i0.files, i1.files, i0.directories, i1.directories, i0.symlinks, i1.symlinks);
	CHECK(i1.block_size && i1.blocks_free + sizeof b / i1.block_size <= i0.blocks_free, "info.blocks_free %" PRIu64 " -> %" PRIu64,
	      i0.blocks_free, i1.blocks_free);
	/* Hard links add no file. */
	EXPECT(kura_link(fs, "/sv/one", "/sv/two"), 0);
	EXPECT(kura_info(fs, &i2), 0);
	CHECK(i2.files == i1.files, "info.files %" PRIu64 " -> %" PRIu64 " after link", i1.files, i2.files);
	EXPECT(kura_unlink(fs, "/sv/one"), 0);
	EXPECT(kura_unlink(fs, "/sv/two"), 0);
	EXPECT(kura_unlink(fs, "/sv/link"), 0);
	EXPECT(kura_rmdir(fs, "/sv"), 0);
	EXPECT(kura_statvfs(fs, &s2), 0);
	EXPECT(kura_info(fs, &i2), 0);
	CHECK(s2.f_bfree > s1.f_bfree && s2.f_bfree + 4 >= s0.f_bfree, "free blocks %lu, %lu, then %lu after delete",
	      (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree, (unsigned long)s2.f_bfree);
	CHECK(s0.f_files == 0 || s2.f_ffree == s0.f_ffree, "free inodes %lu -> %lu after deleting everything",
	      (unsigned long)s0.f_ffree, (unsigned long)s2.f_ffree);
	CHECK(i2.files == i0.files && i2.directories == i0.directories && i2.symlinks == i0.symlinks,
	      "info counts did not return: files %" PRIu64 " dirs %" PRIu64 " symlinks %" PRIu64, i2.files,
	      i2.directories, i2.symlinks);
}

/* ---- mount options ------------------------------------------------------ */

static void test_read_only(void)
{
	section = "read-only mount";
	EXPECT(create_file("/ro-file", "data", 4), 0);
	EXPECT(kura_mkdir(fs, "/ro-dir", 0755), 0);
	EXPECT(kura_unmount(fs), 0);
	struct kura_mount_opts o = {.read_only = 1};
	int err = 0;
	fs = kura_mount(pool, &o, &err);
	if (!CHECK(fs != NULL, "read-only mount failed: %s (%s)", en(err), kura_last_error())) {
		mount_rw();
		return;
	}
	char b[8];
	struct stat st;
	int fd = EXPECT_OK(kura_open(fs, "/ro-file", O_RDONLY, 0));
	if (fd >= 0) {
		EXPECT(kura_read(fs, fd, b, sizeof b), 4);
		EXPECT_ERR(kura_write(fs, fd, "x", 1), EBADF);
		EXPECT_ERR(kura_fchmod(fs, fd, 0600), EROFS);
		kura_close(fs, fd);
	}
	EXPECT(kura_stat(fs, "/ro-file", &st), 0);
	EXPECT_ERR(kura_open(fs, "/ro-file", O_WRONLY, 0), EROFS);
	EXPECT_ERR(kura_open(fs, "/ro-file", O_RDWR, 0), EROFS);
	EXPECT_ERR(kura_open(fs, "/ro-new", O_CREAT | O_WRONLY, 0644), EROFS);
	EXPECT_ERR(kura_mkdir(fs, "/ro-new", 0755), EROFS);
	EXPECT_ERR(kura_rmdir(fs, "/ro-dir"), EROFS);
	EXPECT_ERR(kura_unlink(fs, "/ro-file"), EROFS);
	EXPECT_ERR(kura_rename(fs, "/ro-file", "/ro-2", 0), EROFS);
	EXPECT_ERR(kura_link(fs, "/ro-file", "/ro-2"), EROFS);
	EXPECT_ERR(kura_symlink(fs, "x", "/ro-2"), EROFS);
	EXPECT_ERR(kura_chmod(fs, "/ro-file", 0600), EROFS);
	EXPECT_ERR(kura_truncate(fs, "/ro-file", 0), EROFS);
	EXPECT_ERR(kura_mknod(fs, "/ro-2", S_IFREG | 0644, 0), EROFS);
	EXPECT_ERR(kura_utimens(fs, "/ro-file", NULL, 0), EROFS);
	EXPECT(kura_unmount(fs), 0);
	mount_rw();
	EXPECT(kura_stat(fs, "/ro-file", &st), 0);
	CHECK(st.st_size == 4, "file changed by read-only mount: size %lld", (long long)st.st_size);
	EXPECT(kura_unlink(fs, "/ro-file"), 0);
	EXPECT(kura_rmdir(fs, "/ro-dir"), 0);
}

static void quiet(void *ctx, const char *line)
{
	(void)ctx, (void)line;
}

static void test_pool_errors(void)
{
	section = "pool errors";
	int err = 0;
	/* mkfs refuses a non-empty existing file without force. */
	EXPECT_ERR(kura_mkfs(pool, POOL_SIZE, 0), EEXIST);
	char bad[300];
	snprintf(bad, sizeof bad, "%s.missing", pool);
	kura_fs *f = kura_mount(bad, NULL, &err);
	CHECK(!f && err < 0, "mount of a missing pool: %p err %d", (void *)f, err);
	const char *why = kura_last_error();
	CHECK(why && strstr(why, bad), "kura_last_error does not name the pool: '%s'", why ? why : "(null)");
	snprintf(bad, sizeof bad, "%s.garbage", pool);
	FILE *g = fopen(bad, "w");
	if (g) {
		for (int i = 0; i < (8 << 20) / 16; i++)
			fputs("not a kura pool\n", g);
		fclose(g);
		err = 0;
		f = kura_mount(bad, NULL, &err);
		CHECK(!f && err < 0, "mount of a garbage file: %p err %d", (void *)f, err);
		if (f)
			kura_unmount(f);
		CHECK(kura_fsck(bad, 0, quiet, NULL) != 0, "fsck of a garbage file reports nothing");
		unlink(bad);
	}
	EXPECT_ERR(kura_mkfs(bad, KURA_MIN_POOL_SIZE - 4096, 0), EINVAL);
	unlink(bad);
}

static void fsck_line(void *ctx, const char *line);

/* A small pool filled to the brim: ENOSPC, no partial state, space back. */
static void test_full_pool(void)
{
	section = "full pool";
	char small[300];
	snprintf(small, sizeof small, "%s.small", pool);
	if (EXPECT(kura_mkfs(small, 8u << 20, 1), 0) < 0)
		return;
	int err = 0;
	kura_fs *f = kura_mount(small, NULL, &err);
	if (!CHECK(f != NULL, "mount small pool: %s", en(err))) {
		unlink(small);
		return;
	}
	struct statvfs s0, s1;
	EXPECT(kura_statvfs(f, &s0), 0);
	static unsigned char chunk[64 << 10];
	int fd = EXPECT_OK(kura_open(f, "/fill", O_CREAT | O_RDWR, 0644));
	uint64_t total = 0;
	long last = 0;
	for (int i = 0; i < 1000; i++) {
		memset(chunk, (int)(i % 251) + 1, sizeof chunk);
		last = kura_write(f, fd, chunk, sizeof chunk);
		if (last > 0)
			total += (uint64_t)last;
		if (last != (long)sizeof chunk)
			break;
	}
	/* A write may come up short once space runs out; the next one fails. */
	if (last >= 0)
		last = kura_write(f, fd, chunk, sizeof chunk);
	CHECK(last == -ENOSPC, "filling an 8 MiB pool ended with %ld (%s), expected ENOSPC", last, en(last));
	struct stat st;
	EXPECT(kura_fstat(f, fd, &st), 0);
	CHECK((uint64_t)st.st_size == total, "size %lld after writes that returned %" PRIu64 " bytes in all",
	      (long long)st.st_size, total);
	int bad = 0;
	for (uint64_t off = 0; off < total; off += sizeof chunk) {
		size_t n = total - off < sizeof chunk ? (size_t)(total - off) : sizeof chunk;
		if (kura_pread(f, fd, chunk, n, (off_t)off) != (ssize_t)n ||
		    !all_bytes(chunk, n, (unsigned char)((off / sizeof chunk) % 251 + 1)))
			bad++;
	}
	CHECK(bad == 0, "%d chunks of the full file read back wrong", bad);
	long r = kura_mkdir(f, "/more", 0755);
	CHECK(r == 0 || r == -ENOSPC, "mkdir on a full pool: %ld (%s)", r, en(r));
	kura_close(f, fd);
	EXPECT(kura_unlink(f, "/fill"), 0);
	EXPECT(kura_statvfs(f, &s1), 0);
	CHECK(s1.f_bfree + 4 >= s0.f_bfree, "free blocks %lu before filling, %lu after deleting",
	      (unsigned long)s0.f_bfree, (unsigned long)s1.f_bfree);
	/* The space is usable again. */
	fd = EXPECT_OK(kura_open(f, "/again", O_CREAT | O_RDWR, 0644));
	uint64_t again = 0;
	while (again < total && kura_write(f, fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk)
		again += sizeof chunk;
	CHECK(again + sizeof chunk >= total, "after freeing, only %" PRIu64 " of %" PRIu64 " bytes fit again", again,
	      total);
	kura_close(f, fd);
	EXPECT(kura_unmount(f), 0);
	EXPECT(kura_fsck(small, 0, fsck_line, NULL), 0);
	unlink(small);
}

/* ---- host prefix -------------------------------------------------------- */

/* The call must end in KURA_ESCAPED, leaving the host path `want`. */
#define EXPECT_ESCAPE(expr, want)                                                          \
	do {                                                                               \
		if (EXPECT(expr, KURA_ESCAPED) == KURA_ESCAPED)                            \
			CHECK(!strcmp(kura_escaped_path(), want), "escaped to '%s', want '%s'", \
			      kura_escaped_path(), want);                                    \
	} while (0)

static int mount_prefix(const char *prefix)
{
	EXPECT(kura_unmount(fs), 0);
	struct kura_mount_opts o = {.host_prefix = prefix};
	int err = 0;
	fs = kura_mount(pool, &o, &err);
	if (!CHECK(fs != NULL, "mount with host_prefix %s: %s (%s)", prefix, en(err), kura_last_error())) {
		mount_rw();
		return -1;
	}
	return 0;
}

static void test_host_prefix(void)
{
	section = "host prefix";
	struct stat st, root;
	char buf[64];
	EXPECT(kura_mkdir(fs, "/hp", 0755), 0);
	EXPECT(kura_mkdir(fs, "/hp/d", 0755), 0);
	EXPECT(create_file("/hp/x", "hello", 5), 0);
	EXPECT(kura_symlink(fs, "/kura/hp/x", "/hp/in"), 0);
	EXPECT(kura_symlink(fs, "/hp/x", "/hp/abs"), 0);
	EXPECT(kura_symlink(fs, "../../hp/x", "/hp/d/in2"), 0);
	EXPECT(kura_symlink(fs, "../../../hp/x", "/hp/d/up"), 0);
	EXPECT(kura_symlink(fs, "/kura", "/hp/top"), 0);
	EXPECT(kura_symlink(fs, "/kura/", "/hp/top2"), 0);
	EXPECT(kura_symlink(fs, "/kurax/y", "/hp/alike"), 0);
	EXPECT(kura_symlink(fs, "/tmp", "/hp/out"), 0);
	EXPECT(kura_symlink(fs, "/kura/hp/d/up", "/hp/chain"), 0);
	EXPECT(kura_symlink(fs, "../../../../x", "/hp/d/far"), 0);
	EXPECT(kura_symlink(fs, "../../kura/hp/loop", "/hp/loop"), 0);
	EXPECT(kura_symlink(fs, "d/..", "/hp/dd"), 0);

	/* Off (the default): pool-rooted, as before the option existed. */
	EXPECT_ERR(kura_stat(fs, "/hp/in", &st), ENOENT);
	EXPECT(kura_stat(fs, "/hp/abs", &st), 0);
	EXPECT(kura_stat(fs, "/hp/d/up", &st), 0); /* ".." at the root stays there */
	CHECK(S_ISREG(st.st_mode) && st.st_size == 5, "off: ../../hp/x mode %o", st.st_mode);
	EXPECT_ERR(kura_stat(fs, "/hp/out/x", &st), ENOENT);
	EXPECT_ERR(kura_stat(fs, "/hp/d/far", &st), ENOENT);
	EXPECT_ERR(kura_stat(fs, "/hp/loop", &st), ENOENT);

	/* On, with a trailing slash to be ignored. */
	if (mount_prefix("/kura/"))
		return;
	EXPECT(kura_stat(fs, "/", &root), 0);
	EXPECT(kura_stat(fs, "/hp/in", &st), 0);
	CHECK(S_ISREG(st.st_mode) && st.st_size == 5, "on: /kura/hp/x mode %o size %lld", st.st_mode,
	      (long long)st.st_size);
	EXPECT(kura_stat(fs, "/hp/top", &st), 0);
	CHECK(st.st_ino == root.st_ino, "/kura is the root: ino %llu, root %llu", (unsigned long long)st.st_ino,
	      (unsigned long long)root.st_ino);
	EXPECT(kura_stat(fs, "/hp/top/hp/x", &st), 0);
	EXPECT(kura_stat(fs, "/hp/top2/hp/x", &st), 0);
	EXPECT_ESCAPE(kura_stat(fs, "/hp/chain", &st), "/hp/x");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/abs", &st), "/hp/x");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/alike", &st), "/kurax/y");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/d/up", &st), "/hp/x");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/d/far", &st), "/../x"); /* the rest as it stands */
	EXPECT(kura_stat(fs, "/hp/d/in2", &st), 0);
	EXPECT_ESCAPE(kura_stat(fs, "/hp/out/a/b", &st), "/tmp/a/b");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/out/", &st), "/tmp/");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/out", &st), "/tmp");
	/* A ".." of the caller's own path above the root leaves the pool as
	 * one from a target does (the root's parent is the prefix's); one from
	 * a target below the root does not. */
	EXPECT_ESCAPE(kura_stat(fs, "/../hp/x", &st), "/hp/x");
	EXPECT(kura_stat(fs, "/hp/dd/x", &st), 0);
	/* What does not follow the link sees it, and readlink its text. */
	EXPECT(kura_lstat(fs, "/hp/abs", &st), 0);
	CHECK(S_ISLNK(st.st_mode) && st.st_size == 5, "lstat of escaping link: mode %o", st.st_mode);
	EXPECT(kura_readlink(fs, "/hp/in", buf, sizeof buf), 10);
	CHECK(!memcmp(buf, "/kura/hp/x", 10), "readlink: '%.10s'", buf);
	EXPECT_ESCAPE(kura_readlink(fs, "/hp/out/l", buf, sizeof buf), "/tmp/l");
	/* Every path call escapes, and changes nothing in the pool. */
	EXPECT_ESCAPE(kura_open(fs, "/hp/out/new", O_CREAT | O_WRONLY, 0644), "/tmp/new");
	EXPECT_ESCAPE(kura_mkdir(fs, "/hp/out/nd", 0755), "/tmp/nd");
	EXPECT_ESCAPE(kura_unlink(fs, "/hp/out/f"), "/tmp/f");
	EXPECT_ESCAPE(kura_rename(fs, "/hp/x", "/hp/out/y", 0), "/tmp/y");
	EXPECT_ESCAPE(kura_link(fs, "/hp/x", "/hp/out/y"), "/tmp/y");
	EXPECT_ESCAPE(kura_symlink(fs, "t", "/hp/out/s"), "/tmp/s");
	EXPECT_ESCAPE(kura_chmod(fs, "/hp/abs", 0600), "/hp/x");
	EXPECT_ESCAPE(kura_truncate(fs, "/hp/abs", 0), "/hp/x");
	int err = 0;
	kura_dir *dp = kura_opendir(fs, "/hp/out", &err);
	CHECK(!dp && err == KURA_ESCAPED, "opendir through an escaping link: %p err %d", (void *)dp, err);
	EXPECT(kura_open(fs, "/hp/abs", O_RDONLY | O_NOFOLLOW, 0), -ELOOP);
	EXPECT(kura_stat(fs, "/hp/x", &st), 0);
	CHECK(st.st_size == 5 && (st.st_mode & 07777) == 0644, "escaped calls changed /hp/x: size %lld mode %o",
	      (long long)st.st_size, st.st_mode & 07777);
	EXPECT_ERR(kura_lstat(fs, "/hp/y", &st), ENOENT);
	/* A loop through the host is the caller's to count: each walk ends. */
	EXPECT_ESCAPE(kura_stat(fs, "/hp/loop", &st), "/kura/hp/loop");
	/* Too long to hand back. */
	char longp[PATH_MAX];
	memset(longp, 'b', 3001);
	longp[0] = '/';
	longp[3001] = 0;
	EXPECT(kura_symlink(fs, longp, "/hp/longl"), 0);
	memset(longp, 'a', 2000);
	memcpy(longp, "/hp/longl/", 10);
	for (size_t i = 100; i < 2000; i += 100)
		longp[i] = '/';
	longp[2000] = 0;
	EXPECT_ERR(kura_stat(fs, longp, &st), ENAMETOOLONG);

	/* A prefix with a parent other than "/": ".." above the root goes there. */
	if (mount_prefix("/mnt/pools/kura"))
		return;
	EXPECT_ESCAPE(kura_stat(fs, "/hp/d/up", &st), "/mnt/pools/hp/x");
	EXPECT_ESCAPE(kura_stat(fs, "/hp/in", &st), "/kura/hp/x");
	/* Off again after a kura_set_host_prefix(NULL); a relative prefix is refused. */
	EXPECT_ERR(kura_set_host_prefix(fs, "kura"), EINVAL);
	EXPECT(kura_set_host_prefix(fs, NULL), 0);
	EXPECT_ERR(kura_stat(fs, "/hp/in", &st), ENOENT);
	EXPECT(kura_stat(fs, "/hp/abs", &st), 0);
	EXPECT(kura_set_host_prefix(fs, "/kura"), 0);
	EXPECT(kura_stat(fs, "/hp/in", &st), 0);
	EXPECT(kura_unmount(fs), 0);
	struct kura_mount_opts bad = {.host_prefix = "rel"};
	fs = kura_mount(pool, &bad, &err);
	CHECK(!fs && err == -EINVAL, "mount with a relative host_prefix: %p %s", (void *)fs, en(err));
	if (fs)
		kura_unmount(fs);
	mount_rw();
	EXPECT_ERR(kura_stat(fs, "/hp/in", &st), ENOENT);
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("  fsck: %s\n", line);
}

/* kura_fstatat_gen: one generation per inode for its life; a reused
 * inode number comes with another. */
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

int main(void)
{
	snprintf(pool, sizeof pool, "/dev/shm/kura-api-%d.pool", (int)getpid());
	int r = kura_mkfs(pool, POOL_SIZE, 1);
	if (r < 0) {
		printf("FATAL: kura_mkfs(%s): %s (%s)\n", pool, en(r), kura_last_error());
		return 1;
	}
	mount_rw();
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
	    {"name errors", test_name_errors},     {"symlinks", test_symlinks},
	    {"trailing slash", test_trailing_slash}, {"descriptors", test_descriptors},
	    {"append", test_append},
	    {"sparse/truncate", test_sparse_truncate}, {"unlink while open", test_unlink_open},
	    {"statvfs/info", test_statvfs_info},   {"readdir cookies", test_readdir_cookies},
	    {"50k directory", test_big_dir},       {"200 MiB file", test_big_file},
	    {"read-only mount", test_read_only},   {"pool errors", test_pool_errors},
	    {"full pool", test_full_pool},         {"reopen/O_TMPFILE", test_reopen_tmpfile},
	    {"host prefix", test_host_prefix},     {"generation", test_generation},
	};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		int f0 = nfail;
		tests[i].fn();
		printf("%-20s %s\n", tests[i].name, nfail == f0 ? "ok" : "FAILED");
		fflush(stdout);
	}
	section = "final fsck";
	EXPECT(kura_unmount(fs), 0);
	EXPECT(kura_fsck(pool, 0, fsck_line, NULL), 0);
	unlink(pool);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
