"""Atomic groups as a preloaded program sees them (tests/atomic/groups.c):
kura_atomic.h, F2FS's atomic-write ioctls, stores through shared maps that
join a group, isolation from other processes, abort and close, and
processes killed in the middle of groups, on a memory pool and on a disk
pool in both durability modes; on a file kura does not serve, the header's
fallback.  tests/atomic/gset.c does the same for a group over several
files and names (kura_gbegin … kura_gcommit).  Run through ctest."""
import os
import subprocess
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KURA_BIN = os.environ.get("KURA_BIN", "")
KURA_LIB = os.environ.get("KURA_LIB", "")
KURA_BUILD = os.environ.get("KURA_BUILD", "")

if not (KURA_BIN and os.access(KURA_BIN, os.X_OK) and KURA_LIB):
    pytest.skip("KURA_BIN/KURA_LIB not set (run through ctest)", allow_module_level=True)


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    exe = tmp_path_factory.mktemp("bin") / "groups"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-pthread", "-I", str(ROOT / "include"), "-o", str(exe),
                    str(HERE / "atomic" / "groups.c")], check=True)
    return str(exe)


@pytest.fixture(scope="module")
def gset(tmp_path_factory):
    exe = tmp_path_factory.mktemp("bin") / "gset"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-I", str(ROOT / "include"), "-o", str(exe),
                    str(HERE / "atomic" / "gset.c")], check=True)
    return str(exe)


def pool_path(kind):
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    if kind == "memory":
        return f"/dev/shm/kura-atomic-{tag}.pool"
    base = Path(KURA_BUILD) if KURA_BUILD else Path("/var/tmp")
    return str(base / f"kura-atomic-{tag}.pool")


def run_in_pool(exe, kind, sync, sub):
    """Runs exe on /kura/SUB of a fresh pool; then the pool must be clean
    and hold nothing: killed processes' groups left their shadows as
    orphans, which the next mount that is alone reclaims."""
    pool = pool_path(kind)
    subprocess.run([KURA_BIN, "mkfs", pool, "--size", "256M"], check=True, capture_output=True)
    try:
        env = dict(os.environ, KURA_SYNC=sync)
        env.pop("LD_PRELOAD", None)
        r = subprocess.run([KURA_BIN, "run", "--pool", pool, "--", "bash", "-c",
                            f"mkdir -p /kura/{sub} && exec {exe} /kura/{sub}"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        assert " 0 failed" in r.stdout, r.stdout
        f = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
        subprocess.run([KURA_BIN, "run", "--pool", pool, "--", "rmdir", f"/kura/{sub}"], env=env, check=True)
        info = " ".join(subprocess.run([KURA_BIN, "info", pool], capture_output=True, text=True).stdout.split())
        assert "orphans: 0" in info and "files: 0" in info, info
    finally:
        subprocess.run([KURA_BIN, "gc", pool], capture_output=True)
        os.unlink(pool)


@pytest.mark.parametrize("kind,sync", [("memory", "op"), ("disk", "fsync"), ("disk", "op")])
def test_groups_under_kura(groups, kind, sync):
    run_in_pool(groups, kind, sync, "t")


def test_fallback_without_kura(groups, tmp_path):
    """The same calls on an ordinary file: no group, plain fdatasync, and
    an abort that says it cannot (the header's promise)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([groups, str(tmp_path), "--fallback"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # With kura loaded too, a file outside the prefix falls back the same way.
    pool = pool_path("memory")
    subprocess.run([KURA_BIN, "mkfs", pool, "--size", "64M"], check=True, capture_output=True)
    try:
        r = subprocess.run([KURA_BIN, "run", "--pool", pool, "--", groups, str(tmp_path), "--fallback"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        subprocess.run([KURA_BIN, "gc", pool], capture_output=True)
        os.unlink(pool)


@pytest.mark.parametrize("kind,sync", [("memory", "op"), ("disk", "fsync"), ("disk", "op")])
def test_group_of_files_and_names(gset, kind, sync):
    run_in_pool(gset, kind, sync, "s")


def test_group_of_files_fallback_without_kura(gset, tmp_path):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([gset, str(tmp_path), "--fallback"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout + r.stderr
