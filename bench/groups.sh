#!/bin/bash
# make bench-groups: what an atomic group's commit costs (bench/groupbench.c):
# one page stored through a 256 MiB shared map, or one pwrite, then
# kura_fcommit, on a memory pool under `kura run`, three runs in turn with
# the kernel's cost of making one page durable on tmpfs (msync, fdatasync).
# The issue's target: a median at or under 10 us for the map.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
pool=/dev/shm/kura-groupbench-$$.pool
file=/dev/shm/kura-groupbench-$$.file
trap 'rm -f "$pool" "$file"; "$bin/kura" gc "$pool" >/dev/null 2>&1 || true' EXIT
"$bin/kura" mkfs "$pool" --size 600M >/dev/null
for run in 1 2 3; do
	echo "run $run, kura (memory pool):"
	"$bin/kura" run --pool "$pool" -- "$bin/groupbench" /kura/g 256 5000 | sed 's/^/  /'
	echo "run $run, tmpfs:"
	"$bin/groupbench" "$file" 256 5000 | sed 's/^/  /'
done
