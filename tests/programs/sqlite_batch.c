/*
 * sqlite_batch.c — SQLite's batch-atomic commit (SQLITE_ENABLE_BATCH_ATOMIC_WRITE,
 * F2FS's atomic-write ioctls, which kura answers) seen from a program.
 *
 * Built by scripts/sqlite-batch-atomic.sh against SQLite's amalgamation,
 * once with SQLITE_ENABLE_BATCH_ATOMIC_WRITE and once without; used by
 * tests/test_sqlite_batch_atomic.py and bench/sqlite_batch_atomic.sh.
 *
 * A VFS shim over the default "unix" VFS counts what SQLite asks of the
 * file system: rollback journals opened (SQLITE_OPEN_MAIN_JOURNAL), the
 * batch-atomic file controls (BEGIN/COMMIT/ROLLBACK_ATOMIC_WRITE, which
 * unixFileControl turns into F2FS_IOC_START_ATOMIC_WRITE,
 * F2FS_IOC_COMMIT_ATOMIC_WRITE and F2FS_IOC_ABORT_VOLATILE_WRITE) and the
 * main database's device characteristics (SQLITE_IOCAP_BATCH_ATOMIC when
 * F2FS_IOC_GET_FEATURES answered).  It can also fail a write inside a
 * batch, as a full or failing device would, and then checks from a second
 * descriptor that the batch was invisible and that the abort discarded it.
 *
 *   sqlite_batch insert DB N [BYTES]   N transactions of one INSERT each
 *                                      (journal_mode=DELETE, synchronous=FULL)
 *   sqlite_batch verify DB             integrity_check and the rows' count
 *   sqlite_batch crash DB [SEED PM [AT]]  transactions of varying size
 *                                      forever, "committed K" after each
 *                                      COMMIT returns; with PM > 0 it kills
 *                                      itself inside a batch (maybe_die)
 *   sqlite_batch crashcheck DB         the crash writer's invariants hold
 *   sqlite_batch rollback DB           ROLLBACK after writes changes nothing
 *   sqlite_batch abort DB full|ioerr   a write in the batch fails: with
 *                                      SQLITE_FULL the commit fails and the
 *                                      batch is aborted; with SQLITE_IOERR
 *                                      SQLite aborts it and commits through
 *                                      a journal instead
 *   sqlite_batch big DB MIB            one transaction of MIB MiB, the page
 *                                      cache large enough to hold it
 *
 * SQLITE_BATCH_MMAP=BYTES in the environment sets PRAGMA mmap_size.
 *
 * Output: key=value lines; exit 0, or 1 with "FAIL: ..." on standard error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3.h"

/* ---- the counting VFS ---------------------------------------------------- */

static sqlite3_vfs *real_vfs;
static sqlite3_vfs count_vfs;

static struct {
	int journal_opens;      /* SQLITE_OPEN_MAIN_JOURNAL */
	int begin, commit, rollback; /* SQLITE_FCNTL_*_ATOMIC_WRITE */
	int begin_rc, commit_rc;     /* the last answers */
	int main_dc;            /* xDeviceCharacteristics of the main database */
	int main_dc_seen;
	int syncs;              /* xSync of the main database */
	int mmap_failures;      /* mmap() refused, as sqlite3_log reports it */
	int mapped_reads;       /* pages xFetch gave from a map */
} cnt;

/* SQLite logs an mmap() that failed (os_unix.c, unixRemapfile) and then
 * reads and writes that file without a map. */
static void log_cb(void *arg, int code, const char *msg)
{
	(void)arg;
	if (msg && strstr(msg, "mmap"))
		cnt.mmap_failures++;
	if (getenv("SQLITE_BATCH_LOG"))
		fprintf(stderr, "sqlite3_log %d: %s\n", code, msg ? msg : "");
}

