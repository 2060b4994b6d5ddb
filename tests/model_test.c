/*
 * model_test — randomized differential test of kura against the kernel.
 *
 * Every operation is applied twice: to a kura pool through kura.h and to a
 * reference directory tree on tmpfs through ordinary system calls.  Return
 * values and errno values must agree after every step, and the whole
 * observable state (names, types, modes, sizes, link counts, contents,
 * symlink targets, hard-link structure, open descriptors) must agree at
 * regular checkpoints and after every remount.
 *
 * usage: model_test [seed [ops]]
 *   seed: argv[1], else $KURA_MODEL_SEED, else derived from time and pid
 *   ops:  argv[2], else $KURA_MODEL_OPS, else 100000
 *   $KURA_MODEL_DIR_NLINK=0 skips the directory link-count comparison.
 *   $KURA_MODEL_STATS=1 prints, per operation, how often each outcome came.
 *   $KURA_MODEL_KEEP=1 leaves the pool and the reference tree after a failure.
 *
 * Runs as root in CI, where the kernel bypasses read/write permission checks
 * (only access(X_OK) on a file without any x bit fails); kura, mounted with
 * the process's ids, is expected to answer exactly the same.
 */
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

/* ---- paths ------------------------------------------------------------- */

static const char *dnames[] = {"d0", "d1", "d2", "d3"};
static const char *fnames[] = {"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"};
static char name255[256], name256[257];

static void kpath(char *out, size_t n, const char *rel)
{
	/* The engine resolves relative paths from the root too; use both forms. */
	if (rel[0] && rn(10) == 0)
		snprintf(out, n, "%s", rel);
	else
		snprintf(out, n, "/%s", rel);
}

static void rpath(char *out, size_t n, const char *rel)
{
	snprintf(out, n, "%s/%s", ref_root, rel);
}

static const char *final_name(void)
{
	int x = (int)rn(1000);
	if (x < 12)
		return name255;
	if (x < 18)
		return name256;
	if (x < 600)
		return fnames[rn(8)];
	return dnames[rn(4)];
}

/*
 * A random path relative to the root.  "." and at most one ".." appear, the
 * latter only after a real component: symlink targets never contain "." or
 * ".." components (see gen_target), so every real component resolves one
 * level or more below the root and ".." cannot climb out of it.  Outside
 * the root the reference would reach /dev/shm while kura stays at its root.
 */
static void gen_path(char *out, size_t n)
{
	int x = (int)rn(100);
	int depth = x < 40 ? 0 : x < 70 ? 1 : x < 90 ? 2 : 3;
	int real = 0, dots = 0;
	out[0] = 0;
	for (int i = 0; i < depth; i++) {
		const char *c;
		x = (int)rn(100);
		if (x < 3)
			c = ".";
		else if (x < 7 && real && !dots)
			c = "..", dots++;
		else if (x < 12)
			c = fnames[rn(8)], real++;
		else
			c = dnames[rn(4)], real++;
		size_t l = strlen(out);
		/* Repeated slashes are one separator. */
		snprintf(out + l, n - l, "%s%s", c, rn(50) ? "/" : "//");
	}
	size_t l = strlen(out);
	/* A trailing slash demands a directory (and follows a final symlink). */
	int slash = rn(33) == 0;
	trailing_slash |= slash;
	snprintf(out + l, n - l, "%s%s", final_name(), slash ? "/" : "");
}

/* Symlink targets: relative names-only paths, absolute ones (the reference
 * gets ref_root prefixed), a self-reference for loops, or a long one. */
static void gen_target(char *out, size_t n, const char *linkrel)
{
	int x = (int)rn(100);
	if (x < 8) {
		const char *base = strrchr(linkrel, '/');
		snprintf(out, n, "%.255s", base ? base + 1 : linkrel);
		return;
	}
	if (x < 10) {
		size_t len = 200 + rn(800);
		if (len >= n)
			len = n - 1;
		for (size_t i = 0; i < len; i++)
			out[i] = (i % 2) ? '/' : 'q';
		out[len - 1] = 'q';
		out[len] = 0;
		return;
	}
	out[0] = 0;
	if (x < 22)
		snprintf(out, n, "/");
	int comps = 1 + (int)rn(3);
	for (int i = 0; i < comps; i++) {
		size_t l = strlen(out);
		const char *c = (i == comps - 1 && pct(60)) ? fnames[rn(8)] : dnames[rn(4)];
		snprintf(out + l, n - l, "%s%s", i ? "/" : "", c);
	}
}

/* The reference stores absolute targets under ref_root; map back. */
static const char *ref_target_to_model(const char *t)
{
	if (strncmp(t, ref_root, ref_root_len) == 0 && t[ref_root_len] == '/')
		return t + ref_root_len;
	return t;
}

/* ---- descriptors ------------------------------------------------------- */

static int free_slot(void)
{
	for (int i = 0; i < NSLOTS; i++)
		if (!slots[i].used)
			return i;
	return -1;
}

static int pick_slot(void)
{
	int idx[NSLOTS], n = 0;
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used)
			idx[n++] = i;
	return n ? idx[rn(n)] : -1;
}

static void close_slot(int i)
{
	long k = kura_close(fs, slots[i].kfd);
	long r = kres(close(slots[i].rfd));
	slots[i].used = 0;
	cmp_ret("close", k, r);
}

static void close_all(void)
{
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used)
			close_slot(i);
}

static off_t ref_size(int rfd)
{
	struct stat st;
	if (fstat(rfd, &st) < 0)
		fail("reference fstat: %s", strerror(errno));
	return st.st_size;
}

/* ---- state comparison -------------------------------------------------- */

