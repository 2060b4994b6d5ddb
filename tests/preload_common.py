"""What the interposition-layer tests share (test_preload.py,
test_preload_regress.py, test_preload_paths.py, test_maps.py, test_xattr.py):
a pool mounted at a prefix of its own, a tmpfs directory beside it, and
running the same command on both."""
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KURA_BIN = os.environ.get("KURA_BIN", "")
KURA_LIB = os.environ.get("KURA_LIB", "")
KURA_BUILD = os.environ.get("KURA_BUILD", "")

if not (KURA_BIN and os.access(KURA_BIN, os.X_OK) and KURA_LIB and os.path.exists(KURA_LIB)):
    pytest.skip("KURA_BIN/KURA_LIB not set (run through ctest)", allow_module_level=True)
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the call checks", allow_module_level=True)

TAG = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
PREFIX = f"/kura-preload-{TAG}"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pool = f"/dev/shm/kura-preload-{TAG}.pool"
    subprocess.run([KURA_BIN, "mkfs", pool, "--size", "128M"], check=True, capture_output=True)
    tmpfs = Path(f"/dev/shm/kura-preload-{TAG}-tmpfs")
    tmpfs.mkdir()
    build = tmp_path_factory.mktemp("bin")
    calls = build / "calls"
    subprocess.run(["gcc", "-O1", "-o", str(calls), str(HERE / "preload" / "calls.c")], check=True)
    e = dict(os.environ, KURA_POOL=pool, KURA_MOUNT=PREFIX, LD_PRELOAD=KURA_LIB)
    e.pop("KURA_DEBUG", None)
    yield {"pool": pool, "tmpfs": tmpfs, "calls": str(calls), "env": e}
    shutil.rmtree(tmpfs, ignore_errors=True)
    r = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
    st = os.stat(pool)
    # The layer's lock table and event ring for this pool (lock.c and
    # notify.c name them after the pool file).
    for kind in ("locks", "notify"):
        Path(f"/dev/shm/kura-{kind}-{st.st_dev:x}-{st.st_ino:x}").unlink(missing_ok=True)
    os.unlink(pool)
    assert r.returncode == 0, r.stdout + r.stderr


def make_base(env, kind, name):
    """The directory a check runs in, on tmpfs or under the prefix, and the
    environment to run it with."""
    if kind == "tmpfs":
        base = str(env["tmpfs"] / name)
        os.makedirs(base)
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
    else:
        base = f"{PREFIX}/{name}"
        e = env["env"]
        subprocess.run(["mkdir", base], env=e, check=True)
    return base, e


def run_both(env, name, argv_fn, shell=False, cwd=None):
    """argv_fn(base) -> command; returns (tmpfs output, kura output)."""
    outs = []
    for kind in ("tmpfs", "kura"):
        base, e = make_base(env, kind, name)
        r = subprocess.run(argv_fn(base), shell=shell, env=e, capture_output=True, text=True, timeout=120,
                           cwd=cwd or "/")
        outs.append((r.returncode, (r.stdout + r.stderr).replace(base, "BASE")))
    return outs


def run_both_with_host(env, tmp_path, name, script):
    """A bash script on tmpfs and under the prefix, with $B its base directory
    and $H a host directory of its own (outside both); each is replaced in the
    output (BASE, HOST).  Returns [(rc, output) on tmpfs, (rc, output) on kura]."""
    outs = []
    for kind in ("tmpfs", "kura"):
        host = tmp_path / kind
        host.mkdir()
        base, e = make_base(env, kind, name)
        r = subprocess.run(["bash", "-c", f"B={base}\nH={host}\n" + script], env=e, capture_output=True,
                           text=True, timeout=120, cwd="/")
        outs.append((r.returncode, (r.stdout + r.stderr).replace(base, "BASE").replace(str(host), "HOST")))
    return outs


def bash_as_on_tmpfs(env, name, script, expect):
    """script (bash, $B its directory) gives on kura what it gives on tmpfs,
    where it succeeds with expect in its output."""
    (rc0, out0), (rc1, out1) = run_both(env, name, lambda b: ["bash", "-c", f"B={b}\n" + script])
    assert rc0 == 0 and expect in out0, out0
    assert (rc1, out1) == (rc0, out0)
