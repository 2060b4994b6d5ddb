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
#include "sqlite_batch/db.h"
#include "sqlite_batch/crash.h"

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
