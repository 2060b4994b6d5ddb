# bash completion for kura(1): commands, their options, pool files and
# POOL:/path operands (the path part listed from the pool with kura ls).
_kura()
{
	local cur prev words cword
	_init_completion -n : 2>/dev/null || {
		cur=${COMP_WORDS[COMP_CWORD]}
		prev=${COMP_WORDS[COMP_CWORD-1]}
		words=("${COMP_WORDS[@]}")
		cword=$COMP_CWORD
	}
	local commands="mkfs fsck gc upgrade info ls stat cat import export run mount umount --version --help"
	if [ "$cword" -eq 1 ]; then
		COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		return
	fi
	local cmd=${words[1]}
	if [[ $cur == -* ]]; then
		local opts="--help"
		case $cmd in
		mkfs) opts="--size --mode --force --help" ;;
		fsck) opts="--repair --help" ;;
		ls) opts="-l -a --help" ;;
		stat) opts="-L --help" ;;
		run) opts="--pool --mount --help" ;;
		mount) opts="-o -f --help" ;;
		esac
		COMPREPLY=($(compgen -W "$opts" -- "$cur"))
		return
	fi
	case $prev in
	--size | --mode | --mount) return ;;
	-o) [ "$cmd" = mount ] && COMPREPLY=($(compgen -W "ro allow_other default_permissions" -- "$cur")); return ;;
	--pool) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	esac
	[ "$cmd" = run ] && [ "$cword" -gt 2 ] && { COMPREPLY=($(compgen -c -- "$cur")); return; }
	if [[ $cur == *:* ]]; then
		# POOL:/dir/partial: list /dir in the pool.
		local pool=${cur%%:*} path=${cur#*:}
		local dir=${path%/*}/
		[[ $path == */* ]] || dir=/
		local name
		COMPREPLY=()
		while IFS= read -r name; do
			[ -n "$name" ] && COMPREPLY+=("$pool:${dir%/}/$name")
		done < <(kura ls "$pool:$dir" 2>/dev/null)
		COMPREPLY=($(compgen -W "${COMPREPLY[*]}" -- "$cur"))
		# bash splits words at ':': give back only what follows it.
		COMPREPLY=("${COMPREPLY[@]#"${cur%%:*}:"}")
		return
	fi
	case $cmd in
	mount) [ "$cword" -gt 2 ] && { COMPREPLY=($(compgen -d -- "$cur")); return; } ;;
	umount) COMPREPLY=($(awk '$3 == "fuse.kura" { print $2 }' /proc/mounts 2>/dev/null | grep -- "^$cur")); return ;;
	esac
	COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _kura kura
