"""End-to-end tests of the `kura` command-line tool.

The binary comes from $KURA_BIN.  Pools live in a scratch directory under
/dev/shm (tmpfs: fast, and sparse pool files cost nothing).  Every run of the
binary is checked for death by signal: a crash is never an acceptable way
to report a bad pool.
"""

import os
import random
import signal
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

KURA_BIN = os.environ.get("KURA_BIN", "")
if not KURA_BIN or not os.access(KURA_BIN, os.X_OK):
    pytest.skip(
        f"KURA_BIN is unset or not an executable ({KURA_BIN!r}); build kura first",
        allow_module_level=True,
    )

REPO = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
KURA_LIB = os.environ.get("KURA_LIB") or str(Path(KURA_BIN).resolve().parent.parent / "lib" / "libkura.so")


def _others_can_run(path):
    """Whether a user with no special rights could execute `path`."""
    p = Path(path).resolve()
    if not os.stat(p).st_mode & 0o001:
        return False
    return all(os.stat(d).st_mode & 0o001 for d in p.parents)
MiB = 1 << 20


# ---------------------------------------------------------------- helpers


def run(*args, env=None, check=None, timeout=600, **kw):
    """Run kura; assert it was not killed by a signal."""
    e = dict(os.environ)
    e["TZ"] = "UTC"
    e.setdefault("LC_ALL", "C")
    if env:
        e.update(env)
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    r = subprocess.run([KURA_BIN, *map(str, args)], env=e, timeout=timeout, **kw)
    assert r.returncode >= 0, (
        f"kura {' '.join(map(str, args))} died from signal {-r.returncode}\n"
        f"stderr: {r.stderr.decode(errors='replace')}"
    )
    if check is not None:
        assert r.returncode == check, (
            f"kura {' '.join(map(str, args))}: exit {r.returncode}, expected {check}\n"
            f"stdout: {r.stdout.decode(errors='replace')[-3000:]}\n"
            f"stderr: {r.stderr.decode(errors='replace')[-3000:]}"
        )
    return r


def ok(*args, **kw):
    return run(*args, check=0, **kw)


def err_text(r):
    return r.stderr.decode(errors="replace")


def out_text(r):
    return r.stdout.decode(errors="replace")


@pytest.fixture
def scratch():
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = Path(tempfile.mkdtemp(prefix="kura-cli-", dir=base))
    yield d
    # Read-only directories in generated trees would block removal.
    for dirpath, dirnames, _ in os.walk(d):
        for n in dirnames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pool(scratch):
    p = scratch / "test.pool"
    ok("mkfs", p, "--size", "512M")
    return p


def snapshot(root, with_atime=False):
    """relative path -> comparable attributes, without following symlinks.

    Hard links are represented by the set of paths sharing an inode, so the
    grouping (not the inode numbers) is compared.
    """
    root = Path(root)
    entries = {}
    by_inode = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            rec = {
                "type": stat.S_IFMT(st.st_mode),
                "mode": stat.S_IMODE(st.st_mode),
                "mtime_ns": st.st_mtime_ns,
            }
            if stat.S_ISREG(st.st_mode):
                rec["size"] = st.st_size
                if with_atime:
                    rec["atime_ns"] = st.st_atime_ns
                if st.st_nlink > 1:
                    by_inode.setdefault((st.st_dev, st.st_ino), []).append(rel)
            elif stat.S_ISLNK(st.st_mode):
                rec["target"] = os.readlink(p)
            if IS_ROOT:
                rec["owner"] = (st.st_uid, st.st_gid)
            entries[rel] = rec
    for group in by_inode.values():
        for rel in group:
            entries[rel]["links"] = tuple(sorted(group))
    return entries


def assert_same_tree(a, b):
    if a != b:
        missing = sorted(set(a) - set(b))[:20]
        extra = sorted(set(b) - set(a))[:20]
        diffs = [(k, a[k], b[k]) for k in sorted(set(a) & set(b)) if a[k] != b[k]][:20]
        pytest.fail(f"trees differ:\nmissing: {missing}\nextra: {extra}\ndiffering: {diffs}")


def diff_r(a, b):
    r = subprocess.run(
        ["diff", "-r", "--no-dereference", str(a), str(b)], capture_output=True
    )
    assert r.returncode == 0, (
        f"diff -r {a} {b}:\n{r.stdout.decode(errors='replace')[-4000:]}"
        f"{r.stderr.decode(errors='replace')[-2000:]}"
    )


def round_trip(pool, src, scratch, dest="/t", with_atime=False):
    before = snapshot(src, with_atime)
    ok("import", src, f"{pool}:{dest}")
    out = scratch / "out"
    ok("export", f"{pool}:{dest}", out)
    # Compare attributes before diff reads the files and moves their atimes.
    after = snapshot(out, with_atime)
    assert_same_tree(before, after)
    diff_r(src, out)
    return before


def set_times(path, atime_ns, mtime_ns):
    os.utime(path, ns=(atime_ns, mtime_ns), follow_symlinks=False)


