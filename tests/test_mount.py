"""`kura mount`: a pool through FUSE, for programs the preload library
cannot serve (a static busybox, a Go program, another user), beside `kura
run` processes of the same pool, each seeing the other's changes at once.

Needs /dev/fuse, fusermount3 and a kura built with libfuse3; the tests of
other users need root (CI runs as root).  Pools live in /dev/shm.
"""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_common import scratch  # noqa: F401 (fixture)
from cli_common import KURA_BIN, IS_ROOT, run, ok, err_text, out_text

if not os.path.exists("/dev/fuse"):
    pytest.skip("no /dev/fuse: FUSE is not available here", allow_module_level=True)
if not shutil.which("fusermount3"):
    pytest.skip("no fusermount3 (Debian package fuse3)", allow_module_level=True)
if "built without FUSE" in err_text(run("mount", "x", "y")):
    pytest.skip("this kura was built without libfuse3 (Debian package libfuse3-dev)", allow_module_level=True)

# `kura run` with another build's binary: a sanitized libkura.so cannot be
# preloaded into the unsanitized programs it runs (the ASan build runs this
# file with its own kura for mount and the plain one for run).
KURA_RUN_BIN = os.environ.get("KURA_RUN_BIN", KURA_BIN)
PREFIX = "/kura-mnt-test"
BUSYBOX = shutil.which("busybox") or "/bin/busybox"
FSX = shutil.which("fsx") or os.path.expanduser("~/.cargo/bin/fsx")
FSX_OPS = int(os.environ.get("KURA_FSX_OPS", "100000"))
USER = "kuratest"


def mounted_dirs():
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


@pytest.fixture
def mnt(scratch):
    """A pool mounted with allow_other; unmounted and checked after."""
    os.chmod(scratch, 0o755)  # other users must reach the mount point
    pool = scratch / "m.pool"
    ok("mkfs", pool, "--size", "256M")
    d = scratch / "mnt"
    d.mkdir()
    # A server in the background writes to /dev/null: a sanitizer's report
    # goes to a file instead, and none may appear.
    asan_log = scratch / "server-asan"
    opts = os.environ.get("ASAN_OPTIONS", "")
    ok("mount", pool, d, "-o", "allow_other",
       env={"ASAN_OPTIONS": f"{opts}:log_path={asan_log}".lstrip(":")})
    assert str(d) in mounted_dirs()
    try:
        yield pool, d
    finally:
        if str(d) in mounted_dirs():
            ok("umount", d)
        assert str(d) not in mounted_dirs()
        r = ok("fsck", pool)
        assert "clean" in out_text(r)
        reports = list(scratch.glob("server-asan*"))
        assert not reports, reports[0].read_text()


def krun(pool, script, check=0):
    """sh -c script under kura run, the pool at PREFIX."""
    r = subprocess.run([KURA_RUN_BIN, "run", "--pool", pool, "--mount", PREFIX, "--", "sh", "-c", script],
                       capture_output=True, timeout=120)
    if check is not None:
        assert r.returncode == check, f"kura run sh -c {script!r}: {r.returncode} {err_text(r)}"
    return r


def bb(*args, check=True, **kw):
    r = subprocess.run([BUSYBOX, *map(str, args)], capture_output=True, timeout=60, **kw)
    if check:
        assert r.returncode == 0, f"busybox {args}: {r.returncode} {r.stderr.decode(errors='replace')}"
    return r


