#!/bin/bash
# SQLite's batch-atomic commit on kura: SQLite built with
# SQLITE_ENABLE_BATCH_ATOMIC_WRITE asks F2FS's atomic-write ioctls, which
# kura answers (src/preload/atomic.c), and then commits a rollback-journal
# transaction that fits its page cache without writing a journal at all.
#
#   scripts/sqlite-batch-atomic.sh [build]
#       builds SQLite's amalgamation from Debian's source (scripts/sqlite-src.sh)
#       and tests/programs/sqlite_batch.c against it twice: sqlite_batch-batch
#       (with SQLITE_ENABLE_BATCH_ATOMIC_WRITE) and sqlite_batch-plain
#       (without); prints the directory that holds them.
#   scripts/sqlite-batch-atomic.sh testfixture [files|perm|FILE.test...]
#       builds SQLite's testfixture with SQLITE_ENABLE_BATCH_ATOMIC_WRITE and
#       runs test files on tmpfs and under `kura run` on a memory pool, side
#       by side, as the unprivileged user "tests" (as scripts/sqlite-
#       testfixture.sh does); exits 1 if a test fails under kura that does
#       not fail on tmpfs.  files (the default): every test file that asks
#       `atomic_batch_write` (those that test the batch commit or skip parts
#       where it is in use).  perm: SQLite's "atomic-batch-write"
#       permutation (veryquick without the tests that need a journal file)
#       under kura, beside veryquick (a superset) on tmpfs, where that
#       permutation refuses to start; about ten minutes.
#
# Everything is cached in $SQLITE_BATCH_DIR (default $KURA_BUILD/sqlite-batch,
# else build/sqlite-batch) and built again only when missing (the drivers
# also when sqlite_batch.c or a part of it in tests/programs/sqlite_batch/
# changes).  Without the source, a compiler or tcl it says why and exits
# 77, which CTest counts as skipped.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kura=${KURA_BIN:-$root/build/bin/kura}
out=${SQLITE_BATCH_DIR:-${KURA_BUILD:-$root/build}/sqlite-batch}
driver_src=$root/tests/programs/sqlite_batch.c
driver_parts=$root/tests/programs/sqlite_batch
me=sqlite-batch-atomic
skip() { echo "$me: skipped: $*" >&2; exit 77; }

mode=${1:-build}
shift || true
case $mode in build | testfixture) ;; *) echo "$me: unknown mode '$mode' (build, testfixture)" >&2; exit 2 ;; esac

command -v gcc >/dev/null || skip "gcc is missing"
src=$("$root/scripts/sqlite-src.sh" "$root/build/third_party")
[ -n "$src" ] || skip "Debian's sqlite3 source could not be fetched"
mkdir -p "$out"
# One builder at a time (ctest -j, a benchmark beside a test).
exec 9>"$out/.lock"
flock 9

# ---- the amalgamation and the two drivers --------------------------------
build_drivers() {
	local amal=$out/amal
	if [ ! -s "$amal/sqlite3.c" ]; then
		command -v tclsh >/dev/null ||
			{ [ "$(id -u)" -eq 0 ] && apt-get install -y -q tcl >/dev/null 2>&1; } ||
			skip "tclsh is missing (apt-get install tcl)"
		echo "$me: making SQLite's amalgamation from $src" >&2
		rm -rf "$amal" && mkdir -p "$amal"
		(cd "$amal" && "$src/configure" >configure.log 2>&1 && make sqlite3.c >make.log 2>&1) ||
			{ tail -20 "$amal/make.log" "$amal/configure.log" >&2 2>/dev/null; exit 1; }
	fi
	local v def pids=()
	# The two compilations of the amalgamation side by side (a minute each).
	for v in batch plain; do
		def=
		[ $v = batch ] && def=-DSQLITE_ENABLE_BATCH_ATOMIC_WRITE
		if [ ! -s "$out/sqlite3-$v.o" ]; then
			echo "$me: compiling the amalgamation ($v)" >&2
			(gcc -O2 -g -DSQLITE_OMIT_LOAD_EXTENSION $def -c "$amal/sqlite3.c" -o "$out/sqlite3-$v.o.tmp" &&
				mv "$out/sqlite3-$v.o.tmp" "$out/sqlite3-$v.o") &
			pids+=($!)
		fi
	done
	for p in "${pids[@]}"; do wait "$p"; done
	for v in batch plain; do
		if [ ! -x "$out/sqlite_batch-$v" ] || [ "$out/sqlite3-$v.o" -nt "$out/sqlite_batch-$v" ] ||
			[ -n "$(find "$driver_src" "$driver_parts" -newer "$out/sqlite_batch-$v" -print -quit)" ]; then
			gcc -O2 -g -Wall -Wextra -I"$amal" -o "$out/sqlite_batch-$v.tmp" "$driver_src" \
				"$out/sqlite3-$v.o" -lpthread -lm
			mv "$out/sqlite_batch-$v.tmp" "$out/sqlite_batch-$v"
		fi
	done
}

