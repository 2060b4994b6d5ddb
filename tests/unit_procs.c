/*
 * unit_procs.c — the API the interposition layer builds on: *at calls
 * relative to directory descriptors, kura_getpath, and open file
 * descriptions shared across fork() and handed over across exec().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kura.h"

#include "check.h"

static char pool[128];

static void test_at_calls(kura_fs *fs)
{
	CHECK(kura_mkdir(fs, "/a", 0755) == 0, "mkdir /a");
	int a = kura_open(fs, "/a", O_RDONLY | O_DIRECTORY, 0);
	CHECK(a >= 0, "open /a: %d", a);
	CHECK(kura_mkdirat(fs, a, "b", 0755) == 0, "mkdirat a/b");
	int f = kura_openat(fs, a, "b/file", O_CREAT | O_RDWR, 0644);
	CHECK(f >= 0, "openat a/b/file: %d", f);
	CHECK(kura_write(fs, f, "hello", 5) == 5, "write");
	struct stat st;
	CHECK(kura_fstatat(fs, a, "b/file", &st, 0) == 0 && st.st_size == 5, "fstatat through dirfd");
	CHECK(kura_fstatat(fs, f, "", &st, AT_EMPTY_PATH) == 0 && st.st_size == 5, "fstatat AT_EMPTY_PATH");
	CHECK(kura_openat(fs, f, "x", O_RDONLY, 0) == -ENOTDIR, "openat relative to a file: ENOTDIR");
	CHECK(kura_openat(fs, 9999, "x", O_RDONLY, 0) == -EBADF, "openat with a bad dirfd: EBADF");
	CHECK(kura_openat(fs, 9999, "/a/b/file", O_RDONLY, 0) >= 0, "an absolute path ignores dirfd");
	CHECK(kura_symlinkat(fs, "file", a, "b/link") == 0, "symlinkat");
	char t[16];
	CHECK(kura_readlinkat(fs, a, "b/link", t, sizeof t) == 4 && !memcmp(t, "file", 4), "readlinkat");
	CHECK(kura_linkat(fs, a, "b/file", a, "hard", 0) == 0, "linkat");
	CHECK(kura_renameat2(fs, a, "hard", KURA_AT_ROOT, "/moved", 0) == 0, "renameat2 across dirfds");
	CHECK(kura_unlinkat(fs, KURA_AT_ROOT, "/moved", 0) == 0, "unlinkat");
	CHECK(kura_unlinkat(fs, a, "b", AT_REMOVEDIR) == -ENOTEMPTY, "unlinkat AT_REMOVEDIR of a full dir");
	CHECK(kura_fchmodat(fs, a, "b/file", 0600, 0) == 0, "fchmodat");
	CHECK(kura_faccessat(fs, a, "b/file", R_OK, 0) == 0, "faccessat");
	/* chattr: kura keeps no flag, so setting none works and each flag
	 * tmpfs keeps is refused rather than ignored. */
	int ff = kura_openat(fs, a, "b/file", O_RDONLY, 0);
	CHECK(ff >= 0 && kura_fsetflags(fs, ff, 0) == 0, "fsetflags with no flag");
	static const unsigned kept_by_tmpfs[] = { FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NODUMP_FL, FS_NOATIME_FL };
	for (size_t i = 0; i < sizeof kept_by_tmpfs / sizeof *kept_by_tmpfs; i++)
		CHECK(kura_fsetflags(fs, ff, kept_by_tmpfs[i]) == -EOPNOTSUPP, "fsetflags %#x", kept_by_tmpfs[i]);
	kura_close(fs, ff);
	CHECK(kura_fsetflags(fs, ff, 0) == -EBADF, "fsetflags on a closed descriptor");

	/* getpath follows renames of the directory and of its ancestors */
	int b = kura_openat(fs, a, "b", O_RDONLY | O_DIRECTORY, 0);
	char path[256];
	CHECK(kura_getpath(fs, b, path, sizeof path) == 0 && !strcmp(path, "/a/b"), "getpath %s", path);
	CHECK(kura_rename(fs, "/a", "/z", 0) == 0, "rename /a");
	CHECK(kura_getpath(fs, b, path, sizeof path) == 0 && !strcmp(path, "/z/b"), "getpath after rename: %s", path);
	/* the names getpath found before are only hints (files.c): a directory
	 * that took b's old name meanwhile is not b */
	CHECK(kura_rename(fs, "/z/b", "/z/c", 0) == 0 && kura_mkdir(fs, "/z/b", 0755) == 0,
	      "rename /z/b to /z/c, a new /z/b");
	CHECK(kura_getpath(fs, b, path, sizeof path) == 0 && !strcmp(path, "/z/c"), "getpath after its name was taken: %s",
	      path);
	int nb = kura_open(fs, "/z/b", O_RDONLY | O_DIRECTORY, 0);
	CHECK(nb >= 0 && kura_getpath(fs, nb, path, sizeof path) == 0 && !strcmp(path, "/z/b"), "getpath of the new /z/b: %s",
	      path);
	kura_close(fs, nb);
	CHECK(kura_getpath(fs, b, path, 3) == -ERANGE, "getpath with a short buffer");
	CHECK(kura_getpath(fs, f, path, sizeof path) == -ENOTDIR, "getpath of a file");
	int r = kura_open(fs, "/", O_RDONLY, 0);
	CHECK(kura_getpath(fs, r, path, sizeof path) == 0 && !strcmp(path, "/"), "getpath of the root: %s", path);
	CHECK(kura_getpath(fs, r, path, 1) == -ERANGE, "getpath of the root into one byte");

	/* deeper than PATH_MAX, as a Linux cwd may be: whatever fits the buffer */
	char name[201];
	memset(name, 'd', 200);
	name[200] = 0;
	int deep = kura_open(fs, "/", O_RDONLY, 0);
	for (int i = 0; i < 25 && deep >= 0; i++) {
		kura_mkdirat(fs, deep, name, 0755);
		int next = kura_openat(fs, deep, name, O_RDONLY | O_DIRECTORY, 0);
		kura_close(fs, deep);
		deep = next;
	}
	static char big[25 * 201 + 1];
	CHECK(deep >= 0 && kura_getpath(fs, deep, big, sizeof big) == 0 && strlen(big) == 25 * 201 &&
		      big[0] == '/' && !strncmp(big + 1, name, 200),
	      "getpath of a directory %d bytes deep: %zu", 25 * 201, strlen(big));
	CHECK(kura_getpath(fs, deep, big, sizeof big - 1) == -ERANGE, "getpath one byte short");
	CHECK(kura_getpath(fs, deep, path, sizeof path) == -ERANGE, "getpath of it into 256 bytes");
	kura_close(fs, deep);

	/* a removed directory: no new names, and no path */
	CHECK(kura_mkdir(fs, "/gone", 0755) == 0, "mkdir /gone");
	int g = kura_open(fs, "/gone", O_RDONLY, 0);
	CHECK(kura_rmdir(fs, "/gone") == 0, "rmdir while open");
	CHECK(kura_openat(fs, g, "new", O_CREAT | O_WRONLY, 0644) == -ENOENT, "create in a removed dir");
	CHECK(kura_getpath(fs, g, path, sizeof path) == -ENOENT, "getpath of a removed dir");
	kura_dir *d = kura_fdopendir(fs, b, NULL);
	struct kura_dirent e;
	int names = 0;
	while (d && kura_readdir(d, &e) == 1)
		names++;
	CHECK(d && names == 4, "fdopendir lists . .. file link: %d", names);
	CHECK(d && kura_dirfd(d) == b, "dirfd");
	if (d)
		kura_closedir(d);
	kura_close(fs, g);
	kura_close(fs, r);
	kura_close(fs, f);
	kura_close(fs, a);
}

