"""SQLite's own test suite, veryquick, on tmpfs and under `kura run`: the
same tests must fail on both (scripts/sqlite-testfixture.sh builds and runs
it; `make sqlite-full` runs the whole suite)."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_veryquick_fails_only_where_tmpfs_fails():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if os.environ.get("KURA_BUILD"):
        env["SQLITE_TF_DIR"] = str(Path(os.environ["KURA_BUILD"]) / "sqlite-tf")
    r = subprocess.run([str(ROOT / "scripts" / "sqlite-testfixture.sh"), "veryquick"], env=env,
                       capture_output=True, text=True, timeout=3000)
    if r.returncode == 77:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "errors out of" in r.stdout, r.stdout
