# A C program (stdio and friends) and a C++ program (fstream,
# std::filesystem), compiled by the harness outside the tree ($BIN_DIR) and
# run with the working directory in the tree.
. "$PROG_DIR/common.sh"
step "C stdio"
"$BIN_DIR/stdio_prog" 2>&1
echo "exit $?"
step "C++ fstream"
"$BIN_DIR/fstream_prog" 2>&1
echo "exit $?"
step "tree"
manifest