/* Failing a write inside a batch (abort mode). */
static struct {
	int armed;              /* fail the at-th write of the next batch */
	int at;
	int rc;                 /* SQLITE_FULL or SQLITE_IOERR_WRITE */
	int in_batch;
	int writes;             /* writes forwarded in this batch */
	int fired;
	int probe_fd;           /* a second descriptor on the main database */
	uint64_t hash_before;   /* the file through probe_fd at BEGIN */
	uint64_t hash_during;   /* ... when the write failed */
	uint64_t hash_after;    /* ... after ROLLBACK_ATOMIC_WRITE */
	int own_sees_group;     /* the batch's descriptor read back its first write */
	int own_sees_file_after; /* ... and, after the abort, the file again */
	sqlite3_int64 first_off;
	int first_len;
	unsigned char first_new[65536], first_old[65536];
} inj;

/* Killing itself inside a batch (crash mode with a seed): with probability
 * selfkill_pm / 1000 at each point of the kind selfkill_at names: "write"
 * (before a write of a batch), "precommit" or "postcommit" (just before,
 * just after COMMIT_ATOMIC_WRITE), "any"; says where on standard output
 * first. */
static int selfkill_pm;
static const char *selfkill_at = "any";

static void maybe_die(const char *where)
{
	if (selfkill_pm && (!strcmp(selfkill_at, "any") || !strcmp(selfkill_at, where)) &&
	    rand() % 1000 < selfkill_pm) {
		printf("selfkill %s\n", where);
		fflush(stdout);
		kill(getpid(), SIGKILL);
	}
}

typedef struct CFile {
	sqlite3_file base;
	sqlite3_file *real;
	int flags;
} CFile;

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	while (n--)
		h = (h ^ *p++) * 0x100000001b3ULL;
	return h;
}

/* The whole file through a descriptor of its own. */
static uint64_t hash_fd(int fd)
{
	unsigned char buf[65536];
	uint64_t h = 0xcbf29ce484222325ULL;
	off_t off = 0;
	ssize_t n;
	while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
		h = fnv(h, buf, (size_t)n);
		off += n;
	}
	if (n < 0)
		return 0;
	return fnv(h, (const unsigned char *)&off, sizeof off);
}

#define REAL(f) (((CFile *)(f))->real)
#define MAINDB(f) (((CFile *)(f))->flags & SQLITE_OPEN_MAIN_DB)

static int c_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}

static int c_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
	return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}

static int c_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
	sqlite3_file *r = REAL(f);
	if (MAINDB(f) && inj.in_batch) {
		if (inj.armed && inj.writes + 1 == inj.at) {
			inj.armed = 0;
			inj.fired = 1;
			if (inj.probe_fd >= 0)
				inj.hash_during = hash_fd(inj.probe_fd);
			/* The batch's own descriptor sees the batch. */
			if (inj.first_len > 0) {
				unsigned char tmp[65536];
				if (r->pMethods->xRead(r, tmp, inj.first_len, inj.first_off) == SQLITE_OK)
					inj.own_sees_group = !memcmp(tmp, inj.first_new, (size_t)inj.first_len);
			}
			return inj.rc;
		}
		/* Only a test that injects a failure looks at the batch's first
		 * page: a timed run must not pay a read per transaction. */
		if (inj.armed && inj.writes == 0 && n <= (int)sizeof inj.first_new) {
			inj.first_off = o;
			inj.first_len = n;
			memcpy(inj.first_new, b, (size_t)n);
			int rc = r->pMethods->xRead(r, inj.first_old, n, o);
			if (rc == SQLITE_IOERR_SHORT_READ)
				rc = SQLITE_OK; /* zero-filled past the end */
			if (rc != SQLITE_OK)
				inj.first_len = 0;
		}
		inj.writes++;
		maybe_die("write");
	}
	return r->pMethods->xWrite(r, b, n, o);
}

