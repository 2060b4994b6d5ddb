#!/bin/bash
# SQLite's own test suite (testfixture, from Debian's sqlite3 source) on
# tmpfs and under `kura run` on a memory pool, side by side; exits 1 if the
# sets of failing tests differ, and prints both counts and the difference.
#
#   scripts/sqlite-testfixture.sh [veryquick|full|all] [testfixture option...]
#
# Options go to both runs, e.g. --start=walcrash3 to go on from a test
# file after a run was stopped (SQLite's tester.tcl reads it).
# veryquick (make check): the quick tests without the malloc and I/O-error
# simulations, minutes.  full (make sqlite-full): every test once, as
# SQLite's `make fulltestonly`.  all: every test under every permutation
# (SQLite's `make fulltest`), many hours.
#
# testfixture refuses to run as root (and root would pass its permission
# tests wrongly), so both runs are a user of their own, "tests" (made here
# if missing).  Needs root, tcl-dev and the source (scripts/sqlite-src.sh);
# without them it says so and exits 77, which CTest counts as skipped.
set -euo pipefail

suite=${1:-veryquick}
shift || true
for a in "$@"; do
	case $a in -*) ;; *) echo "sqlite-testfixture: '$a' is not a testfixture option" >&2; exit 2 ;; esac
done
case $suite in veryquick | full | all) ;; *) echo "sqlite-testfixture: unknown suite '$suite'" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
kura=${KURA_BIN:-$root/build/bin/kura}
out=${SQLITE_TF_DIR:-$root/build/sqlite-tf}
skip() { echo "sqlite-testfixture: skipped: $*" >&2; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (to run the suite as a user of its own)"
[ -x "$kura" ] || skip "$kura is not built"
src=$("$root/scripts/sqlite-src.sh" "$root/build/third_party")
[ -n "$src" ] || skip "Debian's sqlite3 source could not be fetched"
[ -f /usr/lib/tcl8.6/tclConfig.sh ] || apt-get install -y -q tcl-dev >/dev/null 2>&1 || skip "tcl-dev is missing"
id tests >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin tests

mkdir -p "$out/bld"
tf=$out/bld/testfixture
if [ ! -x "$tf" ] || [ "$src/VERSION" -nt "$tf" ]; then
	echo "sqlite-testfixture: building testfixture from $src (a few minutes)"
	(cd "$out/bld" && "$src/configure" --with-tcl=/usr/lib/tcl8.6 >configure.log 2>&1 &&
		make -j2 testfixture >make.log 2>&1) || { tail -20 "$out/bld/make.log" >&2; exit 1; }
fi
# The user runs testfixture and reads the tests: every directory on the way.
for d in "$out" "$out/bld" "$src" "$src/test"; do chmod o+rx "$d"; done
p=$root
while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done

as_tests() { setpriv --reuid=tests --regid=tests --init-groups "$@"; }
tag=$$
tmpdir=/dev/shm/kura-tf-$tag
pool=/dev/shm/kura-tf-$tag.pool
trap 'rm -rf "$tmpdir"; rm -f "$pool"; "$kura" gc "$pool" >/dev/null 2>&1 || true' EXIT
mkdir "$tmpdir"
chown tests: "$tmpdir"
as_tests "$kura" mkfs "$pool" --size 4G >/dev/null
test_file=$src/test/$suite.test

# The two runs side by side, one per core: the suite is single-threaded.
start=$(date +%s)
(cd "$tmpdir" && as_tests "$tf" "$test_file" "$@" >"$out/tmpfs.out" 2>&1) &
on_tmpfs=$!
(cd / && as_tests "$kura" run --pool "$pool" -- bash -c "mkdir -p /kura/tf && cd /kura/tf && exec '$tf' '$test_file' \"\$@\"" bash "$@" \
	>"$out/kura.out" 2>&1) &
on_kura=$!
wait $on_tmpfs || true
wait $on_kura || true
echo "sqlite-testfixture: $suite took $(($(date +%s) - start)) s"

# testfixture ends with "N errors out of M tests" and, if N > 0,
# "!Failures on these tests: name...".
failures() {
	# No failures, no such line: grep's status 1 is not an error here.
	{ grep -h '^!Failures on these tests:' "$1" || true; } | sed 's/^!Failures on these tests://' | tr ' ' '\n' |
		sed '/^$/d' | sort -u
}
summary() { grep -h 'errors out of' "$1" | tail -1; }
for run in tmpfs kura; do
	f=$out/$run.out
	if ! grep -q 'errors out of' "$f"; then
		echo "sqlite-testfixture: the $run run did not finish; its last lines:" >&2
		tail -20 "$f" >&2
		exit 1
	fi
	failures "$f" >"$out/$run.failures"
	printf '%-6s %s\n' "$run:" "$(summary "$f")"
done
if ! diff -u "$out/tmpfs.failures" "$out/kura.failures" >"$out/diff"; then
	echo "sqlite-testfixture: the failing tests differ (- tmpfs only, + kura only):"
	grep '^[-+][^-+]' "$out/diff" || true
	exit 1
fi
echo "sqlite-testfixture: the same $(wc -l <"$out/kura.failures") failing tests on both"
