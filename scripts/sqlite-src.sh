#!/usr/bin/env bash
# Fetches Debian's SQLite source tree (apt-get source sqlite3) for the import/
# export round-trip test, with a private apt configuration so the machine's
# sources.list is left alone.  Prints the tree's path; prints nothing and
# exits 0 when it cannot be had (not root, no network), so tests skip.
set -uo pipefail
dest=${1:-build/third_party}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
found=$(find "$dest" -maxdepth 1 -type d -name 'sqlite3-*' | head -n 1)
if [ -n "$found" ]; then echo "$found"; exit 0; fi
command -v apt-get >/dev/null || exit 0
[ "$(id -u)" = 0 ] || { echo "sqlite-src: not root, skipping the SQLite source fetch" >&2; exit 0; }
command -v dpkg-source >/dev/null || apt-get install -y -q dpkg-dev >/dev/null 2>&1 || exit 0

apt_dir="$dest/apt"
mkdir -p "$apt_dir/lists/partial"
# Same mirrors as the machine's own deb lines, as deb-src.
{
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sed -e 's/^Types: deb$/Types: deb-src/' "$f" && echo
  done
} > "$apt_dir/src.sources"
[ -s "$apt_dir/src.sources" ] || grep -h '^deb ' /etc/apt/sources.list 2>/dev/null \
  | sed 's/^deb /deb-src /' > "$apt_dir/src.list"
opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir"
      -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Sandbox::User=root")
timeout 300 apt-get "${opts[@]}" update -q >/dev/null 2>&1 || { echo "sqlite-src: apt-get update failed" >&2; exit 0; }
(cd "$dest" && timeout 600 apt-get "${opts[@]}" source -q sqlite3 >/dev/null 2>&1) \
  || { echo "sqlite-src: apt-get source sqlite3 failed" >&2; exit 0; }
find "$dest" -maxdepth 1 -type d -name 'sqlite3-*' | head -n 1
