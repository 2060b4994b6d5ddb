# bash completion for kura(1): commands, each command's options, pool files
# (*.pool, and directories on the way to them) and POOL:/path operands, whose
# path part is listed from the pool itself with `kura ls -l`.  Needs nothing
# from the bash-completion package; with it, `kura run CMD` goes on with
# CMD's own completion.

# Adds to COMPREPLY the directories and pool files that start with $1; pool
# files get $2 appended (":" where a POOL:/path operand is wanted).
_kura_pools()
{
	local f
	while IFS= read -r f; do
		COMPREPLY+=("$f/")
	done < <(compgen -d -- "$1")
	while IFS= read -r f; do
		[ -d "$f" ] || COMPREPLY+=("$f$2")
	done < <(compgen -f -X '!*.pool' -- "$1")
}

# Adds to COMPREPLY the entries of the pool directory that POOL:/dir/part
# ($2) names which start with part, listed by the kura command $1.
# Directories get a '/', so that completion goes on into them.
_kura_pool_paths()
{
	local pool=${2%%:*} path=${2#*:} dir= mode links uid gid size day time name
	[[ $path == */* ]] && dir=${path%/*}/
	[ -z "$path" ] && path=/ dir=/
	while read -r mode links uid gid size day time name; do
		[[ $mode == [-dlcbps]?????????* && -n $name ]] || continue
		[[ $mode == l* ]] && name=${name% -> *}
		[[ $mode == d* ]] && name+=/
		[[ $dir$name == "$path"* ]] && COMPREPLY+=("$pool:$dir$name")
	done < <("$1" ls -l -- "$pool:${dir:-/}" 2>/dev/null)
}

_kura_commands="mkfs fsck gc upgrade info ls stat cat import export stage-in stage-out run mount umount"

_kura()
{
	# Words from the line itself: COMP_WORDS splits POOL:/path at the ':'.
	# read without -r takes "a\ b" as one word "a b", as the shell would.
	local line=${COMP_LINE:0:COMP_POINT} words
	read -a words <<<"$line"
	[[ -z $line || $line == *[[:space:]] ]] && words+=("")
	local cword=$((${#words[@]} - 1))
	local cur=${words[cword]} prev=
	[ "$cword" -gt 0 ] && prev=${words[cword - 1]}
	COMPREPLY=()

	if [ "$cword" -le 1 ]; then
		COMPREPLY=($(compgen -W "$_kura_commands version help --version --help" -- "$cur"))
		return
	fi
	local cmd=${words[1]} i operand=0 opts="--help" takes_value=""
	case $cmd in
	mkfs) opts="--size --mode --force --help" takes_value="--size|--mode|-s|-m" ;;
	fsck) opts="--repair --help" ;;
	ls) opts="-l -a --help" ;;
	stat) opts="-L --help" ;;
	run) opts="--pool --mount --help --" takes_value="--pool|--mount" ;;
	stage-in) opts="--jobs --verify --rclone --help" takes_value="--jobs|-j" ;;
	mount) opts="-o -f --help" takes_value="-o" ;;
	stage-out) opts="--jobs --verify --watch --settle --rclone --help" takes_value="--jobs|-j|--settle" ;;
	help)
		[ "$cword" -eq 2 ] && COMPREPLY=($(compgen -W "$_kura_commands" -- "$cur"))
		return ;;
	esac
	# Which operand this is (0 for the first), options and their values aside.
	for ((i = 2; i < cword; i++)); do
		case ${words[i]} in
		--) [ "$cmd" = run ] && { _kura_run_command "$((i + 1))"; return; } ;;
		-*) [[ "|$takes_value|" == *"|${words[i]}|"* ]] && ((i++)) ;;
		*)
			if [ "$cmd" = run ]; then
				_kura_run_command "$i"
				return
			fi
			((operand++)) ;;
		esac
	done

	case $prev in
	--size | -s | --mode | -m | --mount | --jobs | -j | --settle) return ;;
	--pool) _kura_pools "$cur" "" ;;
	-o) [ "$cmd" = mount ] && COMPREPLY=($(compgen -W "ro allow_other default_permissions" -- "$cur")) ;;
	*)
		if [[ $cur == --pool=* && $cmd == run ]]; then
			cur=${cur#--pool=}
			_kura_pools "$cur" ""
		elif [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$opts" -- "$cur"))
			return
		else
			case $cmd:$operand in
			mkfs:0 | fsck:0 | gc:0 | upgrade:0 | info:0 | mount:0) _kura_pools "$cur" "" ;;
			mount:1) COMPREPLY=($(compgen -d -- "$cur")) ;;
			umount:0) COMPREPLY=($(awk '$3 == "fuse.kura" { print $2 }' /proc/mounts 2>/dev/null | grep -- "^$cur")) ;;
			ls:* | stat:* | cat:* | import:1 | export:0 | stage-in:1 | stage-out:0)
				if [[ $cur == *:* ]]; then
					_kura_pool_paths "$1" "$cur"
				else
					_kura_pools "$cur" ":"
				fi ;;
			import:0 | export:1 | stage-in:0 | stage-out:1) COMPREPLY=($(compgen -f -- "$cur")) ;;
			run:*) mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u) ;;
			esac
		fi ;;
	esac

	# Go on typing after a directory or POOL: rather than after a space.
	local r
	for r in "${COMPREPLY[@]}"; do
		[[ $r == */ || $r == *: ]] && { compopt -o nospace 2>/dev/null; break; }
	done
	# Readline replaces only what follows the last ':' of the word.
	if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
		local head=${cur%"${cur##*:}"}
		COMPREPLY=("${COMPREPLY[@]#"$head"}")
	fi
	# Quoted for the line, but for a leading ~, which the shell expands.
	for i in "${!COMPREPLY[@]}"; do
		r=${COMPREPLY[i]}
		printf -v "COMPREPLY[i]" '%q' "$r"
		[[ $r == "~"* ]] && COMPREPLY[i]=${COMPREPLY[i]#\\}
	done
}

# `kura run [OPTIONS] CMD ARGS`: CMD from the commands on PATH, ARGS as CMD's
# own completion would have them (bash-completion's _command_offset), else
# as file names.  $1 is the index of CMD in words.
_kura_run_command()
{
	if [ "$cword" -eq "$1" ]; then
		mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
		return
	fi
	if ! declare -F _command_offset >/dev/null; then
		COMPREPLY=($(compgen -f -- "$cur"))
		return
	fi
	# _command_offset counts in COMP_WORDS, where '=' and ':' stand alone.
	local k j=0 acc
	for ((k = 0; k < $1; k++)); do
		acc=
		while [[ $acc != "${words[k]}" && j -lt COMP_CWORD ]]; do
			acc+=${COMP_WORDS[j++]}
		done
	done
	_command_offset "$j"
}

complete -F _kura -o bashdefault -o default kura