static int c_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int c_sync(sqlite3_file *f, int flags)
{
	if (MAINDB(f))
		cnt.syncs++;
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int c_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int c_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int c_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int c_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int c_fcntl(sqlite3_file *f, int op, void *arg)
{
	sqlite3_file *r = REAL(f);
	int rc;
	switch (op) {
	case SQLITE_FCNTL_BEGIN_ATOMIC_WRITE:
		cnt.begin++;
		if (inj.armed && inj.probe_fd >= 0)
			inj.hash_before = hash_fd(inj.probe_fd);
		rc = r->pMethods->xFileControl(r, op, arg);
		cnt.begin_rc = rc;
		if (rc == SQLITE_OK) {
			inj.in_batch = 1;
			inj.writes = 0;
			inj.first_len = 0;
		}
		return rc;
	case SQLITE_FCNTL_COMMIT_ATOMIC_WRITE:
		cnt.commit++;
		maybe_die("precommit");
		rc = r->pMethods->xFileControl(r, op, arg);
		cnt.commit_rc = rc;
		inj.in_batch = 0;
		if (rc == SQLITE_OK)
			maybe_die("postcommit");
		return rc;
	case SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE:
		cnt.rollback++;
		rc = r->pMethods->xFileControl(r, op, arg);
		if (inj.in_batch && inj.fired) {
			if (inj.probe_fd >= 0)
				inj.hash_after = hash_fd(inj.probe_fd);
			if (inj.first_len > 0) {
				unsigned char tmp[65536];
				int rr = r->pMethods->xRead(r, tmp, inj.first_len, inj.first_off);
				if (rr == SQLITE_IOERR_SHORT_READ) /* the batch had grown the file */
					rr = SQLITE_OK;
				inj.own_sees_file_after = rr == SQLITE_OK &&
							  !memcmp(tmp, inj.first_old, (size_t)inj.first_len);
			}
		}
		inj.in_batch = 0;
		return rc;
	}
	return r->pMethods->xFileControl(r, op, arg);
}

static int c_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int c_dc(sqlite3_file *f)
{
	int dc = REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
	if (MAINDB(f)) {
		cnt.main_dc = dc;
		cnt.main_dc_seen = 1;
	}
	return dc;
}

static int c_shmmap(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}

static int c_shmlock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void c_shmbarrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int c_shmunmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int c_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp)
{
	int rc = REAL(f)->pMethods->xFetch(REAL(f), o, n, pp);
	if (rc == SQLITE_OK && *pp)
		cnt.mapped_reads++;
	return rc;
}

static int c_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
	return REAL(f)->pMethods->xUnfetch(REAL(f), o, p);
}

static const sqlite3_io_methods c_methods = {
	3, c_close, c_read, c_write, c_truncate, c_sync, c_size, c_lock, c_unlock, c_reserved,
	c_fcntl, c_sector, c_dc, c_shmmap, c_shmlock, c_shmbarrier, c_shmunmap, c_fetch, c_unfetch,
};

static int c_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out)
{
	(void)v;
	CFile *c = (CFile *)f;
	c->real = (sqlite3_file *)&c[1];
	c->flags = flags;
	c->base.pMethods = NULL;
	if (flags & SQLITE_OPEN_MAIN_JOURNAL)
		cnt.journal_opens++;
	int rc = real_vfs->xOpen(real_vfs, name, c->real, flags, out);
	if (c->real->pMethods) {
		if (c->real->pMethods->iVersion < 3) {
			fprintf(stderr, "FAIL: the default VFS's files are version %d\n", c->real->pMethods->iVersion);
			exit(1);
		}
		c->base.pMethods = &c_methods;
	}
	return rc;
}

