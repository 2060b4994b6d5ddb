"""What the command-line tests share (test_cli.py, test_cli_pool.py,
test_cli_copy.py): the binary from $KURA_BIN, run and checked for death by
signal, scratch pools under /dev/shm, and trees to copy and compare."""
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


def pool_with_file(directory, name, text, *mkfs_args, size="16M"):
    """A pool directory/NAME.pool of `size` holding /t/f with text."""
    p = directory / f"{name}.pool"
    ok("mkfs", p, "--size", size, *mkfs_args)
    src = directory / f"src-{name}"
    src.mkdir()
    (src / "f").write_text(text)
    ok("import", src, f"{p}:/t")
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
