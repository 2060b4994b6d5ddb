/*
 * stress_mp_test — several processes mount the same pool at once (kura.h:
 * "Several processes may mount the same pool") and work on it together, a
 * bounded number of iterations each:
 *
 *  - each process creates, writes, verifies, renames and unlinks files in its
 *    own directory and keeps a model of what must survive;
 *  - all append fixed-size records to one O_APPEND file: every record must
 *    land whole and exactly once;
 *  - all mkdir/rmdir/readdir in a shared directory whose permanent entries
 *    every listing must show exactly once;
 *  - all pread a shared file written before they start;
 *  - meanwhile a launcher starts victims, one at a time, that churn files
 *    of their own and the shared directory and die by SIGKILL at a random
 *    moment: the others must not notice (a dead holder's transaction is
 *    undone by whoever takes the lock next, a dead checkpointer's finished
 *    by whoever takes the flush mutex next).
 *
 * The parent then checks every process's files and the records, remounts,
 * and runs kura_fsck (0 problems expected).
 * usage: stress_mp_test [iterations]   (or $KURA_STRESS_ITERS; default 800)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kura.h"

#define NPROC 4
#define NOWN 6
#define NPERM 30
#define NCHURN 16
#define REC 777
#define RO_SIZE (1u << 20)
#define MAXFILE (40 * 1024)
#define MAX_VICTIMS 400

static kura_fs *fs;
static char pool[256];
static long iters = 800;
static int errors;
static int me = -1; /* process index; -1 in the parent's own checks */

/* What each process leaves in /p<k>; filled by the children, read by the
 * parent after they exit. */
struct own_model {
	int exists[NOWN];
	uint32_t seed[NOWN];
	uint32_t size[NOWN];
};
static struct own_model *models; /* MAP_SHARED, one per process */
static struct {
	int workers_done; /* the parent's count of workers that ended */
	int victims;      /* the launcher's count of victims killed */
} *shared;            /* MAP_SHARED */

static const char *en(long r)
{
	if (r >= 0)
		return "ok";
	const char *n = strerrorname_np((int)-r);
	return n ? n : "E?";
}