#define FWD(name, ...) real_vfs->name(real_vfs, __VA_ARGS__)
static int c_delete(sqlite3_vfs *v, const char *n, int s) { (void)v; return FWD(xDelete, n, s); }
static int c_access(sqlite3_vfs *v, const char *n, int fl, int *o) { (void)v; return FWD(xAccess, n, fl, o); }
static int c_full(sqlite3_vfs *v, const char *n, int sz, char *o) { (void)v; return FWD(xFullPathname, n, sz, o); }
static void *c_dlopen(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xDlOpen, n); }
static void c_dlerr(sqlite3_vfs *v, int n, char *o) { (void)v; FWD(xDlError, n, o); }
static void (*c_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return FWD(xDlSym, h, s); }
static void c_dlclose(sqlite3_vfs *v, void *h) { (void)v; FWD(xDlClose, h); }
static int c_random(sqlite3_vfs *v, int n, char *o) { (void)v; return FWD(xRandomness, n, o); }
static int c_sleep(sqlite3_vfs *v, int us) { (void)v; return FWD(xSleep, us); }
static int c_time(sqlite3_vfs *v, double *t) { (void)v; return FWD(xCurrentTime, t); }
static int c_lasterr(sqlite3_vfs *v, int n, char *o) { (void)v; return FWD(xGetLastError, n, o); }
static int c_time64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return FWD(xCurrentTimeInt64, t); }
static int c_setsys(sqlite3_vfs *v, const char *n, sqlite3_syscall_ptr p) { (void)v; return FWD(xSetSystemCall, n, p); }
static sqlite3_syscall_ptr c_getsys(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xGetSystemCall, n); }
static const char *c_nextsys(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xNextSystemCall, n); }

static void vfs_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs) {
		fprintf(stderr, "FAIL: no default VFS\n");
		exit(1);
	}
	count_vfs = (sqlite3_vfs){
		3, (int)sizeof(CFile) + real_vfs->szOsFile, real_vfs->mxPathname, NULL, "count", NULL,
		c_open, c_delete, c_access, c_full, c_dlopen, c_dlerr, c_dlsym, c_dlclose,
		c_random, c_sleep, c_time, c_lasterr, c_time64, c_setsys, c_getsys, c_nextsys,
	};
	sqlite3_vfs_register(&count_vfs, 1);
}

/* ---- helpers ------------------------------------------------------------- */

static const char *db_path;

static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail("%s: %s", sql, err ? err : sqlite3_errmsg(db));
}

static sqlite3_int64 one_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		fail("%s: %s", sql, sqlite3_errmsg(db));
	if (sqlite3_step(st) != SQLITE_ROW)
		fail("%s: no row (%s)", sql, sqlite3_errmsg(db));
	sqlite3_int64 v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

static void integrity(sqlite3 *db)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK)
		fail("integrity_check: %s", sqlite3_errmsg(db));
	int rc = sqlite3_step(st);
	const char *r = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : sqlite3_errmsg(db);
	int ok = rc == SQLITE_ROW && r && !strcmp(r, "ok");
	printf("integrity=%s\n", ok ? "ok" : (r ? r : "?"));
	if (!ok)
		fail("integrity_check: %s", r ? r : "?");
	sqlite3_finalize(st);
}

static sqlite3 *open_db(const char *path)
{
	sqlite3 *db;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "count") != SQLITE_OK)
		fail("open %s: %s", path, sqlite3_errmsg(db));
	sqlite3_busy_timeout(db, 10000);
	exec_ok(db, "PRAGMA journal_mode=DELETE");
	exec_ok(db, "PRAGMA synchronous=FULL");
	/* SQLITE_BATCH_MMAP=BYTES: reads through a map of the database. */
	const char *mm = getenv("SQLITE_BATCH_MMAP");
	if (mm && *mm) {
		char sql[64];
		snprintf(sql, sizeof sql, "PRAGMA mmap_size=%lld", atoll(mm));
		exec_ok(db, sql);
	}
	return db;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void report(sqlite3 *db)
{
	/* Asks the main database file, so cnt.main_dc is current. */
	sqlite3_file *fd = NULL;
	if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &fd) == SQLITE_OK && fd)
		fd->pMethods->xDeviceCharacteristics(fd);
	printf("compiled_batch_atomic=%d\n", sqlite3_compileoption_used("ENABLE_BATCH_ATOMIC_WRITE"));
	printf("batch_atomic=%d\n", cnt.main_dc_seen && (cnt.main_dc & SQLITE_IOCAP_BATCH_ATOMIC) ? 1 : 0);
	printf("journal_opens=%d\nbegin_atomic=%d\ncommit_atomic=%d\nrollback_atomic=%d\nsyncs=%d\n"
	       "mmap_failures=%d\nmapped_reads=%d\n",
	       cnt.journal_opens, cnt.begin, cnt.commit, cnt.rollback, cnt.syncs, cnt.mmap_failures,
	       cnt.mapped_reads);
}