struct inopair {
	uint64_t k, r;
	char rel[64];
};
static struct inopair *pairs;
static size_t npairs, cappairs;
static uint64_t tree_bytes;

struct dent {
	char name[256];
	unsigned char type;
	uint64_t ino;
};

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dent *)a)->name, ((const struct dent *)b)->name);
}

static int pair_cmp_k(const void *a, const void *b)
{
	const struct inopair *x = a, *y = b;
	return x->k < y->k ? -1 : x->k > y->k ? 1 : (x->r < y->r ? -1 : x->r > y->r);
}

static int pair_cmp_r(const void *a, const void *b)
{
	const struct inopair *x = a, *y = b;
	return x->r < y->r ? -1 : x->r > y->r ? 1 : (x->k < y->k ? -1 : x->k > y->k);
}

static const char *type_name(mode_t m)
{
	return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static size_t list_kura(const char *rel, struct dent **out)
{
	char p[4096];
	snprintf(p, sizeof p, "/%s", rel);
	int err = 0;
	kura_dir *d = kura_opendir(fs, p, &err);
	if (!d)
		fail("checkpoint: kura_opendir(%s) failed: %s", p, en(err ? err : -EIO));
	size_t n = 0, cap = 16;
	struct dent *v = malloc(cap * sizeof *v);
	struct kura_dirent e;
	int r, pos = 0;
	while ((r = kura_readdir(d, &e)) == 1) {
		/* "." and ".." are documented to come first. */
		if (pos == 0 || pos == 1) {
			const char *want = pos == 0 ? "." : "..";
			if (strcmp(e.name, want))
				fail("checkpoint: readdir(%s) entry %d is '%s', expected '%s'", p, pos, e.name, want);
			if (e.type != DT_DIR)
				fail("checkpoint: readdir(%s) '%s' has type %d", p, want, e.type);
			pos++;
			continue;
		}
		pos++;
		if (n == cap)
			v = realloc(v, (cap *= 2) * sizeof *v);
		snprintf(v[n].name, sizeof v[n].name, "%s", e.name);
		v[n].type = e.type;
		v[n].ino = e.ino;
		n++;
	}
	if (r < 0)
		fail("checkpoint: kura_readdir(%s) failed: %s", p, en(r));
	if (pos < 2)
		fail("checkpoint: readdir(%s) returned no '.'/'..'", p);
	kura_closedir(d);
	qsort(v, n, sizeof *v, dent_cmp);
	*out = v;
	return n;
}

static size_t list_ref(const char *rel, struct dent **out)
{
	char p[4096];
	rpath(p, sizeof p, rel);
	DIR *d = opendir(p);
	if (!d)
		fail("checkpoint: reference opendir(%s): %s", p, strerror(errno));
	size_t n = 0, cap = 16;
	struct dent *v = malloc(cap * sizeof *v);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap)
			v = realloc(v, (cap *= 2) * sizeof *v);
		snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
		v[n].type = e->d_type;
		n++;
	}
	closedir(d);
	qsort(v, n, sizeof *v, dent_cmp);
	*out = v;
	return n;
}

