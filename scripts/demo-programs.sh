#!/bin/bash
# Called by demo.sh: real, unmodified programs on kura through `kura run`,
# side by side with the kernel.  The sqlite3 CLI builds and queries a
# database, and fio runs short 4 KiB random read and write jobs, on:
#
#   kura-disk   the default pool (prefix /kura).  It lives on a disk, so kura
#               uses the `file` back end: every write is on the disk (msync)
#               before it returns.
#   disk+sync   a directory beside the default pool, on the same kernel file
#               system, with fio writing O_SYNC: the same promise as kura-disk.
#   kura-shm    a pool in /dev/shm: the `memory` back end, exactly as
#               volatile as tmpfs, so the like-for-like column for tmpfs.
#   tmpfs       /dev/shm.
#
# Comparing kura-disk with tmpfs would compare durable writes with volatile
# ones; hence the two pairs.  If the interposition layer does not serve the
# prefix, says so and returns 0: no figures are made up.  Different query
# answers are a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
kura=$PWD/build/bin/kura
pool=${XDG_DATA_HOME:-$HOME/.local/share}/kura/default.pool
prefix=/kura
sub=demo-programs-$$
shm=/dev/shm/kura-$sub
for t in sqlite3 fio; do
	command -v $t >/dev/null || { echo "skipped: $t is not installed (scripts/deps.sh)"; exit 0; }
done
if [ -e "$prefix" ]; then
	echo "skipped: $prefix exists in the kernel's namespace, so it cannot be kura's prefix"
	exit 0
fi
mkdir -p "$shm/tmpfs" "$(dirname "$pool")/$sub"
trap 'rm -rf "$shm" "$(dirname "$pool")/$sub"' EXIT
"$kura" mkfs "$shm/demo.pool" --size 512M >/dev/null

sides=(kura-disk disk+sync kura-shm tmpfs)
declare -A dir=([kura-disk]=$prefix/$sub [disk+sync]=$(dirname "$pool")/$sub
	[kura-shm]=$prefix/$sub [tmpfs]=$shm/tmpfs)
declare -A poolof=([kura-disk]=$pool [kura-shm]=$shm/demo.pool)
# run SIDE CMD...: the command through `kura run` for the kura sides.
run() {
	local s=$1; shift
	if [ -n "${poolof[$s]:-}" ]; then
		"$kura" run --pool "${poolof[$s]}" --mount "$prefix" -- "$@"
	else
		"$@"
	fi
}
for s in kura-disk kura-shm; do
	# Served means: the directory landed in the pool, not in the kernel.
	if ! run $s mkdir -p "${dir[$s]}" 2>/dev/null || [ -e "$prefix" ] ||
		! "$kura" stat "${poolof[$s]}:/$sub" >/dev/null 2>&1; then
		echo "skipped: the interposition layer (kura run / libkura.so) does not serve $prefix"
		[ -d "$prefix" ] && rm -rf "${prefix:?}/$sub" && rmdir "$prefix" 2>/dev/null
		exit 0
	fi
done

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
declare -A r
sql="PRAGMA journal_mode=DELETE;
CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
  INSERT INTO kv SELECT i, printf('value-%08d', (i * 7919) % 200003), i % 1000 FROM c;
CREATE INDEX kv_n ON kv(n);"
query="SELECT count(*), sum(n), max(v) FROM kv WHERE n BETWEEN 100 AND 199;"
for s in "${sides[@]}"; do
	d=${dir[$s]}
	t=$(date +%s%N)
	run $s sqlite3 "$d/demo.db" "$sql" >/dev/null || echo "$s: sqlite3 build failed"
	r[$s,build]=$(ms "$t")
	t=$(date +%s%N)
	r[$s,answer]=$(run $s sqlite3 "$d/demo.db" "$query" "PRAGMA integrity_check;" | tr '\n' ' ')
	r[$s,query]=$(ms "$t")
	sync=0
	[ $s = disk+sync ] && sync=1
	for rw in randread randwrite; do
		r[$s,$rw]=$(run $s fio --name=demo --directory="$d" --filename=fio.dat --size=64m --bs=4k \
			--ioengine=psync --rw=$rw --sync=$sync --thread --time_based --runtime=2 --invalidate=0 \
			--output-format=terse --terse-version=3 2>/dev/null |
			awk -F';' -v rw=$rw '{ print (rw == "randread" ? $8 : $49) }')
	done
	run $s rm -rf "$d"
done
row() { printf '%-38s' "$1"; shift; printf ' %11s' "$@"; printf '\n'; }
row "" "${sides[@]}"
for k in build query randread randwrite; do
	case $k in
	build) label="sqlite3: 200k rows + index (ms)" ;;
	query) label="sqlite3: query + integrity (ms)" ;;
	randread) label="fio 4k randread IOPS (psync, 2 s)" ;;
	randwrite) label="fio 4k randwrite IOPS (psync, 2 s)" ;;
	esac
	vals=()
	for s in "${sides[@]}"; do vals+=("${r[$s,$k]:-failed}"); done
	row "$label" "${vals[@]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "randwrite IOPS ratios: kura-disk/disk+sync $(ratio "${r[kura-disk,randwrite]:-0}" "${r[disk+sync,randwrite]:-0}")," \
	"kura-shm/tmpfs $(ratio "${r[kura-shm,randwrite]:-0}" "${r[tmpfs,randwrite]:-0}")"
echo "randread IOPS ratios:  kura-disk/disk+sync $(ratio "${r[kura-disk,randread]:-0}" "${r[disk+sync,randread]:-0}")," \
	"kura-shm/tmpfs $(ratio "${r[kura-shm,randread]:-0}" "${r[tmpfs,randread]:-0}")"
fail=0
for s in "${sides[@]}"; do
	echo "query answer on $s: ${r[$s,answer]}"
	[ "${r[$s,answer]}" = "${r[tmpfs,answer]}" ] || fail=1
done
if [ $fail = 1 ]; then
	echo "ANSWERS DIFFER"
	exit 1
fi
echo "same answer everywhere"
