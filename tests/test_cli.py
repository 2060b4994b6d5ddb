"""End-to-end tests of the `kura` command-line tool.

The binary comes from $KURA_BIN.  Pools live in a scratch directory under
/dev/shm (tmpfs: fast, and sparse pool files cost nothing).  Every run of the
binary is checked for death by signal: a crash is never an acceptable way
to report a bad pool.  Pools in use (kura run, kura gc, what they leave in
/dev/shm) are test_cli_pool.py; import and export, test_cli_copy.py.
"""

import os
import random
import stat
import subprocess
from pathlib import Path

import pytest

from cli_common import scratch, pool  # noqa: F401 (fixtures)
from cli_common import IS_ROOT, MiB, run, ok, err_text, out_text, set_times, make_tree, pool_with_file


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


@pytest.mark.parametrize("where", ["scratch", "disk"])
def test_mkfs_a_size_the_system_refuses_loses_nothing(scratch, tmp_path, where):
    """An exabyte is a valid size that no file system or address space here
    takes (EFBIG from ext4, ENOMEM for the map on tmpfs): mkfs fails with
    the reason, leaves no file where there was none, and, --force or not,
    an existing pool keeps its files."""
    d = scratch if where == "scratch" else tmp_path
    p = d / "big.pool"
    r = run("mkfs", p, "--size", "1E")
    assert r.returncode == 1 and str(p) in err_text(r), err_text(r)
    assert not p.exists()
    pool_with_file(d, "big", "kept\n")
    r = run("mkfs", p, "--size", "1E", "--force")
    assert r.returncode == 1 and str(p) in err_text(r), err_text(r)
    assert p.stat().st_size == 16 * MiB
    assert ok("cat", f"{p}:/t/f").stdout == b"kept\n"
    ok("fsck", p)


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
