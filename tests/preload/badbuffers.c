/* badbuffers.c — calls given a buffer, a result structure or a vector the
 * program does not have (NULL, a PROT_NONE page, a buffer running into
 * one), one line per call: the kernel answers EFAULT, or copies up to the
 * page it cannot reach; the layer must answer the same, not crash.
 * (statvfs, utimes and utime are left out: glibc itself converts their
 * structures, and crashes on a bad one before the kernel is asked.)  Each
 * call runs in a child, so a crash shows as one line.  Usage: badbuffers
 * BASE; the output must be the same on tmpfs and on kura. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PG 4096

/* NULL where the compiler cannot see it (it warns of a literal one). */
static void *volatile nothing;

#define CALL(name, expr)                                                                              \
	do {                                                                                          \
		fflush(stdout);                                                                       \
		pid_t c_ = fork();                                                                    \
		if (c_ == 0) {                                                                        \
			errno = 0;                                                                    \
			long r_ = (long)(expr);                                                       \
			printf("%-28s %ld %s\n", name, r_, r_ < 0 ? strerrorname_np(errno) : "");     \
			fflush(stdout);                                                               \
			_exit(0);                                                                     \
		}                                                                                     \
		int st_;                                                                              \
		waitpid(c_, &st_, 0);                                                                 \
		if (!WIFEXITED(st_))                                                                  \
			printf("%-28s killed by signal %d\n", name, WTERMSIG(st_));                   \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char f[4096], missing[4096], link[4096], sub[4096];
	snprintf(f, sizeof f, "%s/f", argv[1]);
	snprintf(missing, sizeof missing, "%s/missing", argv[1]);
	snprintf(link, sizeof link, "%s/l", argv[1]);
	snprintf(sub, sizeof sub, "%s/d", argv[1]);
	/* A readable page, then one the program may not touch. */
	char *two = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (two == MAP_FAILED || mprotect(two + PG, PG, PROT_NONE))
		return 1;
	char *bad = two + PG, *edge = bad - 100;
	memset(two, 'x', PG);

	int fd = open(f, O_RDWR | O_CREAT | O_TRUNC, 0644);
	char block[8192];
	memset(block, 'a', sizeof block);
	if (fd < 0 || write(fd, block, sizeof block) != (ssize_t)sizeof block || symlink("f", link) || mkdir(sub, 0755))
		return 1;
	fsetxattr(fd, "user.k", "value", 5, 0); /* may be refused: the same on both */

	CALL("read NULL", read(fd, nothing, 16));
	CALL("read", (lseek(fd, 0, SEEK_SET), read(fd, bad, 16)));
	CALL("read into the edge", pread(fd, edge, 200, 0));
	CALL("pread", pread(fd, bad, 16, 0));
	CALL("write NULL", write(fd, nothing, 16));
	CALL("write from the edge", pwrite(fd, edge, 200, 0));
	CALL("pwrite", pwrite(fd, bad, 16, 0));
	CALL("write 0 bytes of NULL", write(fd, nothing, 0));
	struct iovec iv[2] = { { two, 8 }, { bad, 8 } };
	CALL("preadv, second bad", preadv(fd, iv, 2, 0));
	CALL("pwritev, second bad", pwritev(fd, iv, 2, 0));
	CALL("readv, first bad", readv(fd, iv + 1, 1));
	CALL("writev, vector bad", writev(fd, (struct iovec *)bad, 1));
	CALL("fstat NULL", fstat(fd, nothing));
	CALL("stat", stat(f, (struct stat *)bad));
	CALL("stat of a missing name", stat(missing, nothing));
	CALL("lstat", lstat(link, nothing));
	CALL("fstatat", fstatat(AT_FDCWD, f, nothing, 0));
	CALL("statx", statx(AT_FDCWD, f, 0, STATX_BASIC_STATS, nothing));
	CALL("statfs", statfs(f, nothing));
	CALL("fstatfs", fstatfs(fd, (struct statfs *)bad));
	CALL("utimensat", utimensat(AT_FDCWD, f, (struct timespec *)bad, 0));
	CALL("utimensat of a missing name", utimensat(AT_FDCWD, missing, (struct timespec *)bad, 0));
	CALL("futimens", futimens(fd, (struct timespec *)bad));
	CALL("readlink", readlink(link, bad, 16));
	int dfd = open(sub, O_RDONLY | O_DIRECTORY);
	CALL("getdents64", getdents64(dfd, bad, 4096));
	CALL("fsetxattr", fsetxattr(fd, "user.x", bad, 10, 0));
	CALL("setxattr", setxattr(f, "user.x", bad, 10, 0));
	CALL("fgetxattr of a missing one", fgetxattr(fd, "user.x", bad, 10));
	CALL("fgetxattr", fgetxattr(fd, "user.k", bad, 10) == -1 && errno == EOPNOTSUPP ? -1 : fgetxattr(fd, "user.k", bad, 10));
	CALL("getxattr, buffer too small", getxattr(f, "user.k", bad, 2));
	CALL("flistxattr", flistxattr(fd, bad, 100));
	int gd = open(link, O_RDWR);
	CALL("sendfile, offset bad", sendfile(gd, fd, (off_t *)bad, 5));
	CALL("copy_file_range, offset bad", copy_file_range(fd, (loff_t *)bad, gd, NULL, 5, 0));
	CALL("fcntl F_GETLK", fcntl(fd, F_GETLK, bad));
	CALL("fcntl F_SETLK", fcntl(fd, F_SETLK, bad));
	CALL("fcntl F_OFD_GETLK", fcntl(fd, F_OFD_GETLK, bad));
	CALL("ioctl FIONREAD", ioctl(fd, FIONREAD, bad));
	CALL("ioctl FIGETBSZ", ioctl(fd, FIGETBSZ, bad));
	int bsz = 0;
	CALL("ioctl FIGETBSZ, good", ioctl(fd, FIGETBSZ, &bsz) == 0 && bsz > 0 ? 0 : -1);

	/* A page the program may read but not store into: the kernel's
	 * copy into it fails, a copy from it works. */
	char *rw_ro = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rw_ro == MAP_FAILED || mprotect(rw_ro + PG, PG, PROT_READ))
		return 1;
	char *ro = rw_ro + PG;
	struct iovec into_ro[2] = { { two, 8 }, { ro, 8 } };
	CALL("read into read-only", (lseek(fd, 0, SEEK_SET), read(fd, ro, 16)));
	CALL("read into a literal", (lseek(fd, 0, SEEK_SET), read(fd, (char *)"literal", 4)));
	CALL("pread into read-only at end", pread(fd, ro, 16, sizeof block));
	CALL("pread into a read-only tail", pread(fd, ro - 100, 200, 0));
	CALL("preadv, second read-only", preadv(fd, into_ro, 2, 0));
	CALL("preadv, read-only past end", preadv(fd, into_ro, 2, sizeof block - 8));
	CALL("pwrite from read-only", pwrite(fd, ro, 16, 0));
	CALL("fstat into read-only", fstat(fd, (struct stat *)ro));
	CALL("stat into read-only", stat(f, (struct stat *)ro));
	CALL("statx into read-only", statx(AT_FDCWD, f, 0, STATX_BASIC_STATS, (struct statx *)ro));
	CALL("fstatfs into read-only", fstatfs(fd, (struct statfs *)ro));
	CALL("readlink into read-only", readlink(link, ro, 16));
	CALL("getdents64 into read-only", getdents64(dfd, ro, 4096));
	CALL("flistxattr into read-only", flistxattr(fd, ro, 100));
	CALL("ioctl FIONREAD, read-only", ioctl(fd, FIONREAD, ro));
	CALL("fcntl F_GETLK, read-only", fcntl(fd, F_GETLK, (struct flock *)ro));
	CALL("fcntl F_SETLK from read-only", fcntl(fd, F_SETLK, (struct flock *)ro)); /* zeros: F_RDLCK of all */
	CALL("getcwd into read-only", getcwd(ro, 100) ? 0 : -1);

	int sock = socket(AF_UNIX, SOCK_STREAM, 0);
	CALL("bind, address bad", bind(sock, (struct sockaddr *)bad, sizeof(struct sockaddr_un)));
	CALL("connect, address bad", connect(sock, (struct sockaddr *)bad, sizeof(struct sockaddr_un)));
	CALL("openat2, how bad", syscall(SYS_openat2, AT_FDCWD, f, bad, 24));
	if (chdir(argv[1]) == 0)
		CALL("getcwd", getcwd(bad, 100) ? 0 : -1);
	return 0;
}
