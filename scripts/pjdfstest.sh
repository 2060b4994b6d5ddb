#!/bin/bash
# pjdfstest (the maintained Rust port, crates.io) on tmpfs, then under
# `kura run` on a memory pool (/dev/shm) and on a file pool (/var/tmp).
# Prints each run's summary and the tests that fail under kura but not on
# tmpfs in the same run; exits 1 if there are any.  Needs root (the suite
# switches users), cargo for the first run (about a minute to build), and
# a user "tests" (made here if missing; "nobody" is the other).
#
#   scripts/pjdfstest.sh [TEST_PATTERN...]     (make pjdfstest)
#   PJDFSTEST_KINDS="fuse" scripts/pjdfstest.sh  (make pjdfstest-fuse): a
#       memory pool through `kura mount -o allow_other` instead; the kinds
#       are memory, file and fuse (default: memory file)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kura=${KURA_BIN:-$root/build/bin/kura}
dir=${PJDFSTEST_DIR:-$root/build/third_party/pjdfstest}
bin=$dir/bin/pjdfstest
tag=$$

if [ "$(id -u)" -ne 0 ]; then
	echo "pjdfstest: needs root (its permission tests switch users)" >&2
	exit 2
fi
[ -x "$kura" ] || { echo "pjdfstest: $kura not built (make)" >&2; exit 2; }
if [ ! -x "$bin" ]; then
	command -v cargo >/dev/null || { echo "pjdfstest: cargo is needed to install it" >&2; exit 2; }
	cargo install pjdfstest --version 0.2.2 --root "$dir" -j2 >&2
fi
id tests >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin tests

work=$(mktemp -d /tmp/pjdfstest-XXXXXX)
pools=()
mnt=""
cleanup() {
	if [ -n "$mnt" ] && grep -q " $mnt fuse.kura " /proc/mounts; then
		"$kura" umount "$mnt" || true
	fi
	for p in "${pools[@]}"; do
		if [ -e "$p" ]; then
			id=$(printf '%x-%x' "$(stat -c %d "$p")" "$(stat -c %i "$p")")
			rm -f "$p" "/dev/shm/kura-$id" "/dev/shm/kura-locks-$id" "/dev/shm/kura-notify-$id"
		fi
	done
	rm -rf "$work" "/dev/shm/pjdfstest-tmpfs-$tag"
}
trap cleanup EXIT
cat > "$work/conf.toml" <<'EOF'
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}
[settings]
naptime = 0.05
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
EOF

# The tests that failed in a run's output, one name a line.
failed() { awk '$NF == "FAILED" { print $1 }' "$1" | sort; }

mkdir -m 755 "/dev/shm/pjdfstest-tmpfs-$tag"
"$bin" -c "$work/conf.toml" -p "/dev/shm/pjdfstest-tmpfs-$tag" "$@" > "$work/tmpfs.out" 2>&1 || true
echo "tmpfs:       $(grep '^Summary' "$work/tmpfs.out" || echo 'no summary (crashed?)')"
failed "$work/tmpfs.out" > "$work/tmpfs.failed"

status=0
for kind in ${PJDFSTEST_KINDS:-memory file}; do
	pool=$([ $kind = file ] && echo /var/tmp || echo /dev/shm)/pjdfstest-$tag-$kind.pool
	pools+=("$pool")
	"$kura" mkfs "$pool" --size 1G >/dev/null
	if [ $kind = fuse ]; then
		# The suite switches users: they must reach the mount point.
		chmod 755 "$work"
		mnt=$work/mnt
		mkdir "$mnt"
		"$kura" mount "$pool" "$mnt" -o allow_other
		mkdir -m 755 "$mnt/t"
		"$bin" -c "$work/conf.toml" -p "$mnt/t" "$@" > "$work/$kind.out" 2>&1 || true
		"$kura" umount "$mnt"
		"$kura" fsck "$pool" >/dev/null || { echo "  fsck of the pool after the fuse run found problems"; status=1; }
	else
		"$kura" run --pool "$pool" --mount "/pjdfstest-$tag" -- sh -c "mkdir -m 755 /pjdfstest-$tag/t"
		"$kura" run --pool "$pool" --mount "/pjdfstest-$tag" -- \
			"$bin" -c "$work/conf.toml" -p "/pjdfstest-$tag/t" "$@" > "$work/$kind.out" 2>&1 || true
	fi
	printf '%-12s %s\n' "kura $kind:" "$(grep '^Summary' "$work/$kind.out" || echo 'no summary: the run crashed')"
	failed "$work/$kind.out" > "$work/$kind.failed"
	extra=$(comm -13 "$work/tmpfs.failed" "$work/$kind.failed")
	if [ -n "$extra" ] || ! grep -q '^Summary' "$work/$kind.out"; then
		status=1
		echo "  failing under kura ($kind) only:"
		# shellcheck disable=SC2001
		echo "$extra" | sed 's/^/    /'
	fi
done
exit $status
