/*
 * paths.h — api_test's checks of how a path resolves: name errors,
 * symlinks, trailing slashes, and the host prefix through which a link
 * leaves the pool.  Included once, by api_test.c (api/common.h says why).
 */
#ifndef API_PATHS_H
#define API_PATHS_H

#include "api/common.h"

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

#endif
