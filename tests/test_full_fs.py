"""A pool on a file system with less room than the pool's size.

A pool file is sparse, and kura stores to it through a map: a store into a
hole that the file system cannot fill is a SIGBUS, which killed the program
in the middle of a write.  What a program must see instead is what the
kernel gives it on a full tmpfs: ENOSPC for the write that does not fit,
everything written before intact, room again once files are removed.  The
small file system is a tmpfs of its own, so these tests need root.
"""

import os
import subprocess

import pytest

from cli_common import scratch  # noqa: F401 (the fixture)
from cli_common import KURA_BIN, IS_ROOT, run, ok, err_text, pool_with_file

TMPFS_MIB = 8

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="needs root to mount a small tmpfs")


@pytest.fixture
def small_fs(scratch):
    d = scratch / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


# Writes 1 MiB files until one fails, reads every whole one back, then
# removes two and writes one more: its lines are what the test checks.
WRITER = r"""
import errno, os, sys
root = sys.argv[1]
def body(i):
    return (b"%07d" % i) * ((1 << 20) // 7) + b"x" * ((1 << 20) % 7)
n = 0
try:
    for n in range(64):
        with open(f"{root}/f{n}", "wb") as f:
            f.write(body(n))
    print("no-error")
except OSError as e:
    print("error", errno.errorcode.get(e.errno, e.errno), n)
for i in range(n):
    with open(f"{root}/f{i}", "rb") as f:
        assert f.read() == body(i), f"f{i} changed"
print("intact", n)
os.unlink(f"{root}/f0")
os.unlink(f"{root}/f1")
if os.path.exists(f"{root}/f{n}"):
    os.unlink(f"{root}/f{n}")
with open(f"{root}/again", "wb") as f:
    f.write(body(99))
print("again")
"""


def test_writes_past_the_room_fail_with_enospc(small_fs):
    pool = small_fs / "p.pool"
    ok("mkfs", pool, "--size", "64M")
    prefix = f"/kura-fullfs-{os.getpid()}"
    r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--mount", prefix, "--",
                        "python3", "-c", WRITER, prefix], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"writer ended with {r.returncode}:\n{r.stdout}\n{r.stderr}"
    lines = r.stdout.split("\n")
    assert lines[0].startswith("error ENOSPC "), r.stdout
    written = int(lines[0].split()[2])
    assert 0 < written < TMPFS_MIB, r.stdout
    assert lines[1:3] == [f"intact {written}", "again"], r.stdout
    ok("fsck", pool)


def test_mkfs_without_room_for_the_metadata_says_so(small_fs):
    """A 1 GiB pool's metadata (its undo log) does not fit in 8 MiB: mkfs
    fails with a message and removes the file it made, leaving no broken
    pool behind."""
    pool = small_fs / "big.pool"
    r = run("mkfs", pool, "--size", "1G")
    assert r.returncode != 0
    assert "no room for the pool's metadata" in err_text(r) and "No space left" in err_text(r), err_text(r)
    assert not pool.exists()
    ok("mkfs", pool, "--size", "16M")
    ok("fsck", pool)


def test_mkfs_force_without_room_keeps_the_old_pool(small_fs):
    """mkfs --force over a pool, for a pool whose metadata the file system
    has no room for: it fails with the reason, and the old pool, emptied
    only once the new one's space is held, keeps its files."""
    pool = pool_with_file(small_fs, "old", "kept\n", size="4M")
    r = run("mkfs", pool, "--size", "1G", "--force")
    assert r.returncode != 0
    assert "no room for the pool's metadata" in err_text(r) and "kept" in err_text(r), err_text(r)
    assert pool.stat().st_size == 4 << 20
    assert ok("cat", f"{pool}:/t/f").stdout == b"kept\n"
    ok("fsck", pool)
