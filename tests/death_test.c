/*
 * death_test — a process of a disk pool (either mode) dies by SIGKILL at
 * each of its writes and syncs of the pool file in turn, before or after
 * the call, while another process has the pool mounted (or, every other
 * time, with none).  Nothing may be lost or wedged: the working copy holds
 * everything the dead process did, so the survivor must see every
 * operation it completed, go on writing and syncing, and leave a pool that
 * fsck finds whole and a remount shows the same.
 *
 * The dead process's workload writes large fresh files (a seal writes them
 * home rather than through the journal), small ones, syncs, renames and
 * unlinks, in a pool whose journal it fills several times over
 * (checkpoints).  A seal that died after its home writes once wedged the
 * pool with ENOSPC (journal_seal.c says how).
 *
 * Linked with -Wl,--wrap=pwrite,--wrap=fdatasync: the dying process counts
 * its calls and raises SIGKILL at the chosen one.  On the memory back end,
 * which makes no system call, the points are its stores to the pool (seen
 * by a media tracer): a death there may leave the pool's mutex held
 * mid-transaction, which the next taker rolls back.
 *
 * The same process is also stopped, not killed, just after it wrote a new
 * journal head in a checkpoint (before its copy counts the new epoch),
 * while another process mounts: the mount must succeed (it failed with EIO,
 * the copy "not in step" with the disk, before journal.c's copy_current
 * allowed for a checkpoint in flight).
 */
#include "layout.h"
#include "media.h"
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kura.h"

#include "check.h"

#define POOL_SIZE (16ull << 20) /* a journal of 256 KiB */
#define NOPS 40
#define BIG (300u * 1024)
#define BIG_FILE (1280u * 1024) /* overwritten whole: five times the journal */
/* Kill points tried per mode, spread over the calls: a disk pool's cost
 * a sync each, the memory back end's almost nothing. */
#define MAX_POINTS 32
#define MAX_STORE_POINTS 300

ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
int __real_fdatasync(int fd);

static long calls, die_at; /* in the dying process; die_at 0: count only */
static int die_after;
static long pause_at_head;          /* stop after this many head writes (0: never) */
static off_t head_off;              /* the journal head's place in the pool file */
static int to_parent[2], to_child[2]; /* pipes while stopped */
static int at_stores; /* the points are stores (memory back end), not system calls */
static struct { long done, calls; } *shared; /* MAP_SHARED with the parent */

static void call_point(int after)
{
	if (!after)
		calls++;
	if (die_at && calls == die_at && after == die_after)
		raise(SIGKILL);
}

#define AROUND(points, call)           \
	do {                           \
		if (points)            \
			call_point(0); \
		call;                  \
		if (points)            \
			call_point(1); \
	} while (0)

ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	ssize_t r;
	AROUND(!at_stores, r = __real_pwrite(fd, buf, n, off));
	if (pause_at_head && off == head_off && --pause_at_head == 0) {
		char c = 'p';
		if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1)
			_exit(5);
	}
	return r;
}

static int fail_syncs; /* the disk refuses: fdatasync fails with EIO */

int __wrap_fdatasync(int fd)
{
	if (fail_syncs) {
		errno = EIO;
		return -1;
	}
	int r;
	AROUND(!at_stores, r = __real_fdatasync(fd));
	return r;
}

static struct kura_mount_opts opts = { .persist = KURA_PERSIST_FILE };
static char pool[160];

/* Where the dying process mapped the pool: the tracer is told offsets,
 * and to die just after a store it makes the store itself. */
static char *pool_base(void)
{
	static char *base;
	char line[512];
	FILE *f = base ? NULL : fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, offset;
		int path_at = 0;
		if (sscanf(line, "%lx-%*x %*s %lx %*s %*s %n", &lo, &offset, &path_at) == 2 && path_at &&
		    offset == 0 && !strncmp(line + path_at, pool, strlen(pool)) && line[path_at + strlen(pool)] == '\n') {
			base = (char *)lo;
			break;
		}
	}
	if (f)
		fclose(f);
	if (!base)
		_exit(6);
	return base;
}

/* The memory back end's stores are inline, so its points come from the
 * media tracer, which sees every store to the pool before it lands. */
static void store_point(void *ctx, enum media_event ev, uint64_t off, const void *data, uint64_t len)
{
	(void)ctx;
	if (ev != MEDIA_STORE && ev != MEDIA_STORE64 && ev != MEDIA_NT)
		return;
	call_point(0);
	if (die_at && calls == die_at && die_after) {
		char *dst = pool_base() + off;
		if (ev == MEDIA_STORE64)
			__atomic_store_n((uint64_t *)dst, *(const uint64_t *)data, __ATOMIC_RELEASE);
		else
			memcpy(dst, data, len);
		call_point(1);
	}
}


