# python3: io, os, os.walk, shutil.copytree/rmtree, tempfile with dir in the
# tree, subprocess with stdout to a file in the tree, the sqlite3 module.
. "$PROG_DIR/common.sh"
python3 "$PROG_DIR/files.py"
echo "exit $?"
step "tree"
manifest