static void test_fork_shares_offsets(kura_fs *fs)
{
	int fd = kura_open(fs, "/shared", O_CREAT | O_RDWR | O_TRUNC, 0644);
	kura_write(fs, fd, "parent", 6);
	kura_fork_prepare(fs);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fork_child(fs);
		/* The child's write moves the one offset both processes share. */
		int ok = kura_write(fs, fd, "child", 5) == 5;
		kura_close(fs, fd);
		_exit(ok ? 0 : 1);
	}
	kura_fork_parent(fs);
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child write");
	CHECK(kura_lseek(fs, fd, 0, SEEK_CUR) == 11, "offset after the child's write: %lld",
	      (long long)kura_lseek(fs, fd, 0, SEEK_CUR));
	CHECK(kura_write(fs, fd, "!", 1) == 1, "parent writes after the child closed its copy");
	char buf[16] = { 0 };
	CHECK(kura_pread(fs, fd, buf, sizeof buf, 0) == 12 && !strcmp(buf, "parentchild!"), "content %s", buf);

	/* An unlinked file lives while a child still holds it. */
	CHECK(kura_unlink(fs, "/shared") == 0, "unlink while open");
	int pipefd[2];
	if (pipe(pipefd))
		return;
	kura_fork_prepare(fs);
	pid = fork();
	if (pid == 0) {
		kura_fork_child(fs);
		char c;
		close(pipefd[1]);
		if (read(pipefd[0], &c, 1) != 1) /* wait for the parent to close */
			_exit(2);
		char b2[16] = { 0 };
		_exit(kura_pread(fs, fd, b2, sizeof b2, 0) == 12 && !strcmp(b2, "parentchild!") ? 0 : 1);
	}
	kura_fork_parent(fs);
	close(pipefd[0]);
	kura_close(fs, fd);
	if (write(pipefd[1], "x", 1) != 1)
		return;
	close(pipefd[1]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child read the unlinked file after the parent closed it");
}

