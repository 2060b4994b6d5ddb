# Sourced by every scenario script.  The harness (tests/test_programs.py)
# starts each scenario with its working directory set to $ROOT, an empty
# directory that is either on tmpfs or under the kura prefix, and compares
# everything the scenario prints (stdout and stderr, merged).
#
# Normalisation, all of it documented here and in test_programs.py:
#  - the harness replaces $ROOT by @ROOT@ and the kura prefix by @PREFIX@;
#  - scenarios never print wall-clock times: ls uses --time-style=+, stat
#    prints fixed fields, times set with touch -d are printed verbatim;
#  - directory sizes, st_blocks (du without --apparent-size, ls "total"),
#    inode and device numbers are file-system specific and are not printed
#    (ls_tree masks the size column of directories and collapses ls's
#    column padding, which the largest masked size would otherwise set);
#  - readdir order is file-system specific: listings are sorted.
set -u
set -o pipefail
export LC_ALL=C TZ=UTC
umask 022

step() { printf '\n== %s\n' "$*"; }

# ls -laR without times, with directory sizes and "total" lines masked and
# ".." entries dropped (the top one is outside the scenario's tree).
ls_tree() {
	ls -laR --time-style=+ "$@" | awk '
		/^total [0-9]+$/ { print "total -"; next }
		/^d.* \.\.$/ { next }
		/^d/ { $5 = "-" } { $1 = $1; print }'
}

# Every object below DIR (default .): type, mode, link count (not for
# directories: their link count is checked by ls_tree), size (not for
# directories), name, symlink target; then the sha256 of every regular file.
manifest() {
	local d=${1:-.}
	( cd "$d" || exit 1
	  { find . -mindepth 1 -type d -printf '%y %m - - %P\n'
	    find . -mindepth 1 ! -type d ! -type l -printf '%y %m %n %s %P\n'
	    find . -mindepth 1 -type l -printf '%y %m %n %s %P -> %l\n'
	  } | sort -k5
	  find . -type f -print0 | sort -z | xargs -0 -r sha256sum )
}