static void reset_counts(void)
{
	int dc = cnt.main_dc, seen = cnt.main_dc_seen, mf = cnt.mmap_failures;
	memset(&cnt, 0, sizeof cnt);
	cnt.main_dc = dc;
	cnt.main_dc_seen = seen;
	cnt.mmap_failures = mf;
}

/* ---- insert: N one-row transactions -------------------------------------- */

static int cmd_insert(int n, int bytes)
{
	sqlite3 *db = open_db(db_path);
	exec_ok(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB)");
	sqlite3_int64 before = one_int(db, "SELECT count(*) FROM t");
	sqlite3_stmt *ins;
	if (sqlite3_prepare_v2(db, "INSERT INTO t(v) VALUES(?)", -1, &ins, NULL) != SQLITE_OK)
		fail("prepare: %s", sqlite3_errmsg(db));
	char *blob = malloc((size_t)bytes);
	reset_counts();
	double t0 = now();
	for (int i = 0; i < n; i++) {
		memset(blob, 'a' + i % 26, (size_t)bytes);
		exec_ok(db, "BEGIN");
		sqlite3_bind_blob(ins, 1, blob, bytes, SQLITE_STATIC);
		if (sqlite3_step(ins) != SQLITE_DONE)
			fail("insert %d: %s", i, sqlite3_errmsg(db));
		sqlite3_reset(ins);
		exec_ok(db, "COMMIT");
	}
	double el = now() - t0;
	sqlite3_finalize(ins);
	free(blob);
	printf("txns=%d\nelapsed=%.6f\n", n, el);
	report(db);
	printf("rows=%lld\n", (long long)(one_int(db, "SELECT count(*) FROM t") - before));
	sqlite3_close(db);
	return 0;
}

static int cmd_verify(void)
{
	sqlite3 *db = open_db(db_path);
	integrity(db);
	printf("rows=%lld\n", (long long)one_int(db, "SELECT count(*) FROM t"));
	report(db);
	sqlite3_close(db);
	return 0;
}

/* ---- crash: transactions a SIGKILL may interrupt -------------------------- */

/* Transaction k writes rows_of(k) rows (k, 0..), each payload the bytes
 * pay(k, j, i), cuts transaction k - 7's rows to their first half, deletes
 * transaction k - 40's, and sets meta to (k, the number of rows).  Most
 * fit SQLite's page cache (2 MB) and commit as one batch; every 16th is
 * larger, so SQLite spills and commits through a journal. */
#define HALVE 7
#define DROP 40
static int rows_of(sqlite3_int64 k) { return k % 16 == 15 ? 3000 : 1 + (int)((k * 2654435761u) % 150); }
static int size_of(sqlite3_int64 k, int j) { return 200 + (int)(((k * 31 + j) * 40503u) % 2000); }
static unsigned char pay(sqlite3_int64 k, int j, int i) { return (unsigned char)(k * 131 + j * 7 + i * 13 + (i >> 8)); }
static int kept_of(sqlite3_int64 k) { return (rows_of(k) + 1) / 2; }
/* Transaction k's rows once transaction `last` has committed. */
static int expect(sqlite3_int64 k, sqlite3_int64 last)
{
	return k + DROP <= last ? 0 : k + HALVE <= last ? kept_of(k) : rows_of(k);
}

static void crash_schema(sqlite3 *db)
{
	exec_ok(db, "CREATE TABLE IF NOT EXISTS r(k INTEGER, j INTEGER, v BLOB, PRIMARY KEY(k, j))");
	exec_ok(db, "CREATE INDEX IF NOT EXISTS r_len ON r(length(v), k)");
	exec_ok(db, "CREATE TABLE IF NOT EXISTS meta(id INTEGER PRIMARY KEY, last INTEGER, total INTEGER)");
	exec_ok(db, "INSERT OR IGNORE INTO meta VALUES(1, 0, 0)");
}