def make_tree(root):
    """A tree exercising every attribute import/export must keep."""
    rng = random.Random(1234)
    root.mkdir()
    (root / "empty_dir").mkdir()
    d = root / "a" / "b" / "c"
    d.mkdir(parents=True)
    (d / "deep.txt").write_text("deep\n")
    (root / "empty_file").write_bytes(b"")
    (root / "small.txt").write_text("hello kura\n")
    (root / "big.bin").write_bytes(rng.randbytes(5 * MiB + 123))
    with open(root / "sparse.bin", "wb") as f:
        f.seek(3 * MiB)
        f.write(b"middle")
        f.seek(8 * MiB - 5)
        f.write(b"end!!")
    with open(root / "sparse_tail.bin", "wb") as f:
        f.write(b"head")
        f.truncate(2 * MiB)
    (root / "with space.txt").write_text("spaces\n")
    (root / " leading and trailing ").write_text("odd\n")
    (root / "ünïcødé-名前-🙂.txt").write_text("utf8\n")
    (root / ("n" * 255)).write_text("255 byte name\n")
    (root / ("é" * 127 + "x")).write_text("255 byte utf-8 name\n")
    (root / "tab\tname").write_text("tab\n")
    (root / "link_to_small").symlink_to("small.txt")
    (root / "link_to_dir").symlink_to("a/b")
    (root / "dangling").symlink_to("does/not/exist")
    (root / "absolute_link").symlink_to("/etc/hostname")
    (root / "hard1").write_bytes(b"shared inode\n")
    os.link(root / "hard1", root / "hard2")
    os.link(root / "hard1", root / "a" / "hard3")
    modes = {
        "m0600": 0o600,
        "m0755": 0o755,
        "m04755": 0o4755,
        "m02755": 0o2755,
        "m0444": 0o444,
    }
    if IS_ROOT:  # only root can read it back for the comparison
        modes["m0000"] = 0o000
    for name, mode in modes.items():
        p = root / name
        p.write_text(name + "\n")
        os.chmod(p, mode)
    sticky = root / "sticky"
    sticky.mkdir()
    (sticky / "inside").write_text("x\n")
    os.chmod(sticky, 0o1777)
    ro = root / "readonly_dir"
    ro.mkdir()
    (ro / "child").write_text("in a read-only dir\n")
    os.chmod(ro, 0o555)
    os.chmod(root / "a", 0o700)
    if IS_ROOT:
        os.chown(root / "small.txt", 1234, 5678)
        os.chown(root / "link_to_small", 4321, 8765, follow_symlinks=False)
        os.chown(root / "a" / "b", 99, 98)
    # Times last, children before parents, so nothing moves them afterwards.
    base = 946_684_800_000_000_000  # 2000-01-01
    everything = sorted(root.rglob("*"), key=lambda p: -len(p.parts))
    for i, p in enumerate(everything):
        set_times(p, base + i * 86_400_123_456_789 + 111, base + i * 3_600_987_654_321 + 7)
    set_times(root, base + 5, base + 999_999_999)


# ---------------------------------------------------------------- help / usage


def test_help_and_usage():
    r = ok("--help")
    for cmd in ("mkfs", "fsck", "upgrade", "info", "ls", "stat", "cat", "import", "export"):
        assert cmd in out_text(r)
        rc = ok(cmd, "--help")
        assert f"kura {cmd}" in out_text(rc)
    r = run()
    assert r.returncode == 2 and "usage" in err_text(r)
    r = run("frobnicate")
    assert r.returncode == 2 and "frobnicate" in err_text(r)
    r = run("import", "only-one-operand")
    assert r.returncode == 2 and err_text(r)
    r = run("ls", "-Z", "x:/")
    assert r.returncode == 2 and "-Z" in err_text(r)


# ---------------------------------------------------------------- mkfs


@pytest.mark.parametrize(
    "size,expected",
    [
        ("8388608", 8 * MiB),
        ("8M", 8 * MiB),
        ("8MiB", 8 * MiB),
        ("8m", 8 * MiB),
        ("6144K", 6 * MiB),
        ("6144KiB", 6 * MiB),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("8392704", 8392704),  # 8 MiB + 4 KiB: already block aligned
    ],
)
def test_mkfs_sizes(scratch, size, expected):
    p = scratch / "p.pool"
    ok("mkfs", p, "--size", size)
    assert p.stat().st_size == expected
    info = parse_info(ok("info", p))
    assert int(info["pool size"].split()[0]) == expected


def test_mkfs_rounds_down_to_4k(scratch):
    p = scratch / "p.pool"
    ok("mkfs", p, "--size", str(8 * MiB + 1000))
    assert p.stat().st_size == 8 * MiB


@pytest.mark.parametrize(
    "size",
    ["12Q", "-5M", "-1", "0", "0K", "", "M", "1.5G", "12 M", " 12M", "8MB", "8KB",
     "99999999999999999999999", "18014398509481984K", "16E", "8388608T", "1M", "4095K"],
)
def test_mkfs_rejects_bad_sizes(scratch, size):
    p = scratch / "p.pool"
    r = run("mkfs", p, "--size", size)
    assert r.returncode != 0
    assert "size" in err_text(r).lower(), err_text(r)
    assert not p.exists() or p.stat().st_size == 0


def test_mkfs_refuses_existing_without_force(scratch):
    p = scratch / "p.pool"
    p.write_bytes(b"precious data\n" * 100)
    r = run("mkfs", p, "--size", "8M")
    assert r.returncode != 0
    assert str(p) in err_text(r) and "--force" in err_text(r)
    assert p.read_bytes() == b"precious data\n" * 100
    ok("mkfs", p, "--size", "8M", "--force")
    assert p.stat().st_size == 8 * MiB
    ok("fsck", p)


def pool_with_file(scratch, name, text, *mkfs_args):
    """A 16 MiB pool scratch/NAME.pool holding /t/f with text."""
    p = scratch / f"{name}.pool"
    ok("mkfs", p, "--size", "16M", *mkfs_args)
    src = scratch / f"src-{name}"
    src.mkdir()
    (src / "f").write_text(text)
    ok("import", src, f"{p}:/t")
    return p