def test_busybox_static_and_kura_run_see_each_other(mnt):
    pool, d = mnt
    if not os.path.exists(BUSYBOX):
        pytest.skip("no busybox (Debian package busybox-static)")
    if b"statically linked" not in subprocess.run(["file", "-L", BUSYBOX], capture_output=True).stdout \
            and shutil.which("file"):
        pytest.skip(f"{BUSYBOX} is not static (Debian package busybox-static)")
    bb("sh", "-c", f"cd {d} && mkdir dir && echo one > dir/f && mv dir/f dir/g && echo two > dir/h")
    assert bb("ls", d / "dir").stdout.split() == [b"g", b"h"]
    r = krun(pool, f"cat {PREFIX}/dir/g {PREFIX}/dir/h; ls {PREFIX}/dir")
    assert out_text(r).split() == ["one", "two", "g", "h"]
    # The other way: kura run changes, busybox sees them at once.
    krun(pool, f"echo three > {PREFIX}/dir/k && mv {PREFIX}/dir/g {PREFIX}/dir/g2 && rm {PREFIX}/dir/h")
    assert bb("ls", d / "dir").stdout.split() == [b"g2", b"k"]
    assert bb("cat", d / "dir/k").stdout == b"three\n"
    assert not (d / "dir/h").exists()
    # An open file through the mount shows what kura run appends to it
    # (no page cache: direct_io).
    with open(d / "dir/k", "rb") as f:
        assert f.read() == b"three\n"
        krun(pool, f"echo four >> {PREFIX}/dir/k")
        f.seek(0)
        assert f.read() == b"three\nfour\n"
    # stat through both agrees (same inode numbers, sizes, modes).
    st = os.stat(d / "dir/k")
    r = krun(pool, f"stat -c '%i %s %a' {PREFIX}/dir/k")
    assert out_text(r).split() == [str(st.st_ino), str(st.st_size), "644"]
    bb("rm", "-r", d / "dir")
    r = krun(pool, f"ls -A {PREFIX}")
    assert out_text(r).split() == []


GO_PROGRAM = r"""package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	dir := os.Args[1]
	switch os.Args[2] {
	case "write":
		check(os.MkdirAll(filepath.Join(dir, "go"), 0755))
		check(os.WriteFile(filepath.Join(dir, "go", "a"), []byte("from go\n"), 0644))
		check(os.Rename(filepath.Join(dir, "go", "a"), filepath.Join(dir, "go", "b")))
	case "read":
		ents, err := os.ReadDir(filepath.Join(dir, "go"))
		check(err)
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(dir, "go", n))
			check(err)
			fmt.Printf("%s=%s", n, b)
		}
	case "clean":
		check(os.RemoveAll(filepath.Join(dir, "go")))
	}
}
"""


def test_go_program_and_kura_run(mnt, tmp_path):
    pool, d = mnt
    go = shutil.which("go") or next((p for p in ("/usr/lib/go/bin/go", "/usr/local/go/bin/go")
                                     if os.access(p, os.X_OK)), None)
    if not go:
        pytest.skip("no Go toolchain (Debian package golang-go)")
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.go").write_text(GO_PROGRAM)
    (src / "go.mod").write_text("module kuratest\n\ngo 1.18\n")
    env = dict(os.environ, GOCACHE=str(tmp_path / "cache"), GOPATH=str(tmp_path / "gopath"),
               GOFLAGS="-mod=mod", GOPROXY="off", CGO_ENABLED="0", GOTOOLCHAIN="local")
    r = subprocess.run([go, "build", "-o", str(tmp_path / "prog"), "."], cwd=src, env=env,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    prog = str(tmp_path / "prog")
    subprocess.run([prog, d, "write"], check=True, timeout=60)
    assert out_text(krun(pool, f"cat {PREFIX}/go/b")) == "from go\n"
    krun(pool, f"echo from run > {PREFIX}/go/c")
    r = subprocess.run([prog, d, "read"], capture_output=True, check=True, timeout=60)
    assert r.stdout == b"b=from go\nc=from run\n"
    subprocess.run([prog, d, "clean"], check=True, timeout=60)
    r = krun(pool, f"test -e {PREFIX}/go", check=None)
    assert r.returncode == 1


def test_open_file_outlives_its_name(mnt):
    """The kernel asks for an unlinked open file by its node alone."""
    pool, d = mnt
    with open(d / "u", "w+") as f:
        os.unlink(d / "u")
        assert os.fstat(f.fileno()).st_nlink == 0
        f.write("data")
        f.flush()
        os.setxattr(f.fileno(), "user.k", b"v")
        assert os.getxattr(f.fileno(), "user.k") == b"v"
        os.fchmod(f.fileno(), 0o600)
        assert os.fstat(f.fileno()).st_mode & 0o777 == 0o600
        with open(f"/proc/self/fd/{f.fileno()}") as g:
            assert g.read() == "data"
    assert os.listdir(d) == []


@pytest.mark.skipif(not IS_ROOT, reason="chown needs root")
def test_link_itself_changed(mnt):
    """lchown and utimensat(AT_SYMLINK_NOFOLLOW) change the link, not its
    target; chmod through it changes the target."""
    pool, d = mnt
    (d / "t").write_text("x")
    os.chmod(d / "t", 0o600)
    os.symlink("t", d / "l")
    os.chown(d / "l", 5, 5, follow_symlinks=False)
    os.utime(d / "l", ns=(10**18, 10**18), follow_symlinks=False)
    os.chmod(d / "l", 0o640)
    lst, st = os.lstat(d / "l"), os.stat(d / "t")
    assert (lst.st_uid, lst.st_mtime_ns) == (5, 10**18)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o640) and st.st_mtime_ns != 10**18


