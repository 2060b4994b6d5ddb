#!/bin/bash
# Installs the Debian packages the build, tests and benchmarks need, and only
# those missing.  Not root: says what is missing and carries on, so a
# developer with the tools from elsewhere is not blocked.
set -euo pipefail

wanted=(build-essential cmake python3 strace e2fsprogs sqlite3 git fio clang libclang-rt-14-dev rsync patch diffutils lmdb-utils rocksdb-tools acl tcl-dev
	pkg-config man-db groff-base libsqlite3-dev python3-matplotlib inotify-tools python3-watchdog
	fuse3 libfuse3-dev busybox-static golang-go rclone libleveldb-dev)
missing=()
for p in "${wanted[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# python3 may be a pyenv shim that brings its own pytest; only the pytest
# reachable as `python3 -m pytest` matters.
if ! python3 -m pytest --version >/dev/null 2>&1; then
	dpkg -s python3-pytest >/dev/null 2>&1 || missing+=(python3-pytest)
fi

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: not root; please install: ${missing[*]}" >&2
	exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