static void __attribute__((format(printf, 1, 2))) err(const char *fmt, ...)
{
	if (errors++ < 20) {
		va_list ap;
		va_start(ap, fmt);
		fprintf(stderr, "stress_mp: process %d: ", me);
		vfprintf(stderr, fmt, ap);
		fprintf(stderr, "\n");
		va_end(ap);
	}
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static unsigned char own_byte(uint32_t seed, size_t i) { return (unsigned char)(seed * 29 + i * 151 + (i >> 10)); }
static unsigned char ro_byte(size_t i) { return (unsigned char)((i * 13) ^ (i >> 11) ^ 0xa5); }

static void make_record(unsigned char *b, int p, long seq)
{
	memset(b, (int)((p * 53 + seq) % 253 + 1), REC);
	memcpy(b, &p, sizeof p);
	memcpy(b + sizeof p, &seq, sizeof seq);
}

static kura_fs *mount_or_die(void)
{
	int e = 0;
	kura_fs *f = kura_mount(pool, NULL, &e);
	if (!f) {
		fprintf(stderr, "stress_mp: process %d: mount %s: %s (%s)\n", me, pool, en(e), kura_last_error());
		exit(2);
	}
	return f;
}

static void verify_file(const char *path, uint32_t seed, size_t size, unsigned char *buf)
{
	int fd = kura_open(fs, path, O_RDONLY, 0);
	if (fd < 0) {
		err("open %s: %s", path, en(fd));
		return;
	}
	ssize_t n = kura_pread(fs, fd, buf, MAXFILE + 1, 0);
	if (n != (ssize_t)size)
		err("%s: read %zd (%s), expected %zu bytes", path, n, en(n), size);
	else
		for (size_t i = 0; i < size; i++)
			if (buf[i] != own_byte(seed, i)) {
				err("%s: byte %zu is 0x%02x, expected 0x%02x", path, i, buf[i], own_byte(seed, i));
				break;
			}
	kura_close(fs, fd);
}

static void child(int p)
{
	me = p;
	fs = mount_or_die();
	struct own_model *m = &models[p];
	uint64_t rs = 0x2545f4914f6cdd1dull * (uint64_t)(p + 1);
	unsigned char *buf = malloc(MAXFILE + 65536), *rbuf = malloc(MAXFILE + 65536);
	int afd = kura_open(fs, "/shared/append", O_WRONLY | O_APPEND, 0);
	int ro = kura_open(fs, "/shared/ro", O_RDONLY, 0);
	if (afd < 0 || ro < 0)
		err("open shared files: %s %s", en(afd), en(ro));
	for (long i = 0; i < iters && afd >= 0 && ro >= 0; i++) {
		/* Own files: write under a temporary name, rename over g<k>. */
		char tmp[64], dst[64];
		int k = (int)(next(&rs) % NOWN);
		uint32_t seed = (uint32_t)next(&rs), size = (uint32_t)(next(&rs) % MAXFILE);
		snprintf(tmp, sizeof tmp, "/p%d/tmp", p);
		snprintf(dst, sizeof dst, "/p%d/g%d", p, k);
		int fd = kura_open(fs, tmp, O_CREAT | O_EXCL | O_RDWR, 0644);
		if (fd < 0) {
			err("iter %ld: create %s: %s", i, tmp, en(fd));
			break;
		}
		for (size_t j = 0; j < size; j++)
			buf[j] = own_byte(seed, j);
		ssize_t n = kura_write(fs, fd, buf, size);
		if (n != (ssize_t)size)
			err("iter %ld: write %s: %zd (%s)", i, tmp, n, en(n));
		kura_close(fs, fd);
		if (m->exists[k] && i % 5 == 0)
			verify_file(dst, m->seed[k], m->size[k], rbuf);
		int r = kura_rename(fs, tmp, dst, 0);
		if (r < 0) {
			err("iter %ld: rename %s -> %s: %s", i, tmp, dst, en(r));
			break;
		}
		m->exists[k] = 1, m->seed[k] = seed, m->size[k] = size;
		if (next(&rs) % 3 == 0) {
			int j = (int)(next(&rs) % NOWN);
			snprintf(dst, sizeof dst, "/p%d/g%d", p, j);
			r = kura_unlink(fs, dst);
			if (r != (m->exists[j] ? 0 : -ENOENT))
				err("iter %ld: unlink %s: %s", i, dst, en(r));
			m->exists[j] = 0;
		}

		/* Records appended by every process. */
		make_record(buf, p, i);
		n = kura_write(fs, afd, buf, REC);
		if (n != REC)
			err("iter %ld: append: %zd (%s)", i, n, en(n));

		/* Shared read-only file. */
		size_t off = (size_t)(next(&rs) % RO_SIZE), len = (size_t)(next(&rs) % 32768) + 1;
		if (off + len > RO_SIZE)
			len = RO_SIZE - off;
		n = kura_pread(fs, ro, rbuf, len, (off_t)off);
		if (n != (ssize_t)len)
			err("iter %ld: pread shared ro: %zd (%s)", i, n, en(n));
		for (ssize_t j = 0; j < n; j++)
			if (rbuf[j] != ro_byte(off + (size_t)j)) {
				err("iter %ld: shared ro byte %zu wrong", i, off + (size_t)j);
				break;
			}

		/* Shared directory churn and listing. */
		char c[64];
		snprintf(c, sizeof c, "/shared/dir/c%d", (int)(next(&rs) % NCHURN));
		r = (next(&rs) % 2) ? kura_mkdir(fs, c, 0755) : kura_rmdir(fs, c);
		if (r != 0 && r != -EEXIST && r != -ENOENT)
			err("iter %ld: mkdir/rmdir %s: %s", i, c, en(r));
		if (i % 4 == 0) {
			int e = 0, seen[NPERM] = {0};
			kura_dir *d = kura_opendir(fs, "/shared/dir", &e);
			struct kura_dirent de;
			while (d && (r = kura_readdir(d, &de)) == 1)
				if (de.name[0] == 'p' && atoi(de.name + 1) < NPERM)
					seen[atoi(de.name + 1)]++;
			if (!d || r < 0)
				err("iter %ld: listing /shared/dir: %s", i, en(d ? r : e));
			if (d)
				kura_closedir(d);
			for (int j = 0; j < NPERM; j++)
				if (seen[j] != 1) {
					err("iter %ld: permanent entry p%d listed %d times", i, j, seen[j]);
					break;
				}
		}
	}
	if (afd >= 0)
		kura_close(fs, afd);
	if (ro >= 0)
		kura_close(fs, ro);
	int r = kura_unmount(fs);
	if (r < 0)
		err("unmount: %s", en(r));
	free(buf);
	free(rbuf);
	exit(errors ? 1 : 0);
}

/* Never returns: works until killed.  What it leaves behind is not
 * checked, only that it breaks nothing of the others' and that fsck finds
 * the pool whole.  Its files are small: those it holds open unlinked when
 * it dies keep their space while the others have the pool mounted (README,
 * Current limits), and several hundred victims must not fill the pool. */
#define VICTIM_FILE (8 * 1024)
static void victim(int round)
{
	me = NPROC + round;
	fs = mount_or_die();
	uint64_t rs = 0x9e3779b97f4a7c15ull * (uint64_t)(round + 7);
	unsigned char *buf = malloc(MAXFILE);
	for (size_t j = 0; j < MAXFILE; j++)
		buf[j] = (unsigned char)j;
	for (;;) {
		char a[64], b[64];
		snprintf(a, sizeof a, "/victim/v%d", (int)(next(&rs) % 8));
		snprintf(b, sizeof b, "/victim/v%d", (int)(next(&rs) % 8));
		switch (next(&rs) % 6) {
		case 0:
		case 1: {
			int fd = kura_open(fs, a, O_CREAT | O_RDWR | O_TRUNC, 0644);
			if (fd >= 0) {
				kura_write(fs, fd, buf, (size_t)(next(&rs) % VICTIM_FILE));
				if (next(&rs) % 4 == 0)
					kura_fsync(fs, fd);
				kura_close(fs, fd);
			}
			break;
		}
		case 2:
			kura_rename(fs, a, b, 0);
			break;
		case 3:
			kura_unlink(fs, a);
			break;
		case 4: {
			/* An unlinked file held open: an orphan when the victim dies. */
			int fd = kura_open(fs, a, O_RDWR, 0);
			if (fd >= 0)
				kura_unlink(fs, a);
			break;
		}
		default:
			snprintf(a, sizeof a, "/shared/dir/c%d", (int)(next(&rs) % NCHURN));
			if (next(&rs) % 2)
				kura_mkdir(fs, a, 0755);
			else
				kura_rmdir(fs, a);
		}
	}
}

/* Victims one at a time while the workers run, and a few after, so that
 * some die with no other process in the pool.  Exits 0 if each died by
 * the signal. */
static void launch_victims(void)
{
	me = -2;
	uint64_t rs = 0x5851f42d4c957f2dull;
	int round = 0;
	for (; round < MAX_VICTIMS &&
	       (__atomic_load_n(&shared->workers_done, __ATOMIC_ACQUIRE) < NPROC || round % 8);
	     round++) {
		fflush(NULL);
		pid_t v = fork();
		if (v < 0) {
			perror("fork");
			_exit(2);
		}
		if (v == 0)
			victim(round);
		usleep((useconds_t)(500 + next(&rs) % 8000));
		kill(v, SIGKILL);
		int st = 0;
		waitpid(v, &st, 0);
		if (!WIFSIGNALED(st)) {
			err("victim %d ended with status %d before it was killed", round, WEXITSTATUS(st));
			_exit(1);
		}
	}
	shared->victims = round;
	_exit(0);
}

static void verify_all(const char *when)
{
	unsigned char *b = malloc(MAXFILE + 65536);
	for (int p = 0; p < NPROC; p++)
		for (int k = 0; k < NOWN; k++) {
			char path[64];
			struct stat st;
			snprintf(path, sizeof path, "/p%d/g%d", p, k);
			if (models[p].exists[k])
				verify_file(path, models[p].seed[k], models[p].size[k], b);
			else if (kura_stat(fs, path, &st) != -ENOENT)
				err("%s: %s should not exist", when, path);
		}
	free(b);

	struct stat st;
	int fd = kura_open(fs, "/shared/append", O_RDONLY, 0);
	long want = NPROC * iters;
	if (fd < 0 || kura_fstat(fs, fd, &st) < 0 || st.st_size != (off_t)want * REC) {
		err("%s: /shared/append: %s, %lld bytes, expected %ld records of %d", when, en(fd),
		    fd >= 0 ? (long long)st.st_size : -1LL, want, REC);
		if (fd >= 0)
			kura_close(fs, fd);
		return;
	}
	unsigned char *seen = calloc((size_t)want, 1), r[REC], w[REC];
	for (long i = 0; i < want; i++) {
		int p;
		long seq;
		if (kura_pread(fs, fd, r, REC, (off_t)i * REC) != REC) {
			err("%s: short read of record %ld", when, i);
			break;
		}
		memcpy(&p, r, sizeof p);
		memcpy(&seq, r + sizeof p, sizeof seq);
		if (p < 0 || p >= NPROC || seq < 0 || seq >= iters) {
			err("%s: record %ld has a bad header: overlapping appends?", when, i);
			break;
		}
		make_record(w, p, seq);
		if (memcmp(r, w, REC) || seen[p * iters + seq]++) {
			err("%s: record %ld (process %d seq %ld) torn or repeated", when, i, p, seq);
			break;
		}
	}
	free(seen);
	kura_close(fs, fd);
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "stress_mp: fsck: %s\n", line);
}