def test_mkfs_makes_pools_private_unless_told(scratch):
    p = scratch / "private.pool"
    ok("mkfs", p, "--size", "8M")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    q = scratch / "shared.pool"
    old = os.umask(0o022)
    try:
        ok("mkfs", q, "--size", "8M", "--mode", "0664")
    finally:
        os.umask(old)
    # Exactly the mode asked for, as mkdir -m and install -m: the umask
    # would turn a pool shared with a group (0660) into one it may only read.
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o664
    r = run("mkfs", scratch / "x.pool", "--mode", "1777")
    assert r.returncode == 2 and "1777" in err_text(r)


def test_mkfs_refuses_a_pool_in_use(scratch):
    """A pool a process has mounted is not formatted, --force or not; the
    process goes on and the pool keeps its files."""
    p = pool_with_file(scratch, "busy", "kept\n")
    prefix = f"/kura-busy-{os.getpid()}"
    # One process keeps the pool mounted: it holds a file open throughout.
    holder = subprocess.Popen(
        [KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "python3", "-c",
         f"import sys\nf = open('{prefix}/t/f')\nprint(f.read(), end='', flush=True)\nsys.stdin.readline()\n"
         f"f.seek(0)\nprint(f.read(), end='')\nprint(open('{prefix}/t/f').read(), end='')"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"kept\n"
        r = run("mkfs", p, "--size", "16M")
        assert r.returncode != 0 and "not empty" in err_text(r), err_text(r)
        r = run("mkfs", p, "--size", "16M", "--force")
        assert r.returncode != 0 and "in use" in err_text(r), err_text(r)
        out, err = holder.communicate(b"go\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert (holder.returncode, out) == (0, b"kept\nkept\n"), err
    assert ok("cat", f"{p}:/t/f").stdout == b"kept\n"
    ok("fsck", p)


def test_a_pool_one_may_only_read_mounts_read_only(scratch):
    if not IS_ROOT:
        pytest.skip("needs root to act as a second user")
    if not _others_can_run(KURA_BIN):
        pytest.skip("the checkout is not searchable by other users")
    p = pool_with_file(scratch, "ro", "readable\n", "--mode", "0644")
    os.chmod(scratch, 0o755)
    prefix = f"/kura-ro-{os.getpid()}"
    script = (f"cat {prefix}/t/f; ls {prefix}/t; touch {prefix}/t/new 2>&1; rm {prefix}/t/f 2>&1; "
              f"mkdir {prefix}/d 2>&1; echo x >> {prefix}/t/f 2>&1; true")
    r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
    lines = r.stdout.splitlines()
    assert lines[:2] == ["readable", "f"], r.stdout + r.stderr
    said = (r.stdout + r.stderr).splitlines()[2:]
    assert sum("Read-only file system" in line for line in said) == 4, r.stdout + r.stderr
    assert ok("cat", f"{p}:/t/f").stdout == b"readable\n"


def _shm_left(pool):
    st = os.stat(pool)
    tail = f"{st.st_dev:x}-{st.st_ino:x}"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("kura-") and n.endswith(tail))


@pytest.mark.parametrize("script", ["echo hi > $P/f; cat $P/f", "echo hi > $P/f",
                                    "flock $P/f true", "echo x > $P/g; kill -9 $$"])
def test_run_leaves_nothing_in_dev_shm(scratch, script):
    """Whatever way the command ends (dash's _exit, a SIGKILL), the pool's
    shared state is gone afterwards and the changes are in the pool file."""
    p = scratch / "tidy.pool"
    ok("mkfs", p, "--size", "16M")
    prefix = f"/kura-tidy-{os.getpid()}"
    r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "sh", "-c",
                        script.replace("$P", prefix)], capture_output=True, timeout=120)
    assert r.returncode == (-signal.SIGKILL if "kill" in script else 0), r.stderr
    assert _shm_left(p) == []
    assert ok("ls", f"{p}:/").stdout.split()


def test_gc_writes_home_and_removes_what_the_dead_left(scratch):
    """A process killed with the pool mounted (no kura run to tidy after it)
    leaves the working copy and lock tables; kura gc writes the copy home
    and removes them, but leaves a pool in use alone."""
    p = scratch / "gc.pool"
    ok("mkfs", p, "--size", "16M")
    prefix = f"/kura-gc-{os.getpid()}"
    env = dict(os.environ, LD_PRELOAD=KURA_LIB, KURA_POOL=str(p), KURA_MOUNT=prefix)
    r = subprocess.run(["sh", "-c", f"echo kept > {prefix}/f; flock {prefix}/f true; kill -9 $$"], env=env,
                       capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert _shm_left(p)
    holder = subprocess.Popen(["python3", "-c", f"import sys\nf = open('{prefix}/f')\nsys.stdin.readline()"],
                              env=env, stdin=subprocess.PIPE)
    try:
        time.sleep(1)
        assert "in use" in out_text(ok("gc", p))
        assert _shm_left(p)
    finally:
        holder.communicate(b"\n", timeout=60)
    assert "nothing left" in out_text(ok("gc", p))
    assert _shm_left(p) == []
    assert ok("cat", f"{p}:/f").stdout == b"kept\n"


def test_run_passes_signals_and_status_on(scratch):
    p = scratch / "sig.pool"
    ok("mkfs", p, "--size", "16M")
    assert run("run", "--pool", p, "--", "sh", "-c", "exit 7").returncode == 7
    w = subprocess.Popen([KURA_BIN, "run", "--pool", str(p), "--", "sleep", "30"])
    time.sleep(0.5)
    w.terminate()
    assert w.wait(timeout=30) == -signal.SIGTERM
    assert _shm_left(p) == []


def test_shared_objects_others_planted_are_refused(scratch):
    """A user who cannot use a pool plants its lock table's name in
    /dev/shm first (a file open to all, a symlink): mounts refuse it with a
    clear message instead of sharing a mutex with a stranger, and never hang.
    A lock table whose maker died halfway is rebuilt after a bounded wait."""
    if not IS_ROOT:
        pytest.skip("needs root to act as a second user")
    p = pool_with_file(scratch, "sq", "mine\n")
    st = os.stat(p)
    table = f"/dev/shm/kura-{st.st_dev:x}-{st.st_ino:x}"
    locks = f"/dev/shm/kura-locks-{st.st_dev:x}-{st.st_ino:x}"
    plant = f"import os\nos.umask(0)\nos.close(os.open('{table}', os.O_CREAT | os.O_WRONLY, 0o666))"
    subprocess.run(["python3", "-c", plant], check=True, timeout=60,
                   preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
    try:
        r = run("cat", f"{p}:/t/f", timeout=60)
        assert r.returncode != 0 and "belongs to uid 65534" in err_text(r) and table[8:] in err_text(r), err_text(r)
    finally:
        os.unlink(table)
    os.symlink("/etc/passwd", table)
    try:
        r = run("cat", f"{p}:/t/f", timeout=60)
        assert r.returncode != 0 and table[8:] in err_text(r), err_text(r)
    finally:
        os.unlink(table)
    assert ok("cat", f"{p}:/t/f").stdout == b"mine\n"
    # The layer's lock table as a maker that died after claiming it left it.
    with open(locks, "wb") as f:
        f.write((1).to_bytes(4, "little"))
    os.chmod(locks, 0o600)
    prefix = f"/kura-sq-{os.getpid()}"
    r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "flock", f"{prefix}/t/f", "cat",
                        f"{prefix}/t/f"], capture_output=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, b"mine\n"), r.stderr
    assert _shm_left(p) == []


