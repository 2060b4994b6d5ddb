/* fallocate_times.c — which time stamps posix_fallocate and fallocate
 * change, compared with tmpfs.  Usage: fallocate_times BASE. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void step(const char *label, int fd, int (*op)(int))
{
	struct stat a, b;
	fstat(fd, &a);
	nanosleep(&(struct timespec){ 0, 20000000 }, NULL); /* past the clock's granularity */
	int r = op(fd);
	fstat(fd, &b);
	printf("%s: %d size %lld mtime %s ctime %s\n", label, r, (long long)b.st_size,
	       a.st_mtim.tv_nsec == b.st_mtim.tv_nsec && a.st_mtim.tv_sec == b.st_mtim.tv_sec ? "same" : "changed",
	       a.st_ctim.tv_nsec == b.st_ctim.tv_nsec && a.st_ctim.tv_sec == b.st_ctim.tv_sec ? "same" : "changed");
}

static int grow(int fd) { return posix_fallocate(fd, 0, 123); }
static int keep_size(int fd) { return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 8192); }

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char p[4096];
	snprintf(p, sizeof p, "%s/f", argv[1]);
	int fd = open(p, O_CREAT | O_RDWR, 0644);
	if (fd < 0)
		return 1;
	step("posix_fallocate grows", fd, grow);
	step("fallocate keep size", fd, keep_size);
	return 0;
}
