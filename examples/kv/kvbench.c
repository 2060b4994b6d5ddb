/*
 * kvbench — LevelDB db_bench's fillrandom, fillsync and readrandom, on the
 * kv store (kv.h) or, built with -DKVBENCH_LEVELDB and -lleveldb, on
 * LevelDB through its C API, so that both print the same figures.
 *
 *   kvbench [--benchmarks=fillrandom,readrandom] [--num=N] [--range=R]
 *           [--db=PATH] [--batch=B] [--capacity=C] [--max_batch=M]
 *
 * As in db_bench: keys are 16 bytes ("%016d" of a number drawn uniformly
 * from [0, range), LevelDB's own generator), values 100 bytes (db_bench's
 * generator: half of each is random, so LevelDB's Snappy halves them; kv
 * stores them as they are); fillrandom and fillsync start from an empty
 * store, readrandom reads the store as the earlier benchmarks of the run
 * left it (or the one at PATH).  fillrandom: N puts, not synced;
 * fillsync: N puts, each durable before the next (db_bench does N/1000:
 * here say --num); readrandom: N gets.  range defaults to N.
 *
 * kv only: fillrandom commits a batch (kv_sync) every B puts (default
 * 10,000) and once at the end, inside the time; the store is sized for C
 * keys (kv_options.capacity, default: range); M is kv_options.max_batch
 * (default B).  A put that finds the log full within its batch (it grows
 * between batches) ends the batch early.
 *
 * Prints one line a benchmark:
 *   fillrandom :    123456 ops/s  (N ops in T s; ...)
 * Exit status 0, or 1 with a message on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY_SIZE 16
#define VALUE_SIZE 100

static long num = 1000000, range = -1, batch = 10000, capacity = -1, max_batch = -1;
static const char *path;

static void die(const char *what, const char *why)
{
	fprintf(stderr, "kvbench: %s: %s\n", what, why);
	exit(1);
}

/* ---- the store ------------------------------------------------------- */

#ifdef KVBENCH_LEVELDB
#include <leveldb/c.h>

static leveldb_t *ldb;
static leveldb_options_t *lopt;
static leveldb_writeoptions_t *lwrite, *lwrite_sync;
static leveldb_readoptions_t *lread;

static void check(char *err, const char *what)
{
	if (err)
		die(what, err);
}

static void store_open(int fresh)
{
	char *err = NULL;
	if (!lopt) {
		lopt = leveldb_options_create(); /* db_bench's defaults: Snappy, 4 MB write buffer */
		leveldb_options_set_create_if_missing(lopt, 1);
		lwrite = leveldb_writeoptions_create();
		lwrite_sync = leveldb_writeoptions_create();
		leveldb_writeoptions_set_sync(lwrite_sync, 1);
		lread = leveldb_readoptions_create();
		printf("LevelDB %d.%d: %s\n", leveldb_major_version(), leveldb_minor_version(), path);
	}
	if (ldb && !fresh)
		return;
	if (ldb)
		leveldb_close(ldb);
	ldb = NULL;
	if (fresh) {
		leveldb_destroy_db(lopt, path, &err);
		check(err, path);
	}
	ldb = leveldb_open(lopt, path, &err);
	check(err, path);
}

static void store_put(const char *key, const char *val, int sync)
{
	char *err = NULL;
	leveldb_put(ldb, sync ? lwrite_sync : lwrite, key, KEY_SIZE, val, VALUE_SIZE, &err);
	check(err, "put");
}

static void store_batch_end(int last)
{
	(void)last;
}

static int store_get(const char *key)
{
	char *err = NULL;
	size_t len;
	char *v = leveldb_get(ldb, lread, key, KEY_SIZE, &len, &err);
	check(err, "get");
	leveldb_free(v);
	return v != NULL;
}

static const char *store_note(void)
{
	return "LevelDB";
}

static void store_close(void)
{
	if (ldb)
		leveldb_close(ldb);
}

#else
#include "kv.h"