static int cmd_crash(unsigned seed, int permille)
{
	srand(seed);
	sqlite3 *db = open_db(db_path);
	/* FULL leaves the unlink that commits a journaled transaction to the
	 * next sync: a machine crash may bring the journal back, and with it
	 * the transaction before.  EXTRA syncs the directory after it. */
	exec_ok(db, "PRAGMA synchronous=EXTRA");
	crash_schema(db);
	sqlite3_int64 k = one_int(db, "SELECT last FROM meta") + 1;
	sqlite3_stmt *ins, *cut, *meta;
	if (sqlite3_prepare_v2(db, "INSERT INTO r VALUES(?, ?, ?)", -1, &ins, NULL) ||
	    sqlite3_prepare_v2(db, "DELETE FROM r WHERE k = ? AND j >= ?", -1, &cut, NULL) ||
	    sqlite3_prepare_v2(db, "UPDATE meta SET last = ?, total = total + ? WHERE id = 1", -1, &meta, NULL))
		fail("prepare: %s", sqlite3_errmsg(db));
	unsigned char buf[4096];
	printf("start %lld\n", (long long)k);
	reset_counts();
	selfkill_pm = permille;
	for (;; k++) {
		exec_ok(db, "BEGIN");
		int n = rows_of(k);
		for (int j = 0; j < n; j++) {
			int sz = size_of(k, j);
			for (int i = 0; i < sz; i++)
				buf[i] = pay(k, j, i);
			sqlite3_bind_int64(ins, 1, k);
			sqlite3_bind_int(ins, 2, j);
			sqlite3_bind_blob(ins, 3, buf, sz, SQLITE_STATIC);
			if (sqlite3_step(ins) != SQLITE_DONE)
				fail("insert: %s", sqlite3_errmsg(db));
			sqlite3_reset(ins);
		}
		for (int d = 0; d < 2; d++) {
			sqlite3_int64 old = k - (d ? DROP : HALVE);
			if (old < 1)
				continue;
			sqlite3_bind_int64(cut, 1, old);
			sqlite3_bind_int(cut, 2, d ? 0 : kept_of(old));
			if (sqlite3_step(cut) != SQLITE_DONE)
				fail("delete: %s", sqlite3_errmsg(db));
			sqlite3_reset(cut);
		}
		sqlite3_bind_int64(meta, 1, k);
		sqlite3_bind_int(meta, 2, expect(k, k) + (k > HALVE ? kept_of(k - HALVE) - rows_of(k - HALVE) : 0) -
						  (k > DROP ? kept_of(k - DROP) : 0));
		if (sqlite3_step(meta) != SQLITE_DONE)
			fail("meta: %s", sqlite3_errmsg(db));
		sqlite3_reset(meta);
		exec_ok(db, "COMMIT");
		printf("committed %lld batch=%d journal=%d\n", (long long)k, cnt.commit, cnt.journal_opens);
	}
	return 0;
}