/* Re-executed with: inherit STATEFD ID: adopt the description, append, exit. */
static int inherited_main(const char *state, const char *id)
{
	kura_fs *fs = kura_mount_inherit(pool, NULL, atoi(state), NULL);
	if (!fs)
		return 3;
	int fd = kura_fd_import(fs, atol(id));
	if (fd < 0)
		return 4;
	int ok = kura_write(fs, fd, "exec", 4) == 4;
	kura_unmount(fs);
	return ok ? 0 : 5;
}

static void test_exec_handover(kura_fs *fs, const char *self)
{
	int fd = kura_open(fs, "/handed", O_CREAT | O_RDWR | O_TRUNC, 0644);
	kura_write(fs, fd, "pre-", 4);
	long id = kura_fd_export(fs, fd);
	CHECK(id >= 0, "export: %ld", id);
	kura_fork_prepare(fs);
	pid_t pid = fork();
	if (pid == 0) {
		kura_fork_child(fs);
		int sfd = kura_state_fd(fs);
		kura_exec_prepare(fs); /* hand the table over to the new image */
		char s1[16], s2[24];
		snprintf(s1, sizeof s1, "%d", sfd);
		snprintf(s2, sizeof s2, "%ld", id);
		execl(self, self, "inherit", pool, s1, s2, (char *)NULL);
		_exit(6);
	}
	kura_fork_parent(fs);
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exec'd image adopted the descriptor (status %d)",
	      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	CHECK(kura_lseek(fs, fd, 0, SEEK_CUR) == 8, "offset shared across exec: %lld",
	      (long long)kura_lseek(fs, fd, 0, SEEK_CUR));
	kura_close(fs, fd);
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "inherit")) {
		snprintf(pool, sizeof pool, "%s", argv[2]);
		return inherited_main(argv[3], argv[4]);
	}
	snprintf(pool, sizeof pool, "/dev/shm/kura-procs-%d.pool", getpid());
	if (kura_mkfs(pool, 16 << 20, 1)) {
		printf("mkfs: %s\n", kura_last_error());
		return 1;
	}
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	test_at_calls(fs);
	test_fork_shares_offsets(fs);
	test_exec_handover(fs, "/proc/self/exe");
	kura_unmount(fs);
	CHECK(kura_fsck(pool, 0, NULL, NULL) == 0, "fsck at the end");
	unlink(pool);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