static size_t size_of(int i)
{
	return i % 4 == 0 ? BIG : (size_t)(i * 1237) % 20000;
}

static unsigned char pattern(size_t at, int i)
{
	return (unsigned char)(at * 31 + (at >> 12) + (size_t)i * 101);
}

/* The names the workload's op i touches, and what it leaves: /f<i> made,
 * /f<i-2> unlinked (i % 5 == 4), /f<i-1> renamed to /g<i-1> (i % 7 == 6),
 * /f<i-3> cut to half its length (i % 10 == 9), /big overwritten whole
 * with op i's bytes in one write (i % 6 == 5: more than the journal holds),
 * /d<i> made with a file in it and /d<i-9> emptied and removed
 * (i % 9 == 8). */
struct model {
	int f[NOPS], g[NOPS], d[NOPS]; /* exists */
	size_t len[NOPS];
	int big; /* the op whose bytes /big holds */
};

static void model_op(struct model *m, int i)
{
	m->f[i] = 1;
	m->len[i] = size_of(i);
	if (i % 5 == 4 && i >= 2)
		m->f[i - 2] = 0;
	if (i % 7 == 6 && m->f[i - 1])
		m->f[i - 1] = 0, m->g[i - 1] = 1;
	if (i % 10 == 9 && m->f[i - 3])
		m->len[i - 3] /= 2;
	if (i % 6 == 5)
		m->big = i;
	if (i % 9 == 8) {
		m->d[i] = 1;
		if (i >= 9)
			m->d[i - 9] = 0;
	}
}

static int touches(int op, int i)
{
	return op < NOPS && (i == op || (op % 5 == 4 && i == op - 2) || (op % 7 == 6 && i == op - 1) ||
			     (op % 10 == 9 && i == op - 3) || (op % 9 == 8 && i == op - 9));
}

static int write_file(kura_fs *fs, const char *path, size_t len, int i, int sync)
{
	unsigned char *b = malloc(len + 1);
	for (size_t at = 0; at < len; at++)
		b[at] = pattern(at, i);
	int fd = kura_open(fs, path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	ssize_t n = fd >= 0 ? kura_write(fs, fd, b, len) : fd;
	int err = n == (ssize_t)len ? 0 : n < 0 ? (int)n : -EIO;
	if (!err && sync)
		err = kura_fsync(fs, fd);
	if (fd >= 0)
		kura_close(fs, fd);
	free(b);
	return err;
}

static int overwrite_big(kura_fs *fs, int i)
{
	unsigned char *b = malloc(BIG_FILE);
	for (size_t at = 0; at < BIG_FILE; at++)
		b[at] = pattern(at, i);
	int fd = kura_open(fs, "/big", O_CREAT | O_WRONLY, 0644);
	ssize_t n = fd >= 0 ? kura_pwrite(fs, fd, b, BIG_FILE, 0) : fd;
	if (fd >= 0)
		kura_close(fs, fd);
	free(b);
	return n == (ssize_t)BIG_FILE ? 0 : n < 0 ? (int)n : -EIO;
}

static void workload(kura_fs *fs)
{
	char a[32], b[32];
	if (overwrite_big(fs, -1))
		_exit(3);
	for (int i = 0; i < NOPS; i++) {
		snprintf(a, sizeof a, "/f%d", i);
		if (write_file(fs, a, size_of(i), i, i % 3 == 2))
			_exit(3);
		if (i % 5 == 4 && i >= 2) {
			snprintf(a, sizeof a, "/f%d", i - 2);
			kura_unlink(fs, a); /* may have been renamed: ENOENT is fine */
		}
		if (i % 7 == 6) {
			snprintf(a, sizeof a, "/f%d", i - 1);
			snprintf(b, sizeof b, "/g%d", i - 1);
			kura_rename(fs, a, b, 0);
		}
		if (i % 10 == 9) {
			snprintf(a, sizeof a, "/f%d", i - 3);
			kura_truncate(fs, a, (off_t)(size_of(i - 3) / 2)); /* ENOENT if gone */
		}
		if (i % 6 == 5 && overwrite_big(fs, i))
			_exit(3);
		if (i % 9 == 8) {
			snprintf(a, sizeof a, "/d%d", i);
			snprintf(b, sizeof b, "/d%d/x", i);
			if (kura_mkdir(fs, a, 0755) || write_file(fs, b, 100, i, 0))
				_exit(3);
			if (i >= 9) {
				snprintf(a, sizeof a, "/d%d", i - 9);
				snprintf(b, sizeof b, "/d%d/x", i - 9);
				if (kura_unlink(fs, b) || kura_rmdir(fs, a))
					_exit(3);
			}
		}
		shared->done = i + 1;
	}
}

static void dying_process(void)
{
	int e = 0;
	if (at_stores)
		media_mount_tracer.event = store_point;
	kura_fs *fs = kura_mount(pool, &opts, &e);
	if (!fs)
		_exit(2);
	shared->done = 0;
	calls = 0;
	workload(fs);
	shared->calls = calls;
	kura_unmount(fs);
	_exit(0);
}

static void check_file(kura_fs *fs, const char *path, int i, int exists, size_t len, const char *when)
{
	struct stat st;
	int r = kura_stat(fs, path, &st);
	if (!exists) {
		CHECK(r == -ENOENT, "%s: %s exists (%d)", when, path, r);
		return;
	}
	unsigned char *buf = malloc(len + 1);
	int fd = kura_open(fs, path, O_RDONLY, 0);
	ssize_t n = fd >= 0 ? kura_pread(fs, fd, buf, len + 1, 0) : fd;
	size_t ok = 0;
	while (n == (ssize_t)len && ok < len && buf[ok] == pattern(ok, i))
		ok++;
	CHECK(n == (ssize_t)len && ok == len, "%s: %s: read %zd of %zu bytes, first wrong byte at %zu", when, path, n,
	      len, ok);
	if (fd >= 0)
		kura_close(fs, fd);
	free(buf);
}

/* Every name no op after the last completed one touched is as the model
 * of the completed ops says. */
static void check_model(kura_fs *fs, long done, const char *when)
{
	struct model m = { 0 };
	m.big = -1;
	for (int i = 0; i < done; i++)
		model_op(&m, i);
	for (int i = 0; i < NOPS; i++) {
		if (touches((int)done, i))
			continue;
		char a[32];
		snprintf(a, sizeof a, "/f%d", i);
		check_file(fs, a, i, m.f[i], m.len[i], when);
		snprintf(a, sizeof a, "/g%d", i);
		check_file(fs, a, i, m.g[i], m.len[i], when);
		snprintf(a, sizeof a, "/d%d/x", i);
		check_file(fs, a, i, m.d[i], 100, when);
	}
	if (done > 0 && done % 6 != 5) /* before op 0: its first write in flight */
		check_file(fs, "/big", m.big, 1, BIG_FILE, when);
}

static void fsck_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("fsck: %s\n", line);
}

