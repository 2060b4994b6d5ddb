/* groupbench FILE MIB N — the cost of committing an atomic group that
 * dirtied one 4 KiB page of a large shared map (kura_fbegin, a store,
 * kura_fcommit), and of one that wrote a page with pwrite; median, 90th
 * and 99th percentile of N commits, in microseconds.  Without kura
 * (kura_atomic.h falls back) the same loop times fdatasync, or msync of
 * the page: the kernel's cost of making one page durable, for comparison.
 * Run by bench/groups.py. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../include/kura_atomic.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, double *lat, int n)
{
	qsort(lat, (size_t)n, sizeof *lat, by_value);
	printf("%s: median %.2f us, p90 %.2f us, p99 %.2f us\n", what, lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100]);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: groupbench FILE MIB N\n");
		return 2;
	}
	size_t len = (size_t)atol(argv[2]) << 20, pages = len / 4096;
	int n = atoi(argv[3]);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)len)) {
		perror(argv[1]);
		return 1;
	}
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(m, 1, len); /* every page present, as in a database that is in use */
	fsync(fd);
	double *lat = malloc(sizeof *lat * (size_t)n);
	int grouped = 0;
	srand(1);
	for (int i = 0; i < n; i++) {
		size_t p = (size_t)rand() % pages;
		grouped = kura_atomic_fbegin(fd);
		if (grouped < 0) {
			perror("kura_fbegin");
			return 1;
		}
		m[p * 4096 + (size_t)(i % 4096)]++;
		double t0 = now_us();
		int r = grouped ? kura_atomic_fcommit(fd) : msync(m + p * 4096, 4096, MS_SYNC);
		lat[i] = now_us() - t0;
		if (r) {
			perror("commit");
			return 1;
		}
	}
	report(grouped ? "map, one page: commit" : "map, one page: msync(MS_SYNC)", lat, n);
	static char page[4096];
	for (int i = 0; i < n; i++) {
		size_t p = (size_t)rand() % pages;
		memset(page, i, sizeof page);
		grouped = kura_atomic_fbegin(fd);
		if (pwrite(fd, page, sizeof page, (off_t)(p * 4096)) != (ssize_t)sizeof page) {
			perror("pwrite");
			return 1;
		}
		double t0 = now_us();
		int r = kura_atomic_fcommit(fd);
		lat[i] = now_us() - t0;
		if (r) {
			perror("commit");
			return 1;
		}
	}
	report(grouped ? "pwrite, one page: commit" : "pwrite, one page: fdatasync", lat, n);
	munmap(m, len);
	close(fd);
	unlink(argv[1]);
	return 0;
}
