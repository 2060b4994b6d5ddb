"""Paths that cross the prefix's edge under the LD_PRELOAD layer (src/preload/path.c):
symbolic links into and out of a pool, host paths whose links lead into it,
and the prefix seen as a mount point from its parent.  Each check compares a
run on tmpfs with one under the prefix, as test_preload.py does.
"""

import os
import shutil
import subprocess

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import PREFIX, bash_as_on_tmpfs, run_both_with_host


SYMLINKS = r"""
cd "$B"
mkdir d tree "$H/dir"
echo inside > x; echo hostfile > "$H/file"; echo hf > "$H/dir/f"
UP=../../../../../../../../../..
ln -s "$B/x" in                      # absolute, into the prefix
ln -s "$H/file" out                  # absolute, out to the host
ln -s "$H/dir" hd                    # a host directory
ln -s "$UP$H/file" d/up              # relative, climbing out
ln -s "$UP$B/x" d/back               # climbing out and back in
ln -s "$H/hb" c; ln -s "$B/x" "$H/hb"        # out, back in through a host link
ln -s "$H/hl" loop; ln -s "$B/loop" "$H/hl"  # a loop across the boundary
ln -s "$UP$B/dl" dl                          # a loop out of the pool by ".." and back
ln -s "$B/self" self; ln -s "$B/nowhere" dangling
for l in in out hd d/up d/back c loop dl self dangling; do
  echo "== $l -> $(readlink $l)"
  realpath "$l" 2>&1; cat "$l" 2>&1; stat -L -c "%F %s" "$l" 2>&1; stat -c %F "$l"
done
ls -L hd; ls -L 2>&1; ls -lL in out | awk '{print $1, $5, $NF}'
echo new > hd/new; cat "$H/dir/new"
echo more >> c; cat x
test -d hd/ && echo dir-through-link; test -e loop || echo loop-absent
exec 3> fd3   # from here on children mount by inheriting it (kura_mount_inherit)
find -L . 2>&1 | sort
(cd hd && pwd -P && /bin/pwd && ls)
(cd d && cat up back)
mv hd/f moved && cat moved && ls hd
ln hd/new hard 2>&1 | sed 's/.*: //'
mkdir "$H/made" && ln -s "$H/made" md && mkdir md/sub && touch md/sub/t && rm md/sub/t && rmdir md/sub && ls -a "$H/made"
ln -s "$B/x" tree/in; ln -s "$H/file" tree/out; ln -s "$UP$H/file" tree/up; ln -s ../x tree/rel
cp -a tree tree2; find tree2 -type l -printf '%p -> %l\n' | sort; cat tree2/in tree2/out tree2/up tree2/rel
cp -a tree "$H/tcopy"; find "$H/tcopy" -type l -printf "%f -> %l\n" | sort
cp -aL tree tree3; find tree3 -type f | sort
"""


def test_symlinks_across_prefix(env, tmp_path):
    """Absolute symlink targets are host paths, as programs store them: into
    the prefix, out to the host, ".." above the pool's root, chains that
    cross back in through a host link, loops across the boundary; readlink
    shows the stored text; realpath, cat, ls -L, find -L, cp -a agree with
    tmpfs."""
    (rc0, out0), (rc1, out1) = run_both_with_host(env, tmp_path, "symlinks", SYMLINKS)
    assert rc0 == 0, out0
    assert "== c -> HOST/hb\nBASE/x\ninside\n" in out0  # the scenario means what it says
    assert "Too many levels of symbolic links" in out0
    assert (rc1, out1) == (rc0, out0)


