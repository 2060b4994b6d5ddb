#!/bin/bash
# The ASan build's interposition layer under a real program: tests/preload/
# shared_maps.c (shared maps: coherence across processes, SIGBUS past the
# end, growth and mremap, partial munmap, unlink while mapped, fork) run on
# tmpfs and under `kura run` with the sanitized libkura.so, whose output
# must be the same, then fsck.  The program itself is not instrumented, so
# ASan's runtime is preloaded behind the layer (CTest, ASan builds only).
#   tests/preload_asan.sh KURA_BIN SOURCE_DIR SCRATCH
set -euo pipefail
kura=$1 src=$2 scratch=$3
asan=$(gcc -print-file-name=libasan.so)
[ -e "$asan" ] || { echo "preload_asan: no libasan.so"; exit 77; }
mkdir -p "$scratch"
exe=$scratch/shared_maps
gcc -O2 -o "$exe" "$src/tests/preload/shared_maps.c"
tag=$$
ref=/dev/shm/kura-asan-ref-$tag pool=/dev/shm/kura-asan-$tag.pool
trap 'rm -rf "$ref" "$pool"' EXIT
mkdir "$ref"
want=$("$exe" "$ref")
"$kura" mkfs "$pool" --size 64M >/dev/null
got=$(ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 LD_PRELOAD=$asan \
	"$kura" run --pool "$pool" -- bash -c "mkdir /kura/m && exec '$exe' /kura/m")
if [ "$got" != "$want" ]; then
	diff <(echo "$want") <(echo "$got") || true
	echo "preload_asan: the output under kura differs from tmpfs's"
	exit 1
fi
"$kura" fsck "$pool"
echo "preload_asan: shared maps as on tmpfs, fsck clean"
