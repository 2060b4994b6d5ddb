# make -j2 compiling a small C project that lives in the tree, running the
# program it built (an executable inside the tree), an incremental rebuild
# after touching one source, a static library with ar, and make clean.
# The first build is -s: parallel jobs echo their commands in any order.
. "$PROG_DIR/common.sh"
cp -r "$PROG_DIR/mkproj" proj
cd proj
step "build"
make -j2 -s
echo "make exit $?"
./app
cat result.txt
make -j2
step "incremental"
touch -d @1000000000 *
touch -d @1000000100 util.c
make -j2
./app
make -j2 libutil.a
ar t libutil.a
step "clean"
make -s clean
ls
cd ..
step "tree"
make -C proj -j2 -s
ls_tree proj | grep -v -e '\.o$' -e ' app$' -e ' libutil.a$'
manifest proj | grep -v -e '\.o$' -e ' app$' -e '/app$'
