/*
 * stress_mt_test — four threads on one mounted pool, a bounded number of
 * iterations each (run under TSan too, so nothing depends on timing):
 *
 *  - each thread creates, writes, verifies, renames and unlinks files in its
 *    own directory, keeping a model of what must survive;
 *  - all threads pread a shared read-only file and check its known pattern;
 *  - thread 0 pwrites whole 4 KiB blocks of a second shared file, each block
 *    filled with one byte value, while the others pread it: every block read
 *    must be uniform, since kura's writes are atomic (a torn read would show
 *    two values in one block);
 *  - all threads mkdir/rmdir/readdir in one shared directory that also holds
 *    permanent entries, which every listing must show exactly once;
 *  - all threads move directories into each other's subtrees and back: two
 *    racing moves (A into B, B into A) must never both succeed, so the tree
 *    stays connected and every directory is found exactly once;
 *  - all threads append fixed-size records to one O_APPEND file through
 *    their own descriptors, and write records through one shared descriptor
 *    (one shared offset) to another file: every record must land whole,
 *    exactly once, with no two writes overlapping.
 *
 * Then: verify, unmount, mount, verify again, unmount and fsck (0 problems).
 * usage: stress_mt_test [iterations]   (or $KURA_STRESS_ITERS; default 1500)
 */
#include "stress_mt/steps.h"

/* ---- setup and final verification -------------------------------------- */

static void verify_all(const char *when)
{
	unsigned char *b = malloc(MAXFILE + 65536 + 4 * BLK);
	for (int t = 0; t < NTHREADS; t++) {
		for (int k = 0; k < NOWN; k++) {
			char p[64];
			struct stat st;
			snprintf(p, sizeof p, "/t%d/g%d", t, k);
			if (models[t].exists[k])
				verify_own_file(t, p, models[t].seed[k], models[t].size[k], b);
			else if (kura_stat(fs, p, &st) != -ENOENT)
				err(t, "%s: %s exists but was unlinked", when, p);
			snprintf(p, sizeof p, "/t%d/tmp%d", t, k);
			if (kura_stat(fs, p, &st) != -ENOENT)
				err(t, "%s: %s left behind", when, p);
		}
	}
	int fd = kura_open(fs, "/shared/rw", O_RDONLY, 0);
	for (int k = 0; fd >= 0 && k < RW_BLOCKS; k++) {
		ssize_t n = kura_pread(fs, fd, b, BLK, (off_t)k * BLK);
		for (int j = 0; n == BLK && j < BLK; j++)
			if (b[j] != rw_final[k]) {
				err(-1, "%s: shared rw block %d byte %d is 0x%02x, last write was 0x%02x", when, k, j, b[j],
				    rw_final[k]);
				break;
			}
		if (n != BLK)
			err(-1, "%s: shared rw block %d: read %zd (%s)", when, k, n, en(n));
	}
	if (fd >= 0)
		kura_close(fs, fd);
	fd = kura_open(fs, "/shared/ro", O_RDONLY, 0);
	ssize_t n = fd >= 0 ? pread_full(fd, b, 65536, RO_SIZE - 65536) : fd;
	if (n != 65536)
		err(-1, "%s: shared ro tail read %zd (%s)", when, n, en(n));
	for (ssize_t i = 0; i < n; i++)
		if (b[i] != ro_byte(RO_SIZE - 65536 + (size_t)i)) {
			err(-1, "%s: shared ro corrupt at %zd", when, RO_SIZE - 65536 + (size_t)i);
			break;
		}
	if (fd >= 0)
		kura_close(fs, fd);
	free(b);
	int found[NNODES] = {0};
	count_nodes("/shared/mv", found, 1);
	for (int k = 0; k < NNODES; k++)
		if (found[k] != 1)
			err(-1, "%s: directory n%d found %d times under /shared/mv", when, k, found[k]);
	verify_records("/shared/append", when);
	verify_records("/shared/records", when);
}

static int must(long r, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "stress: setup: %s: %s\n", what, en(r));
		kura_unmount(fs);
		unlink(pool);
		exit(1);
	}
	return (int)r;
}

