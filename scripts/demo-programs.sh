#!/bin/bash
# Called by demo.sh: real, unmodified programs on kura through `kura run`,
# side by side with the kernel.  The sqlite3 CLI builds and queries a
# database, and fio runs short 4 KiB random read and write jobs, on:
#
#   kura-op     the default pool (prefix /kura), on a disk: the `file` back
#               end with KURA_SYNC=op, every change on the disk before it
#               returns.
#   disk+sync   a directory beside the default pool, on the same kernel file
#               system, with fio writing O_SYNC: the same promise as kura-op.
#   kura-fsync  the default pool with KURA_SYNC=fsync (the file back end's
#               default): changes durable at fsync, atomic and in order.
#   disk        the same kernel directory, fio writing plainly: ext4's promise.
#   kura-shm    a pool in /dev/shm: the `memory` back end, exactly as
#               volatile as tmpfs, so the like-for-like column for tmpfs.
#   tmpfs       /dev/shm.
#
# Comparing a durable column with a volatile one would compare different
# promises; hence the three pairs.  The last fio row fsyncs after every
# write everywhere.  If the interposition layer does not serve the
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

sides=(kura-op disk+sync kura-fsync disk kura-shm tmpfs)
declare -A dir=([kura-op]=$prefix/$sub [disk+sync]=$(dirname "$pool")/$sub [kura-fsync]=$prefix/$sub
	[disk]=$(dirname "$pool")/$sub [kura-shm]=$prefix/$sub [tmpfs]=$shm/tmpfs)
declare -A poolof=([kura-op]=$pool [kura-fsync]=$pool [kura-shm]=$shm/demo.pool)
declare -A syncof=([kura-op]=op [kura-fsync]=fsync [kura-shm]=op)
# run SIDE CMD...: the command through `kura run` for the kura sides.
run() {
	local s=$1; shift
	if [ -n "${poolof[$s]:-}" ]; then
		KURA_SYNC=${syncof[$s]} "$kura" run --pool "${poolof[$s]}" --mount "$prefix" -- "$@"
	else
		"$@"
	fi
}
for s in kura-op kura-shm; do
	# Served means: the directory landed in the pool, not in the kernel.
	if ! run $s mkdir -p "${dir[$s]}" 2>/dev/null || [ -e "$prefix" ] ||
		! "$kura" stat "${poolof[$s]}:/$sub" >/dev/null 2>&1; then
		echo "skipped: the interposition layer (kura run / libkura.so) does not serve $prefix"
		[ -d "$prefix" ] && rm -rf "${prefix:?}/$sub" && rmdir "$prefix" 2>/dev/null
		exit 0
	fi
done

# Both pools stay mounted through the runs, as the kernel's file systems
# are: a shell under `kura run` whose working directory is in the pool
# holds each, so every program's `kura run` joins the pool instead of
# loading it (a disk pool's working copy is all its data) and writing it
# back at exit.  Closing their input ends them.
holders=()
for s in kura-op kura-shm; do
	exec {fd}> >(KURA_SYNC=${syncof[$s]} "$kura" run --pool "${poolof[$s]}" --mount "$prefix" -- \
		sh -c "cd $prefix && echo held >&2 && read _ 2>/dev/null" 2>"$shm/held-$s")
	holders+=("$fd")
	for _ in $(seq 100); do grep -q held "$shm/held-$s" 2>/dev/null && break; sleep 0.05; done
done
release_holders() { for fd in "${holders[@]}"; do eval "exec $fd>&-"; done; sleep 0.5; }

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
	run $s mkdir -p "$d" # sides that share a place start from an empty one
	t=$(date +%s%N)
	run $s sqlite3 "$d/demo.db" "$sql" >/dev/null || echo "$s: sqlite3 build failed"
	r[$s,build]=$(ms "$t")
	t=$(date +%s%N)
	r[$s,answer]=$(run $s sqlite3 "$d/demo.db" "$query" "PRAGMA integrity_check;" | tr '\n' ' ')
	r[$s,query]=$(ms "$t")
	sync=0
	[ $s = disk+sync ] && sync=1
	for rw in randread randwrite randwrite+fsync; do
		fsync=0
		[ $rw = randwrite+fsync ] && fsync=1
		r[$s,$rw]=$(run $s fio --name=demo --directory="$d" --filename=fio.dat --size=64m --bs=4k \
			--ioengine=psync --rw=${rw%+fsync} --sync=$sync --fsync=$fsync --thread --time_based \
			--runtime=2 --invalidate=0 --output-format=terse --terse-version=3 2>/dev/null |
			awk -F';' -v rw=$rw '{ print (rw == "randread" ? $8 : $49) }')
	done
	run $s rm -rf "$d"
done
release_holders
row() { printf '%-38s' "$1"; shift; printf ' %10s' "$@"; printf '\n'; }
row "" "${sides[@]}"
label() {
	case $1 in
	build) echo "sqlite3: 200k rows + index (ms)" ;;
	query) echo "sqlite3: query + integrity (ms)" ;;
	randread) echo "fio 4k randread IOPS (psync, 2 s)" ;;
	randwrite) echo "fio 4k randwrite IOPS (psync, 2 s)" ;;
	randwrite+fsync) echo "fio 4k randwrite, fsync each (IOPS)" ;;
	esac
}
keys=(build query randread randwrite randwrite+fsync)
for k in "${keys[@]}"; do
	vals=()
	for s in "${sides[@]}"; do vals+=("${r[$s,$k]:-failed}"); done
	row "$(label $k)" "${vals[@]}"
done
# kura over the kernel with the same promise, higher is better (times inverted).
ratio() {
	awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", t ? b / a : a / b; else print "n/a" }'
}
echo
row "ratio, kura / kernel (higher is better)" "op/sync" "fsync/disk" "shm/tmpfs"
for k in "${keys[@]}"; do
	t=0
	case $k in build | query) t=1 ;; esac
	row "$(label $k)" "$(ratio "${r[kura-op,$k]:-0}" "${r[disk+sync,$k]:-0}" $t)" \
		"$(ratio "${r[kura-fsync,$k]:-0}" "${r[disk,$k]:-0}" $t)" "$(ratio "${r[kura-shm,$k]:-0}" "${r[tmpfs,$k]:-0}" $t)"
done
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
