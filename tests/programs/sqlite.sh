# The sqlite3 CLI building and querying a database in the DELETE, TRUNCATE
# and PERSIST rollback-journal modes, with a rolled-back transaction and a
# journal left behind by a killed writer (hot journal recovery).
. "$PROG_DIR/common.sh"

for mode in DELETE TRUNCATE PERSIST; do
	db=db_$mode.sqlite
	step "journal_mode=$mode"
	sqlite3 "$db" <<EOT
PRAGMA journal_mode=$mode;
CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
  INSERT INTO kv SELECT i, printf('value-%08d', (i * 7919) % 20011), i % 100 FROM c;
CREATE INDEX kv_n ON kv(n);
BEGIN;
UPDATE kv SET n = n + 1000 WHERE k % 7 = 0;
DELETE FROM kv WHERE k % 11 = 0;
COMMIT;
BEGIN;
DELETE FROM kv;
ROLLBACK;
SELECT count(*), sum(n), min(v), max(v) FROM kv;
SELECT n, count(*) FROM kv WHERE n >= 1090 GROUP BY n ORDER BY n LIMIT 3;
PRAGMA integrity_check;
EOT
	echo "exit $?"
	ls -l --time-style=+ "$db"*
	sqlite3 "$db" "PRAGMA journal_mode; SELECT count(*) FROM kv WHERE v LIKE 'value-0000%';"
	# Kill a writer in the middle of a big transaction (cache_size=10
	# spills changed pages into the database file before the commit): the
	# next opener must roll the hot journal back.
	( sqlite3 "$db" <<EOT >/dev/null 2>&1
PRAGMA journal_mode=$mode;
PRAGMA cache_size=10;
BEGIN;
UPDATE kv SET v = 'x' || v;
.system kill -KILL \$PPID
EOT
	echo "killed writer: exit $?" ) 2>/dev/null
	ls -l --time-style=+ "$db"* | awk '{ print ($5 > 0 ? "nonempty" : "empty"), $NF }'
	sqlite3 "$db" "PRAGMA integrity_check; SELECT count(*) FROM kv WHERE v LIKE 'x%';"
	sqlite3 "$db" .dump | sha256sum
	sqlite3 -readonly "$db" "SELECT count(*) FROM kv" && echo "read-only open ok"
done

step "vacuum into, backup, attach"
sqlite3 db_DELETE.sqlite "VACUUM INTO 'vacuumed.sqlite'"
sqlite3 db_TRUNCATE.sqlite ".backup backup.sqlite"
sqlite3 vacuumed.sqlite "ATTACH 'backup.sqlite' AS b; SELECT count(*) FROM main.kv JOIN b.kv USING (k, v, n);"
sqlite3 -csv -header vacuumed.sqlite "SELECT * FROM kv ORDER BY k LIMIT 3" > out.csv
cat out.csv
sqlite3 imported.sqlite ".import --csv out.csv t" "SELECT * FROM t"

step "tree"
ls -l --time-style=+ *.sqlite*
# A persisted journal's header holds a random nonce: compare its size only.
rm -f *-journal
manifest
