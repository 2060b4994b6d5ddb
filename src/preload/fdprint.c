/*
 * fdprint.c — glibc functions that write to a descriptor with libc's own
 * internal write: dprintf and vdprintf (also the fortified forms) and
 * backtrace_symbols_fd.  On a kura descriptor that write reaches the sealed
 * placeholder and fails with EPERM, so the text is formatted here and
 * written through the wrappers.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp.h"

int __vasprintf_chk(char **out, int flag, const char *fmt, va_list ap);
int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);

/* All of s, as glibc's stream would write it: -1 on the first failure. */
static int write_whole(int fd, const char *s, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t w = write(fd, s + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

static int print_formatted(int fd, char *s, int n)
{
	if (n < 0)
		return -1;
	int r = write_whole(fd, s, (size_t)n) ? -1 : n;
	int saved = errno;
	free(s);
	errno = saved;
	return r;
}

KP_EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
	if (!kp_get(fd))
		return REAL(vdprintf)(fd, fmt, ap);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	return print_formatted(fd, s, n);
}

KP_EXPORT int dprintf(int fd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vdprintf(fd, fmt, ap);
	va_end(ap);
	return n;
}

/* _FORTIFY_SOURCE's forms: flag asks glibc to check the format (%n only
 * from read-only memory), which __vasprintf_chk does the same way. */
KP_EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
	if (!kp_get(fd))
		return REALT(int (*)(int, int, const char *, va_list), "__vdprintf_chk")(fd, flag, fmt, ap);
	char *s = NULL;
	int n = __vasprintf_chk(&s, flag, fmt, ap);
	return print_formatted(fd, s, n);
}

KP_EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = __vdprintf_chk(fd, flag, fmt, ap);
	va_end(ap);
	return n;
}

/* glibc's writes no line when it cannot allocate either. */
KP_EXPORT void backtrace_symbols_fd(void *const *buffer, int size, int fd)
{
	if (!kp_get(fd)) {
		REAL(backtrace_symbols_fd)(buffer, size, fd);
		return;
	}
	char **lines = backtrace_symbols(buffer, size);
	if (!lines)
		return;
	for (int i = 0; i < size; i++)
		if (write_whole(fd, lines[i], strlen(lines[i])) || write_whole(fd, "\n", 1))
			break;
	free(lines);
}
