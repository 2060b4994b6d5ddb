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

static void own_files_step(int t, long i, uint64_t *rs, unsigned char *buf, unsigned char *rbuf)
{
	struct own_model *m = &models[t];
	char tmp[64], dst[64];
	int k = (int)(next(rs) % NOWN);
	uint32_t seed = (uint32_t)next(rs);
	size_t size = (size_t)(next(rs) % 4 == 0 ? next(rs) % MAXFILE : next(rs) % 9000);
	snprintf(tmp, sizeof tmp, "/t%d/tmp%d", t, k);
	snprintf(dst, sizeof dst, "/t%d/g%d", t, k);

	int fd = kura_open(fs, tmp, O_CREAT | O_EXCL | O_RDWR, 0644);
	if (fd < 0) {
		err(t, "iter %ld: create %s: %s", i, tmp, en(fd));
		return;
	}
	fill_own(buf, size, seed);
	/* Write in two pieces to exercise offsets, then read back whole. */
	size_t half = size / 2;
	ssize_t w1 = kura_write(fs, fd, buf, half);
	ssize_t w2 = kura_pwrite(fs, fd, buf + half, size - half, (off_t)half);
	if (w1 != (ssize_t)half || w2 != (ssize_t)(size - half))
		err(t, "iter %ld: write %s: %zd/%zd of %zu", i, tmp, w1, w2, size);
	ssize_t n = pread_full(fd, rbuf, size + 100, 0);
	if (n != (ssize_t)size || memcmp(buf, rbuf, size))
		err(t, "iter %ld: %s reads back %zd bytes (%s), contents %s", i, tmp, n, en(n),
		    n == (ssize_t)size ? "differ" : "-");
	kura_close(fs, fd);

	/* Replace the old g<k> atomically; the old one must have been intact. */
	if (m->exists[k] && next(rs) % 4 == 0)
		verify_own_file(t, dst, m->seed[k], m->size[k], rbuf);
	int r = kura_rename(fs, tmp, dst, 0);
	if (r < 0) {
		err(t, "iter %ld: rename %s -> %s: %s", i, tmp, dst, en(r));
		kura_unlink(fs, tmp);
		return;
	}
	m->exists[k] = 1, m->seed[k] = seed, m->size[k] = size;
	struct stat st;
	r = kura_stat(fs, tmp, &st);
	if (r != -ENOENT)
		err(t, "iter %ld: %s after rename: %s", i, tmp, en(r));
	r = kura_stat(fs, dst, &st);
	if (r < 0 || (size_t)st.st_size != size)
		err(t, "iter %ld: stat %s: %s size %lld expected %zu", i, dst, en(r), (long long)st.st_size, size);

	/* Sometimes drop another name. */
	if (next(rs) % 3 == 0) {
		int j = (int)(next(rs) % NOWN);
		snprintf(dst, sizeof dst, "/t%d/g%d", t, j);
		r = kura_unlink(fs, dst);
		int want = m->exists[j] ? 0 : -ENOENT;
		if (r != want)
			err(t, "iter %ld: unlink %s: %s, expected %s", i, dst, en(r), en(want));
		m->exists[j] = 0;
	}
}

static void shared_ro_step(int t, int fd, uint64_t *rs, unsigned char *rbuf)
{
	size_t off = (size_t)(next(rs) % RO_SIZE);
	size_t len = (size_t)(next(rs) % 65536) + 1;
	ssize_t n = kura_pread(fs, fd, rbuf, len, (off_t)off);
	size_t want = off + len > RO_SIZE ? RO_SIZE - off : len;
	if (n != (ssize_t)want) {
		err(t, "pread shared ro at %zu len %zu: %zd (%s), expected %zu", off, len, n, en(n), want);
		return;
	}
	for (size_t i = 0; i < want; i++)
		if (rbuf[i] != ro_byte(off + i)) {
			err(t, "shared ro byte %zu is 0x%02x, expected 0x%02x", off + i, rbuf[i], ro_byte(off + i));
			return;
		}
	atomic_fetch_add(&nchecks, 1);
}

