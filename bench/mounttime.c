/*
 * mounttime.c — how long kura_mount takes on a pool holding many files
 * (default 100,000 in 100 directories), best of 5, plus fsck time.
 * usage: mounttime [POOL] [FILES]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "kura.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *pool = argc > 1 ? argv[1] : "/dev/shm/kura-mounttime.pool";
	int files = argc > 2 ? atoi(argv[2]) : 100000;
	if (kura_mkfs(pool, 2ull << 30, 1)) {
		fprintf(stderr, "mounttime: %s\n", kura_last_error());
		return 1;
	}
	kura_fs *fs = kura_mount(pool, NULL, NULL);
	if (!fs) {
		fprintf(stderr, "mounttime: %s\n", kura_last_error());
		return 1;
	}
	char name[64];
	double t0 = now();
	for (int i = 0; i < files; i++) {
		if (i % 1000 == 0) {
			snprintf(name, sizeof name, "/d%d", i / 1000);
			kura_mkdir(fs, name, 0755);
		}
		snprintf(name, sizeof name, "/d%d/f%d", i / 1000, i);
		int fd = kura_open(fs, name, O_CREAT | O_WRONLY, 0644);
		if (fd < 0) {
			fprintf(stderr, "mounttime: create %s: %d\n", name, fd);
			return 1;
		}
		kura_close(fs, fd);
	}
	printf("created %d files in %.2f s\n", files, now() - t0);
	kura_unmount(fs);
	double best = 1e9;
	for (int r = 0; r < 5; r++) {
		t0 = now();
		fs = kura_mount(pool, NULL, NULL);
		double t = now() - t0;
		if (!fs)
			return 1;
		kura_unmount(fs);
		if (t < best)
			best = t;
	}
	printf("mount: %.3f ms (best of 5)\n", best * 1e3);
	t0 = now();
	int problems = kura_fsck(pool, 0, NULL, NULL);
	printf("fsck: %d problems in %.2f s\n", problems, now() - t0);
	unlink(pool);
	return problems != 0;
}