static void must(long r, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "stress_mp: setup: %s: %s\n", what, en(r));
		unlink(pool);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *e = getenv("KURA_STRESS_ITERS");
	if (argc > 1)
		iters = strtol(argv[1], NULL, 0);
	else if (e && *e)
		iters = strtol(e, NULL, 0);
	snprintf(pool, sizeof pool, "/dev/shm/kura-stress-mp-%d.pool", (int)getpid());
	models = mmap(NULL, NPROC * sizeof *models, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (models == MAP_FAILED)
		return 1;
	memset(models, 0, NPROC * sizeof *models);
	shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		return 1;
	must(kura_mkfs(pool, 128ull << 20, 1), "mkfs");
	fs = mount_or_die();
	must(kura_mkdir(fs, "/shared", 0755), "mkdir /shared");
	must(kura_mkdir(fs, "/shared/dir", 0755), "mkdir /shared/dir");
	must(kura_mkdir(fs, "/victim", 0755), "mkdir /victim");
	for (int p = 0; p < NPROC; p++) {
		char d[32];
		snprintf(d, sizeof d, "/p%d", p);
		must(kura_mkdir(fs, d, 0755), d);
	}
	for (int j = 0; j < NPERM; j++) {
		char d[64];
		snprintf(d, sizeof d, "/shared/dir/p%d", j);
		must(kura_mknod(fs, d, S_IFREG | 0644, 0), d);
	}
	int fd = kura_open(fs, "/shared/ro", O_CREAT | O_WRONLY, 0444);
	must(fd, "create /shared/ro");
	unsigned char *b = malloc(RO_SIZE);
	for (size_t i = 0; i < RO_SIZE; i++)
		b[i] = ro_byte(i);
	if (kura_write(fs, fd, b, RO_SIZE) != RO_SIZE)
		must(-EIO, "write /shared/ro");
	free(b);
	kura_close(fs, fd);
	fd = kura_open(fs, "/shared/append", O_CREAT | O_WRONLY, 0644);
	must(fd, "create /shared/append");
	kura_close(fs, fd);
	/* Children must not inherit a mount (its memory and mapping belong to
	 * the parent), so unmount around fork; the parent then mounts again and
	 * stays mounted while they work: a process merely holding the pool
	 * mapped must not disturb the others. */
	must(kura_unmount(fs), "unmount before fork");
	fs = NULL;

	pid_t pids[NPROC];
	for (int p = 0; p < NPROC; p++) {
		fflush(NULL);
		pids[p] = fork();
		if (pids[p] < 0) {
			perror("fork");
			return 1;
		}
		if (pids[p] == 0)
			child(p);
	}
	/* Forked before the parent mounts, so that no victim inherits a mount
	 * (nor the launcher's waits the parent's). */
	fflush(NULL);
	pid_t launcher = fork();
	if (launcher < 0) {
		perror("fork");
		return 1;
	}
	if (launcher == 0)
		launch_victims();
	fs = mount_or_die();
	int failed_children = 0;
	for (int p = 0; p < NPROC; p++) {
		int st = 0;
		waitpid(pids[p], &st, 0);
		__atomic_add_fetch(&shared->workers_done, 1, __ATOMIC_RELEASE);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			failed_children++;
			fprintf(stderr, "stress_mp: process %d ended with %s %d\n", p,
				WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		}
	}
	int st = 0;
	waitpid(launcher, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		err("the victims' launcher ended with %s %d", WIFEXITED(st) ? "status" : "signal",
		    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	if (failed_children || errors) {
		/* What filled the pool, when something did. */
		struct kura_info in;
		if (kura_info(fs, &in) == 0)
			fprintf(stderr,
				"stress_mp: pool: %llu of %llu blocks free, %llu files, %llu directories, %llu orphans\n",
				(unsigned long long)in.blocks_free, (unsigned long long)in.blocks_total,
				(unsigned long long)in.files, (unsigned long long)in.directories,
				(unsigned long long)in.orphans);
	}
	verify_all("after processes");
	int r = kura_unmount(fs);
	if (r < 0)
		err("unmount: %s", en(r));
	fs = mount_or_die();
	verify_all("after remount");
	r = kura_unmount(fs);
	if (r < 0)
		err("unmount: %s", en(r));
	r = kura_fsck(pool, 0, fsck_line, NULL);
	if (r != 0)
		err("fsck found %d problems (%s)", r, en(r));
	unlink(pool);
	int bad = errors + failed_children;
	printf("stress_mp: %d processes x %ld iterations, %d victims killed, %d failed processes, %d errors: %s\n",
	       NPROC, iters, shared->victims, failed_children, errors, bad ? "FAILED" : "OK");
	return bad ? 1 : 0;
}