static void shared_rw_step(int t, int fd, uint64_t *rs, unsigned char *buf, long i)
{
	int b = (int)(next(rs) % RW_BLOCKS);
	int nb = 1 + (int)(next(rs) % 4);
	if (b + nb > RW_BLOCKS)
		nb = RW_BLOCKS - b;
	if (t == 0) {
		/* One value per block, different blocks usually different. */
		for (int k = 0; k < nb; k++)
			memset(buf + (size_t)k * BLK, (int)((i * 4 + k) % 255 + 1), BLK);
		ssize_t n = kura_pwrite(fs, fd, buf, (size_t)nb * BLK, (off_t)b * BLK);
		if (n != (ssize_t)nb * BLK)
			err(t, "pwrite shared rw blocks %d+%d: %zd (%s)", b, nb, n, en(n));
		for (int k = 0; k < nb; k++)
			rw_final[b + k] = buf[(size_t)k * BLK];
		return;
	}
	ssize_t n = kura_pread(fs, fd, buf, (size_t)nb * BLK, (off_t)b * BLK);
	if (n != (ssize_t)nb * BLK) {
		err(t, "pread shared rw blocks %d+%d: %zd (%s)", b, nb, n, en(n));
		return;
	}
	for (int k = 0; k < nb; k++) {
		const unsigned char *p = buf + (size_t)k * BLK;
		for (int j = 1; j < BLK; j++)
			if (p[j] != p[0]) {
				err(t, "torn block %d: byte 0 is 0x%02x, byte %d is 0x%02x", b + k, p[0], j, p[j]);
				return;
			}
	}
	atomic_fetch_add(&ntorn_checked, nb);
}

static void shared_dir_step(int t, uint64_t *rs)
{
	char p[64];
	int k = (int)(next(rs) % NCHURN);
	snprintf(p, sizeof p, "/shared/dir/c%d", k);
	int r;
	switch (next(rs) % 3) {
	case 0:
		r = kura_mkdir(fs, p, 0755);
		if (r != 0 && r != -EEXIST)
			err(t, "mkdir %s: %s", p, en(r));
		return;
	case 1:
		r = kura_rmdir(fs, p);
		if (r != 0 && r != -ENOENT)
			err(t, "rmdir %s: %s", p, en(r));
		return;
	}
	int e = 0;
	kura_dir *d = kura_opendir(fs, "/shared/dir", &e);
	if (!d) {
		err(t, "opendir /shared/dir: %s", en(e));
		return;
	}
	int seen[NPERM] = {0}, pos = 0;
	struct kura_dirent de;
	while ((r = kura_readdir(d, &de)) == 1) {
		if (pos < 2 && strcmp(de.name, pos ? ".." : "."))
			err(t, "readdir entry %d is '%s'", pos, de.name);
		pos++;
		if (de.name[0] == 'p') {
			int j = atoi(de.name + 1);
			if (j >= 0 && j < NPERM)
				seen[j]++;
		} else if (de.name[0] != 'c' && strcmp(de.name, ".") && strcmp(de.name, ".."))
			err(t, "readdir: unexpected name '%s'", de.name);
	}
	if (r < 0)
		err(t, "readdir /shared/dir: %s", en(r));
	kura_closedir(d);
	for (int j = 0; j < NPERM; j++)
		if (seen[j] != 1) {
			err(t, "listing of /shared/dir showed permanent entry p%d %d times", j, seen[j]);
			break;
		}
	atomic_fetch_add(&nchecks, 1);
}

/* A record: thread id, sequence number, and a fill byte derived from both. */
static void make_record(unsigned char *b, int t, long seq)
{
	memset(b, (int)((t * 37 + seq) % 254 + 1), REC);
	memcpy(b, &t, sizeof t);
	memcpy(b + sizeof t, &seq, sizeof seq);
}

static void records_step(int t, int afd, long i, unsigned char *b)
{
	make_record(b, t, i);
	ssize_t n = kura_write(fs, afd, b, REC);
	if (n != REC)
		err(t, "append record %ld: %zd (%s)", i, n, en(n));
	n = kura_write(fs, shared_fd, b, REC);
	if (n != REC)
		err(t, "shared-offset record %ld: %zd (%s)", i, n, en(n));
}

