/*
 * db.h — what every sqlite_batch command uses: FAIL and exit, statements
 * that must succeed, integrity_check, the database opened through the
 * counting VFS, and the counts it prints.  Included once, by sqlite_batch.c
 * (sqlite_batch/vfs.h says why).
 */
#ifndef SQLITE_BATCH_DB_H
#define SQLITE_BATCH_DB_H

#include "vfs.h"

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

#endif