def test_mkfs_missing_size_value_is_usage_error(scratch):
    r = run("mkfs", scratch / "p.pool", "--size")
    assert r.returncode == 2 and "--size" in err_text(r)


# ---------------------------------------------------------------- info / fsck


def parse_info(r):
    out = {}
    for line in out_text(r).splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_info_fresh_pool(pool):
    info = parse_info(ok("info", pool))
    assert int(info["pool size"].split()[0]) == 512 * MiB
    assert "512.0 MiB" in info["pool size"]
    assert int(info["block size"]) == 4096
    assert int(info["format version"]) >= 1
    used = int(info["used"].split()[0])
    free = int(info["free"].split()[0])
    assert 0 <= used < 512 * MiB and 0 < free < 512 * MiB
    assert used + free <= 512 * MiB
    assert int(info["files"]) == 0
    assert int(info["symlinks"]) == 0
    assert int(info["orphans"]) == 0
    assert int(info["directories"]) in (0, 1)  # whether the root counts
    assert info["persistence"] in ("pmem", "file", "memory")


def test_info_counts_after_import(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "f1").write_bytes(os.urandom(100_000))
    (src / "f2").write_text("two\n")
    os.link(src / "f2", src / "f2-again")
    (src / "d").mkdir()
    (src / "d" / "e").mkdir()
    (src / "sym").symlink_to("f1")
    before = parse_info(ok("info", pool))
    ok("import", src, f"{pool}:/imp")
    info = parse_info(ok("info", pool))
    assert int(info["files"]) == 2  # f2 and f2-again are one inode
    assert int(info["symlinks"]) == 1
    assert int(info["directories"]) - int(before["directories"]) == 3  # imp, d, e
    assert int(info["used"].split()[0]) >= int(before["used"].split()[0]) + 100_000
    assert int(info["orphans"]) == 0


def test_fsck_clean_fresh_and_after_import(pool, scratch):
    r = ok("fsck", pool)
    assert "clean" in out_text(r)
    src = scratch / "src"
    make_tree(src)
    ok("import", src, f"{pool}:/t")
    r = ok("fsck", pool)
    assert "clean" in out_text(r)
    r = ok("fsck", pool, "--repair")
    assert "clean" in out_text(r)


def test_upgrade_of_a_current_pool_changes_nothing(pool, scratch):
    """reclaim_test upgrades a format-1 pool; here the command's other answers."""
    before = Path(pool).read_bytes()
    r = ok("upgrade", pool)
    assert "already format version" in out_text(r)
    assert Path(pool).read_bytes() == before
    r = run("upgrade", pool, "extra")
    assert r.returncode == 2 and "too many" in err_text(r)
    r = run("upgrade", "--bogus")
    assert r.returncode == 2 and "--bogus" in err_text(r)
    p = scratch / "nope.pool"
    r = run("upgrade", p)
    assert r.returncode == 2 and str(p) in err_text(r)


def test_fsck_missing_pool(scratch):
    p = scratch / "nope.pool"
    r = run("fsck", p)
    assert r.returncode not in (0, 1)
    assert str(p) in err_text(r)


# ---------------------------------------------------------------- round trips


