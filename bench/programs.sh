#!/bin/bash
# Real programs on kura vs tmpfs vs ext4 (loop file in /dev/shm), in one run:
#   fio 4 KiB random read / random write IOPS (psync, numjobs=1, --thread,
#       --invalidate=0, time based), and
#   SQLite (python3's sqlite3 module, default DELETE journal, synchronous=FULL):
#       100k inserts in one transaction, 1k inserts in a transaction each,
#       and an aggregate query.
# kura runs through LD_PRELOAD=build/lib/libkura.so; if the interposition
# layer does not work yet, its column says so (no figures are made up).
# ext4 needs root (mount -o loop); otherwise its column is skipped.
# Usage: bench/programs.sh [FIO_SIZE (default 1g)] [FIO_RUNTIME (default 5)]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kura=$root/build/bin/kura
lib=$root/build/lib/libkura.so
size=${1:-1g}
runtime=${2:-5}
for t in fio python3; do
	command -v "$t" >/dev/null || { echo "programs.sh: $t is missing (scripts/deps.sh)" >&2; exit 1; }
done
[ -x "$kura" ] && [ -f "$lib" ] || { echo "programs.sh: build first (make)" >&2; exit 1; }

work=/dev/shm/kura-progbench-$$
pool=$work/bench.pool
prefix=/kura-progbench-$$
img=$work/ext4.img
mnt=$work/ext4
mkdir -p "$work/tmpfs"
cleanup() {
	mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
	rm -rf "$work"
}
trap cleanup EXIT

targets=(tmpfs)
declare -A dir=([tmpfs]=$work/tmpfs [kura]=$prefix/b) pre=()
if [ "$(id -u)" -eq 0 ] && command -v mkfs.ext4 >/dev/null; then
	mkdir -p "$mnt"
	truncate -s 3G "$img"
	if mkfs.ext4 -q -F "$img" && mount -o loop "$img" "$mnt"; then
		targets+=(ext4)
		dir[ext4]=$mnt
	else
		echo "programs.sh: ext4 loop mount failed; skipping ext4" >&2
	fi
else
	echo "programs.sh: not root; skipping ext4 on a loop file" >&2
fi
"$kura" mkfs "$pool" --size 3G --force >/dev/null
kenv=(env LD_PRELOAD="$lib" KURA_POOL="$pool" KURA_MOUNT="$prefix")
# Interposition works if a directory made through it lands in the pool and
# not in the kernel's namespace.
if "${kenv[@]}" mkdir -p "$prefix/b" 2>/dev/null && [ ! -e "$prefix" ] &&
	"$kura" stat "$pool:/b" >/dev/null 2>&1 && "${kenv[@]}" stat "$prefix/b" >/dev/null 2>&1; then
	targets+=(kura)
	kura_ok=1
else
	kura_ok=0
	[ -d "$prefix" ] && rmdir "$prefix/b" "$prefix" 2>/dev/null  # made in the kernel: not ours to keep
	echo "programs.sh: libkura.so does not serve $prefix yet (no interposition); kura column skipped" >&2
fi

# run TARGET CMD...: CMD with the preload for kura, plain otherwise.
run() {
	local t=$1; shift
	if [ "$t" = kura ]; then "${kenv[@]}" "$@"; else "$@"; fi
}

declare -A res
fio_iops() { # target rw
	run "$1" fio --name=r4k --directory="${dir[$1]}" --filename=fio.dat --size="$size" --bs=4k \
		--ioengine=psync --rw="$2" --thread --numjobs=1 --time_based --runtime="$runtime" \
		--invalidate=0 --output-format=json 2>/dev/null |
		python3 -c '
import json, sys
t = sys.stdin.read()
try:
    j = json.loads(t[t.index("{"):])["jobs"][0]
    d = j["read"] if sys.argv[1] == "randread" else j["write"]
    print("%.0f" % d["iops"] if j["error"] == 0 else "error%d" % j["error"])
except Exception:
    print("failed")' "$2"
}

sqlite_code='
import os, sqlite3, sys, time
d = sys.argv[1]
p = os.path.join(d, "bench.db")
for f in (p, p + "-journal"):
    if os.path.exists(f):
        os.unlink(f)
con = sqlite3.connect(p, isolation_level=None)
con.execute("pragma synchronous=FULL")
con.execute("create table t(id integer primary key, k integer, v text)")
t0 = time.perf_counter()
con.execute("begin")
for i in range(100000):
    con.execute("insert into t(k, v) values (?, ?)", ((i * 7919) % 100003, "value %d" % i))
con.execute("commit")
t1 = time.perf_counter()
for i in range(1000):
    con.execute("insert into t(k, v) values (?, ?)", (i, "single %d" % i))
t2 = time.perf_counter()
con.execute("select k % 100, count(*), max(v) from t group by k % 100 order by 2 desc").fetchall()
t3 = time.perf_counter()
assert con.execute("select count(*) from t").fetchone()[0] == 101000
con.close()
print("%.1f %.1f %.1f" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
'

for t in "${targets[@]}"; do
	echo "programs.sh: $t ..." >&2
	res[$t,randread]=$(fio_iops "$t" randread)
	res[$t,randwrite]=$(fio_iops "$t" randwrite)
	run "$t" rm -f "${dir[$t]}/fio.dat"
	read -r a b c < <(run "$t" python3 -c "$sqlite_code" "${dir[$t]}" 2>/dev/null || echo "failed failed failed")
	res[$t,ins]=$a res[$t,tx]=$b res[$t,q]=$c
done

cols=(tmpfs ext4 kura)
printf '\n%-40s' "fio 4k psync nj=1 --thread ($size, ${runtime}s)"
for c in "${cols[@]}"; do printf '%14s' "$c"; done
echo
row() { # label key
	printf '%-40s' "$1"
	for c in "${cols[@]}"; do
		if [ "$c" = kura ] && [ $kura_ok = 0 ]; then printf '%14s' "n/a"
		else printf '%14s' "${res[$c,$2]:--}"; fi
	done
	echo
}
row "  randread IOPS" randread
row "  randwrite IOPS" randwrite
row "sqlite 100k inserts, 1 tx (ms)" ins
row "sqlite 1k inserts, 1 tx each (ms)" tx
row "sqlite group-by query (ms)" q
[ $kura_ok = 1 ] || echo "(kura: interposition not available in $lib yet)"