static void new_pool(void)
{
	if (kura_mkfs(pool, POOL_SIZE, 1) < 0) {
		fprintf(stderr, "mkfs %s: %s\n", pool, kura_last_error());
		exit(1);
	}
}

/* Returns the calls the dying process made (all of them when die_at is 0). */
static long run_case(long at, int after, int survivor)
{
	char when[96];
	snprintf(when, sizeof when, "%s, death at %s %ld (%s it), %s",
		 at_stores ? "memory" : opts.sync == KURA_SYNC_OP ? "op mode" : "fsync mode",
		 at_stores ? "store" : "call", at, after ? "after" : "before",
		 survivor ? "another mount alive" : "alone");
	new_pool();
	int e = 0;
	kura_fs *fs = survivor ? kura_mount(pool, &opts, &e) : NULL;
	CHECK(!survivor || fs, "%s: mount: %d", when, e);
	shared->calls = -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		die_at = at;
		die_after = after;
		dying_process(); /* not the parent's mount: a new one */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	long done = shared->done;
	CHECK(at ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL : WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "%s: the process ended with status %#x", when, st);
	if (!fs)
		fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "%s: mount after the death: %d (%s)", when, e, kura_last_error());
	if (!fs)
		return 0;
	check_model(fs, done, when);
	int err = write_file(fs, "/after", 64 * 1024, 99, 1);
	CHECK(err == 0, "%s: a synced write after the death: %d", when, err);
	err = kura_unmount(fs);
	CHECK(err == 0, "%s: the last unmount: %d", when, err);
	CHECK(kura_fsck(pool, 0, fsck_line, NULL) == 0, "%s: fsck", when);
	fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "%s: remount: %d", when, e);
	if (fs) {
		check_model(fs, done, when);
		kura_unmount(fs);
	}
	unlink(pool);
	return shared->calls;
}