static int cmd_crashcheck(void)
{
	sqlite3 *db = open_db(db_path);
	integrity(db);
	sqlite3_int64 last = one_int(db, "SELECT last FROM meta");
	sqlite3_int64 total = one_int(db, "SELECT total FROM meta");
	sqlite3_int64 count = one_int(db, "SELECT count(*) FROM r");
	sqlite3_int64 want_total = 0;
	for (sqlite3_int64 k = 1; k <= last; k++)
		want_total += expect(k, last);
	if (count != total || total != want_total)
		fail("after transaction %lld: %lld rows, meta says %lld, %lld are due", (long long)last,
		     (long long)count, (long long)total, (long long)want_total);
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, "SELECT k, j, v FROM r ORDER BY k, j", -1, &st, NULL) != SQLITE_OK)
		fail("prepare: %s", sqlite3_errmsg(db));
	/* Each transaction's rows are there whole, in order, none missing. */
	sqlite3_int64 k = 0;
	int j = 0, rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 rk = sqlite3_column_int64(st, 0);
		int rj = sqlite3_column_int(st, 1);
		if (rk < 1 || rk > last)
			fail("a row of transaction %lld; the last is %lld", (long long)rk, (long long)last);
		if (rk != k) {
			if (k && j != expect(k, last))
				fail("transaction %lld has %d rows, not %d (last %lld)", (long long)k, j,
				     expect(k, last), (long long)last);
			for (sqlite3_int64 m = k + 1; m < rk; m++)
				if (expect(m, last))
					fail("transaction %lld is missing (last %lld)", (long long)m, (long long)last);
			k = rk;
			j = 0;
		}
		if (rj != j)
			fail("transaction %lld: row %d where %d was due", (long long)rk, rj, j);
		const unsigned char *v = sqlite3_column_blob(st, 2);
		int sz = sqlite3_column_bytes(st, 2);
		if (sz != size_of(rk, rj))
			fail("row (%lld, %d): %d bytes, not %d", (long long)rk, rj, sz, size_of(rk, rj));
		for (int i = 0; i < sz; i++)
			if (v[i] != pay(rk, rj, i))
				fail("row (%lld, %d): byte %d differs", (long long)rk, rj, i);
		j++;
	}
	if (rc != SQLITE_DONE)
		fail("scan: %s", sqlite3_errmsg(db));
	if (last > 0 && (k != last || j != expect(k, last)))
		fail("the table ends at transaction %lld with %d rows; meta says %lld", (long long)k, j, (long long)last);
	sqlite3_finalize(st);
	printf("last=%lld\nrows=%lld\n", (long long)last, (long long)count);
	sqlite3_close(db);
	return 0;
}

/* ---- rollback and abort --------------------------------------------------- */

static uint64_t hash_path(const char *p)
{
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		fail("open %s: %s", p, strerror(errno));
	uint64_t h = hash_fd(fd);
	close(fd);
	return h;
}

static void fill(sqlite3 *db, int from, int n, int bytes)
{
	char sql[256];
	snprintf(sql, sizeof sql,
		 "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM c WHERE i < %d) "
		 "INSERT INTO t(id, v) SELECT i, randomblob(%d) FROM c",
		 from, from + n - 1, bytes);
	exec_ok(db, sql);
}

static int cmd_rollback(void)
{
	sqlite3 *db = open_db(db_path);
	exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
	fill(db, 1, 200, 500);
	sqlite3_close(db);
	uint64_t h0 = hash_path(db_path);
	db = open_db(db_path);
	reset_counts();
	/* Fits the page cache: nothing reaches the file before COMMIT. */
	exec_ok(db, "BEGIN");
	fill(db, 1000, 300, 500);
	exec_ok(db, "UPDATE t SET v = zeroblob(10) WHERE id % 3 = 0");
	exec_ok(db, "DELETE FROM t WHERE id % 5 = 0");
	exec_ok(db, "ROLLBACK");
	printf("small_rows=%lld\n", (long long)one_int(db, "SELECT count(*) FROM t"));
	/* Larger than the page cache: spilled into the file, then undone. */
	exec_ok(db, "PRAGMA cache_size=20");
	exec_ok(db, "BEGIN");
	fill(db, 1000, 3000, 500);
	exec_ok(db, "UPDATE t SET v = zeroblob(10) WHERE id < 1000");
	exec_ok(db, "ROLLBACK");
	printf("spilled_rows=%lld\n", (long long)one_int(db, "SELECT count(*) FROM t"));
	report(db);
	integrity(db);
	sqlite3_close(db);
	uint64_t h1 = hash_path(db_path);
	printf("file_unchanged=%d\n", h0 == h1);
	return 0;
}

/* COMMIT, printing its result; a failed one is rolled back. */
static void commit_reporting(sqlite3 *db)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &err);
	printf("commit_rc=%d\ncommit_err=%s\n", rc, err ? err : "");
	sqlite3_free(err);
	if (sqlite3_get_autocommit(db) == 0)
		exec_ok(db, "ROLLBACK");
}

