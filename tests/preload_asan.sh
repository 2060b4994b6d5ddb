#!/bin/bash
# The ASan build's interposition layer under real programs: tests/preload/
# shared_maps.c (shared maps: coherence across processes, SIGBUS past the
# end, growth and mremap, partial munmap, unlink while mapped, fork), and
# notify_events.c and dnotify.c (inotify and F_NOTIFY with the watcher
# thread), each run on tmpfs and under `kura run` with the sanitized libkura.so, whose output
# must be the same; tests/atomic/groups.c under kura alone; then fsck.  The program itself is not instrumented, so
# ASan's runtime is preloaded behind the layer (CTest, ASan builds only).
#   tests/preload_asan.sh KURA_BIN SOURCE_DIR SCRATCH
set -euo pipefail
kura=$1 src=$2 scratch=$3
asan=$(gcc -print-file-name=libasan.so)
[ -e "$asan" ] || { echo "preload_asan: no libasan.so"; exit 77; }
mkdir -p "$scratch"
tag=$$
ref=/dev/shm/kura-asan-ref-$tag pool=/dev/shm/kura-asan-$tag.pool
trap 'rm -rf "$ref" "$pool"' EXIT
"$kura" mkfs "$pool" --size 64M >/dev/null
# badbuffers.c: EFAULT for buffers the program does not have (the layer
# probes them before the engine copies); notify_events.c, notify_fork.c
# and dnotify.c: change notification (src/preload/notify*.c), the watcher
# thread and a forked child's takeover included; signal_handlers.c: a
# handler's signal deferred while its thread holds kura's locks.
for prog in shared_maps badbuffers notify_events notify_fork dnotify signal_handlers; do
	exe=$scratch/$prog
	gcc -O2 -pthread -o "$exe" "$src/tests/preload/$prog.c"
	rm -rf "$ref"
	mkdir "$ref"
	want=$("$exe" "$ref" | sed "s|$ref|BASE|g")
	got=$(ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 LD_PRELOAD=$asan \
		"$kura" run --pool "$pool" -- bash -c "mkdir /kura/$prog && exec '$exe' /kura/$prog" | sed "s|/kura/$prog|BASE|g")
	if [ "$got" != "$want" ]; then
		diff <(echo "$want") <(echo "$got") || true
		echo "preload_asan: $prog's output under kura differs from tmpfs's"
		exit 1
	fi
done
# Atomic groups (src/group.c, src/preload/groupmap.c): map stores taken
# over in a SIGSEGV handler, threads, fork, kills; the program checks itself.
exe=$scratch/groups
gcc -O1 -pthread -I "$src/include" -o "$exe" "$src/tests/atomic/groups.c"
ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 LD_PRELOAD=$asan \
	"$kura" run --pool "$pool" -- bash -c "mkdir /kura/groups && exec '$exe' /kura/groups" || {
	echo "preload_asan: atomic groups failed under the sanitized layer"
	exit 1
}
# A group over several files and names (src/preload/gset.c).
gcc -O1 -I "$src/include" -o "$scratch/gset" "$src/tests/atomic/gset.c"
ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 LD_PRELOAD=$asan \
	"$kura" run --pool "$pool" -- bash -c "mkdir /kura/gset && exec '$scratch/gset' /kura/gset" || {
	echo "preload_asan: a group of files and names failed under the sanitized layer"
	exit 1
}
"$kura" fsck "$pool"
echo "preload_asan: shared maps, change notification and atomic groups as expected, fsck clean"
