/*
 * common.h — the harness every part of model_test shares: its limits, the
 * seeded random numbers, the global state, the failure report with the
 * recent ops, the comparison of a call's two results, and the teardown a
 * failure runs.  The parts are headers that model_test.c includes once, as
 * crash_test.c includes tests/crash/, so all of it stays static in one
 * translation unit and no name is exported.
 */
#ifndef MODEL_COMMON_H
#define MODEL_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "kura.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define POOL_SIZE (256ull << 20)
#define CHECK_EVERY 50      /* ops between full state comparisons */
#define REMOUNT_ONE_IN 500  /* chance of a remount per op */
#define NSLOTS 8            /* open descriptor pairs kept at once */
#define MAX_IO (300 * 1024) /* largest single read or write */
/* Above this many bytes of file data in the tree, generation switches to
 * small sizes so the pool never runs out of space (tmpfs would not) and the
 * checkpoints stay cheap. */
#define PRESSURE_BYTES (48ull << 20)

/* ---- random numbers: xoshiro256** seeded by splitmix64 ----------------- */

static uint64_t rng_s[4];

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rnd(void)
{
	uint64_t r = rotl(rng_s[1] * 5, 7) * 9, t = rng_s[1] << 17;
	rng_s[2] ^= rng_s[0];
	rng_s[3] ^= rng_s[1];
	rng_s[1] ^= rng_s[2];
	rng_s[0] ^= rng_s[3];
	rng_s[2] ^= t;
	rng_s[3] = rotl(rng_s[3], 45);
	return r;
}

static uint64_t rn(uint64_t n) { return n ? rnd() % n : 0; }
static int pct(int p) { return (int)rn(100) < p; }

/* ---- global state ------------------------------------------------------ */

static uint64_t seed;
static long nops = 100000, opno;
static long ncompares;
static kura_fs *fs;
static char pool_path[256], ref_root[256];
static size_t ref_root_len;
static int cmp_dir_nlink = 1;
static int pressure;
/* Set when the current op has a path ending in '/': see errs_agree(). */
static int trailing_slash;
static unsigned char data_buf[1 << 20]; /* random bytes written by writes */
static unsigned char *kbuf, *rbuf;      /* read buffers, MAX_IO each */

struct slot {
	int used;
	int kfd, rfd;
	int isdir;
	int flags;
	char path[600]; /* as opened, for messages only */
};
static struct slot slots[NSLOTS];

/* The last ops, printed on failure so a divergence can be read in context. */
#define LOGN 200
static char oplog[LOGN][700];
static char *cur_op;

static void cleanup(void);

static const char *en(long r)
{
	if (r >= 0)
		return "ok";
	const char *n = strerrorname_np((int)-r);
	return n ? n : "E?";
}

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "\nmodel: FAILED at op %ld, seed %" PRIu64 "\n", opno, seed);
	fprintf(stderr, "  op: %s\n  divergence: ", cur_op ? cur_op : "(setup)");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n  recent ops (oldest first):\n");
	for (long i = opno - LOGN + 1; i <= opno; i++)
		if (i >= 0 && oplog[i % LOGN][0])
			fprintf(stderr, "    #%ld %.300s\n", i, oplog[i % LOGN]);
	fprintf(stderr, "  reproduce: model_test %" PRIu64 " %ld\n", seed, opno + 1);
	if (!getenv("KURA_MODEL_KEEP"))
		cleanup();
	else
		fprintf(stderr, "  kept: pool %s, reference %s\n", pool_path, ref_root);
	exit(1);
}

/* Describes a step that is not one of the logged random ops. */
static char note_buf[200];
static void op_note(const char *what)
{
	snprintf(note_buf, sizeof note_buf, "%s", what);
	cur_op = note_buf;
}

static void __attribute__((format(printf, 1, 2))) op_desc(const char *fmt, ...)
{
	va_list ap;
	cur_op = oplog[opno % LOGN];
	va_start(ap, fmt);
	vsnprintf(cur_op, sizeof oplog[0], fmt, ap);
	va_end(ap);
}

/* Kernel result in kura's convention; call right after the system call. */
static long kres(long r) { return r < 0 ? -errno : r; }

/* Outcome tally per operation, printed with $KURA_MODEL_STATS set, to see
 * which error paths a seed actually reached. */
#define MAXKIND 48
static struct {
	const char *what;
	long ok, err[134];
} tally[MAXKIND];

static void count(const char *what, long r)
{
	int i = 0;
	while (i < MAXKIND - 1 && tally[i].what && strcmp(tally[i].what, what))
		i++;
	tally[i].what = what;
	if (r >= 0)
		tally[i].ok++;
	else if (-r < 134)
		tally[i].err[-r]++;
}

static void print_tally(void)
{
	for (int i = 0; i < MAXKIND && tally[i].what; i++) {
		printf("  %-18s ok %ld", tally[i].what, tally[i].ok);
		for (int e = 1; e < 134; e++)
			if (tally[i].err[e])
				printf(", %s %ld", strerrorname_np(e), tally[i].err[e]);
		printf("\n");
	}
}

/*
 * When a path ends in '/' and names something that is not a directory, POSIX
 * lists ENOTDIR while Linux answers EEXIST, EISDIR or ENOENT depending on the
 * call and on what else is wrong.  For such ops only failure vs success (and
 * the resulting state) is compared, not which errno.
 */
static int errs_agree(long k, long r)
{
	return k == r || (trailing_slash && k < 0 && r < 0);
}

static void cmp_ret(const char *what, long k, long r)
{
	count(what, r);
	if (!errs_agree(k, r))
		fail("%s: kura %ld (%s), reference %ld (%s)", what, k, en(k), r, en(r));
}

/* ---- setup and teardown ------------------------------------------------ */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(p);
	return 0;
}

static void cleanup(void)
{
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used) {
			if (fs)
				kura_close(fs, slots[i].kfd);
			close(slots[i].rfd);
			slots[i].used = 0;
		}
	if (fs)
		kura_unmount(fs);
	fs = NULL;
	unlink(pool_path);
	nftw(ref_root, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

#endif
