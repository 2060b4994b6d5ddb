# tar: create (plain, through gzip, to a pipe), list, append, extract.
# The archive is made reproducible (--sort=name, fixed owner and times) so
# its sha256 is compared too.
. "$PROG_DIR/common.sh"

step "source tree"
mkdir -p src/d1/d2 src/empty src/mode
seq 1 20000 > src/d1/nums
echo x > src/d1/d2/x
ln -s d1/nums src/link
ln src/d1/d2/x src/hard
dd if=/dev/zero of=src/sparse bs=1 count=1 seek=300000 status=none
printf 'exec\n' > src/mode/script && chmod 750 src/mode/script
chmod 700 src/d1/d2
find src -exec touch -h -d @1000000000 {} +
ls_tree src

step "create"
reproducible=(--sort=name --owner=0 --group=0 --numeric-owner --format=gnu)
tar "${reproducible[@]}" -cf a.tar src
sha256sum a.tar
tar -tvf a.tar
tar "${reproducible[@]}" -czf a.tgz src
tar -tzf a.tgz
tar "${reproducible[@]}" -cf - src | tar -tf - | wc -l
tar "${reproducible[@]}" -S -cf sparse.tar src/sparse
tar -tvf sparse.tar

step "extract"
mkdir out out2 out3
tar -xf a.tar -C out
diff -r src out/src && echo "tar x: identical"
stat -c '%n %a %Y %h' out/src/d1/d2 out/src/mode/script out/src/hard out/src/d1/nums
stat -c '%N' out/src/link
tar "${reproducible[@]}" -cf - src | ( cd out2 && tar -xf - )
diff -r src out2/src && echo "tar through a pipe: identical"
tar -xzf a.tgz -C out3 src/d1
ls -R out3
tar -xOf a.tar src/d1/d2/x
tar -xf a.tar nonexistent 2>&1; echo "exit $?"

step "append and update"
echo extra > extra
touch -d @1000000000 extra
tar "${reproducible[@]}" -rf a.tar extra
tar -tf a.tar | tail -2
sha256sum a.tar
tar --delete -f a.tar src/d1/nums
tar -tf a.tar | grep -c nums
sha256sum a.tar

step "tree"
manifest