# One line per call on host paths whose symlinks lead into BASE (argv[1]);
# HOST is argv[2].  Regular files show size and mode, errors their message.
HOSTSYM_C = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *B, *H;
static char bufs[8][PATH_MAX];
static int nb;
static const char *in(const char *base, const char *rest)
{
	char *p = bufs[nb++ % 8];
	snprintf(p, PATH_MAX, "%s/%s", base, rest);
	return p;
}
#define h(r) in(H, r)
#define b(r) in(B, r)
static void say(const char *what, long r)
{
	printf("%s: %s\n", what, r < 0 ? strerror(errno) : "ok");
}
static void show_fd(const char *what, int fd)
{
	char buf[256];
	if (fd < 0)
		return say(what, -1);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	printf("%s: %s", what, buf);
	close(fd);
}
static void show_mode(const char *what, int r, mode_t m, long long size, long long nlink)
{
	if (r < 0)
		return say(what, -1);
	if (S_ISREG(m))
		printf("%s: file %lld %o %lld\n", what, size, m & 07777, nlink);
	else
		printf("%s: %s\n", what, S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other");
}
#define SHOW(what, call) do { struct stat st; int r_ = (call); show_mode(what, r_, st.st_mode, st.st_size, st.st_nlink); } while (0)
static void show_str(const char *what, const char *s)
{
	if (!s)
		return say(what, -1);
	printf("%s: %s\n", what, s);
}
static void list(const char *what, const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return say(what, -1);
	char names[64][256];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < 64)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			snprintf(names[n++], 256, "%s", e->d_name);
	closedir(d);
	qsort(names, n, 256, (int (*)(const void *, const void *))strcmp);
	printf("%s:", what);
	for (int i = 0; i < n; i++)
		printf(" %s", names[i]);
	printf("\n");
}
static void run(const char *path, const char *arg)
{
	pid_t pid = fork();
	if (pid == 0) {
		execl(path, "prog", arg, (char *)NULL);
		printf("execl %s: %s\n", arg, strerror(errno));
		_exit(1);
	}
	int status;
	waitpid(pid, &status, 0);
	printf("  status %d\n", WEXITSTATUS(status));
}
static void glob_d(void)
{
	/* glob reads directories through the wrappers */
	glob_t g;
	int r = glob(h("d/[fp]*"), 0, NULL, &g);
	printf("glob d/[fp]*: %d", r);
	for (size_t i = 0; r == 0 && i < g.gl_pathc; i++)
		printf(" %s", g.gl_pathv[i]);
	printf("\n");
	if (r == 0)
		globfree(&g);
}
static void put(const char *what, int fd, const char *s)
{
	say(what, fd);
	if (fd >= 0) {
		write(fd, s, strlen(s));
		close(fd);
	}
}