def test_maps(mnt):
    """Private maps (and so exec) work; shared ones are refused, as the
    kernel does for direct_io files (README: kura mount)."""
    import mmap
    pool, d = mnt
    (d / "f").write_bytes(b"hello")
    fd = os.open(d / "f", os.O_RDWR)
    try:
        with mmap.mmap(fd, 0, mmap.MAP_PRIVATE, mmap.PROT_READ) as m:
            assert m[:5] == b"hello"
        with pytest.raises(OSError) as e:
            mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        assert e.value.errno == 19  # ENODEV
    finally:
        os.close(fd)
    if os.path.exists(BUSYBOX):
        shutil.copy(BUSYBOX, d / "busybox")
        r = subprocess.run([str(d / "busybox"), "echo", "ran"], capture_output=True, timeout=60)
        assert r.stdout == b"ran\n"


def test_copy_file_range(mnt):
    pool, d = mnt
    data = os.urandom(3 << 20)
    (d / "a").write_bytes(data)
    a = os.open(d / "a", os.O_RDONLY)
    b = os.open(d / "b", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert os.copy_file_range(a, b, 1 << 20, 1000, 10) == 1 << 20
        rest = len(data) - (1 << 20) - 1000
        assert os.copy_file_range(a, b, 10 << 20, (1 << 20) + 1000, (1 << 20) + 10) == rest  # to the end
    finally:
        os.close(a)
        os.close(b)
    want = bytes(10) + data[1000:]
    assert (d / "b").read_bytes() == want
    assert out_text(krun(pool, f"cmp {PREFIX}/b {PREFIX}/b && wc -c < {PREFIX}/b")).strip() == str(len(want))


def test_concurrent_clients_both_ways(mnt):
    """Several programs through the mount (the server's threads serve them
    at once) and kura run processes, all changing one directory tree."""
    pool, d = mnt
    if not os.path.exists(BUSYBOX):
        pytest.skip("no busybox (Debian package busybox-static)")
    loop = ("i=0; while [ $i -lt 150 ]; do echo $i > {D}/f$i && mv {D}/f$i {D}/g$i && "
            "cat {D}/g$i > /dev/null && i=$((i+1)); done; rm {D}/g1*")
    procs = []
    for k in range(4):
        os.mkdir(d / f"b{k}")
        procs.append(subprocess.Popen([BUSYBOX, "sh", "-c", loop.format(D=d / f"b{k}")]))
    for k in range(2):
        krun(pool, f"mkdir {PREFIX}/r{k}")
        procs.append(subprocess.Popen([KURA_RUN_BIN, "run", "--pool", pool, "--mount", PREFIX, "--", "sh", "-c",
                                       loop.format(D=f"{PREFIX}/r{k}")]))
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    want = sorted(f"g{i}" for i in range(150) if not str(i).startswith("1"))
    for sub in [f"b{k}" for k in range(4)] + [f"r{k}" for k in range(2)]:
        assert sorted(os.listdir(d / sub)) == want, sub
        assert (d / sub / "g42").read_text() == "42\n"


def ensure_user():
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", USER], check=True)


def as_user(*cmd):
    return subprocess.run(["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", *map(str, cmd)],
                          capture_output=True, timeout=60)


@pytest.mark.skipif(not IS_ROOT, reason="switching users needs root")
def test_second_user_refused_as_on_ext4(mnt):
    pool, d = mnt
    if not shutil.which("setpriv"):
        pytest.skip("no setpriv (util-linux)")
    ensure_user()
    (d / "secret").write_text("root only\n")
    os.chmod(d / "secret", 0o600)
    (d / "open").write_text("anyone\n")
    os.chmod(d / "open", 0o644)
    r = as_user("cat", d / "secret")
    assert r.returncode != 0 and b"Permission denied" in r.stderr
    r = as_user("cat", d / "open")
    assert r.returncode == 0 and r.stdout == b"anyone\n"
    r = as_user("touch", d / "new")  # the root directory is root's, 0755
    assert r.returncode != 0 and b"Permission denied" in r.stderr
    # The user's own directory: files made there are the user's.
    os.mkdir(d / "home", 0o755)
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, check=True).stdout)
    os.chown(d / "home", uid, -1)
    r = as_user("sh", "-c", f"echo mine > {d}/home/f && stat -c '%U %a' {d}/home/f")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [USER.encode(), b"644"]
    # The same answer under kura run, as that user.
    r = as_user(KURA_RUN_BIN, "run", "--pool", pool, "--mount", PREFIX, "--", "cat", f"{PREFIX}/secret")
    if b"Permission denied" not in r.stderr and r.returncode == 0:
        pytest.fail("kura run let the second user read root's 0600 file")


