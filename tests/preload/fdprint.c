/* What glibc writes to a descriptor with its own internal write (dprintf,
 * vdprintf, their fortified forms, backtrace_symbols_fd), on a file of the
 * directory argv[1]: test_preload.py compares the output on tmpfs and on
 * kura. */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int __dprintf_chk(int fd, int flag, const char *fmt, ...);

static int via_vdprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vdprintf(fd, fmt, ap);
	va_end(ap);
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fdprint DIR\n");
		return 2;
	}
	char path[PATH_MAX], buf[4096] = "";
	snprintf(path, sizeof path, "%s/printed", argv[1]);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	printf("dprintf: %d\n", dprintf(fd, "dprintf %d %s\n", 42, "words"));
	printf("vdprintf: %d\n", via_vdprintf(fd, "vdprintf %05.1f|%-4s|\n", 3.14159, "ab"));
	printf("__dprintf_chk: %d\n", __dprintf_chk(fd, 1, "chk %x\n", 255));
	char big[10000];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = 0;
	printf("long: %d\n", dprintf(fd, "%s\n", big));
	void *frames[4];
	int n = backtrace(frames, 4);
	off_t before = lseek(fd, 0, SEEK_END);
	backtrace_symbols_fd(frames, n, fd);
	off_t after = lseek(fd, 0, SEEK_END);
	printf("backtrace_symbols_fd wrote: %s\n", after > before ? "yes" : "no");
	close(fd);
	int ro = open(path, O_RDONLY);
	ssize_t got = read(ro, buf, 100);
	printf("read back %zd: %.*s", got, (int)(got > 0 ? got : 0), buf);
	int refused = dprintf(ro, "no\n");
	printf("\ndprintf to a read-only descriptor: %d (%s)\n", refused, strerror(errno));
	close(ro);
	return 0;
}