int main(int argc, char **argv)
{
	(void)argc;
	B = argv[1];
	H = argv[2];
	setvbuf(stdout, NULL, _IONBF, 0);
	char buf[PATH_MAX];
	ssize_t n;
	int hd = open(H, O_RDONLY | O_DIRECTORY);

	show_fd("open l", open(h("l"), O_RDONLY));
	show_fd("open d/f", open(h("d/f"), O_RDONLY));
	show_fd("open d/rl", open(h("d/rl"), O_RDONLY));
	show_fd("open d/../x", open(h("d/../x"), O_RDONLY));
	show_fd("openat hostdir l", openat(hd, "l", O_RDONLY));
	show_fd("openat hostdir d/f", openat(hd, "d/f", O_RDONLY));
	say("open nofollow l", open(h("l"), O_RDONLY | O_NOFOLLOW));
	say("open d/missing", open(h("d/missing"), O_RDONLY));
	say("open d/f/x", open(h("d/f/x"), O_RDONLY));
	say("open d/f/", open(h("d/f/"), O_RDONLY));
	int fd = open(h("d"), O_RDONLY | O_DIRECTORY);
	say("open d O_DIRECTORY", fd);
	close(fd);
	say("open l O_DIRECTORY", open(h("l"), O_RDONLY | O_DIRECTORY));
	put("creat d/c1", creat(h("d/c1"), 0640), "c1\n");
	show_fd("  read back", open(b("dir/c1"), O_RDONLY));
	put("open creat d/new", open(h("d/new"), O_WRONLY | O_CREAT | O_TRUNC, 0644), "new\n");
	show_fd("  read back", open(b("dir/new"), O_RDONLY));
	put("openat creat hostdir d/new2", openat(hd, "d/new2", O_WRONLY | O_CREAT | O_EXCL, 0600), "new2\n");
	show_fd("  read back", open(b("dir/new2"), O_RDONLY));
	say("open excl dangling", open(h("dangling"), O_WRONLY | O_CREAT | O_EXCL, 0644));
	put("open creat dangling", open(h("dangling"), O_WRONLY | O_CREAT, 0644), "made\n");
	show_fd("  read back", open(b("nowhere"), O_RDONLY));

	FILE *f = fopen(h("d/f"), "r");
	show_str("fopen r d/f", f && fgets(buf, sizeof buf, f) ? strtok(buf, "\n") : NULL);
	if (f)
		fclose(f);
	f = fopen(h("d/fo"), "w");
	say("fopen w d/fo", f ? 0 : -1);
	if (f) {
		fputs("fo\n", f);
		fclose(f);
	}
	show_fd("  read back", open(b("dir/fo"), O_RDONLY));
	f = fopen(h("d/missing"), "r");
	say("fopen d/missing", f ? 0 : -1);

	SHOW("stat l", stat(h("l"), &st));
	SHOW("lstat l", lstat(h("l"), &st));
	SHOW("stat d", stat(h("d"), &st));
	SHOW("lstat d", lstat(h("d"), &st));
	SHOW("lstat d/", lstat(h("d/"), &st));
	SHOW("stat d/f", stat(h("d/f"), &st));
	SHOW("stat d/rl", stat(h("d/rl"), &st));
	SHOW("lstat d/rl", lstat(h("d/rl"), &st));
	SHOW("fstatat nofollow d/rl", fstatat(AT_FDCWD, h("d/rl"), &st, AT_SYMLINK_NOFOLLOW));
	SHOW("fstatat hostdir d/f", fstatat(hd, "d/f", &st, 0));
	SHOW("stat d/missing", stat(h("d/missing"), &st));
	SHOW("stat d/f/", stat(h("d/f/"), &st));
	struct statx sx;
	int r = statx(AT_FDCWD, h("d/f"), 0, STATX_BASIC_STATS, &sx);
	show_mode("statx d/f", r, sx.stx_mode, (long long)sx.stx_size, sx.stx_nlink);
	r = statx(AT_FDCWD, h("d/rl"), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx);
	show_mode("statx nofollow d/rl", r, sx.stx_mode, (long long)sx.stx_size, sx.stx_nlink);
	r = statx(hd, "d/missing", 0, STATX_BASIC_STATS, &sx);
	show_mode("statx hostdir d/missing", r, sx.stx_mode, (long long)sx.stx_size, sx.stx_nlink);

	say("access d/f R_OK", access(h("d/f"), R_OK));
	say("access d/missing", access(h("d/missing"), F_OK));
	say("faccessat hostdir l", faccessat(hd, "l", R_OK, 0));
	say("euidaccess d/f W_OK", euidaccess(h("d/f"), W_OK));

	n = readlink(h("d/rl"), buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	show_str("readlink d/rl", n < 0 ? NULL : buf);
	n = readlinkat(hd, "d/rl", buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	show_str("readlinkat hostdir d/rl", n < 0 ? NULL : buf);
	say("readlink d/f", readlink(h("d/f"), buf, sizeof buf));
	say("readlink d/missing", readlink(h("d/missing"), buf, sizeof buf));

	list("opendir d", h("d"));
	list("opendir d/", h("d/"));
	list("opendir d/../", h("d/../"));
	list("opendir l", h("l"));
	list("opendir d/missing", h("d/missing"));
	glob_d();

	say("mkdir d/sub", mkdir(h("d/sub"), 0750));
	SHOW("  stat", stat(b("dir/sub"), &st));
	say("mkdir d/sub again", mkdir(h("d/sub"), 0750));
	say("mkdirat hostdir d/sub2", mkdirat(hd, "d/sub2", 0700));
	say("mkdir d/missing/x", mkdir(h("d/missing/x"), 0700));
	say("mkdir dangling", mkdir(h("dangling2"), 0700));
	say("rmdir d/sub", rmdir(h("d/sub")));
	say("unlinkat hostdir d/sub2", unlinkat(hd, "d/sub2", AT_REMOVEDIR));
	list("  left", b("dir"));
	say("unlink d/new", unlink(h("d/new")));
	say("unlink d/new again", unlink(h("d/new")));
	say("unlink d/f/", unlink(h("d/f/")));
	say("unlinkat hostdir d/fo", unlinkat(hd, "d/fo", 0));
	say("remove d/new2", remove(h("d/new2")));

	say("rename d/c1 d/c2", rename(h("d/c1"), h("d/c2")));
	show_fd("  read back", open(b("dir/c2"), O_RDONLY));
	say("rename d/c2 -> host", rename(h("d/c2"), h("c3")));
	say("rename host -> d", rename(h("file"), h("d/file")));
	say("rename base -> d", rename(b("dir/c2"), h("d/c4")));
	say("rename d -> base", rename(h("d/c4"), b("c5")));
	say("renameat -> hostdir d", renameat(AT_FDCWD, b("c5"), hd, "d/c6"));
	say("rename d/missing", rename(h("d/missing"), h("d/m2")));
	say("link d/c6 d/hard", link(h("d/c6"), h("d/hard")));
	SHOW("  stat", stat(h("d/hard"), &st));
	say("link d/c6 -> host", link(h("d/c6"), h("hard")));
	say("symlink d/sl", symlink("c6", h("d/sl")));
	show_fd("  open", open(h("d/sl"), O_RDONLY));
	say("remove d/sl", remove(h("d/sl")));
	say("chmod d/c6", chmod(h("d/c6"), 0604));
	say("truncate d/c6", truncate(h("d/c6"), 1));
	SHOW("  stat", stat(b("dir/c6"), &st));
	list("  dir", b("dir"));

	char *rp = realpath(h("d/rl"), NULL);
	show_str("realpath d/rl", rp);
	free(rp);
	show_str("realpath l", realpath(h("l"), buf));
	show_str("realpath d/../x", realpath(h("d/../x"), buf));
	show_str("realpath d/missing", realpath(h("d/missing"), buf));
	show_str("realpath hl", realpath(h("hl"), buf));

	say("chdir d", chdir(h("d")));
	show_str("  getcwd", getcwd(buf, sizeof buf));
	show_fd("  open f", open("f", O_RDONLY));
	SHOW("  lstat rl", lstat("rl", &st));
	say("chdir d/missing", chdir(h("d/missing")));
	say("chdir l", chdir(h("l")));
	say("chdir host", chdir(H));
	show_fd("  open relative l", open("l", O_RDONLY));
	SHOW("  stat relative d/f", stat("d/f", &st));
	say("  mkdir relative d/rel", mkdir("d/rel", 0700));
	say("  rmdir relative d/rel", rmdir("d/rel"));
	run("d/prog", "relative exec");
	chdir("/");

	/* host -> kura -> host: a loop across the boundary */
	say("open hl", open(h("hl"), O_RDONLY));
	say("open creat hl", open(h("hl"), O_WRONLY | O_CREAT, 0644));
	SHOW("stat hl", stat(h("hl"), &st));
	SHOW("lstat hl", lstat(h("hl"), &st));
	SHOW("stat hl/x", stat(h("hl/x"), &st));
	say("access hl", access(h("hl"), F_OK));
	list("opendir hl", h("hl"));
	say("chdir hl", chdir(h("hl")));
	say("mkdir hl/x", mkdir(h("hl/x"), 0700));
	say("unlink hl/x", unlink(h("hl/x")));
	say("rename hl/x", rename(h("hl/x"), h("d/y")));
	f = fopen(h("hl"), "r");
	say("fopen hl", f ? 0 : -1);

	run(h("hl"), "loop");
	run(h("d/prog"), "run from the pool");
	run(h("d/f"), "not executable");
	run(h("d/missing"), "missing");
	return 0;
}
"""

HOSTSYM = r"""
cd /
mkdir "$B/dir"; echo inside > "$B/x"; echo f > "$B/dir/f"; ln -s f "$B/dir/rl"
cp /bin/echo "$B/dir/prog"
echo host > "$H/file"
ln -s "$B/x" "$H/l"; ln -s "$B/dir" "$H/d"
ln -s "$B/nowhere" "$H/dangling"; ln -s "$B/nowhere2" "$H/dangling2"
ln -s "$H/hl" "$B/loop"; ln -s "$B/loop" "$H/hl"      # host -> kura -> host
"$C" "$B" "$H"
echo "== shell"
cat "$H/l"; ls "$H/d/"; echo hi > "$H/d/new"; cat "$B/dir/new"
ls -l "$H/d/" | awk 'NR > 1 { print $1, $NF }'   # ls -l asks for ACLs too
stat -c "%F %s %a" "$H/d/f"; stat -L -c %F "$H/d"; test -d "$H/d/" && echo is-dir
(cd "$H/d" && pwd && pwd -P && /bin/pwd && cat rl && ls)
"$H/d/prog" exec from the shell
realpath "$H/d/rl" "$H/l"
mkdir "$H/d/m" && touch "$H/d/m/t" && mv "$H/d/m/t" "$H/d/t2" && rm -r "$H/d/m" && ls "$B/dir"
mv "$H/d/t2" "$H/t3" && ls "$H"
cat "$H/hl"; ls "$H/hl/"; cd "$H/hl"
true
"""


def test_host_symlinks_into_prefix(env, tmp_path):
    """Symlinks in the host namespace that lead into the prefix (a file link,
    a directory link, dangling ones, a loop host -> pool -> host): the kernel
    cannot resolve them, so the layer follows them when a host call fails.
    open/openat/creat/fopen, the stat family with statx, access, readlink,
    opendir, glob, mkdir/unlink/rename/link/symlink, realpath, chdir, exec
    and the xattr calls of ls -l behave as on tmpfs, where the kernel sees
    both sides; a ".." after a host link is physical."""
    exe = tmp_path / "hostsym"
    (tmp_path / "hostsym.c").write_text(HOSTSYM_C)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(tmp_path / "hostsym.c")], check=True)
    (rc0, out0), (rc1, out1) = run_both_with_host(env, tmp_path, "hostsym", f"C={exe}\n" + HOSTSYM)
    assert rc0 == 0, out0
    # the scenario means what it says on tmpfs
    assert "open l: inside\n" in out0 and "rename d/c2 -> host: Invalid cross-device link\n" in out0
    assert "open hl: Too many levels of symbolic links\n" in out0
    assert "realpath d/rl: BASE/dir/f\n" in out0 and "run from the pool\n" in out0
    assert not os.path.exists(PREFIX)  # nothing was created in the kernel's namespace
    assert (rc1, out1) == (rc0, out0)


MOUNTPOINT = r"""
import os, sys
prefix = sys.argv[1]
parent, base = os.path.split(prefix)
# listed in its parent, as a directory, with the pool root's inode number
print(base in os.listdir(parent))
print([e.is_dir() for e in os.scandir(parent) if e.name == base])
print([e.inode() for e in os.scandir(parent) if e.name == base] == [os.stat(prefix).st_ino])
# reached one component at a time from a descriptor of the parent
pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
d = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=pfd)
print(os.stat("mp/f", dir_fd=d).st_size, sorted(os.listdir(os.open("mp", os.O_RDONLY, dir_fd=d))))
print(os.stat(base, dir_fd=pfd, follow_symlinks=False).st_ino == os.stat(prefix).st_ino)
"""


def test_prefix_as_mount_point(env, tmp_path):
    """The prefix shows in its parent directory and is reached relative to a
    descriptor of it, as a mount point would be: find and rsync get in.
    rsync -aH copies a tree with modes, times, symlinks and hard links into
    the pool and back out unchanged."""
    e = env["env"]
    subprocess.run(["sh", "-c", f"mkdir -p {PREFIX}/mp && echo four > {PREFIX}/mp/f"], env=e, check=True)
    r = subprocess.run(["python3", "-c", MOUNTPOINT, PREFIX], env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == "True\n[True]\nTrue\n5 ['f']\nTrue\n", r.stderr
    r = subprocess.run(["find", os.path.dirname(PREFIX), "-maxdepth", "1", "-name", os.path.basename(PREFIX)],
                       env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == PREFIX + "\n", r.stderr
    if not shutil.which("rsync"):
        pytest.skip("rsync is not installed (scripts/deps.sh installs it)")
    src, back = tmp_path / "src", tmp_path / "back"
    (src / "d" / "e").mkdir(parents=True)
    for i in range(20):
        (src / "d" / f"f{i}").write_bytes(os.urandom(i * 700))
    (src / "d" / "e" / "x").write_text("x\n")
    os.link(src / "d" / "f3", src / "d" / "e" / "hard")
    os.symlink("../f1", src / "d" / "e" / "rel")
    os.symlink("/etc/hostname", src / "abs")
    os.chmod(src / "d" / "f2", 0o640)
    os.chmod(src / "d" / "e", 0o750)
    # rsync leaves a time alone when it is within a second of the copy's (on
    # any file system): old times, with nanoseconds, make it copy them all.
    for i, (dirpath, dirs, files) in enumerate(sorted(os.walk(src), reverse=True)):
        for j, n in enumerate(files + dirs + ["."]):
            t = 1_500_000_000_123_456_789 - (i * 100 + j) * 1_000_000_007
            os.utime(os.path.join(dirpath, n), ns=(t, t), follow_symlinks=False)
    r = subprocess.run(["sh", "-c", f"rsync -aH {src}/ {PREFIX}/rs/ && rsync -aH {PREFIX}/rs/ {back}/"],
                       env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

    def listing(root):
        out = []
        for dirpath, dirs, files in os.walk(root):
            for n in sorted(dirs + files):
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                data = os.readlink(p) if os.path.islink(p) else (
                    open(p, "rb").read() if os.path.isfile(p) else b"")
                out.append((os.path.relpath(p, root), st.st_mode, st.st_nlink, st.st_mtime_ns, data))
        return sorted(out)
    assert listing(back) == listing(src)


BIND_SCRIPT = r"""
exec 3<$B  # under kura binds last while a process has the pool: this shell holds it
mkdir $B/a $B/b && echo data > $B/a/f && echo hidden > $B/b/h
mount --bind $B/a $B/b; echo mount=$?
ls $B/b; cat $B/b/f
[ "$(stat -c %i $B/a)" = "$(stat -c %i $B/b)" ] && echo same inode
rmdir $B/b; echo rmdir=$?
mv $B/b $B/c; echo mv=$?
echo new > $B/b/n; cat $B/a/n
(cd $B/b && ls)
umount $B/b; echo umount=$?
ls $B/b
umount $B/b; echo again=$?
mount --bind $B/a/f $B/a/n; cat $B/a/n; rm $B/a/n; echo rm=$?; umount $B/a/n
rm $B/b/h && rmdir $B/b && echo removed
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_bind_mount_inside_pool(env):
    """mount --bind and umount of pool paths (kura's own binds) answer as
    the kernel's bind mounts do on tmpfs: the point shows the root, is busy
    for rmdir, rename and unlink, and comes back after umount."""
    bash_as_on_tmpfs(env, "binds", BIND_SCRIPT, "same inode")
    # A kernel file system cannot be mounted where only kura sees, and a
    # bind from outside the pool cannot reach into it: refused, nothing changed.
    e = env["env"]
    r = subprocess.run(["sh", "-c", f"exec 3<{PREFIX}; mkdir {PREFIX}/nb; touch {PREFIX}/nb/keep; "
                        f"mount -t tmpfs none {PREFIX}/nb; echo $?; mount --bind /etc {PREFIX}/nb; echo $?; "
                        f"ls {PREFIX}/nb"], env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == "32\n32\nkeep\n", r.stdout + r.stderr