static kv *db;
static char note[128];

static void check(int r, const char *what)
{
	if (r < 0)
		die(what, kv_strerror(r));
}

static void store_open(int fresh)
{
	if (db && !fresh)
		return;
	if (db)
		check(kv_close(db), "close");
	db = NULL;
	if (fresh && unlink(path) && errno != ENOENT)
		die(path, strerror(errno));
	struct kv_options o = { .capacity = (uint64_t)capacity, .max_batch = (uint32_t)max_batch };
	int r = kv_open(path, &o, &db);
	check(r, path);
	static int said;
	if (!said++)
		printf("kv: %s, %s\n", path,
		       r & KV_ATOMIC ? "atomic batches (kura)" : "batches NOT atomic (no kura: kv_sync is fdatasync)");
	fflush(stdout);
}

static void store_put(const char *key, const char *val, int sync)
{
	int r = kv_put(db, key, KEY_SIZE, val, VALUE_SIZE, sync ? KV_SYNC : 0);
	if (r == -ENOSPC || r == -E2BIG) {
		/* The log must grow, or the batch is full: end the batch
		 * here (kv_sync), and the put goes into the next. */
		check(kv_sync(db), "sync");
		r = kv_put(db, key, KEY_SIZE, val, VALUE_SIZE, sync ? KV_SYNC : 0);
	}
	check(r, "put");
}

/* fillrandom: a batch ends every `batch` puts, and at the end. */
static void store_batch_end(int last)
{
	(void)last;
	check(kv_sync(db), "sync");
}

static int store_get(const char *key)
{
	char val[KV_MAX_VAL];
	size_t len;
	int r = kv_get(db, key, KEY_SIZE, val, sizeof val, &len);
	if (r == -ENOENT)
		return 0;
	check(r, "get");
	if (len != VALUE_SIZE)
		die("get", "a value of the wrong length");
	return 1;
}

static const char *store_note(void)
{
	snprintf(note, sizeof note, "kv, %s", kv_flags(db) & KV_ATOMIC ? "atomic" : "not atomic");
	return note;
}

static void store_close(void)
{
	if (db)
		check(kv_close(db), "close");
}
#endif

/* ---- db_bench's generators ------------------------------------------ */

/* LevelDB's util/random.h: Park-Miller, seed in [1, 2^31 - 2]. */
struct rnd {
	uint32_t seed;
};

static void rnd_init(struct rnd *r, uint32_t s)
{
	r->seed = s & 0x7fffffffu;
	if (r->seed == 0 || r->seed == 2147483647u)
		r->seed = 1;
}

static uint32_t rnd_next(struct rnd *r)
{
	const uint32_t M = 2147483647u;
	uint64_t product = (uint64_t)r->seed * 16807;
	r->seed = (uint32_t)((product >> 31) + (product & M));
	if (r->seed > M)
		r->seed -= M;
	return r->seed;
}

static uint32_t rnd_uniform(struct rnd *r, uint32_t n)
{
	return rnd_next(r) % n;
}

/* db_bench's RandomGenerator: 1 MiB of 100-byte pieces, each 50 random
 * printable bytes repeated (compressible to half). */
static char *values;
#define VALUES_SIZE 1048576
static size_t values_pos;

static void values_init(void)
{
	struct rnd r;
	rnd_init(&r, 301);
	values = malloc(VALUES_SIZE + VALUE_SIZE);
	if (!values)
		die("malloc", strerror(errno));
	for (size_t at = 0; at < VALUES_SIZE; at += VALUE_SIZE) {
		char raw[VALUE_SIZE / 2];
		for (size_t i = 0; i < sizeof raw; i++)
			raw[i] = (char)(' ' + rnd_uniform(&r, 95));
		for (size_t i = 0; i < VALUE_SIZE; i++)
			values[at + i] = raw[i % sizeof raw];
	}
}

