/*
 * steps.h — what each of stress_mt_test's threads does in an iteration (the
 * workloads stress_mt_test.c lists), and the walks of the shared record
 * files and moved directories that the final checks repeat.  Included once,
 * by stress_mt_test.c (stress_mt/common.h says why).
 */
#ifndef STRESS_MT_STEPS_H
#define STRESS_MT_STEPS_H

#include "stress_mt/common.h"

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

#endif
