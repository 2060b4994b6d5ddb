/* glibc's second names of the calls (__open, __read, __write, ...), which
 * older binaries link against, and ftok and isfdtype, which stat inside
 * libc: on a file of the directory argv[1].  test_preload.py compares the
 * output on tmpfs and on kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

extern int __open(const char *path, int flags, ...);
extern int __open64(const char *path, int flags, ...);
extern ssize_t __read(int fd, void *buf, size_t n);
extern ssize_t __write(int fd, const void *buf, size_t n);
extern ssize_t __pread64(int fd, void *buf, size_t n, off_t off);
extern ssize_t __pwrite64(int fd, const void *buf, size_t n, off_t off);
extern off_t __lseek(int fd, off_t off, int whence);
extern int __fcntl(int fd, int cmd, ...);
extern int __dup2(int old, int new);
extern int __statfs(const char *path, struct statfs *sf);

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: libc_names DIR\n");
		return 2;
	}
	char path[PATH_MAX], other[PATH_MAX], buf[32] = "";
	snprintf(path, sizeof path, "%s/f", argv[1]);
	snprintf(other, sizeof other, "%s/g", argv[1]);
	int fd = __open(path, O_RDWR | O_CREAT | O_EXCL, 0640);
	printf("__open: %s\n", fd >= 0 ? "ok" : strerror(errno));
	printf("__write: %zd\n", __write(fd, "0123456789", 10));
	printf("__pwrite64: %zd\n", __pwrite64(fd, "AB", 2, 4));
	printf("__lseek: %lld\n", (long long)__lseek(fd, 2, SEEK_SET));
	printf("__read: %zd %.6s\n", __read(fd, buf, 6), buf);
	memset(buf, 0, sizeof buf);
	printf("__pread64: %zd %.4s\n", __pread64(fd, buf, 4, 3), buf);
	printf("__fcntl O_ACCMODE: %d\n", (__fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
	int two = __dup2(fd, 100);
	memset(buf, 0, sizeof buf);
	printf("__dup2: %d, reads %zd %.3s\n", two, pread(two, buf, 3, 0), buf);
	struct stat st;
	fstat(fd, &st);
	printf("size %lld mode %o\n", (long long)st.st_size, st.st_mode & 07777);
	struct statfs sf;
	printf("__statfs: %d\n", __statfs(path, &sf));
	int ro = __open64(path, O_RDONLY);
	printf("__open64: %zd\n", ro >= 0 ? read(ro, buf, 10) : -1);
	printf("isfdtype regular: %d, directory: %d\n", isfdtype(fd, S_IFREG), isfdtype(fd, S_IFDIR));
	int d = open(argv[1], O_RDONLY | O_DIRECTORY);
	printf("isfdtype of the directory, directory: %d\n", isfdtype(d, S_IFDIR));
	close(__open(other, O_WRONLY | O_CREAT, 0600));
	key_t k1 = ftok(path, 7), k2 = ftok(path, 7), k3 = ftok(path, 8), k4 = ftok(other, 7);
	printf("ftok: %s, stable %d, by project %d, by file %d\n", k1 == (key_t)-1 ? strerror(errno) : "ok", k1 == k2,
	       k1 != k3, k1 != k4);
	snprintf(other, sizeof other, "%s/missing", argv[1]);
	key_t missing = ftok(other, 1);
	printf("ftok of a missing file: %d %s\n", missing, strerror(errno));
	return 0;
}
