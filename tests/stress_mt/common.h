/*
 * common.h — what stress_mt_test's threads and its final checks share: the
 * sizes, the pool, the error counters, the patterns the files hold and the
 * model of each thread's own files.  The parts are headers that
 * stress_mt_test.c includes once, as api_test.c includes tests/api/, so all
 * of it stays static in one translation unit: CMake makes each *_test.c
 * in tests/ a test of its own, and any other .c there a helper program.
 */
#ifndef STRESS_MT_COMMON_H
#define STRESS_MT_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kura.h"

#define NTHREADS 4
#define NOWN 8              /* own file names per thread */
#define RO_SIZE (3u << 20)  /* shared read-only file */
#define RW_BLOCKS 64        /* shared block-written file, 4 KiB blocks */
#define BLK 4096
#define NPERM 40            /* permanent entries of the shared directory */
#define NCHURN 24           /* names that come and go there */
#define MAXFILE (96 * 1024) /* largest own file */
#define NNODES 6            /* directories moved around under /shared/mv */
#define REC 1000            /* record size: not a divisor of the block size */

static kura_fs *fs;
static char pool[256];
static int shared_fd; /* one descriptor, one offset, used by every thread */
static pthread_barrier_t start_line; /* threads start together, so they overlap */
static long iters = 1500;
static atomic_int nerrors;
static atomic_long nchecks;
static atomic_long ntorn_checked;

static const char *en(long r)
{
	if (r >= 0)
		return "ok";
	const char *n = strerrorname_np((int)-r);
	return n ? n : "E?";
}

static void __attribute__((format(printf, 2, 3))) err(int t, const char *fmt, ...)
{
	/* Print the first few in full; count the rest. */
	if (atomic_fetch_add(&nerrors, 1) < 30) {
		char b[512];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(b, sizeof b, fmt, ap);
		va_end(ap);
		fprintf(stderr, "stress: thread %d: %s\n", t, b);
	}
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static unsigned char own_byte(uint32_t seed, size_t i) { return (unsigned char)(seed * 31 + i * 131 + (i >> 9)); }
static unsigned char ro_byte(size_t i) { return (unsigned char)((i * 7) ^ (i >> 12) ^ 0x5a); }

static void fill_own(unsigned char *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = own_byte(seed, i);
}

static size_t first_bad_own(const unsigned char *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != own_byte(seed, i))
			return i;
	return n;
}

/* What each thread expects in its directory: g<k> exists with size/seed. */
struct own_model {
	int exists[NOWN];
	uint32_t seed[NOWN];
	size_t size[NOWN];
};
static struct own_model models[NTHREADS];

/* Last value thread 0 wrote into each block of the shared rw file; read by
 * other threads only after join. */
static unsigned char rw_final[RW_BLOCKS];

static ssize_t pread_full(int fd, void *b, size_t n, off_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = kura_pread(fs, fd, (char *)b + got, n - got, off + (off_t)got);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int verify_own_file(int t, const char *path, uint32_t seed, size_t size, unsigned char *buf)
{
	int fd = kura_open(fs, path, O_RDONLY, 0);
	if (fd < 0) {
		err(t, "open %s for verify: %s", path, en(fd));
		return -1;
	}
	struct stat st;
	int r = kura_fstat(fs, fd, &st);
	if (r < 0 || (size_t)st.st_size != size)
		err(t, "%s: fstat %s, size %lld, expected %zu", path, en(r), (long long)st.st_size, size);
	ssize_t n = pread_full(fd, buf, MAXFILE + 1, 0);
	if (n != (ssize_t)size)
		err(t, "%s: read %zd (%s), expected %zu bytes", path, n, en(n), size);
	else {
		size_t bad = first_bad_own(buf, size, seed);
		if (bad != size)
			err(t, "%s: byte %zu is 0x%02x, expected 0x%02x", path, bad, buf[bad], own_byte(seed, bad));
	}
	kura_close(fs, fd);
	atomic_fetch_add(&nchecks, 1);
	return 0;
}

#endif