static ssize_t kura_read_full(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = kura_read(fs, fd, b + got, n - got);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static ssize_t ref_read_full(int fd, unsigned char *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static void cmp_contents(const char *rel)
{
	char kp[4200], rp[4400];
	snprintf(kp, sizeof kp, "/%s", rel);
	rpath(rp, sizeof rp, rel);
	int kfd = kura_open(fs, kp, O_RDONLY, 0);
	if (kfd < 0)
		fail("checkpoint: kura_open(%s, O_RDONLY) failed: %s", kp, en(kfd));
	int rfd = open(rp, O_RDONLY);
	if (rfd < 0)
		fail("checkpoint: reference open(%s): %s", rp, strerror(errno));
	uint64_t off = 0;
	for (;;) {
		ssize_t k = kura_read_full(kfd, kbuf, MAX_IO);
		ssize_t r = ref_read_full(rfd, rbuf, MAX_IO);
		if (k < 0)
			fail("checkpoint: kura_read(%s) at %" PRIu64 " failed: %s", kp, off, en(k));
		if (k != r)
			fail("checkpoint: %s: kura read %zd bytes at %" PRIu64 ", reference %zd", kp, k, off, r);
		if (memcmp(kbuf, rbuf, (size_t)k)) {
			size_t i = 0;
			while (kbuf[i] == rbuf[i])
				i++;
			fail("checkpoint: %s: contents differ at byte %" PRIu64 ": kura 0x%02x, reference 0x%02x",
			     kp, off + i, kbuf[i], rbuf[i]);
		}
		if (k == 0)
			break;
		off += (uint64_t)k;
	}
	kura_close(fs, kfd);
	close(rfd);
}

static void cmp_stat(const char *what, const struct stat *ks, const struct stat *rs, off_t lnk_adjust)
{
	if ((ks->st_mode & S_IFMT) != (rs->st_mode & S_IFMT))
		fail("%s: kura type %s, reference %s", what, type_name(ks->st_mode), type_name(rs->st_mode));
	if ((ks->st_mode & 07777) != (rs->st_mode & 07777) && !S_ISLNK(rs->st_mode))
		fail("%s: kura mode %04o, reference %04o", what, ks->st_mode & 07777, rs->st_mode & 07777);
	if (S_ISREG(rs->st_mode) && ks->st_size != rs->st_size)
		fail("%s: kura size %lld, reference %lld", what, (long long)ks->st_size, (long long)rs->st_size);
	if (S_ISLNK(rs->st_mode) && ks->st_size != rs->st_size - lnk_adjust)
		fail("%s: symlink size: kura %lld, reference %lld", what, (long long)ks->st_size,
		     (long long)(rs->st_size - lnk_adjust));
	if ((!S_ISDIR(rs->st_mode) || cmp_dir_nlink) && ks->st_nlink != rs->st_nlink)
		fail("%s: kura nlink %lu, reference %lu%s", what, (unsigned long)ks->st_nlink,
		     (unsigned long)rs->st_nlink,
		     S_ISDIR(rs->st_mode) ? " (directory; KURA_MODEL_DIR_NLINK=0 skips this)" : "");
}

/* Reference symlink size counts the ref_root prefix of absolute targets. */
static off_t ref_link_adjust(const char *rp)
{
	char t[8192];
	ssize_t n = readlink(rp, t, sizeof t - 1);
	if (n < 0)
		return 0;
	t[n] = 0;
	return ref_target_to_model(t) != t ? (off_t)ref_root_len : 0;
}

static void cmp_tree(const char *rel, int depth)
{
	struct dent *kv, *rv;
	size_t kn = list_kura(rel, &kv), rn_ = list_ref(rel, &rv);
	for (size_t i = 0, j = 0; i < kn || j < rn_;) {
		int c = i == kn ? 1 : j == rn_ ? -1 : strcmp(kv[i].name, rv[j].name);
		if (c < 0)
			fail("checkpoint: '/%s%s%.80s' exists in kura only", rel, *rel ? "/" : "", kv[i].name);
		if (c > 0)
			fail("checkpoint: '/%s%s%.80s' exists in the reference only", rel, *rel ? "/" : "", rv[j].name);
		if (i + 1 < kn && !strcmp(kv[i].name, kv[i + 1].name))
			fail("checkpoint: kura readdir(/%s) returns '%.80s' twice", rel, kv[i].name);
		i++, j++;
	}
	for (size_t i = 0; i < kn; i++) {
		char crel[4096], kp[4200], rp[4400];
		snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", kv[i].name);
		snprintf(kp, sizeof kp, "/%s", crel);
		rpath(rp, sizeof rp, crel);
		struct stat ks, rs;
		int k = kura_lstat(fs, kp, &ks);
		if (k < 0)
			fail("checkpoint: kura_lstat(%s) of a listed entry failed: %s", kp, en(k));
		if (lstat(rp, &rs) < 0)
			fail("checkpoint: reference lstat(%s): %s", rp, strerror(errno));
		char what[4300];
		snprintf(what, sizeof what, "checkpoint: lstat %s", kp);
		cmp_stat(what, &ks, &rs, S_ISLNK(rs.st_mode) ? ref_link_adjust(rp) : 0);
		unsigned char want = S_ISREG(ks.st_mode) ? DT_REG : S_ISDIR(ks.st_mode) ? DT_DIR : DT_LNK;
		if (kv[i].type != want)
			fail("checkpoint: readdir type of %s is %d, lstat says %s", kp, kv[i].type, type_name(ks.st_mode));
		if (kv[i].ino != (uint64_t)ks.st_ino)
			fail("checkpoint: readdir ino of %s is %" PRIu64 ", lstat says %" PRIu64, kp, kv[i].ino,
			     (uint64_t)ks.st_ino);
		if (S_ISREG(rs.st_mode)) {
			tree_bytes += (uint64_t)rs.st_size;
			cmp_contents(crel);
			if (npairs == cappairs)
				pairs = realloc(pairs, (cappairs = cappairs ? 2 * cappairs : 256) * sizeof *pairs);
			pairs[npairs].k = ks.st_ino;
			pairs[npairs].r = rs.st_ino;
			snprintf(pairs[npairs].rel, sizeof pairs[npairs].rel, "%.63s", crel);
			npairs++;
		} else if (S_ISLNK(rs.st_mode)) {
			char kt[8192], rt[8192];
			ssize_t kl = kura_readlink(fs, kp, kt, sizeof kt - 1);
			ssize_t rl = readlink(rp, rt, sizeof rt - 1);
			if (kl < 0 || rl < 0)
				fail("checkpoint: readlink(%s): kura %s, reference %s", kp, en(kl), rl < 0 ? strerror(errno) : "ok");
			kt[kl] = rt[rl] = 0;
			if (strcmp(kt, ref_target_to_model(rt)))
				fail("checkpoint: symlink %s: kura target '%.100s', reference '%.100s'", kp, kt,
				     ref_target_to_model(rt));
		} else if (S_ISDIR(rs.st_mode)) {
			cmp_tree(crel, depth + 1);
		}
	}
	free(kv);
	free(rv);
}

/* Remove a subtree on both sides, comparing every step. */
static void remove_both(const char *rel)
{
	char kp[4200], rp[4400];
	snprintf(kp, sizeof kp, "/%s", rel);
	rpath(rp, sizeof rp, rel);
	struct stat rs;
	if (lstat(rp, &rs) < 0)
		fail("prune: reference lstat(%s): %s", rp, strerror(errno));
	if (S_ISDIR(rs.st_mode)) {
		struct dent *rv;
		size_t n = list_ref(rel, &rv);
		for (size_t i = 0; i < n; i++) {
			char crel[4096];
			snprintf(crel, sizeof crel, "%s/%s", rel, rv[i].name);
			remove_both(crel);
		}
		free(rv);
		cmp_ret("prune: rmdir", kura_rmdir(fs, kp), kres(rmdir(rp)));
	} else {
		cmp_ret("prune: unlink", kura_unlink(fs, kp), kres(unlink(rp)));
	}
}

/*
 * Renames can nest directories arbitrarily deep, but generated paths reach
 * only four levels, so deeper entries would pile up out of reach of every
 * op (and out of reach of unlink when space runs short).  Entries at depth 5
 * and below are removed on both sides at each checkpoint.
 */
static void prune(const char *rel, int depth)
{
	struct dent *rv;
	size_t n = list_ref(rel, &rv);
	for (size_t i = 0; i < n; i++) {
		char crel[4096];
		snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", rv[i].name);
		if (depth + 1 >= 5)
			remove_both(crel);
		else if (rv[i].type == DT_DIR)
			prune(crel, depth + 1);
	}
	free(rv);
}

static void cmp_slots(void)
{
	for (int i = 0; i < NSLOTS; i++) {
		if (!slots[i].used)
			continue;
		struct stat ks, rs;
		int k = kura_fstat(fs, slots[i].kfd, &ks);
		if (k < 0)
			fail("checkpoint: kura_fstat(fd %d, '%s') failed: %s", slots[i].kfd, slots[i].path, en(k));
		if (fstat(slots[i].rfd, &rs) < 0)
			fail("checkpoint: reference fstat: %s", strerror(errno));
		char what[800];
		snprintf(what, sizeof what, "checkpoint: fstat of open fd %d (opened as %s)", slots[i].kfd, slots[i].path);
		cmp_stat(what, &ks, &rs, 0);
		if (S_ISREG(rs.st_mode)) {
			off_t ko = kura_lseek(fs, slots[i].kfd, 0, SEEK_CUR);
			off_t ro = lseek(slots[i].rfd, 0, SEEK_CUR);
			if (ko != ro)
				fail("checkpoint: offset of fd %d (%s): kura %lld, reference %lld", slots[i].kfd,
				     slots[i].path, (long long)ko, (long long)ro);
		}
	}
}

static void check_state(void)
{
	npairs = 0;
	tree_bytes = 0;
	trailing_slash = 0;
	struct stat ks, rs;
	int k = kura_stat(fs, "/", &ks);
	if (k < 0)
		fail("checkpoint: kura_stat(/) failed: %s", en(k));
	if (stat(ref_root, &rs) < 0)
		fail("checkpoint: reference stat(root): %s", strerror(errno));
	cmp_stat("checkpoint: stat /", &ks, &rs, 0);
	cmp_tree("", 0);
	cmp_slots();
	/* Two names share an inode in kura iff they share one in the reference:
	 * the ino mapping must be a bijection on the names seen. */
	if (npairs > 1) /* qsort of an empty (NULL) array is undefined */
		qsort(pairs, npairs, sizeof *pairs, pair_cmp_k);
	for (size_t i = 1; i < npairs; i++)
		if (pairs[i].k == pairs[i - 1].k && pairs[i].r != pairs[i - 1].r)
			fail("checkpoint: /%s and /%s are one inode in kura, two in the reference", pairs[i - 1].rel,
			     pairs[i].rel);
	if (npairs > 1)
		qsort(pairs, npairs, sizeof *pairs, pair_cmp_r);
	for (size_t i = 1; i < npairs; i++)
		if (pairs[i].r == pairs[i - 1].r && pairs[i].k != pairs[i - 1].k)
			fail("checkpoint: /%s and /%s are one inode in the reference, two in kura", pairs[i - 1].rel,
			     pairs[i].rel);
	pressure = tree_bytes > PRESSURE_BYTES;
	ncompares++;
	prune("", 0);
}

/* ---- mount / remount --------------------------------------------------- */

static void fsck_report(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "  fsck: %s\n", line);
}

static void do_mount(void)
{
	struct kura_mount_opts o = {0};
	int err = 0;
	fs = kura_mount(pool_path, &o, &err);
	if (!fs)
		fail("kura_mount(%s) failed: %s (%s)", pool_path, en(err ? err : -EIO), kura_last_error());
}

static void do_unmount_fsck(void)
{
	int r = kura_unmount(fs);
	fs = NULL;
	if (r < 0)
		fail("kura_unmount failed: %s", en(r));
	r = kura_fsck(pool_path, 0, fsck_report, NULL);
	if (r != 0)
		fail("kura_fsck after unmount returned %d (problems listed above)", r);
}

static void op_remount(void)
{
	op_desc("remount (close all descriptors, unmount, fsck, mount)");
	/* Kernel descriptors go too, so the open sets stay identical. */
	close_all();
	do_unmount_fsck();
	do_mount();
	check_state();
}

/* ---- generators -------------------------------------------------------- */

static size_t gen_size(void)
{
	int x = (int)rn(100);
	if (x < 15)
		return rn(4);
	if (x < 40)
		return 1 + rn(100);
	if (x < 55)
		return 4090 + rn(12);
	if (x < 65)
		return 8189 + rn(7);
	if (x < 85 || pressure)
		return 1 + rn(16384);
	return 1 + rn(MAX_IO);
}

static off_t gen_off(off_t cur)
{
	int x = (int)rn(100);
	if (x < 20)
		return 0;
	if (x < 45)
		return (off_t)rn((uint64_t)cur + 1);
	if (x < 60) {
		off_t o = (off_t)(rn(64) * 4096) + (off_t)rn(7) - 3;
		return o < 0 ? 0 : o;
	}
	if (x < 75)
		return cur + (off_t)rn(10);
	if (x < 90 || pressure)
		return (off_t)rn(1 << 20);
	if (x < 96)
		return (off_t)rn(4 << 20); /* far beyond EOF: sparse */
	if (x < 98)
		return -1 - (off_t)rn(100);
	return cur;
}

static int gen_mode(int dir)
{
	static const int common[] = {0644, 0600, 0755, 0700, 0666, 0777, 0400, 0444, 0000, 0311};
	if (pct(80))
		return common[rn(sizeof common / sizeof common[0])];
	/* mkdir drops S_ISUID/S_ISGID on Linux when the parent is not setgid;
	 * keep directories to permission bits and sticky so both agree. */
	return (int)rn(dir ? 01777 + 1 : 07777 + 1);
}

/* ---- operations -------------------------------------------------------- */

static void op_open(void)
{
	int s = free_slot();
	if (s < 0) {
		s = pick_slot();
		close_slot(s);
	}
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	static const int acc[] = {O_RDONLY, O_WRONLY, O_RDWR, O_RDWR};
	int flags = acc[rn(4)];
	if (pct(50))
		flags |= O_CREAT;
	if ((flags & O_CREAT) && pct(25))
		flags |= O_EXCL;
	if (pct(12))
		flags |= O_TRUNC;
	if (pct(20))
		flags |= O_APPEND;
	if (pct(8))
		flags |= O_DIRECTORY;
	if (pct(8))
		flags |= O_NOFOLLOW;
	/* Opening a directory needs O_RDONLY and no O_CREAT; make that common
	 * enough that directory descriptors are exercised. */
	if (pct(5))
		flags = O_RDONLY | O_DIRECTORY;
	int mode = gen_mode(0);
	op_desc("open %s flags=%#o mode=%04o", kp, flags, mode);
	long k = kura_open(fs, kp, flags, (mode_t)mode);
	long r = kres(open(rp, flags | O_CLOEXEC, mode));
	if ((k >= 0) != (r >= 0)) {
		if (k >= 0)
			kura_close(fs, (int)k);
		if (r >= 0)
			close((int)r);
		fail("open: kura %ld (%s), reference %ld (%s)", k, en(k), r, en(r));
	}
	if (k < 0) {
		cmp_ret("open", k, r);
		return;
	}
	count("open", r);
	struct stat st;
	fstat((int)r, &st);
	slots[s] = (struct slot){.used = 1, .kfd = (int)k, .rfd = (int)r, .isdir = S_ISDIR(st.st_mode), .flags = flags};
	snprintf(slots[s].path, sizeof slots[s].path, "%.590s", kp);
	snprintf(cur_op + strlen(cur_op), sizeof oplog[0] - strlen(cur_op), " -> kfd %ld", k);
}

static void op_close(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	int kfd = slots[s].kfd, rfd = slots[s].rfd;
	op_desc("close kfd %d (%s)", kfd, slots[s].path);
	close_slot(s);
	/* The numbers are now dangling on both sides: EBADF expected.  A dup of
	 * the same description in another slot has a different number. */
	char b[4];
	long k = kura_read(fs, kfd, b, sizeof b);
	long r = kres(read(rfd, b, sizeof b));
	cmp_ret("read after close", k, r);
}

static void op_dup(void)
{
	int s = pick_slot(), d = free_slot();
	if (s < 0 || d < 0)
		return;
	op_desc("dup kfd %d (%s)", slots[s].kfd, slots[s].path);
	long k = kura_dup(fs, slots[s].kfd);
	long r = kres(dup(slots[s].rfd));
	if ((k >= 0) != (r >= 0)) {
		if (r >= 0)
			close((int)r);
		fail("dup: kura %ld (%s), reference %ld (%s)", k, en(k), r, en(r));
	}
	if (k < 0) {
		cmp_ret("dup", k, r);
		return;
	}
	slots[d] = slots[s];
	slots[d].kfd = (int)k;
	slots[d].rfd = (int)r;
	snprintf(cur_op + strlen(cur_op), sizeof oplog[0] - strlen(cur_op), " -> kfd %ld", k);
}

static void op_write(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	size_t n = gen_size();
	const unsigned char *src = data_buf + rn(sizeof data_buf - n);
	long k, r;
	if (pct(50)) {
		op_desc("write kfd %d (%s) len %zu", slots[s].kfd, slots[s].path, n);
		k = kura_write(fs, slots[s].kfd, src, n);
		r = kres(write(slots[s].rfd, src, n));
	} else {
		off_t off = gen_off(slots[s].isdir ? 0 : ref_size(slots[s].rfd));
		/* On an O_APPEND descriptor Linux's pwrite appends whatever the
		 * offset (pwrite(2), BUGS), where POSIX would honour it; kura sides
		 * with Linux, so this is compared like any other call. */
		op_desc("pwrite kfd %d (%s) len %zu off %lld%s", slots[s].kfd, slots[s].path, n, (long long)off,
			(slots[s].flags & O_APPEND) ? " (O_APPEND)" : "");
		k = kura_pwrite(fs, slots[s].kfd, src, n, off);
		r = kres(pwrite(slots[s].rfd, src, n, off));
	}
	cmp_ret("write", k, r);
}

static void op_read(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	size_t n = gen_size();
	long k, r;
	memset(kbuf, 0xa5, n);
	memset(rbuf, 0xa5, n);
	if (pct(50)) {
		op_desc("read kfd %d (%s) len %zu", slots[s].kfd, slots[s].path, n);
		k = kura_read(fs, slots[s].kfd, kbuf, n);
		r = kres(read(slots[s].rfd, rbuf, n));
	} else {
		off_t off = gen_off(slots[s].isdir ? 0 : ref_size(slots[s].rfd));
		op_desc("pread kfd %d (%s) len %zu off %lld", slots[s].kfd, slots[s].path, n, (long long)off);
		k = kura_pread(fs, slots[s].kfd, kbuf, n, off);
		r = kres(pread(slots[s].rfd, rbuf, n, off));
	}
	cmp_ret("read", k, r);
	if (k > 0 && memcmp(kbuf, rbuf, (size_t)k)) {
		size_t i = 0;
		while (kbuf[i] == rbuf[i])
			i++;
		fail("read: bytes differ at buffer offset %zu: kura 0x%02x, reference 0x%02x", i, kbuf[i], rbuf[i]);
	}
}

static void check_seek_data_hole(int s, int whence, off_t from, off_t kpos)
{
	/* Hole granularity differs (tmpfs pages vs kura blocks), so the positions
	 * may differ; check only what any correct answer satisfies, against the
	 * reference's bytes. */
	char pp[64];
	snprintf(pp, sizeof pp, "/proc/self/fd/%d", slots[s].rfd);
	int fd = open(pp, O_RDONLY);
	if (fd < 0)
		fail("reopen reference via %s: %s", pp, strerror(errno));
	off_t size = ref_size(fd);
	if (whence == SEEK_DATA) {
		if (kpos < from || kpos >= size)
			fail("SEEK_DATA from %lld returned %lld, outside [from, size=%lld)", (long long)from,
			     (long long)kpos, (long long)size);
		for (off_t o = from; o < kpos;) {
			size_t n = (size_t)(kpos - o < MAX_IO ? kpos - o : MAX_IO);
			ssize_t got = pread(fd, rbuf, n, o);
			if (got <= 0)
				break;
			for (ssize_t i = 0; i < got; i++)
				if (rbuf[i])
					fail("SEEK_DATA from %lld returned %lld, but byte %lld is nonzero", (long long)from,
					     (long long)kpos, (long long)(o + i));
			o += got;
		}
	} else {
		if (kpos < from || kpos > size)
			fail("SEEK_HOLE from %lld returned %lld, outside [from, size=%lld]", (long long)from,
			     (long long)kpos, (long long)size);
		unsigned char c = 0;
		if (kpos < size && pread(fd, &c, 1, kpos) == 1 && c)
			fail("SEEK_HOLE from %lld returned %lld, but that byte is nonzero", (long long)from,
			     (long long)kpos);
	}
	close(fd);
}

static void op_lseek(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	/* Directory offsets are opaque cookies with unrelated values on each side. */
	if (slots[s].isdir)
		return;
	off_t size = ref_size(slots[s].rfd);
	static const int wh[] = {SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE};
	int w = wh[rn(5)];
	off_t off;
	switch (w) {
	case SEEK_SET:
		off = pct(5) ? -1 - (off_t)rn(10) : gen_off(size);
		break;
	case SEEK_CUR:
	case SEEK_END:
		off = (off_t)rn(10000) - 5000;
		break;
	default:
		off = pct(70) ? (off_t)rn((uint64_t)size + 1) : gen_off(size);
		break;
	}
	static const char *wn[] = {"SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"};
	op_desc("lseek kfd %d (%s) %lld %s", slots[s].kfd, slots[s].path, (long long)off, wn[w]);
	off_t from = lseek(slots[s].rfd, 0, SEEK_CUR);
	(void)from;
	long k = kura_lseek(fs, slots[s].kfd, off, w);
	long r = kres(lseek(slots[s].rfd, off, w));
	if (w == SEEK_DATA || w == SEEK_HOLE) {
		count("lseek data/hole", r);
		/* Preallocated blocks are data to kura but holes to tmpfs; both
		 * answers are allowed, so a reference ENXIO only obliges kura's
		 * answer to agree with the contents (checked below). */
		int prealloc_ok = w == SEEK_DATA && r == -ENXIO && k >= 0;
		if ((k < 0 || r < 0) && k != r && !prealloc_ok)
			fail("lseek %s: kura %ld (%s), reference %ld (%s)", wn[w], k, en(k), r, en(r));
		if (k >= 0) {
			check_seek_data_hole(s, w, off, k);
			/* Resynchronise the shared offset to the reference's. */
			long want = r >= 0 ? r : (long)from;
			long k2 = kura_lseek(fs, slots[s].kfd, want, SEEK_SET);
			cmp_ret("lseek resync", k2, want);
		}
		return;
	}
	cmp_ret("lseek", k, r);
}

static void op_truncate(void)
{
	int s = pick_slot();
	off_t cur = 0;
	int by_fd = s >= 0 && pct(50);
	if (by_fd && !slots[s].isdir)
		cur = ref_size(slots[s].rfd);
	off_t len;
	int x = (int)rn(100);
	if (x < 25)
		len = 0;
	else if (x < 50)
		len = (off_t)rn((uint64_t)cur + 1);
	else if (x < 65)
		len = cur + (off_t)rn(5000);
	else if (x < 80)
		len = (off_t)(rn(16) * 4096) + (off_t)rn(3) - 1;
	else if (x < 97)
		len = (off_t)rn(pressure ? 65536 : 4 << 20);
	else
		len = -1;
	if (len < -1)
		len = 0;
	long k, r;
	if (by_fd) {
		op_desc("ftruncate kfd %d (%s) %lld", slots[s].kfd, slots[s].path, (long long)len);
		k = kura_ftruncate(fs, slots[s].kfd, len);
		r = kres(ftruncate(slots[s].rfd, len));
	} else {
		char rel[2048], kp[2100], rp[2400];
		gen_path(rel, sizeof rel);
		kpath(kp, sizeof kp, rel);
		rpath(rp, sizeof rp, rel);
		op_desc("truncate %s %lld", kp, (long long)len);
		k = kura_truncate(fs, kp, len);
		r = kres(truncate(rp, len));
	}
	cmp_ret("truncate", k, r);
}

static void op_fallocate(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	/* tmpfs supports exactly these modes; FALLOC_FL_ZERO_RANGE has no kernel
	 * counterpart here and is covered by api_test. */
	static const int modes[] = {0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				    FALLOC_FL_PUNCH_HOLE};
	int mode = modes[pct(97) ? rn(3) : 3];
	off_t size = slots[s].isdir ? 0 : ref_size(slots[s].rfd);
	off_t off = pct(3) ? -4096 : pct(40) ? (off_t)rn((uint64_t)size + 1) : (off_t)rn(2 << 20);
	off_t len = pct(3) ? 0 : 1 + (off_t)rn(pressure ? 16384 : 1 << 20);
	op_desc("fallocate kfd %d (%s) mode %#x off %lld len %lld", slots[s].kfd, slots[s].path, mode,
		(long long)off, (long long)len);
	long k = kura_fallocate(fs, slots[s].kfd, mode, off, len);
	long r = kres(fallocate(slots[s].rfd, mode, off, len));
	cmp_ret("fallocate", k, r);
}

static void op_stat(void)
{
	struct stat ks, rs;
	long k, r;
	int s = pick_slot();
	off_t adj = 0;
	if (s >= 0 && pct(33)) {
		op_desc("fstat kfd %d (%s)", slots[s].kfd, slots[s].path);
		k = kura_fstat(fs, slots[s].kfd, &ks);
		r = kres(fstat(slots[s].rfd, &rs));
	} else {
		char rel[2048], kp[2100], rp[2400];
		gen_path(rel, sizeof rel);
		kpath(kp, sizeof kp, rel);
		rpath(rp, sizeof rp, rel);
		int l = pct(50);
		op_desc("%s %s", l ? "lstat" : "stat", kp);
		k = l ? kura_lstat(fs, kp, &ks) : kura_stat(fs, kp, &ks);
		r = kres(l ? lstat(rp, &rs) : stat(rp, &rs));
		if (l && r == 0 && S_ISLNK(rs.st_mode))
			adj = ref_link_adjust(rp);
	}
	cmp_ret("stat", k, r);
	if (k == 0)
		cmp_stat("stat", &ks, &rs, adj);
}

static void op_mkdir(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	int mode = gen_mode(1);
	op_desc("mkdir %s %04o", kp, mode);
	cmp_ret("mkdir", kura_mkdir(fs, kp, (mode_t)mode), kres(mkdir(rp, (mode_t)mode)));
}

static void op_rmdir(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("rmdir %s", kp);
	cmp_ret("rmdir", kura_rmdir(fs, kp), kres(rmdir(rp)));
}

static void op_unlink(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("unlink %s", kp);
	cmp_ret("unlink", kura_unlink(fs, kp), kres(unlink(rp)));
}

static void op_link(void)
{
	char r1[2048], r2[2048], k1[2100], k2[2100], p1[2400], p2[2400];
	/* Prefer an existing regular file as the source, so that hard links
	 * actually form instead of mostly failing with ENOENT or EPERM. */
	for (int tries = 0; tries < 4; tries++) {
		gen_path(r1, sizeof r1);
		struct stat st;
		char rp[2400];
		rpath(rp, sizeof rp, r1);
		if (lstat(rp, &st) == 0 && S_ISREG(st.st_mode))
			break;
	}
	gen_path(r2, sizeof r2);
	kpath(k1, sizeof k1, r1);
	kpath(k2, sizeof k2, r2);
	rpath(p1, sizeof p1, r1);
	rpath(p2, sizeof p2, r2);
	op_desc("link %s %s", k1, k2);
	cmp_ret("link", kura_link(fs, k1, k2), kres(link(p1, p2)));
}

static void op_symlink(void)
{
	char rel[2048], kp[2100], rp[2400], t[1100], rt[1400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	gen_target(t, sizeof t, rel);
	if (t[0] == '/')
		snprintf(rt, sizeof rt, "%s%s", ref_root, t);
	else
		snprintf(rt, sizeof rt, "%s", t);
	op_desc("symlink %.200s %s", t, kp);
	cmp_ret("symlink", kura_symlink(fs, t, kp), kres(symlink(rt, rp)));
}

static void op_readlink(void)
{
	char rel[2048], kp[2100], rp[2400], kt[8192], rt[8192];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	op_desc("readlink %s", kp);
	long k = kura_readlink(fs, kp, kt, sizeof kt - 1);
	long r = kres(readlink(rp, rt, sizeof rt - 1));
	if (k < 0 || r < 0) {
		cmp_ret("readlink", k, r);
		return;
	}
	count("readlink", r);
	kt[k] = rt[r] = 0;
	if (strcmp(kt, ref_target_to_model(rt)))
		fail("readlink: kura '%.200s', reference '%.200s'", kt, ref_target_to_model(rt));
}

static void op_rename(void)
{
	char r1[2048], r2[2048], k1[2100], k2[2100], p1[2400], p2[2400];
	gen_path(r1, sizeof r1);
	if (pct(8)) {
		/* Into its own subtree: EINVAL when r1 is a directory. */
		size_t l = strlen(r1);
		snprintf(r1 + l, sizeof r1 - l, "/%s", pct(50) ? dnames[rn(4)] : fnames[rn(8)]);
		memcpy(r2, r1, strlen(r1) + 1);
		*strrchr(r1, '/') = 0;
	} else {
		gen_path(r2, sizeof r2);
	}
	kpath(k1, sizeof k1, r1);
	kpath(k2, sizeof k2, r2);
	rpath(p1, sizeof p1, r1);
	rpath(p2, sizeof p2, r2);
	int x = (int)rn(100);
	unsigned flags = x < 70 ? 0 : x < 85 ? RENAME_NOREPLACE : RENAME_EXCHANGE;
	op_desc("rename %s %s flags %s", k1, k2,
		flags == 0 ? "0" : flags == RENAME_NOREPLACE ? "NOREPLACE" : "EXCHANGE");
	long k = kura_rename(fs, k1, k2, flags);
	long r = kres(renameat2(AT_FDCWD, p1, AT_FDCWD, p2, flags));
	cmp_ret("rename", k, r);
}

static void op_chmod(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	int mode = gen_mode(0);
	op_desc("chmod %s %04o", kp, mode);
	cmp_ret("chmod", kura_chmod(fs, kp, (mode_t)mode), kres(chmod(rp, (mode_t)mode)));
}

static void op_access(void)
{
	char rel[2048], kp[2100], rp[2400];
	gen_path(rel, sizeof rel);
	kpath(kp, sizeof kp, rel);
	rpath(rp, sizeof rp, rel);
	static const int modes[] = {F_OK, R_OK, W_OK, X_OK, R_OK | W_OK, R_OK | X_OK, R_OK | W_OK | X_OK};
	int m = modes[rn(7)];
	op_desc("access %s %d", kp, m);
	cmp_ret("access", kura_access(fs, kp, m), kres(access(rp, m)));
}

static void op_fsync(void)
{
	int s = pick_slot();
	if (s < 0)
		return;
	op_desc("fsync kfd %d (%s)", slots[s].kfd, slots[s].path);
	cmp_ret("fsync", kura_fsync(fs, slots[s].kfd), kres(fsync(slots[s].rfd)));
}

struct opdef {
	void (*fn)(void);
	int weight;
};
static const struct opdef ops[] = {
    {op_open, 12},    {op_close, 5},    {op_dup, 2},      {op_write, 12}, {op_read, 8},
    {op_lseek, 5},    {op_truncate, 4}, {op_fallocate, 3}, {op_stat, 6},  {op_mkdir, 7},
    {op_rmdir, 4},    {op_unlink, 5},   {op_link, 3},     {op_symlink, 3}, {op_readlink, 2},
    {op_rename, 7},   {op_chmod, 2},    {op_access, 2},   {op_fsync, 1},
};

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

int main(int argc, char **argv)
{
	const char *e;
	if (argc > 1)
		seed = strtoull(argv[1], NULL, 0);
	else if ((e = getenv("KURA_MODEL_SEED")) && *e)
		seed = strtoull(e, NULL, 0);
	else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
	}
	if (argc > 2)
		nops = strtol(argv[2], NULL, 0);
	else if ((e = getenv("KURA_MODEL_OPS")) && *e)
		nops = strtol(e, NULL, 0);
	if ((e = getenv("KURA_MODEL_DIR_NLINK")) && !strcmp(e, "0"))
		cmp_dir_nlink = 0;
	printf("model: seed %" PRIu64 ", %ld ops\n", seed, nops);
	fflush(stdout);

	uint64_t sm = seed;
	for (int i = 0; i < 4; i++)
		rng_s[i] = splitmix(&sm);
	for (size_t i = 0; i < sizeof data_buf; i++)
		data_buf[i] = (unsigned char)rnd();
	memset(name255, 'n', 255);
	memset(name256, 'n', 256);
	kbuf = malloc(MAX_IO);
	rbuf = malloc(MAX_IO);

	/* Modes are compared as given; kura never applies a umask. */
	umask(0);
	snprintf(pool_path, sizeof pool_path, "/dev/shm/kura-model-%d.pool", (int)getpid());
	snprintf(ref_root, sizeof ref_root, "/dev/shm/kura-model-%d", (int)getpid());
	ref_root_len = strlen(ref_root);
	nftw(ref_root, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
	if (mkdir(ref_root, 0755) < 0) {
		fprintf(stderr, "model: mkdir %s: %s\n", ref_root, strerror(errno));
		return 1;
	}
	int r = kura_mkfs(pool_path, POOL_SIZE, 1);
	if (r < 0) {
		fprintf(stderr, "model: kura_mkfs(%s): %s (%s)\n", pool_path, en(r), kura_last_error());
		cleanup();
		return 1;
	}
	do_mount();
	/* The pool's root is created by mkfs with whatever mode it picks; align
	 * the reference root with it so the root's mode is not a difference. */
	struct stat st;
	if (kura_stat(fs, "/", &st) == 0)
		chmod(ref_root, st.st_mode & 07777);
	check_state();

	int total = 0;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		total += ops[i].weight;
	for (opno = 0; opno < nops; opno++) {
		cur_op = NULL;
		trailing_slash = 0;
		oplog[opno % LOGN][0] = 0;
		if (rn(REMOUNT_ONE_IN) == 0) {
			op_remount();
			continue;
		}
		int x = (int)rn((uint64_t)total);
		size_t i = 0;
		while (x >= ops[i].weight)
			x -= ops[i++].weight;
		ops[i].fn();
		if (opno % CHECK_EVERY == CHECK_EVERY - 1) {
			op_note("periodic checkpoint after this op");
			check_state();
		}
	}
	opno = nops - 1;
	op_note("final checkpoint");
	check_state();
	op_note("final unmount and fsck");
	close_all();
	do_unmount_fsck();
	if (getenv("KURA_MODEL_STATS"))
		print_tally();
	printf("model: %ld ops, %ld state comparisons, seed %" PRIu64 ": OK\n", nops, ncompares, seed);
	cleanup();
	return 0;
}
