/* mapbench: 4 KiB random loads and stores through a shared map of a file.
 *
 *   mapbench FILE [MIB] [OPS]
 *
 * Creates FILE (MIB MiB, default 64), maps it MAP_SHARED, touches every
 * page once, then times OPS (default 1,000,000) random 4 KiB operations,
 * half copies out of the map and half into it, and prints
 * "load+store ops/s: N".  Run it on tmpfs and under `kura run` on a pool:
 * the pages are the same kind (shared memory), so the ratio prices
 * whatever the layer adds to a map.  bench/maps.py does the pairing. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: mapbench FILE [MIB] [OPS]\n");
		return 2;
	}
	size_t mib = argc > 2 ? strtoul(argv[2], NULL, 0) : 64;
	long ops = argc > 3 ? strtol(argv[3], NULL, 0) : 1000000;
	size_t len = mib << 20, pages = len / 4096;
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
	for (size_t p = 0; p < pages; p++)
		m[p * 4096] = 1;
	static char buf[4096];
	uint64_t sum = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < ops; i++) {
		char *pg = m + (next() % pages) * 4096;
		if (i & 1) {
			memcpy(pg, buf, sizeof buf);
		} else {
			memcpy(buf, pg, sizeof buf);
			sum += (unsigned char)buf[7];
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("load+store ops/s: %.0f (checksum %llu)\n", (double)ops / s, (unsigned long long)sum);
	munmap(m, len);
	close(fd);
	unlink(argv[1]);
	return 0;
}
