/*
 * File system calls made through syscall(SYS_x, ...) rather than by name,
 * as GNU patch (SYS_renameat2) and others do.  Usage: rawcalls BASE.
 * Prints what each call saw; the output on tmpfs and under kura must agree.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

static void show(const char *what, long r)
{
	if (r < 0)
		printf("%s: -1 %s\n", what, strerrorname_np(errno));
	else
		printf("%s: %ld\n", what, r);
}

struct dirent64_raw {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list(const char *dir)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	show("openat dir", fd >= 0 ? 0 : -1);
	char buf[4096], *names[64];
	int n = 0;
	long got;
	while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
		for (long at = 0; at < got;) {
			struct dirent64_raw *d = (void *)(buf + at);
			if (n < 64)
				names[n++] = strdup(d->d_name);
			at += d->d_reclen;
		}
	show("getdents64 end", got);
	qsort(names, (size_t)n, sizeof *names, by_name);
	for (int i = 0; i < n; i++) {
		printf("  %s\n", names[i]);
		free(names[i]);
	}
	syscall(SYS_close, fd);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	const char *base = argv[1];
	if (chdir(base))
		return 1;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "a", O_CREAT | O_RDWR | O_CLOEXEC, 0640);
	show("openat create", fd >= 0 ? 0 : -1);
	show("write", syscall(SYS_write, fd, "hello, raw\n", 11));
	struct iovec iov[2] = { { "two ", 4 }, { "parts\n", 6 } };
	show("pwritev", syscall(SYS_pwritev, fd, iov, 2, 11, 0));
	char buf[64] = { 0 };
	show("pread64", syscall(SYS_pread64, fd, buf, sizeof buf - 1, 0));
	printf("  %s", buf);
	show("lseek", syscall(SYS_lseek, fd, 0, SEEK_END));
	struct stat st;
	show("fstat", syscall(SYS_fstat, fd, &st));
	printf("  size %lld mode %o nlink %lu\n", (long long)st.st_size, st.st_mode & 07777, (unsigned long)st.st_nlink);
	show("ftruncate", syscall(SYS_ftruncate, fd, 5));
	show("fsync", syscall(SYS_fsync, fd));
	show("fcntl F_GETFL", syscall(SYS_fcntl, fd, F_GETFL) & O_ACCMODE);
	show("close", syscall(SYS_close, fd));
	show("newfstatat", syscall(SYS_newfstatat, AT_FDCWD, "a", &st, 0));
	printf("  size %lld\n", (long long)st.st_size);

	show("mkdirat", syscall(SYS_mkdirat, AT_FDCWD, "d", 0755));
	show("mkdir again", syscall(SYS_mkdir, "d", 0755));
	show("renameat2 noreplace", syscall(SYS_renameat2, AT_FDCWD, "a", AT_FDCWD, "d", RENAME_NOREPLACE));
	show("renameat2", syscall(SYS_renameat2, AT_FDCWD, "a", AT_FDCWD, "d/b", 0));
	show("stat old name", syscall(SYS_stat, "a", &st));
	show("symlinkat", syscall(SYS_symlinkat, "d/b", AT_FDCWD, "l"));
	char link[64] = { 0 };
	show("readlinkat", syscall(SYS_readlinkat, AT_FDCWD, "l", link, sizeof link - 1));
	printf("  %s\n", link);
	show("linkat", syscall(SYS_linkat, AT_FDCWD, "d/b", AT_FDCWD, "hard", 0));
	show("fchmodat", syscall(SYS_fchmodat, AT_FDCWD, "hard", 0600));
	show("lstat", syscall(SYS_lstat, "hard", &st));
	printf("  mode %o nlink %lu\n", st.st_mode & 07777, (unsigned long)st.st_nlink);
	show("faccessat", syscall(SYS_faccessat, AT_FDCWD, "hard", R_OK));
	show("utimensat, no path, no descriptor", syscall(SYS_utimensat, AT_FDCWD, NULL, NULL, 0));
	fd = (int)syscall(SYS_open, "hard", O_RDONLY | O_CLOEXEC);
	show("utimensat on the descriptor", syscall(SYS_utimensat, fd, NULL, NULL, 0));
	show("utimensat on it with flags", syscall(SYS_utimensat, fd, NULL, NULL, AT_SYMLINK_NOFOLLOW));
	syscall(SYS_close, fd);
	list(".");

	char cwd[4096];
	long len = syscall(SYS_getcwd, cwd, sizeof cwd);
	printf("getcwd: %s (%s)\n", len == (long)strlen(cwd) + 1 ? "length with its NUL" : "wrong length",
	       strcmp(cwd, base) ? "elsewhere" : "the base");
	show("getcwd too small", syscall(SYS_getcwd, cwd, 2));
	show("chdir", syscall(SYS_chdir, "d"));
	show("open relative", syscall(SYS_open, "b", O_RDONLY | O_CLOEXEC) >= 0 ? 0 : -1);
	show("chdir back", syscall(SYS_chdir, ".."));

	show("unlinkat", syscall(SYS_unlinkat, AT_FDCWD, "hard", 0));
	show("unlinkat dir not empty", syscall(SYS_unlinkat, AT_FDCWD, "d", AT_REMOVEDIR));
	show("unlink", syscall(SYS_unlink, "d/b"));
	show("rmdir", syscall(SYS_rmdir, "d"));
	show("rmdir empty path", syscall(SYS_rmdir, ""));
	show("unlink dangling link", syscall(SYS_unlink, "l"));
	list(".");
	/* A number the file system does not serve passes through. */
	show("getpid matches", syscall(SYS_getpid) == getpid() ? 0 : -1);
	return 0;
}