/* The process stops after its nth head write while another mounts. */
static void run_pause_case(long nth)
{
	char when[96];
	snprintf(when, sizeof when, "%s, a mount while head write %ld waits",
		 opts.sync == KURA_SYNC_OP ? "op mode" : "fsync mode", nth);
	new_pool();
	struct kura_super sb;
	int pfd = open(pool, O_RDONLY);
	if (pfd < 0 || pread(pfd, &sb, sizeof sb, 0) != sizeof sb) {
		perror(pool);
		exit(1);
	}
	close(pfd);
	head_off = (off_t)(sb.log_block * KURA_BLOCK);
	int e = 0;
	kura_fs *fs = kura_mount(pool, &opts, &e); /* the newcomer is then not alone */
	CHECK(fs != NULL, "%s: mount: %d", when, e);
	if (!fs || pipe(to_parent) || pipe(to_child))
		return;
	fflush(NULL);
	pid_t worker = fork();
	if (worker == 0) {
		close(to_parent[0]);
		close(to_child[1]);
		pause_at_head = nth;
		dying_process(); /* does the whole workload, stopping once */
	}
	close(to_parent[1]);
	close(to_child[0]);
	char c;
	int stopped = read(to_parent[0], &c, 1) == 1;
	pid_t newcomer = -1;
	if (stopped) {
		fflush(NULL);
		newcomer = fork();
		if (newcomer == 0) {
			kura_fs *n = kura_mount(pool, &opts, &e);
			if (!n) {
				printf("%s: the newcomer's mount: %s\n", when, kura_last_error());
				_exit(1);
			}
			struct stat st;
			_exit(kura_stat(n, "/", &st) || kura_unmount(n) ? 2 : 0);
		}
		usleep(20000); /* it may wait for the pool's mutex: the worker may hold it */
		c = 'g';
		if (write(to_child[1], &c, 1) != 1)
			perror("pipe");
	}
	int st = 0;
	waitpid(worker, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the worker ended with status %#x", when, st);
	if (newcomer > 0) {
		waitpid(newcomer, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the newcomer ended with status %#x", when, st);
	}
	close(to_parent[0]);
	close(to_child[1]);
	check_model(fs, NOPS, when);
	CHECK(kura_unmount(fs) == 0, "%s: the last unmount", when);
	CHECK(kura_fsck(pool, 0, fsck_line, NULL) == 0, "%s: fsck", when);
	unlink(pool);
	CHECK(stopped, "%s: the workload wrote fewer heads", when);
}

/* The last unmount cannot write the pool home: it says so, and the next
 * mount finds everything in the working copy it kept. */
static void run_failing_unmount(void)
{
	const char *when = "an unmount whose syncs fail";
	new_pool();
	int e = 0;
	kura_fs *fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "%s: mount: %d", when, e);
	if (!fs)
		return;
	CHECK(write_file(fs, "/f0", size_of(0), 0, 0) == 0, "%s: write", when);
	fail_syncs = 1;
	int err = kura_unmount(fs);
	fail_syncs = 0;
	CHECK(err == -EIO, "%s: kura_unmount returned %d, not -EIO", when, err);
	fs = kura_mount(pool, &opts, &e);
	CHECK(fs != NULL, "%s: remount: %d", when, e);
	if (fs) {
		check_file(fs, "/f0", 0, 1, size_of(0), when);
		CHECK(kura_unmount(fs) == 0, "%s: the unmount once the disk works", when);
	}
	CHECK(kura_fsck(pool, 0, fsck_line, NULL) == 0, "%s: fsck", when);
	fs = kura_mount(pool, &opts, &e);
	if (fs) {
		check_file(fs, "/f0", 0, 1, size_of(0), "written home at last");
		kura_unmount(fs);
	}
	unlink(pool);
}

int main(void)
{
	snprintf(pool, sizeof pool, "death-%d.pool", (int)getpid());
	shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		return 1;
	int cases = 0;
	for (int mode = 0; mode < 3; mode++) {
		static const char *const names[] = { "disk pool, fsync mode", "disk pool, op mode", "memory back end" };
		opts.sync = mode == 1 ? KURA_SYNC_OP : KURA_SYNC_FSYNC;
		opts.persist = mode == 2 ? KURA_PERSIST_MEMORY : KURA_PERSIST_FILE;
		at_stores = mode == 2;
		/* The memory back end's pool in memory: many cheap deaths. */
		if (at_stores)
			snprintf(pool, sizeof pool, "/dev/shm/kura-death-%d.pool", (int)getpid());
		long total = run_case(0, 0, 1);
		CHECK(total > 0, "%s: the workload made no write of the pool", names[mode]);
		long step = total / (at_stores ? MAX_STORE_POINTS : MAX_POINTS) + 1;
		for (long at = 1; at <= total; at += step)
			for (int after = 0; after < 2; after++, cases++)
				run_case(at, after, (int)((at / step + after) % 2));
		printf("death_test: %s: %ld %s\n", names[mode], total, at_stores ? "stores" : "writes and syncs");
		/* Op mode checkpoints several times in the workload (fsync mode,
		 * whose fresh data goes home, fills no journal). */
		for (long nth = 1; mode == 1 && nth <= 3; nth++)
			run_pause_case(nth);
		if (mode < 2)
			run_failing_unmount();
	}
	printf("death_test: %d deaths: %d passed, %d failed\n", cases, passed, failed);
	return failed ? 1 : 0;
}