# Shared maps are refused through the mount (direct_io: ENODEV), so fsx
# runs every other operation it has.
FSX_CONF = """[weights]
close_open = 1
mapread = 0
mapwrite = 0
read = 10
write = 10
truncate = 5
fsync = 1
fdatasync = 1
posix_fallocate = 2
punch_hole = 2
sendfile = 2
copy_file_range = 2
"""


def fsx(tmp_path, path, wrapper=(), maps=False):
    """fsx on path; maps: with its default weights, mapped reads and writes
    among them."""
    if not os.access(FSX, os.X_OK):
        pytest.skip("no fsx (cargo install fsx)")
    (tmp_path / "fsx.toml").write_text(FSX_CONF)
    conf = [] if maps else ["-f", str(tmp_path / "fsx.toml")]
    t = time.monotonic()
    r = subprocess.run([*map(str, wrapper), FSX, "-N", str(FSX_OPS), "-S", "7", *conf,
                        "-P", str(tmp_path), str(path)], capture_output=True, timeout=600)
    print(f"fsx: {FSX_OPS} operations in {time.monotonic() - t:.1f} s")
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")[-3000:]


def test_fsx_through_mount(mnt, tmp_path):
    pool, d = mnt
    fsx(tmp_path, d / "fsx.file")


def test_fsx_under_kura_run(mnt, tmp_path):
    """fsx under kura run, on the pool a mount serves, with its shared
    maps too (which the mount refuses)."""
    pool, d = mnt
    fsx(tmp_path, f"{PREFIX}/fsx.file", [KURA_RUN_BIN, "run", "--pool", pool, "--mount", PREFIX, "--"], maps=True)
    assert os.path.getsize(d / "fsx.file") > 0


