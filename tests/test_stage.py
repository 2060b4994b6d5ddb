"""`kura stage-in` and `kura stage-out`: import's and export's copies with
worker threads, resumption after an interruption, verification, and
stage-out --watch streaming files out as they settle."""

import os
import signal
import subprocess
import shutil
import time
from pathlib import Path

import pytest

from cli_common import scratch, pool  # noqa: F401 (fixtures)
from cli_common import KURA_BIN, KURA_LIB, MiB, run, ok, err_text, snapshot, assert_same_tree, diff_r, make_tree


def many_files(root, n, size):
    root.mkdir()
    for d in range(n // 100 + 1):
        sub = root / f"d{d:03}"
        sub.mkdir()
        for i in range(min(100, n - d * 100)):
            (sub / f"f{i:03}").write_bytes(os.urandom(size))


@pytest.mark.parametrize("jobs", ["1", "4"])
def test_stage_round_trip_keeps_everything(pool, scratch, jobs):
    src = scratch / "src"
    make_tree(src)
    before = snapshot(src)
    ok("stage-in", "-j", jobs, "--verify", src, f"{pool}:/t")
    out = scratch / "out"
    ok("stage-out", "--jobs", jobs, "--verify", f"{pool}:/t", out)
    after = snapshot(out)
    assert_same_tree(before, after)
    diff_r(src, out)
    assert len(before) > 30
    ok("fsck", pool)


def test_stage_in_again_copies_only_what_changed(pool, scratch):
    src = scratch / "src"
    many_files(src, 300, 1000)
    ok("stage-in", src, f"{pool}:/t")
    untouched = run("stat", f"{pool}:/t/d002/f042", check=0).stdout
    changed = src / "d001" / "f005"
    changed.write_bytes(os.urandom(1000))
    os.utime(changed, ns=(1, 2))
    (src / "d002" / "new").write_bytes(b"new\n")
    os.chmod(src / "d000" / "f007", 0o600)
    ok("stage-in", src, f"{pool}:/t")
    out = scratch / "out"
    ok("export", f"{pool}:/t", out)
    diff_r(src, out)
    assert_same_tree(snapshot(src), snapshot(out))
    # Left alone: the same inode, its change time not moved.
    assert run("stat", f"{pool}:/t/d002/f042", check=0).stdout == untouched


def test_interrupted_stage_out_resumes(pool, scratch):
    src = scratch / "src"
    many_files(src, 400, 64 * 1024)
    ok("import", src, f"{pool}:/t")
    out = scratch / "out"
    # Killed part way, as a job running out of time would be.
    p = subprocess.Popen([KURA_BIN, "stage-out", "-j", "2", f"{pool}:/t", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        done = sum(len(f) for _, _, f in os.walk(out)) if out.exists() else 0
        if done >= 50:
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done_before = sum(len(f) for _, _, f in os.walk(out))
    if done_before >= 400:
        pytest.skip("the stage-out finished before it could be interrupted")
    mtimes = {p: os.stat(p).st_mtime_ns for p in (out.rglob("f*"))}
    ok("stage-out", f"{pool}:/t", out)
    diff_r(src, out)
    assert_same_tree(snapshot(src), snapshot(out))
    # What was complete before the kill was not copied again: its inode and
    # times are the ones the first run made.
    complete = [p for p, t in mtimes.items() if t == os.stat(src / p.relative_to(out)).st_mtime_ns]
    assert complete, "no file was complete when the first run was killed"
    # A resumed run leaves finished files alone, so their ctime predates it.
    resumed_at = time.time_ns()
    ok("stage-out", f"{pool}:/t", out)
    assert all(os.stat(p).st_ctime_ns < resumed_at for p in out.rglob("f*"))


def test_verify_passes_a_faithful_copy_of_a_sparse_file(pool, scratch):
    src = scratch / "src"
    src.mkdir()
    with open(src / "f", "wb") as f:
        f.write(b"a" * MiB)
        f.seek(9 * MiB)
        f.write(b"b")
    ok("stage-in", "--verify", src, f"{pool}:/t")
    ok("stage-out", "--verify", f"{pool}:/t", scratch / "out")
    assert (scratch / "out" / "f").read_bytes() == (src / "f").read_bytes()


def test_stage_out_watch_streams_settled_files(pool, scratch):
    out = scratch / "out"
    mount = "/kura-stage-watch"
    ok("run", "--pool", pool, "--mount", mount, "--", "mkdir", f"{mount}/w")
    w = subprocess.Popen([KURA_BIN, "stage-out", "--watch", "--settle", "0.5", f"{pool}:/w", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ok("run", "--pool", pool, "--mount", mount, "--", "sh", "-c",
           f"echo one > {mount}/w/one; mkdir {mount}/w/sub; echo two > {mount}/w/sub/two")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out / "sub" / "two").exists():
            time.sleep(0.05)
        assert (out / "one").read_text() == "one\n"
        assert (out / "sub" / "two").read_text() == "two\n"
        # A file still being appended to stays behind until it settles.
        ok("run", "--pool", pool, "--mount", mount, "--", "sh", "-c",
           f"for i in 1 2 3 4 5 6 7 8; do echo $i >> {mount}/w/log; sleep 0.1; done")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (out / "log").exists():
            time.sleep(0.05)
        assert (out / "log").read_text() == "".join(f"{i}\n" for i in range(1, 9))
    finally:
        w.send_signal(signal.SIGTERM)
        stdout, stderr = w.communicate(timeout=30)
    assert w.returncode == 0, stderr.decode(errors="replace")
    # The watcher was the last user of the pool: nothing of it stays in
    # /dev/shm (the preloaded programs' lock table and event ring neither).
    st = os.stat(pool)
    suffix = f"-{st.st_dev:x}-{st.st_ino:x}"
    left = [n for n in os.listdir("/dev/shm") if n.startswith("kura-") and n.endswith(suffix)]
    assert not left, left


def test_stage_usage_errors(pool, scratch):
    for args in (["stage-in", "-j", "0", scratch, f"{pool}:/x"],
                 ["stage-in", "--watch", scratch, f"{pool}:/x"],
                 ["stage-out", "--settle", "soon", f"{pool}:/", scratch / "o"],
                 ["stage-out", f"{pool}:/"]):
        r = run(*args)
        assert r.returncode == 2, (args, err_text(r))
        assert f"kura {args[0]}" in err_text(r) or "Try 'kura" in err_text(r)
    r = run("stage-in", scratch / "missing", f"{pool}:/x")
    assert r.returncode == 1 and "missing" in err_text(r) and "No such file" in err_text(r)


def rclone_usable(pool):
    if not shutil.which("rclone"):
        pytest.skip("rclone is not installed")
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("kura mount (FUSE) needs root and /dev/fuse here")
    r = run("mount", pool, "/nonexistent-dir")
    if b"without FUSE" in r.stderr:
        pytest.skip("this kura was built without FUSE")


def test_stage_through_an_rclone_remote(pool, scratch):
    """rclone as the transport to object storage, tried with its local
    backend: out, back in, and again out (which copies nothing)."""
    rclone_usable(pool)
    src = scratch / "src"
    many_files(src, 120, 3000)
    (src / "link").symlink_to("d000/f001")
    ok("import", src, f"{pool}:/t")
    remote = scratch / "remote"
    ok("stage-out", "--rclone", "--verify", "-j", "2", f"{pool}:/t", f":local:{remote}")
    diff_r(src, remote)
    ok("stage-in", "--rclone", f":local:{remote}", f"{pool}:/back")
    out = scratch / "out"
    ok("export", f"{pool}:/back", out)
    diff_r(src, out)
    before = {p: os.stat(p).st_ctime_ns for p in remote.rglob("f*")}
    ok("stage-out", "--rclone", f"{pool}:/t", f":local:{remote}")
    assert {p: os.stat(p).st_ctime_ns for p in remote.rglob("f*")} == before
    assert not any(m for m in Path("/proc/mounts").read_text().splitlines() if "kura-rclone-" in m)
    ok("fsck", pool)


def test_stage_rclone_usage_errors(pool, scratch):
    r = run("stage-out", "--rclone", "--watch", f"{pool}:/", ":local:/tmp/x")
    assert r.returncode == 2 and "--watch does not go with --rclone" in err_text(r)
    r = run("stage-out", "--rclone", f"{pool}:/", str(scratch / "plain-dir"))
    assert r.returncode == 2 and "not an rclone remote" in err_text(r)