static void do_mount(void)
{
	int e = 0;
	fs = kura_mount(pool, NULL, &e);
	if (!fs) {
		fprintf(stderr, "stress: mount %s: %s (%s)\n", pool, en(e), kura_last_error());
		unlink(pool);
		exit(1);
	}
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "stress: fsck: %s\n", line);
}

int main(int argc, char **argv)
{
	const char *e = getenv("KURA_STRESS_ITERS");
	if (argc > 1)
		iters = strtol(argv[1], NULL, 0);
	else if (e && *e)
		iters = strtol(e, NULL, 0);
	snprintf(pool, sizeof pool, "/dev/shm/kura-stress-%d.pool", (int)getpid());
	int r = kura_mkfs(pool, 256ull << 20, 1);
	if (r < 0) {
		fprintf(stderr, "stress: mkfs %s: %s (%s)\n", pool, en(r), kura_last_error());
		return 1;
	}
	do_mount();

	must(kura_mkdir(fs, "/shared", 0755), "mkdir /shared");
	must(kura_mkdir(fs, "/shared/dir", 0755), "mkdir /shared/dir");
	must(kura_mkdir(fs, "/shared/mv", 0755), "mkdir /shared/mv");
	for (int k = 0; k < NNODES; k++) {
		char p[64];
		snprintf(p, sizeof p, "/shared/mv/n%d", k);
		must(kura_mkdir(fs, p, 0755), p);
	}
	for (int t = 0; t < NTHREADS; t++) {
		char p[32];
		snprintf(p, sizeof p, "/t%d", t);
		must(kura_mkdir(fs, p, 0755), p);
	}
	for (int j = 0; j < NPERM; j++) {
		char p[64];
		snprintf(p, sizeof p, "/shared/dir/p%d", j);
		must(kura_mknod(fs, p, S_IFREG | 0644, 0), p);
	}
	unsigned char *b = malloc(RO_SIZE);
	for (size_t i = 0; i < RO_SIZE; i++)
		b[i] = ro_byte(i);
	int fd = must(kura_open(fs, "/shared/ro", O_CREAT | O_WRONLY, 0444), "create /shared/ro");
	if (kura_write(fs, fd, b, RO_SIZE) != RO_SIZE)
		must(-EIO, "write /shared/ro");
	kura_close(fs, fd);
	memset(b, 0, RW_BLOCKS * BLK);
	fd = must(kura_open(fs, "/shared/rw", O_CREAT | O_WRONLY, 0644), "create /shared/rw");
	if (kura_write(fs, fd, b, RW_BLOCKS * BLK) != RW_BLOCKS * BLK)
		must(-EIO, "write /shared/rw");
	kura_close(fs, fd);
	free(b);
	kura_close(fs, must(kura_open(fs, "/shared/append", O_CREAT | O_WRONLY, 0644), "create /shared/append"));
	shared_fd = must(kura_open(fs, "/shared/records", O_CREAT | O_RDWR, 0644), "create /shared/records");

	pthread_t th[NTHREADS];
	pthread_barrier_init(&start_line, NULL, NTHREADS);
	for (int t = 0; t < NTHREADS; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t)) {
			fprintf(stderr, "stress: pthread_create failed\n");
			return 1;
		}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	kura_close(fs, shared_fd);

	verify_all("after threads");
	r = kura_unmount(fs);
	if (r < 0)
		err(-1, "unmount: %s", en(r));
	do_mount();
	verify_all("after remount");
	r = kura_unmount(fs);
	if (r < 0)
		err(-1, "unmount: %s", en(r));
	r = kura_fsck(pool, 0, fsck_line, NULL);
	if (r != 0)
		err(-1, "fsck found %d problems (or failed: %s)", r, en(r));
	unlink(pool);
	int ne = atomic_load(&nerrors);
	printf("stress: %d threads x %ld iterations, %ld checks, %ld blocks checked for tearing, %d errors: %s\n",
	       NTHREADS, iters, atomic_load(&nchecks), atomic_load(&ntorn_checked), ne, ne ? "FAILED" : "OK");
	return ne ? 1 : 0;
}
