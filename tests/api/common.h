/*
 * common.h — what every part of api_test uses: the pool under test, the
 * EXPECT/CHECK counters and the small helpers.  The parts are headers that
 * api_test.c includes once, as crash_test.c includes tests/crash/, so all
 * of it stays static in one translation unit and no name is exported.  A
 * failure's line number is in the part that holds its section.
 */
#ifndef API_COMMON_H
#define API_COMMON_H

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

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("  fsck: %s\n", line);
}

#endif
