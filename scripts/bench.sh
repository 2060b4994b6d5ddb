#!/bin/bash
# `make bench`: metabench against tmpfs and, when a loop mount is possible
# (root), an ext4 file system on a RAM-backed loop device as well; then once
# more with the pmem back end forced.
# Extra arguments go to metabench (e.g. --files 5000 --ops 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
metabench=$PWD/build/bin/metabench
[ -x "$metabench" ] || { echo "bench: $metabench is missing; run 'make' first" >&2; exit 1; }

img=/dev/shm/kura-bench-ext4.img
mnt=
cleanup() {
	if [ -n "$mnt" ]; then
		mountpoint -q "$mnt" && umount "$mnt"
		rmdir "$mnt"
	fi
	rm -f "$img"
}
trap cleanup EXIT

ext4=()
if [ "$(id -u)" -eq 0 ] && command -v mkfs.ext4 >/dev/null; then
	mnt=$(mktemp -d /tmp/kura-bench-ext4.XXXXXX)
	if truncate -s 2G "$img" && mkfs.ext4 -q -F "$img" &&
	   mount -o loop "$img" "$mnt" 2>/dev/null; then
		ext4=(--ext4 "$mnt")
		echo "bench: ext4 on a loop device over $img (RAM-backed) at $mnt"
	else
		echo "bench: loop mount not possible here; tmpfs only"
	fi
else
	echo "bench: not root; tmpfs only"
fi

run() { "$metabench" --pool /dev/shm/kura-bench.pool --tmpfs /dev/shm/kura-bench-tmpfs "${ext4[@]}" "$@"; }
run "$@"
# On tmpfs kura picks the ordering-only back end; the second run prices the
# cache-line flushes a real persistent-memory pool would pay.
if [ -z "${KURA_PERSIST:-}" ]; then
	echo
	echo "bench: again with KURA_PERSIST=pmem (flush + fence at every durability point)"
	KURA_PERSIST=pmem run "$@"
fi
