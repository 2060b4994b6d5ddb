#!/bin/bash
# Called by demo.sh: real, unmodified programs on kura through `kura run`
# (the default pool, prefix /kura), then the same on tmpfs, side by side:
# the sqlite3 CLI builds and queries a database, and a short fio job.
# If the interposition layer does not work yet, says so and returns 0:
# no figures are made up.
set -uo pipefail
cd "$(dirname "$0")/.."
kura=$PWD/build/bin/kura
pool=${XDG_DATA_HOME:-$HOME/.local/share}/kura/default.pool
prefix=/kura
sub=demo-programs-$$
kdir=$prefix/$sub
tdir=/dev/shm/kura-$sub
for t in sqlite3 fio; do
	command -v $t >/dev/null || { echo "skipped: $t is not installed (scripts/deps.sh)"; exit 0; }
done
if [ -e "$prefix" ]; then
	echo "skipped: $prefix exists in the kernel's namespace, so it cannot be kura's prefix"
	exit 0
fi
krun() { "$kura" run --pool "$pool" --mount "$prefix" -- "$@"; }
if ! krun mkdir -p "$kdir" 2>/dev/null || [ -e "$kdir" ] || ! "$kura" stat "$pool:/$sub" >/dev/null 2>&1; then
	echo "skipped: the interposition layer (kura run / libkura.so) does not serve $prefix yet"
	[ -d "$kdir" ] && rmdir "$kdir" "$prefix" 2>/dev/null  # landed in the kernel's namespace: remove it
	exit 0
fi
mkdir -p "$tdir"
trap 'rm -rf "$tdir"' EXIT

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
declare -A r
sql="PRAGMA journal_mode=DELETE;
CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
  INSERT INTO kv SELECT i, printf('value-%08d', (i * 7919) % 200003), i % 1000 FROM c;
CREATE INDEX kv_n ON kv(n);"
query="SELECT count(*), sum(n), max(v) FROM kv WHERE n BETWEEN 100 AND 199;"
for side in kura tmpfs; do
	if [ $side = kura ]; then d=$kdir; run=krun; else d=$tdir; run=; fi
	t=$(date +%s%N)
	$run sqlite3 "$d/demo.db" "$sql" >/dev/null || echo "$side: sqlite3 build failed"
	r[$side,build]=$(ms "$t")
	t=$(date +%s%N)
	r[$side,answer]=$($run sqlite3 "$d/demo.db" "$query" "PRAGMA integrity_check;" | tr '\n' ' ')
	r[$side,query]=$(ms "$t")
	for rw in randread randwrite; do
		r[$side,$rw]=$($run fio --name=demo --directory="$d" --filename=fio.dat --size=64m --bs=4k \
			--ioengine=psync --rw=$rw --thread --time_based --runtime=2 --invalidate=0 \
			--output-format=terse --terse-version=3 2>/dev/null |
			awk -F';' -v rw=$rw '{ print (rw == "randread" ? $8 : $49) }')
	done
	$run rm -f "$d/demo.db" "$d/fio.dat"
done
krun rmdir "$kdir"
printf '%-40s %14s %14s\n' "" "kura" "tmpfs"
printf '%-40s %14s %14s\n' "sqlite3: build 200k rows + index (ms)" "${r[kura,build]}" "${r[tmpfs,build]}"
printf '%-40s %14s %14s\n' "sqlite3: query + integrity_check (ms)" "${r[kura,query]}" "${r[tmpfs,query]}"
printf '%-40s %14s %14s\n' "fio 4k randread IOPS (psync, 2 s)" "${r[kura,randread]:-failed}" "${r[tmpfs,randread]:-failed}"
printf '%-40s %14s %14s\n' "fio 4k randwrite IOPS (psync, 2 s)" "${r[kura,randwrite]:-failed}" "${r[tmpfs,randwrite]:-failed}"
echo "query answer on kura:  ${r[kura,answer]}"
echo "query answer on tmpfs: ${r[tmpfs,answer]}"
[ "${r[kura,answer]}" = "${r[tmpfs,answer]}" ] && echo "same answer on both" || echo "ANSWERS DIFFER"
