/*
 * crash.h — sqlite_batch's crash and crashcheck commands: transactions
 * of varying size that a SIGKILL may interrupt, and the invariants that must
 * hold in the database it leaves.  Included once, by sqlite_batch.c
 * (sqlite_batch/vfs.h says why).
 */
#ifndef SQLITE_BATCH_CRASH_H
#define SQLITE_BATCH_CRASH_H

#include "db.h"

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

#endif
