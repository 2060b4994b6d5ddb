"""`kura import` and `kura export`: round trips of generated and real trees,
times, special files, attributes, and their failures."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cli_common import scratch, pool  # noqa: F401 (fixtures)
from cli_common import (KURA_BIN, REPO, IS_ROOT, MiB, _others_can_run, run, ok, err_text, out_text, snapshot,
    assert_same_tree, diff_r, round_trip, set_times, make_tree)


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


def test_export_of_a_disk_pool_leaves_its_journal_alone(scratch):
    """After `kura run` a disk pool's log region holds the file back end's
    journal.  A read-only mount (export, ls, cat, and the probe of every
    `kura run`) replays it into its private view of the pool and must not
    then rewrite the whole region there: that copied each of its pages on
    write, 64 MiB of memory and time for a 4 GiB pool, at every command."""
    base = Path(os.environ.get("KURA_BUILD") or "/var/tmp")
    pool = base / f"kura-export-journal-{os.getpid()}.pool"
    ok("mkfs", pool, "--size", "4G", "--force")
    try:
        ok("run", "--pool", pool, "--", "sh", "-c", "mkdir /kura/d && echo hello > /kura/d/f")
        p = subprocess.Popen([KURA_BIN, "export", f"{pool}:/d", str(scratch / "out")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        err = p.stderr.read()
        p.stderr.close()
        _, status, usage = os.wait4(p.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, err
        assert (scratch / "out" / "f").read_text() == "hello\n"
        # Page faults, not the peak size: a child's peak counts the memory
        # of the forked test process.  The log is 16,384 pages.
        assert usage.ru_minflt < 4096, f"export of a 4 GiB disk pool faulted {usage.ru_minflt} pages"
    finally:
        run("gc", pool)
        pool.unlink()