static const char *value_next(void)
{
	if (values_pos + VALUE_SIZE > VALUES_SIZE)
		values_pos = 0;
	values_pos += VALUE_SIZE;
	return values + values_pos - VALUE_SIZE;
}

static void key_of(char *key, uint32_t k)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%016u", k);
	memcpy(key, buf, KEY_SIZE);
}

/* ---- the benchmarks ------------------------------------------------- */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *name, long ops, double secs, const char *more)
{
	printf("%-11s: %10.0f ops/s  (%ld ops in %.3f s; %s)\n", name, (double)ops / secs, ops, secs, more);
	fflush(stdout);
}

static void fill(const char *name, int sync, uint32_t seed)
{
	struct rnd r;
	rnd_init(&r, seed);
	store_open(1);
	char key[KEY_SIZE];
	double t0 = now();
	for (long i = 0; i < num; i++) {
		key_of(key, rnd_uniform(&r, (uint32_t)range));
		store_put(key, value_next(), sync);
		if (!sync && batch > 0 && (i + 1) % batch == 0 && i + 1 < num)
			store_batch_end(0);
	}
	if (!sync)
		store_batch_end(1);
	double t = now() - t0;
	char more[160];
#ifdef KVBENCH_LEVELDB
	snprintf(more, sizeof more, "%s%s", store_note(), sync ? ", each put synced" : ", no sync");
#else
	snprintf(more, sizeof more, "%s%s", store_note(), sync ? ", each put committed" : "");
	if (!sync)
		snprintf(more + strlen(more), sizeof more - strlen(more), ", a commit every %ld puts", batch);
#endif
	report(name, num, t, more);
}

static void readrandom(uint32_t seed)
{
	struct rnd r;
	rnd_init(&r, seed);
	store_open(0);
	char key[KEY_SIZE];
	long found = 0;
	double t0 = now();
	for (long i = 0; i < num; i++) {
		key_of(key, rnd_uniform(&r, (uint32_t)range));
		found += store_get(key);
	}
	double t = now() - t0;
	char more[160];
	snprintf(more, sizeof more, "%s, %ld of %ld found", store_note(), found, num);
	report("readrandom", num, t, more);
}

static long number(const char *arg, const char *name)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || *end || v < 0 || v > 2000000000L)
		die(name, "not a number in [0, 2e9]");
	return v;
}

int main(int argc, char **argv)
{
	const char *benchmarks = "fillrandom,readrandom";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		if (!eq || strncmp(a, "--", 2))
			die(a, "expected --name=value (see the comment at the top of kvbench.c)");
		const char *v = eq + 1;
		size_t n = (size_t)(eq - a);
#define IS(s) (n == strlen(s) && strncmp(a, s, n) == 0)
		if (IS("--benchmarks"))
			benchmarks = v;
		else if (IS("--num"))
			num = number(v, a);
		else if (IS("--range"))
			range = number(v, a);
		else if (IS("--db"))
			path = v;
		else if (IS("--batch"))
			batch = number(v, a);
		else if (IS("--capacity"))
			capacity = number(v, a);
		else if (IS("--max_batch"))
			max_batch = number(v, a);
		else
			die(a, "unknown option");
	}
	if (!path)
		die("--db", "required");
	if (range < 0)
		range = num;
	if (range == 0)
		die("--range", "must be positive");
	if (capacity < 0)
		capacity = range;
	if (max_batch < 0)
		max_batch = batch > 0 ? batch : num;
	values_init();
	char *list = strdup(benchmarks);
	for (char *save, *b = strtok_r(list, ",", &save); b; b = strtok_r(NULL, ",", &save)) {
		if (!strcmp(b, "fillrandom"))
			fill("fillrandom", 0, 1000);
		else if (!strcmp(b, "fillsync"))
			fill("fillsync", 1, 1000);
		else if (!strcmp(b, "readrandom"))
			readrandom(1001);
		else
			die(b, "unknown benchmark (fillrandom, fillsync, readrandom)");
	}
	free(list);
	store_close();
	return 0;
}