def fresh(scratch):
    """A new pool and an empty directory to mount it on."""
    pool = scratch / "p.pool"
    ok("mkfs", pool, "--size", "64M")
    d = scratch / "mnt"
    d.mkdir()
    return pool, d


def foreground(pool, d):
    """kura mount -f, once the directory is mounted."""
    p = subprocess.Popen([KURA_BIN, "mount", "-f", str(pool), str(d)], stderr=subprocess.PIPE)
    for _ in range(200):
        if str(d) in mounted_dirs():
            return p
        assert p.poll() is None, p.stderr.read().decode(errors="replace")
        time.sleep(0.05)
    p.kill()
    pytest.fail(f"kura mount -f did not mount {d} in 10 s")


def test_foreground_sigterm_unmounts_cleanly(scratch):
    pool, d = fresh(scratch)
    p = foreground(pool, d)
    try:
        (d / "x").write_text("kept\n")
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
    assert rc == 0, p.stderr.read().decode(errors="replace")
    assert str(d) not in mounted_dirs()
    assert out_text(ok("cat", f"{pool}:/x")) == "kept\n"
    ok("fsck", pool)


def test_killed_server(scratch):
    """kura umount after the server died (its zombie not reaped yet); kura
    gc then tidies what it left of the pool."""
    pool, d = fresh(scratch)
    p = foreground(pool, d)
    try:
        (d / "x").write_text("kept\n")
        p.kill()
        time.sleep(0.2)
        t = time.monotonic()
        ok("umount", d)
        assert time.monotonic() - t < 10
        assert str(d) not in mounted_dirs()
    finally:
        p.wait(timeout=30)
    ok("gc", pool)
    ok("fsck", pool)
    assert out_text(ok("cat", f"{pool}:/x")) == "kept\n"


def test_two_mounts_of_one_pool(scratch):
    """Mounting a pool mounted elsewhere is not refused: the engine
    coordinates every user, as it does kura run processes."""
    pool, d = fresh(scratch)
    d2 = scratch / "mnt2"
    d2.mkdir()
    ok("mount", pool, d)
    try:
        ok("mount", pool, d2)
        try:
            (d / "a").write_text("one\n")
            assert (d2 / "a").read_text() == "one\n"
            os.rename(d2 / "a", d2 / "b")
            assert os.listdir(d) == ["b"]
        finally:
            ok("umount", d2)
    finally:
        ok("umount", d)
    ok("fsck", pool)


def test_read_only_mount(scratch):
    pool, d = fresh(scratch)
    ok("mount", pool, d, "-o", "ro")
    try:
        assert sorted(os.listdir(d)) == []
        with pytest.raises(OSError) as e:
            (d / "x").write_text("no")
        assert e.value.errno == 30  # EROFS
    finally:
        ok("umount", d)
    ok("fsck", pool)


def test_errors_name_pool_dir_and_cause(scratch):
    pool, d = fresh(scratch)
    r = run("mount", pool, scratch / "missing")
    assert r.returncode == 1
    assert str(pool) in err_text(r) and "missing" in err_text(r) and "no such directory" in err_text(r)
    junk = scratch / "junk"
    junk.write_bytes(b"not a pool" * 1000000)
    r = run("mount", junk, d)
    assert r.returncode == 1 and "junk" in err_text(r) and str(d) in err_text(r)
    assert str(d) not in mounted_dirs()
    r = run("mount", pool, pool)
    assert r.returncode == 1 and "not a directory" in err_text(r)
    r = run("mount", pool, d, "-o", "no_such_option")
    assert r.returncode == 1 and "no_such_option" in err_text(r) and str(d) not in mounted_dirs()
    r = run("umount", d)
    assert r.returncode == 1 and "not a kura mount" in err_text(r)
    r = run("mount", pool)
    assert r.returncode == 2
    for cmd in ("mount", "umount"):
        assert f"kura {cmd}" in out_text(ok(cmd, "--help"))
    ok("fsck", pool)
