#!/bin/bash
# SQLite's batch-atomic commit on kura, measured: N transactions of one
# INSERT each (journal_mode=DELETE, synchronous=FULL; tests/programs/
# sqlite_batch.c "insert"), SQLite built with SQLITE_ENABLE_BATCH_ATOMIC_WRITE
# ("batch": no journal, one atomic group per commit) and without ("plain": a
# journal per commit), on
#   - a memory pool in /dev/shm, beside tmpfs;
#   - a pool file on the disk under the build directory (file back end) in
#     each KURA_SYNC mode of SYNC_MODES (default: fsync, kura's default, and
#     op), beside a directory of the disk's own file system (ext4 here).
# The systems run in turn, ROUNDS times (default 3), each time a new
# database; the table shows the median time per transaction with the fastest
# and slowest, and the ratios.  Timed inside the program: mounting and
# starting are not counted.
#
#   bash bench/sqlite_batch_atomic.sh [N]        (default N=1000)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-1000}
rounds=${ROUNDS:-3}
sync_modes=${SYNC_MODES:-fsync op}
build=${KURA_BUILD:-$root/build}
kura=${KURA_BIN:-$build/bin/kura}
lib=${KURA_LIB:-$build/lib/libkura.so}
[ -x "$kura" ] && [ -e "$lib" ] || { echo "build kura first (make build)" >&2; exit 1; }

set +e
dir=$("$root/scripts/sqlite-batch-atomic.sh" build)
rc=$?
set -e
[ $rc -eq 0 ] || { echo "sqlite_batch_atomic: the driver could not be built (exit $rc)" >&2; exit 1; }
dir=$(tail -n 1 <<<"$dir")
batch=$dir/sqlite_batch-batch
plain=$dir/sqlite_batch-plain

tag=$$
prefix=/kura-sqlbench-$tag
mem_pool=/dev/shm/kura-sqlbench-$tag.pool
disk_pool=$build/scratch/sqlbench-$tag.pool
tmpfs_dir=/dev/shm/kura-sqlbench-$tag-tmpfs
disk_dir=$build/scratch/sqlbench-$tag-disk
mkdir -p "$build/scratch" "$tmpfs_dir" "$disk_dir"
leftovers() { # kura's state of a pool in /dev/shm (lock tables, event ring, working copy)
	local st suffix
	st=$(stat -c '%d %i' "$1" 2>/dev/null) || return 0
	suffix=$(printf %x "${st% *}")-$(printf %x "${st#* }")
	rm -f /dev/shm/kura-"$suffix" /dev/shm/kura-*-"$suffix"
}
cleanup() {
	for p in "$mem_pool" "$disk_pool"; do
		"$kura" gc "$p" >/dev/null 2>&1 || true
		leftovers "$p"
		rm -f "$p"
	done
	rm -rf "$tmpfs_dir" "$disk_dir"
}
trap cleanup EXIT
"$kura" mkfs "$mem_pool" --size 1G >/dev/null
"$kura" mkfs "$disk_pool" --size 1G >/dev/null
fstype=$(df --output=fstype "$disk_dir" | tail -n 1)

# name|program|where|environment
systems=("kura-mem batch|$batch|kura|KURA_POOL=$mem_pool"
	"kura-mem plain|$plain|kura|KURA_POOL=$mem_pool"
	"tmpfs|$plain|$tmpfs_dir|")
for s in $sync_modes; do
	systems+=("kura-disk-$s batch|$batch|kura|KURA_POOL=$disk_pool KURA_SYNC=$s"
		"kura-disk-$s plain|$plain|kura|KURA_POOL=$disk_pool KURA_SYNC=$s")
done
systems+=("$fstype|$plain|$disk_dir|")

declare -A times
run_one() { # name prog where env round -> seconds
	local name=$1 prog=$2 where=$3 env=$4 r=$5 db out
	if [ "$where" = kura ]; then
		db=$prefix/r$r-${name// /-}.db
		out=$(env -u LD_PRELOAD $env KURA_MOUNT=$prefix LD_PRELOAD="$lib" "$prog" insert "$db" "$n")
	else
		db=$where/r$r.db
		rm -f "$db" "$db-journal"
		out=$(env -u LD_PRELOAD "$prog" insert "$db" "$n")
	fi
	# The property measured: batch commits without a journal, plain with.
	local journals
	journals=$(sed -n 's/^journal_opens=//p' <<<"$out")
	case $name in
	*batch) [ "$journals" = 0 ] || { echo "$name: $journals journals opened" >&2; exit 1; } ;;
	*) [ "$journals" = "$n" ] || { echo "$name: $journals journals opened, not $n" >&2; exit 1; } ;;
	esac
	sed -n 's/^elapsed=//p' <<<"$out"
}

echo "SQLite $n one-INSERT transactions (journal_mode=DELETE, synchronous=FULL), median of $rounds alternated runs"
echo "machine: $(nproc) cores, $(uname -r); disk: $fstype on $(df --output=source "$disk_dir" | tail -n 1)"
for r in $(seq "$rounds"); do
	for s in "${systems[@]}"; do
		IFS='|' read -r name prog where env <<<"$s"
		times[$name]+="$(run_one "$name" "$prog" "$where" "$env" "$r") "
	done
done

# median, min, max of "a b c ..." in seconds
stats() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; print m, v[1], v[NR]}'; }
med() { stats "${times[$1]}" | cut -d' ' -f1; }
printf '\n%-22s %12s %12s %10s %14s\n' system "us/txn" "txn/s" "total ms" "(min-max ms)"
for s in "${systems[@]}"; do
	IFS='|' read -r name _ <<<"$s"
	read -r m lo hi < <(stats "${times[$name]}")
	awk -v name="$name" -v m="$m" -v lo="$lo" -v hi="$hi" -v n="$n" \
		'BEGIN { printf "%-22s %12.1f %12.0f %10.1f %14s\n", name, m / n * 1e6, n / m, m * 1000, sprintf("(%.1f-%.1f)", lo * 1000, hi * 1000) }'
done
ratio() { awk -v a="$(med "$2")" -v b="$(med "$3")" -v t="$1" 'BEGIN { printf "  %-44s %6.2fx\n", t, b / a }'; }
echo
echo "speed-up (time of the second / time of the first):"
ratio "kura-mem: batch over plain" "kura-mem batch" "kura-mem plain"
ratio "kura-mem batch over tmpfs" "kura-mem batch" tmpfs
ratio "kura-mem plain over tmpfs" "kura-mem plain" tmpfs
for s in $sync_modes; do
	ratio "kura-disk-$s: batch over plain" "kura-disk-$s batch" "kura-disk-$s plain"
	ratio "kura-disk-$s batch over $fstype" "kura-disk-$s batch" "$fstype"
	ratio "kura-disk-$s plain over $fstype" "kura-disk-$s plain" "$fstype"
done