static int cmd_abort(const char *how)
{
	int full = !strcmp(how, "full");
	if (!full && strcmp(how, "ioerr"))
		fail("abort: full or ioerr, not %s", how);
	sqlite3 *db = open_db(db_path);
	exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
	fill(db, 1, 200, 500);
	sqlite3_int64 n0 = one_int(db, "SELECT count(*) FROM t");
	inj.probe_fd = open(db_path, O_RDONLY); /* closed after the database: POSIX locks */
	if (inj.probe_fd < 0)
		fail("open %s: %s", db_path, strerror(errno));
	uint64_t h0 = hash_fd(inj.probe_fd);
	reset_counts();
	inj.armed = 1;
	inj.at = 5;
	inj.rc = full ? SQLITE_FULL : SQLITE_IOERR_WRITE;
	exec_ok(db, "BEGIN");
	fill(db, 1000, 300, 500); /* about 40 pages */
	exec_ok(db, "UPDATE t SET v = zeroblob(10) WHERE id % 3 = 0");
	commit_reporting(db);
	printf("fired=%d\nwrites_before=%d\n", inj.fired, inj.at - 1);
	printf("isolated=%d\n", inj.hash_before == h0 && inj.hash_during == h0);
	printf("own_sees_group=%d\n", inj.own_sees_group);
	printf("aborted_discarded=%d\n", inj.hash_after == h0);
	printf("own_sees_file_after_abort=%d\n", inj.own_sees_file_after);
	sqlite3_int64 n1 = one_int(db, "SELECT count(*) FROM t");
	printf("rows_before=%lld\nrows_after=%lld\n", (long long)n0, (long long)n1);
	report(db);
	integrity(db);
	sqlite3_close(db);
	close(inj.probe_fd);
	printf("file_unchanged=%d\n", hash_path(db_path) == h0);
	return 0;
}

/* One transaction of `mib` MiB with a page cache that holds it. */
static int cmd_big(int mib)
{
	sqlite3 *db = open_db(db_path);
	char sql[128];
	snprintf(sql, sizeof sql, "PRAGMA cache_size=-%d", (mib + 16) * 1024);
	exec_ok(db, sql);
	exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");
	fill(db, 1, 10, 100);
	reset_counts();
	exec_ok(db, "BEGIN");
	fill(db, 100, mib * 256, 3000); /* about one 4 KiB page a row */
	commit_reporting(db);
	printf("rows=%lld\n", (long long)one_int(db, "SELECT count(*) FROM t"));
	printf("begin_rc=%d\ncommit_atomic_rc=%d\n", cnt.begin_rc, cnt.commit_rc);
	report(db);
	integrity(db);
	sqlite3_close(db);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s insert|verify|crash|crashcheck|rollback|abort|big DB [ARGS]\n", argv[0]);
		return 2;
	}
	inj.probe_fd = -1;
	sqlite3_config(SQLITE_CONFIG_LOG, log_cb, NULL);
	vfs_register();
	db_path = argv[2];
	const char *c = argv[1];
	if (!strcmp(c, "insert"))
		return cmd_insert(argc > 3 ? atoi(argv[3]) : 1000, argc > 4 ? atoi(argv[4]) : 100);
	if (!strcmp(c, "verify"))
		return cmd_verify();
	if (!strcmp(c, "crash")) {
		if (argc > 5)
			selfkill_at = argv[5];
		return cmd_crash(argc > 3 ? (unsigned)atoi(argv[3]) : 1, argc > 4 ? atoi(argv[4]) : 0);
	}
	if (!strcmp(c, "crashcheck"))
		return cmd_crashcheck();
	if (!strcmp(c, "rollback"))
		return cmd_rollback();
	if (!strcmp(c, "abort") && argc > 3)
		return cmd_abort(argv[3]);
	if (!strcmp(c, "big") && argc > 3)
		return cmd_big(atoi(argv[3]));
	fprintf(stderr, "%s: unknown command %s\n", argv[0], c);
	return 2;
}
