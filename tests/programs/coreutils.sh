# coreutils: mkdir -p, touch, ln, ln -s, cat, sort, wc, head, tail, dd,
# sha256sum, ls -laR, stat, cp -a, mv, find, du, rm -r and friends.
# du is used with --apparent-size on files and with --inodes on trees:
# allocated block counts are file-system specific.
. "$PROG_DIR/common.sh"

step "mkdir -p, touch, ln, ln -s"
mkdir -p a/b/c a/x/y
mkdir -p a/b/c && echo "mkdir -p again: ok"
mkdir a 2>&1
touch -d '2001-02-03 04:05:06.123456789' a/b/c/file0
touch a/empty
echo hello > a/file1
ln a/file1 a/hardlink
ln -s file1 a/symlink
ln -s .. a/b/up
ln -s nowhere a/dangling
ln a/file1 a/hardlink 2>&1
ln -sf file1 a/dangling2
stat -c '%n %F %a %h %s' a/file1 a/hardlink a/symlink a/empty
stat -L -c '%n %F %s' a/symlink
stat -c '%N' a/symlink a/b/up a/dangling
stat -c '%n %y %Y' a/b/c/file0
touch -m -d '@1234567890' a/file1
stat -c '%n %Y' a/file1 a/hardlink
touch -r a/b/c/file0 a/empty
stat -c '%n %y' a/empty
stat -c '%n %F %a %h' a a/b a/b/c
cat a/b/up/b/up/file1
readlink a/symlink a/b/up
readlink -f a/b/up/symlink | sed "s|^$PWD|.|"
realpath --relative-to=. a/b/up/b/c

step "data: cat, sort, wc, head, tail, cut, uniq"
awk 'BEGIN { for (i = 1; i <= 3000; i++) print (i * 7919) % 10007, "w" i % 97 }' > data.txt
wc data.txt
wc -lwc < data.txt
sort -n data.txt | head -3
sort -k2,2 -k1,1n data.txt | tail -3
sort -u -k2,2 data.txt | wc -l
sort -n -o sorted.txt data.txt && sha256sum sorted.txt
head -c 100 data.txt | od -c | tail -2
head -n 5 data.txt
tail -n 3 data.txt
tail -c 20 data.txt
tail -n +2995 data.txt
cut -d' ' -f2 data.txt | sort | uniq -c | sort -rn | head -3
cat a/file1 a/file1 data.txt > cat.out
wc -c cat.out
tac data.txt | head -2
split -l 1000 data.txt part_
ls part_*
cat part_* | cmp - data.txt && echo "split round trip ok"
paste -d, <(head -3 data.txt) <(tail -3 data.txt)

step "dd"
dd if=data.txt of=dd.out bs=1000 count=5 skip=2 status=noxfer
cmp <(tail -c +2001 data.txt | head -c 5000) dd.out && echo "dd skip ok"
dd if=/dev/zero of=sparse bs=4096 seek=100 count=1 status=noxfer
dd if=data.txt of=sparse bs=100 count=1 seek=3 conv=notrunc status=noxfer
stat -c '%n %s' sparse
od -A d -c sparse | head -5
dd if=data.txt bs=7 count=3 status=none | od -c
dd if=data.txt of=dd.sync bs=4k conv=fsync,fdatasync status=none && cmp dd.sync data.txt && echo "dd conv=fsync ok"
dd if=data.txt of=trunc.out bs=10 count=2 status=none
dd if=data.txt of=trunc.out bs=1 count=5 seek=3 status=none
od -c trunc.out

step "sha256sum"
sha256sum data.txt sparse a/file1 dd.out > sums
cat sums
sha256sum -c sums

step "truncate, chmod, install, mktemp"
cp data.txt t1
truncate -s 10 t1 && cat t1 && echo
truncate -s 70000 t1 && stat -c '%s' t1 && sha256sum t1
chmod 600 t1 && stat -c '%a' t1
chmod -R go-rx a/x && stat -c '%n %a' a/x a/x/y
chmod u+s,g+s t1 && stat -c '%a' t1
install -m 751 data.txt installed && stat -c '%n %a %s' installed
t=$(mktemp -p .) && [ -f "$t" ] && stat -c '%a %s' "$t" && rm "$t" && echo "mktemp ok"
t=$(mktemp -d -p .) && [ -d "$t" ] && stat -c '%a' "$t" && rmdir "$t" && echo "mktemp -d ok"

step "ls -laR"
ls_tree a
ls -1 a
ls -lA --time-style=+ -d a/* | awk '/^d/ { $5 = "-" } { $1 = $1; print }' # directory sizes are file-system specific
ls -i a/file1 a/hardlink | awk '{ print $1 == prev ? "same inode" : "first"; prev = $1 }'

step "cp -a, cp"
cp -a a acopy
diff -r a acopy && echo "diff -r: identical"
stat -c '%n %y %a %h' acopy/b/c/file0 acopy/file1 acopy/hardlink
stat -c '%N' acopy/symlink acopy/b/up
cp data.txt a/b/c/
cp -r a/b bcopy
cp --sparse=always sparse sparse2 && cmp sparse sparse2 && stat -c '%s' sparse2
cp -p a/b/c/file0 preserved && stat -c '%y' preserved
cp a/file1 a/file1 2>&1
cp nonexistent x 2>&1

step "mv"
mv a/x a/x2
mv acopy/file1 acopy/renamed
mv acopy/renamed a/b/moved
mv -T bcopy a/bmoved
mv a/b/c/data.txt .data.txt
echo target > target
echo source > source
mv -f source target && cat target
mv nonexistent x 2>&1
mv a a/b/inside 2>&1
ls -A a a/b

step "find"
find . -name '*.txt' | sort
find a -type l | sort
find a -type d | sort
find . -maxdepth 1 -type f -size +1k | sort
find a -empty | sort
find a -newer a/b/c/file0 -type f | sort
find . -path ./a -prune -o -type f -name 'part_*' -print | sort
find a -type f -exec wc -c {} + | sort
find a -name file1 -printf '%p %s %m %y\n'
find -L a -maxdepth 2 -type f -name file1 2>&1 | sort
find a -depth -type d | sort

step "du"
du --apparent-size -b data.txt sparse t1
du -s --inodes a
# -l: count every name of a hard link, since which name du would credit
# depends on readdir order, which is file-system specific.
du -al --inodes a | sort -k2
du -L --apparent-size -b a/symlink

step "diff and patch"
# GNU patch renames its output into place by syscall(SYS_renameat2, ...).
printf 'one\ntwo\nthree\n' > p.txt
printf 'one\n2\nthree\nfour\n' > p.new
diff -u p.txt p.new > p.diff
patch p.txt < p.diff
cmp p.txt p.new && echo patched
patch -R p.txt < p.diff
cat p.txt
rm p.new p.diff p.txt*

step "rm"
rm a/symlink a/dangling
rmdir a/b 2>&1
rm a/b 2>&1
rm -r acopy
rm -rf a/bmoved nothing-here
rm -f part_aa part_ab part_ac
rm -ri missing 2>&1
ls -A
ls_tree a

step "tree"
manifest