/* Every (thread, seq) record exactly once, each one whole. */
static void verify_records(const char *path, const char *when)
{
	struct stat st;
	int fd = kura_open(fs, path, O_RDONLY, 0);
	if (fd < 0 || kura_fstat(fs, fd, &st) < 0) {
		err(-1, "%s: open %s: %s", when, path, en(fd));
		return;
	}
	long want = NTHREADS * iters;
	if (st.st_size != (off_t)want * REC) {
		err(-1, "%s: %s is %lld bytes, expected %ld records of %d", when, path, (long long)st.st_size, want, REC);
		kura_close(fs, fd);
		return;
	}
	unsigned char *seen = calloc((size_t)want, 1), b[REC], w[REC];
	for (long r = 0; r < want; r++) {
		if (kura_pread(fs, fd, b, REC, (off_t)r * REC) != REC) {
			err(-1, "%s: %s: short read of record %ld", when, path, r);
			break;
		}
		int t;
		long seq;
		memcpy(&t, b, sizeof t);
		memcpy(&seq, b + sizeof t, sizeof seq);
		if (t < 0 || t >= NTHREADS || seq < 0 || seq >= iters) {
			err(-1, "%s: %s: record %ld has a bad header (thread %d, seq %ld): overlapping writes?", when,
			    path, r, t, seq);
			break;
		}
		make_record(w, t, seq);
		if (memcmp(b, w, REC)) {
			err(-1, "%s: %s: record %ld (thread %d seq %ld) is torn", when, path, r, t, seq);
			break;
		}
		if (seen[t * iters + seq]++) {
			err(-1, "%s: %s: record thread %d seq %ld appears twice", when, path, t, seq);
			break;
		}
	}
	free(seen);
	kura_close(fs, fd);
	atomic_fetch_add(&nchecks, 1);
}

static void move_step(int t, uint64_t *rs)
{
	int x = (int)(next(rs) % NNODES), y = (int)(next(rs) % NNODES);
	if (x == y)
		return;
	char a[64], b[64];
	if (next(rs) % 2) {
		snprintf(a, sizeof a, "/shared/mv/n%d", x);
		snprintf(b, sizeof b, "/shared/mv/n%d/n%d", y, x);
	} else {
		snprintf(a, sizeof a, "/shared/mv/n%d/n%d", y, x);
		snprintf(b, sizeof b, "/shared/mv/n%d", x);
	}
	/* Either side may have been moved away by another thread meanwhile. */
	int r = kura_rename(fs, a, b, 0);
	if (r != 0 && r != -ENOENT)
		err(t, "rename %s -> %s: %s", a, b, en(r));
}

/* Count the n<k> directories reachable below `path`. */
static void count_nodes(const char *path, int *found, int depth)
{
	int e = 0;
	kura_dir *d = kura_opendir(fs, path, &e);
	if (!d) {
		err(-1, "opendir %s: %s", path, en(e));
		return;
	}
	struct kura_dirent de;
	while (kura_readdir(d, &de) == 1) {
		if (de.name[0] != 'n')
			continue;
		int k = atoi(de.name + 1);
		if (k < 0 || k >= NNODES || depth > NNODES) {
			err(-1, "unexpected %s/%s at depth %d", path, de.name, depth);
			continue;
		}
		found[k]++;
		char sub[512];
		snprintf(sub, sizeof sub, "%s/%s", path, de.name);
		count_nodes(sub, found, depth + 1);
	}
	kura_closedir(d);
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	uint64_t rs = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
	unsigned char *buf = malloc(MAXFILE + 4 * BLK), *rbuf = malloc(MAXFILE + 65536 + 4 * BLK);
	int ro = kura_open(fs, "/shared/ro", O_RDONLY, 0);
	int rw = kura_open(fs, "/shared/rw", t == 0 ? O_RDWR : O_RDONLY, 0);
	int afd = kura_open(fs, "/shared/append", O_WRONLY | O_APPEND, 0);
	if (ro < 0 || rw < 0 || afd < 0) {
		err(t, "open shared files: %s %s %s", en(ro), en(rw), en(afd));
		free(buf), free(rbuf);
		pthread_barrier_wait(&start_line);
		return NULL;
	}
	pthread_barrier_wait(&start_line);
	for (long i = 0; i < iters; i++) {
		own_files_step(t, i, &rs, buf, rbuf);
		shared_ro_step(t, ro, &rs, rbuf);
		/* Thread 0 writes the rw file more often than once per iteration so
		 * readers meet writes in flight. */
		for (int k = 0; k < (t == 0 ? 3 : 2); k++)
			shared_rw_step(t, rw, &rs, buf, i * 3 + k);
		shared_dir_step(t, &rs);
		records_step(t, afd, i, buf);
		move_step(t, &rs);
	}
	kura_close(fs, afd);
	kura_close(fs, ro);
	kura_close(fs, rw);
	free(buf);
	free(rbuf);
	return NULL;
}

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