def test_round_trip_generated_tree(pool, scratch):
    src = scratch / "src"
    make_tree(src)
    snap = round_trip(pool, src, scratch, with_atime=True)
    # The snapshot is non-trivial: guard against a silently empty walk.
    assert len(snap) > 30
    assert snap["m04755"]["mode"] == 0o4755
    assert snap["sticky"]["mode"] == 0o1777
    assert len(snap["hard1"]["links"]) == 3
    out = scratch / "out"
    assert (out / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
    with open(out / "sparse.bin", "rb") as f:
        f.seek(3 * MiB)
        assert f.read(6) == b"middle"
    # The root of the exported tree takes the source root's attributes.
    assert os.stat(out).st_mtime_ns == os.stat(src).st_mtime_ns
    ok("fsck", pool)


def test_round_trip_pre_epoch_and_far_future_times(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    old = src / "old"
    old.write_text("1969\n")
    set_times(old, -86_400_000_000_001, -1_500_000_000_123_456_789)
    new = src / "future"
    new.write_text("2200\n")
    set_times(new, 7_258_118_400_000_000_001, 7_258_118_400_999_999_999)
    set_times(src, 1, 2)
    round_trip(pool, src, scratch, with_atime=True)


def test_import_into_existing_directory_and_root(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "x").write_text("x\n")
    (src / "sub").mkdir()
    ok("import", src, f"{pool}:/")
    assert out_text(ok("ls", f"{pool}:/")).split() == ["sub", "x"]
    # Importing again replaces files and merges directories.
    (src / "x").write_text("x, second version\n")
    (src / "y").write_text("y\n")
    ok("import", src, f"{pool}:/")
    assert out_text(ok("ls", f"{pool}:/")).split() == ["sub", "x", "y"]
    assert ok("cat", f"{pool}:/x").stdout == b"x, second version\n"


def test_import_creates_parents(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "leaf.txt").write_text("leaf\n")
    os.chmod(src, 0o750)
    ok("import", src, f"{pool}:/p/q/r")
    assert ok("cat", f"{pool}:/p/q/r/leaf.txt").stdout == b"leaf\n"
    st = out_text(ok("stat", f"{pool}:/p/q/r"))
    assert "(0750/drwxr-x---)" in st


def test_import_single_file(pool, scratch):
    f = scratch / "single.txt"
    f.write_bytes(b"just one\n")
    os.chmod(f, 0o640)
    ok("import", f, f"{pool}:/one.txt")
    assert ok("cat", f"{pool}:/one.txt").stdout == b"just one\n"
    ok("import", scratch / "single.txt", f"{pool}:/")
    assert ok("cat", f"{pool}:/single.txt").stdout == b"just one\n"


def test_export_into_existing_directory(pool, scratch):
    src = scratch / "src"
    make_tree(src)
    ok("import", src, f"{pool}:/t")
    out = scratch / "existing"
    out.mkdir()
    os.chmod(out, 0o711)
    (out / "keep.me").write_text("untouched\n")
    ok("export", f"{pool}:/t", out)
    assert (out / "keep.me").read_text() == "untouched\n"
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o711
    (out / "keep.me").unlink()
    assert_same_tree(snapshot(src), snapshot(out))


def test_export_creates_missing_parents(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "f").write_text("f\n")
    ok("import", src, f"{pool}:/t")
    out = scratch / "x" / "y" / "z"
    ok("export", f"{pool}:/t", out)
    assert (out / "f").read_text() == "f\n"


def test_round_trip_wide_and_deep(pool, scratch):
    src = scratch / "src"
    wide = src / "wide"
    wide.mkdir(parents=True)
    for i in range(3000):
        (wide / f"entry-{i:05d}").write_bytes(b"%d\n" % i)
    deep = src
    for i in range(120):
        deep = deep / f"level{i:03d}"
    deep.mkdir(parents=True)
    (deep / "bottom").write_text("bottom\n")
    snap = round_trip(pool, src, scratch)
    assert len(snap) == 1 + 3000 + 120 + 1
    assert len(out_text(ok("ls", f"{pool}:/t/wide")).splitlines()) == 3000


def test_import_into_full_pool_fails_cleanly(scratch):
    p = scratch / "small.pool"
    ok("mkfs", p, "--size", "8M")
    src = scratch / "src"
    src.mkdir()
    (src / "fits").write_bytes(b"small\n")
    (src / "huge").write_bytes(os.urandom(20 * MiB))
    r = run("import", src, f"{p}:/full")
    assert r.returncode == 1
    assert "/full/huge: No space left on device" in err_text(r), err_text(r)
    # No truncated leftover; the pool stays usable and consistent.
    assert "huge" not in out_text(ok("ls", f"{p}:/full")).split()
    ok("info", p)
    ok("fsck", p)


def test_concurrent_imports_into_one_pool(pool, scratch):
    srcs = []
    for k in range(3):
        src = scratch / f"src{k}"
        src.mkdir()
        for i in range(150):
            (src / f"k{k}-{i}").write_bytes(os.urandom(i * 97))
        srcs.append(src)
    env = dict(os.environ, TZ="UTC")
    procs = [
        subprocess.Popen([KURA_BIN, "import", str(src), f"{pool}:/c{k}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for k, src in enumerate(srcs)
    ]
    for proc in procs:
        out, errb = proc.communicate(timeout=300)
        assert proc.returncode == 0, errb.decode(errors="replace")
    for k, src in enumerate(srcs):
        out = scratch / f"out{k}"
        ok("export", f"{pool}:/c{k}", out)
        assert_same_tree(snapshot(src), snapshot(out))
        diff_r(src, out)
    ok("fsck", pool)


def test_export_does_not_write_through_symlinks(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "x").write_text("from the pool\n")
    ok("import", src, f"{pool}:/t")
    victim = scratch / "victim"
    victim.write_text("must stay\n")
    out = scratch / "out"
    out.mkdir()
    (out / "x").symlink_to(victim)
    ok("export", f"{pool}:/t", out)
    assert victim.read_text() == "must stay\n"
    assert not (out / "x").is_symlink()
    assert (out / "x").read_text() == "from the pool\n"


def test_file_over_directory_is_an_error(pool, scratch):
    src = scratch / "src"
    (src / "thing").mkdir(parents=True)
    (src / "thing" / "inner").write_text("i\n")
    ok("import", src, f"{pool}:/t")
    src2 = scratch / "src2"
    src2.mkdir()
    (src2 / "thing").write_text("now a file\n")
    (src2 / "other").write_text("o\n")
    r = run("import", src2, f"{pool}:/t")
    assert r.returncode == 1
    assert "/t/thing: Is a directory" in err_text(r), err_text(r)
    # The rest of the tree is still copied.
    assert ok("cat", f"{pool}:/t/other").stdout == b"o\n"
    assert ok("cat", f"{pool}:/t/thing/inner").stdout == b"i\n"


def test_import_skips_its_own_pool(scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "a").write_text("a\n")
    p = src / "inside.pool"
    ok("mkfs", p, "--size", "16M")
    r = ok("import", src, f"{p}:/me")
    assert f"{p}: skipping the destination pool file itself" in err_text(r)
    assert out_text(ok("ls", f"{p}:/me")).split() == ["a"]


def copy_source_tree(src, scratch, name):
    """Snapshot a live tree first: other engineers may edit it mid-test."""
    dst = scratch / name
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    return dst


@pytest.mark.parametrize("subdir", ["src", "tests", "include", "tools"])
def test_round_trip_own_repo(pool, scratch, subdir):
    d = REPO / subdir
    if not d.is_dir():
        pytest.skip(f"{d} does not exist")
    src = copy_source_tree(d, scratch, "src")
    snap = round_trip(pool, src, scratch)
    assert len(snap) >= 1


def pick_doc_subset(limit_bytes=40 * MiB):
    root = Path("/usr/share/doc")
    chosen, total = [], 0
    for d in sorted(root.iterdir()):
        size = 0
        for dirpath, _, files in os.walk(d):
            for f in files:
                try:
                    size += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass
        if total + size > limit_bytes:
            continue
        chosen.append(d)
        total += size
    return chosen


def test_round_trip_usr_share_doc(pool, scratch):
    if not os.path.isdir("/usr/share/doc"):
        pytest.skip("/usr/share/doc is not present")
    subset = pick_doc_subset()
    if not subset:
        pytest.skip("/usr/share/doc is empty")
    src = scratch / "doc"
    src.mkdir()
    for d in subset:
        dst = src / d.name
        if d.is_symlink():
            dst.symlink_to(os.readlink(d))
        else:
            shutil.copytree(d, dst, symlinks=True, copy_function=shutil.copy2)
    snap = round_trip(pool, src, scratch)
    assert len(snap) > 10
    ok("fsck", pool)


def test_round_trip_sqlite_source(scratch):
    src = os.environ.get("KURA_SQLITE_SRC")
    if not src:
        # make check fetches it here (scripts/sqlite-src.sh) when it can
        build = Path(os.environ.get("KURA_BUILD", "build"))
        found = sorted((build / "third_party").glob("sqlite3-*/"))
        src = str(found[0]) if found else None
    if not src or not os.path.isdir(src):
        pytest.skip("no SQLite source tree: set KURA_SQLITE_SRC or run scripts/sqlite-src.sh")
    p = scratch / "big.pool"
    ok("mkfs", p, "--size", "4G")
    snap = round_trip(p, Path(src), scratch)
    assert len(snap) > 100
    ok("fsck", p)


# ---------------------------------------------------------------- ls / stat / cat


@pytest.fixture
def filled(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "b.txt").write_bytes(b"bee\n")
    (src / "a.bin").write_bytes(b"")
    os.chmod(src / "a.bin", 0o644)
    (src / "a.bin").write_bytes(bytes(range(256)) * 40)
    (src / "c").mkdir()
    (src / "c" / "inner").write_text("inner\n")
    (src / "lnk").symlink_to("a.bin")
    os.link(src / "b.txt", src / "b2.txt")
    os.chmod(src / "b.txt", 0o640)
    os.chmod(src / "c", 0o751)
    set_times(src / "a.bin", 1_000_000_000_123_456_789, 1_000_000_000_123_456_789)
    set_times(src / "lnk", 1_000_000_000_000_000_000, 1_100_000_000_000_000_001)
    ok("import", src, f"{pool}:/d")
    return pool


def test_ls_plain_sorted(filled):
    r = ok("ls", f"{filled}:/d")
    assert out_text(r).splitlines() == ["a.bin", "b.txt", "b2.txt", "c", "lnk"]
    r = ok("ls", "-a", f"{filled}:/d")
    assert out_text(r).splitlines() == [".", "..", "a.bin", "b.txt", "b2.txt", "c", "lnk"]


def test_ls_long(filled):
    lines = out_text(ok("ls", "-l", f"{filled}:/d")).splitlines()
    assert len(lines) == 5
    by_name = {l.split()[-1] if "->" not in l else l.split()[-3]: l for l in lines}
    a = by_name["a.bin"].split()
    assert a[0] == "-rw-r--r--"
    assert a[4] == str(256 * 40)
    assert a[5] == "2001-09-09" and a[6] == "01:46"
    b = by_name["b.txt"].split()
    assert b[0] == "-rw-r-----" and b[1] == "2"
    assert by_name["c"].split()[0] == "drwxr-x--x"
    lnk = by_name["lnk"].split()
    assert lnk[0].startswith("l") and lnk[-2:] == ["->", "a.bin"]
    if IS_ROOT:
        assert a[2] == "0" and a[3] == "0"


def test_ls_file_prints_just_it(filled):
    assert out_text(ok("ls", f"{filled}:/d/b.txt")).strip() == "/d/b.txt"
    line = out_text(ok("ls", "-l", f"{filled}:/d/lnk")).strip()
    assert line.endswith("/d/lnk -> a.bin")


def test_stat_fields(filled):
    s = out_text(ok("stat", f"{filled}:/d/a.bin"))
    assert "File: /d/a.bin" in s
    assert f"Size: {256 * 40}" in s
    assert "regular file" in s
    assert "Links: 1" in s
    assert "Modify: 2001-09-09 01:46:40.123456789 +0000" in s
    assert "Access: 2001-09-09 01:46:40.123456789 +0000" in s
    s = out_text(ok("stat", f"{filled}:/d/b.txt"))
    assert "(0640/-rw-r-----)" in s and "Links: 2" in s
    ino1 = [l for l in s.splitlines() if "Inode:" in l][0].split("Inode:")[1].split()[0]
    s2 = out_text(ok("stat", f"{filled}:/d/b2.txt"))
    ino2 = [l for l in s2.splitlines() if "Inode:" in l][0].split("Inode:")[1].split()[0]
    assert ino1 == ino2
    s = out_text(ok("stat", f"{filled}:/d/lnk"))
    assert "File: /d/lnk -> a.bin" in s and "symbolic link" in s
    assert "Modify: 2004-11-09 11:33:20.000000001 +0000" in s
    s = out_text(ok("stat", "-L", f"{filled}:/d/lnk"))
    assert "regular file" in s
    s = out_text(ok("stat", f"{filled}:/d/c"))
    assert "directory" in s and "(0751/drwxr-x--x)" in s


def test_cat_exact_bytes(filled, pool, scratch):
    assert ok("cat", f"{filled}:/d/a.bin").stdout == bytes(range(256)) * 40
    assert ok("cat", f"{filled}:/d/lnk").stdout == bytes(range(256)) * 40
    assert ok("cat", f"{filled}:/d/b.txt", f"{filled}:/d/c/inner").stdout == b"bee\ninner\n"
    data = os.urandom(5 * MiB + 17)
    f = scratch / "big"
    f.write_bytes(data)
    ok("import", f, f"{pool}:/big")
    assert ok("cat", f"{pool}:/big").stdout == data


# ---------------------------------------------------------------- errors name paths


def test_errors_name_the_path(filled, scratch):
    r = run("cat", f"{filled}:/nonexistent")
    assert r.returncode != 0
    assert "/nonexistent" in err_text(r) and "No such file or directory" in err_text(r)
    r = run("ls", f"{filled}:/d/missing")
    assert r.returncode != 0 and "/d/missing" in err_text(r)
    assert "No such file or directory" in err_text(r)
    r = run("stat", f"{filled}:/nope")
    assert r.returncode != 0 and "/nope" in err_text(r)
    r = run("cat", f"{filled}:/d/c")
    assert r.returncode != 0 and "/d/c" in err_text(r) and "Is a directory" in err_text(r)
    r = run("export", f"{filled}:/gone", scratch / "o")
    assert r.returncode != 0 and "/gone" in err_text(r)
    r = run("import", scratch / "no-such-src", f"{filled}:/x")
    assert r.returncode != 0 and "no-such-src" in err_text(r)
    assert "No such file or directory" in err_text(r)
    blocker = scratch / "plainfile"
    blocker.write_text("x")
    r = run("export", f"{filled}:/d", blocker)
    assert r.returncode != 0 and str(blocker) in err_text(r)
    assert "Not a directory" in err_text(r)
    r = run("import", scratch / "plainfile", f"{filled}:/d/c/inner/deeper")
    assert r.returncode != 0 and "/d/c/inner" in err_text(r)


def test_missing_pool_names_pool(scratch):
    p = scratch / "absent.pool"
    for args in (("info", p), ("ls", f"{p}:/"), ("cat", f"{p}:/x"), ("export", f"{p}:/", scratch / "o")):
        r = run(*args)
        assert r.returncode != 0
        assert str(p) in err_text(r), (args, err_text(r))


def test_import_unreadable_file_reports_permission_denied(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "public").write_text("fine\n")
    secret = src / "secret"
    secret.write_text("hidden\n")
    os.chmod(secret, 0)
    kw = {}
    if IS_ROOT:
        # The destination must belong to the unprivileged user; importing
        # as root keeps the owner of this empty directory.
        own = scratch / "own"
        own.mkdir()
        os.chown(own, 65534, 65534)
        ok("import", own, f"{pool}:/imp")
        # Root reads anything: drop to nobody so the kernel refuses.
        os.chmod(scratch, 0o777)
        os.chmod(src, 0o755)
        os.chmod(pool, 0o666)
        kw["preexec_fn"] = lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534))
        if not _others_can_run(KURA_BIN):
            pytest.skip("the checkout is not searchable by other users (e.g. a 0700 mktemp "
                        "directory), so nobody cannot run the kura binary")
    r = run("import", src, f"{pool}:/imp", **kw)
    assert r.returncode != 0
    assert f"{secret}: Permission denied" in err_text(r), err_text(r)
    assert ok("cat", f"{pool}:/imp/public").stdout == b"fine\n"


def test_special_files_round_trip(pool, scratch):
    """FIFOs, sockets and (as root) device nodes are kept as nodes with
    their attributes, both ways."""
    src = scratch / "src"
    src.mkdir()
    (src / "regular").write_text("r\n")
    os.mkfifo(src / "fifo", 0o640)
    import socket
    s = socket.socket(socket.AF_UNIX)
    names = ["fifo", "regular", "sock"]
    if os.geteuid() == 0:
        os.mknod(src / "chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        names = ["chr"] + names
    try:
        s.bind(str(src / "sock"))
        os.utime(src / "fifo", ns=(1_000_000_007, 2_000_000_009))
        r = ok("import", src, f"{pool}:/sp")
    finally:
        s.close()
    assert "skipp" not in err_text(r)
    assert out_text(ok("ls", f"{pool}:/sp")).split() == names
    out = scratch / "out"
    ok("export", f"{pool}:/sp", out)
    for n in names:
        a, b = os.lstat(src / n), os.lstat(out / n)
        assert (a.st_mode, a.st_rdev, a.st_mtime_ns) == (b.st_mode, b.st_rdev, b.st_mtime_ns), n


def test_no_progress_noise_when_not_a_tty(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    (src / "f").write_bytes(os.urandom(3 * MiB))
    r = ok("import", src, f"{pool}:/q")
    assert r.stderr == b""
    r = ok("export", f"{pool}:/q", scratch / "out")
    assert r.stderr == b""


def test_progress_on_a_terminal(pool, scratch):
    import pty
    src = scratch / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i}").write_bytes(os.urandom(200_000))
    master, slave = pty.openpty()
    try:
        r = run("import", src, f"{pool}:/pr", stderr=slave, stdout=subprocess.PIPE)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:
                break
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert r.returncode == 0
    text = b"".join(chunks).decode(errors="replace")
    assert "20 files" in text, text


# ---------------------------------------------------------------- default pool


def test_default_pool_created_by_import(scratch):
    xdg = scratch / "xdg"
    env = {"XDG_DATA_HOME": str(xdg)}
    src = scratch / "src"
    src.mkdir()
    (src / "hello").write_text("hi\n")
    r = ok("import", src, ":/h", env=env)
    pool = xdg / "kura" / "default.pool"
    assert pool.exists() and str(pool) in err_text(r)
    assert ok("cat", ":/h/hello", env=env).stdout == b"hi\n"
    assert ok("cat", "default:/h/hello", env=env).stdout == b"hi\n"
    assert ok("ls", "default:/h", env=env).stdout == b"hello\n"
    info = parse_info(ok("info", "default", env=env))
    assert int(info["pool size"].split()[0]) == 1 << 30
    ok("fsck", "default", env=env)


def test_default_pool_mkfs_without_size(scratch):
    xdg = scratch / "xdg2"
    env = {"XDG_DATA_HOME": str(xdg)}
    ok("mkfs", env=env)
    pool = xdg / "kura" / "default.pool"
    assert pool.stat().st_size == 1 << 30
    r = run("mkfs", env=env)
    assert r.returncode != 0 and "--force" in err_text(r)


# ---------------------------------------------------------------- corrupt pools


def corrupt_truncated(p):
    os.truncate(p, p.stat().st_size // 2)


def corrupt_garbage_8k(p):
    with open(p, "r+b") as f:
        f.write(random.Random(8).randbytes(8192))


def corrupt_garbage_4k(p):
    with open(p, "r+b") as f:
        f.write(random.Random(4).randbytes(4096))


def corrupt_empty(p):
    os.truncate(p, 0)


def corrupt_zeros(p):
    p.unlink()
    with open(p, "wb") as f:
        f.write(bytes(10 * MiB))


def corrupt_text(p):
    p.unlink()
    p.write_text("this is not a kura pool, just some text\n" * 300_000)


def corrupt_tiny(p):
    p.unlink()
    p.write_bytes(b"KURA")


CORRUPTIONS = {
    "truncated": corrupt_truncated,
    "garbage8k": corrupt_garbage_8k,
    "empty": corrupt_empty,
    "zeros": corrupt_zeros,
    "text": corrupt_text,
    "tiny": corrupt_tiny,
}


@pytest.fixture
def populated(scratch):
    p = scratch / "c.pool"
    ok("mkfs", p, "--size", "64M")
    src = scratch / "src"
    src.mkdir()
    for i in range(10):
        (src / f"f{i}").write_bytes(os.urandom(50_000))
    ok("import", src, f"{p}:/data")
    return p


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_pool_is_refused_cleanly(populated, scratch, kind):
    CORRUPTIONS[kind](populated)
    for args in (
        ("info", populated),
        ("ls", f"{populated}:/data"),
        ("cat", f"{populated}:/data/f1"),
        ("export", f"{populated}:/data", scratch / "o"),
        ("import", scratch / "src", f"{populated}:/again"),
    ):
        r = run(*args, timeout=120)
        assert r.returncode > 0, (args, out_text(r))
        assert str(populated) in err_text(r), (args, err_text(r))
    r = run("fsck", populated, timeout=120)
    assert r.returncode > 0
    assert str(populated) in err_text(r) + out_text(r)
    r = run("fsck", "--repair", populated, timeout=120)
    assert r.returncode > 0


def test_first_superblock_copy_destroyed(populated, scratch):
    """Only the first 4 KiB are garbage: using the second superblock copy is
    acceptable, failing cleanly is too; crashing is not (run() checks)."""
    corrupt_garbage_4k(populated)
    outcomes = {}
    for args in (
        ("info", populated),
        ("ls", f"{populated}:/data"),
        ("cat", f"{populated}:/data/f1"),
        ("fsck", populated),
    ):
        r = run(*args, timeout=120)
        outcomes[args[0]] = r.returncode
        if r.returncode != 0:
            assert err_text(r).strip(), args
    if outcomes["info"] == 0:
        assert outcomes["ls"] == 0
        r = ok("ls", f"{populated}:/data")
        assert len(out_text(r).split()) == 10


def test_import_export_keep_extended_attributes(pool, scratch):
    src = scratch / "xsrc"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_text("data\n")
    try:
        os.setxattr(src / "d" / "f", "user.color", b"blue")
        os.setxattr(src / "d", "user.kind", b"dir")
    except OSError:
        pytest.skip("this file system has no user.* attributes")
    if os.geteuid() == 0:
        os.setxattr(src / "d" / "f", "trusted.t", b"t")
    ok("import", src, f"{pool}:/x")
    out = scratch / "xout"
    ok("export", f"{pool}:/x", out)
    for rel in ("d", "d/f"):
        a, b = src / rel, out / rel
        got = {n: os.getxattr(b, n) for n in os.listxattr(b)}
        want = {n: os.getxattr(a, n) for n in os.listxattr(a)}
        assert got == want, (rel, got, want)