if [ "$mode" = build ]; then
	build_drivers
	echo "$out"
	exit 0
fi

# ---- testfixture with SQLITE_ENABLE_BATCH_ATOMIC_WRITE -------------------
[ "$(id -u)" -eq 0 ] || skip "needs root (to run the suite as a user of its own)"
[ -x "$kura" ] || skip "$kura is not built"
[ -f /usr/lib/tcl8.6/tclConfig.sh ] || apt-get install -y -q tcl-dev >/dev/null 2>&1 || skip "tcl-dev is missing"
id tests >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin tests

tfb=$out/tf
tf=$tfb/testfixture
if [ ! -x "$tf" ]; then
	echo "$me: building testfixture with SQLITE_ENABLE_BATCH_ATOMIC_WRITE (a few minutes)" >&2
	rm -rf "$tfb" && mkdir -p "$tfb"
	(cd "$tfb" && CFLAGS="-g -O2 -DSQLITE_ENABLE_BATCH_ATOMIC_WRITE" \
		"$src/configure" --with-tcl=/usr/lib/tcl8.6 >configure.log 2>&1 &&
		make -j2 testfixture >make.log 2>&1) || { tail -20 "$tfb/make.log" >&2; exit 1; }
fi
flock -u 9

what=${1:-files}
files=()
case $what in
files)
	for f in $(grep -l 'atomic_batch_write' "$src"/test/*.test); do
		[ "$(basename "$f")" = permutations.test ] || files+=("$f")
	done ;;
perm) ;;
*)
	for f in "$@"; do
		case $f in /*) files+=("$f") ;; *) files+=("$src/test/$f") ;; esac
	done ;;
esac

res=$out/tf-$what
[ "$what" = files ] || [ "$what" = perm ] || res=$out/tf-some
rm -rf "$res" && mkdir -p "$res"
# The user runs testfixture and reads the tests: every directory on the way.
for d in "$out" "$tfb" "$res" "$src" "$src/test"; do chmod o+rx "$d"; done
chmod o+rwx "$res"
p=$root
while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done

as_tests() { setpriv --reuid=tests --regid=tests --init-groups "$@"; }
tag=$$
tmpdir=/dev/shm/kura-batch-tf-$tag
pool=/dev/shm/kura-batch-tf-$tag.pool
trap 'rm -rf "$tmpdir"; rm -f "$pool"; "$kura" gc "$pool" >/dev/null 2>&1 || true' EXIT
mkdir "$tmpdir"
chown tests: "$tmpdir"
as_tests "$kura" mkfs "$pool" --size 4G >/dev/null

# One loop per side: every file in a fresh directory, its output in
# $res/SIDE/NAME.out.  $1: the side, $2: the directory under which to run.
runner=$res/run.sh
cat >"$runner" <<'EOF'
#!/bin/bash
side=$1 base=$2 tf=$3 res=$4; shift 4
mkdir -p "$res/$side"
for f in "$@"; do
	# FILE.test, or FILE.test:ARG for permutations.test ARG.
	test=${f%%:*}
	arg=
	[ "$test" = "$f" ] || arg=${f#*:}
	name=$(basename "$test" .test)
	d=$base/$name
	mkdir -p "$d" && cd "$d" || exit 1
	start=$(date +%s)
	"$tf" "$test" $arg >"$res/$side/$name.out" 2>&1
	echo "exit $? seconds $(($(date +%s) - start))" >>"$res/$side/$name.out"
	cd / && rm -rf "$d"
done
EOF
chmod 755 "$runner"

if [ "$what" = perm ]; then
	# On kura, the permutation SQLite made for such file systems; on tmpfs
	# it refuses to start ("File system does NOT support
	# atomic-batch-write"), so veryquick runs there instead: the failures
	# under kura must be among veryquick's.
	kura_list=("$src/test/permutations.test:atomic-batch-write")
	tmpfs_list=("$src/test/veryquick.test")
else
	kura_list=("${files[@]}")
	tmpfs_list=("${files[@]}")
fi

start=$(date +%s)
(as_tests "$runner" tmpfs "$tmpdir" "$tf" "$res" "${tmpfs_list[@]}") &
on_tmpfs=$!
(cd / && as_tests "$kura" run --pool "$pool" -- bash -c 'mkdir -p /kura/tf && exec "$@"' bash \
	"$runner" kura /kura/tf "$tf" "$res" "${kura_list[@]}") &
on_kura=$!
wait $on_tmpfs || true
wait $on_kura || true
echo "$me: testfixture ($(basename "$res")) took $(($(date +%s) - start)) s"

# testfixture ends with "N errors out of M tests" and, if N > 0,
# "!Failures on these tests: name...".
failures() {
	{ grep -h '^!Failures on these tests:' "$@" || true; } | sed 's/^!Failures on these tests://' | tr ' ' '\n' |
		sed '/^$/d' | sort -u
}
summary() {
	{ grep -h 'errors out of' "$1" | sed 's/ tests on .*/ tests/' || echo "did not finish"; } | tail -n 1
}
bad=0
for side in tmpfs kura; do
	for o in "$res/$side"/*.out; do
		grep -q 'errors out of' "$o" || { echo "$me: $side: $(basename "$o" .out) did not finish"; bad=1; }
	done
	failures "$res/$side"/*.out >"$res/$side.failures"
done
if [ "$what" != perm ]; then
	# A file that skips itself (wholly, where batch commits are in use or
	# where they are not) counts one test on that side.
	printf '%-16s %-40s %s\n' file tmpfs kura
	for o in "$res/kura"/*.out; do
		n=$(basename "$o" .out)
		a=$(summary "$res/tmpfs/$n.out") b=$(summary "$o")
		na=$(sed -n 's/.* out of \([0-9]*\) tests/\1/p' <<<"$a") nb=$(sed -n 's/.* out of \([0-9]*\) tests/\1/p' <<<"$b")
		[ "${na:-0}" = 1 ] && [ "${nb:-0}" -gt 1 ] && a+=" (skips)"
		[ "${nb:-0}" = 1 ] && [ "${na:-0}" -gt 1 ] && b+=" (skips)"
		printf '%-16s %-40s %s\n' "$n" "$a" "$b"
	done
else
	printf '%-6s %s\n' tmpfs: "$(summary "$res/tmpfs/veryquick.out")"
	printf '%-6s %s\n' kura: "$(summary "$res/kura/permutations.out")"
fi
comm -13 "$res/tmpfs.failures" "$res/kura.failures" >"$res/kura-only"
if [ -s "$res/kura-only" ]; then
	echo "$me: failing under kura only:"
	sed 's/^/  /' "$res/kura-only"
	bad=1
fi
echo "$me: $(wc -l <"$res/tmpfs.failures") failing on tmpfs, $(wc -l <"$res/kura.failures") under kura (outputs in $res)"
exit $bad
