# git init, add, commit, log, status, diff, branch, checkout, tag, gc in the
# tree.  Author, committer and dates come from the environment, so every
# object id is the same on every file system.
. "$PROG_DIR/common.sh"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=Kura GIT_AUTHOR_EMAIL=kura@example.org
export GIT_COMMITTER_NAME=Kura GIT_COMMITTER_EMAIL=kura@example.org
export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
g() { git -c core.pager=cat -c advice.detachedHead=false -c init.defaultBranch=main "$@"; }

step "init, add, commit"
g init -q repo
cd repo
mkdir -p src doc
seq 1 100 > src/nums.txt
printf 'int main(void) { return 0; }\n' > src/main.c
echo "# readme" > README
ln -s src/main.c link.c
g add .
g status --short
g commit -q -m "first commit"
g log --format='%H %an %ad %s' --date=iso-strict

step "modify, diff, commit"
sed -i 's/^50$/fifty/' src/nums.txt
echo "more" >> README
echo new > doc/new.txt
g status --short
g diff
g diff --stat
g add -A
g diff --cached --name-status
export GIT_COMMITTER_DATE='2020-01-02T00:00:00Z' GIT_AUTHOR_DATE='2020-01-02T00:00:00Z'
g commit -q -m "second commit"
g rm -q README
g mv src/nums.txt src/numbers.txt
g commit -q -m "third: rm and mv"
g log --stat --format='%h %s'

step "branches and checkout"
g checkout -q -b topic HEAD~1
ls
echo topic > topic.txt
g add topic.txt && g commit -q -m "topic work"
g checkout -q main
ls
g merge -q --no-edit topic
g log --graph --format='%h %s' --all
g checkout -q HEAD~2 -- src
g status --short
g checkout -q HEAD -- .
g status --short
g tag v1
g show --stat --format='%H' v1 | head -3
g cat-file -p HEAD^{tree}
g stash list

step "gc, fsck, clone"
g gc -q
g count-objects -v | grep -E '^(count|in-pack|packs)'
g fsck --full --strict 2>&1
cd ..
g clone -q repo clone
g -C clone log --format='%h %s'
g -C clone rev-parse HEAD
g -C repo rev-parse HEAD

step "tree"
manifest clone | grep -v '\.git/'
