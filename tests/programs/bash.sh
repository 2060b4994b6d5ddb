# bash: redirections (>, >>, <, <>, here-docs, here-strings), descriptors
# kept open across commands, pipes, subshells, a virtual working directory
# inherited by exec'd children.
. "$PROG_DIR/common.sh"

step "redirections"
echo one > f1
echo two >> f1
cat < f1
printf 'x%.0s' {1..5000} > big
wc -c < big
cat > heredoc.txt <<EOT
expanded: $((6 * 7)) in $(basename "$PWD")
EOT
cat <<'EOT' >> heredoc.txt
literal: $HOME $(not run)
EOT
cat heredoc.txt
tr a-z A-Z <<< "here string" > hs
cat hs
while read -r a b; do echo "line:$a|$b"; done < heredoc.txt

step "descriptors"
exec 3> fd3.txt
echo via3 >&3
echo more >&3
exec 3>&-
exec 4< fd3.txt
read -r l <&4; echo "read: $l"
read -r l <&4; echo "read: $l"
exec 4<&-
printf 'abcdef\n' > rw.txt
exec 5<> rw.txt
echo XY >&5
exec 5>&-
cat rw.txt
{ echo a; /bin/echo b; echo c; } > grouped
( echo sub1; ( echo sub2; /bin/echo sub3 ) ) >> grouped
cat grouped
{ echo to-stderr >&2; } 2> e1
cat e1
ls does-not-exist 2>> errs
ls does-not-exist-either 2>> errs
cat errs
echo both > both.txt 2>&1
ls missing >> both.txt 2>&1
cat both.txt
x=$(< f1)
echo "subst: $x"
set -o noclobber
{ echo no > f1; } 2>/dev/null || echo "noclobber refused"
echo yes >| f1
set +o noclobber
cat f1

step "pipes"
seq 1 2000 | sort -r | head -3
seq 1 1000 > nums
sort -n -r < nums | tail -2
cat nums | wc -l
cat nums | tee copy1 | grep -c 7
cmp nums copy1 && echo "tee copy identical"
seq 1 300 | gzip -c > nums.gz
gzip -dc < nums.gz | tail -1

step "subshells and working directory"
mkdir -p d1/d2
( cd d1/d2 && pwd && echo inside > here.txt )
pwd
cat d1/d2/here.txt
cd d1
echo "relative: $(cat d2/here.txt)"
cd ..
pushd d1/d2 >/dev/null
/bin/pwd
bash -c 'pwd; cat here.txt'
popd >/dev/null
for i in 1 2 3; do echo "$i" > "loop$i"; done
cat loop*
echo *.txt
[ -s f1 ] && echo "f1 nonempty"
[ -d d1 ] && echo "d1 is a directory"
[ -e missing ] || echo "missing is missing"
bash -c 'echo from child > child.txt'
cat child.txt
sh -c 'cat f1 nums | wc -l'
cd "$ROOT/d1" && echo "absolute cd: $(ls)" && cd "$ROOT"

step "tree"
ls_tree .
manifest
