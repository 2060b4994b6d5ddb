#!/bin/bash
# `make demo`: round-trips the project's own sources through the default
# pool, checks the pool, and benchmarks kura against tmpfs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kura=$root/build/bin/kura
metabench=$root/build/bin/metabench
for b in "$kura" "$metabench"; do
	[ -x "$b" ] || { echo "demo: $b is missing; run 'make' first" >&2; exit 1; }
done

pool=${XDG_DATA_HOME:-$HOME/.local/share}/kura/default.pool
step() { printf '\n== %s\n' "$*"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "1. default pool: $pool"
if [ -s "$pool" ]; then
	echo "exists"
	# A pool an older kura made is brought up to this one's format (the
	# command says what it did; a pool that is current stays as it is).
	"$kura" upgrade "$pool"
else
	mkdir -p "$(dirname "$pool")"
	"$kura" mkfs "$pool" --size 1G
fi

# The CLI has no rm, so every run imports into a fresh directory.  The
# sources are snapshotted first: other people may be editing them while the
# demo runs, and the diff must compare against exactly what was imported.
dest=/demo-$(date +%s)
dirs=(src include tools tests scripts)
step "2. import ${dirs[*]} into $pool:$dest"
mkdir "$tmp/orig"
for d in "${dirs[@]}"; do
	[ -d "$d" ] && cp -a "$d" "$tmp/orig/"
done
for d in "$tmp"/orig/*; do
	"$kura" import "$d" "$pool:$dest/$(basename "$d")"
done
echo "$(find "$tmp/orig" -type f | wc -l) files, $(du -sh "$tmp/orig" | cut -f1) imported"
"$kura" ls "$pool:$dest"

step "3. export to a temp dir and compare"
"$kura" export "$pool:$dest" "$tmp/export"
diff -r "$tmp/orig" "$tmp/export"
echo "identical: diff -r found no difference"

step "4. fsck"
"$kura" fsck "$pool"

step "5. info"
"$kura" info "$pool"

step "6. metabench: kura vs tmpfs (/dev/shm)"
"$metabench" --pool /dev/shm/kura-demo-bench.pool --tmpfs /dev/shm/kura-demo-bench-tmpfs "$@"

step "7. real programs on kura (kura run: sqlite3, fio) vs tmpfs"
scripts/demo-programs.sh

printf '\ndemo: all steps passed\n'
