"""Pools in use, end to end through `kura`: what mkfs refuses while a
process has the pool mounted, who may mount it and how, what `kura run` and
`kura gc` leave in /dev/shm however the programs ended, and shared objects
someone else planted there.  The rest of the tool (mkfs, info, fsck, ls,
stat, cat, corrupt pools) is test_cli.py; import and export, test_cli_copy.py.
"""

import glob
import os
import signal
import subprocess
import time

import pytest

from cli_common import scratch  # noqa: F401 (the fixture)
from cli_common import KURA_BIN, IS_ROOT, KURA_LIB, _others_can_run, run, ok, err_text, out_text
from cli_common import pool_with_file


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
    assert _shm_left(p) == [], "kura run left the pool's tables behind for a user who may only read it"
    assert ok("cat", f"{p}:/t/f").stdout == b"readable\n"


def test_run_beside_a_holder_still_refuses_a_user_who_cannot_open_the_pool(scratch):
    """Beside a process that has the pool mounted, `kura run` skips the
    read-only mount it makes to check a pool (tools/cli_run.c), yet a user
    who may not open the pool still gets the reason, naming the pool, and
    the command is not run; the owner's command sees what the holder wrote
    and has not written home."""
    if not IS_ROOT:
        pytest.skip("needs root to act as a second user")
    if not _others_can_run(KURA_BIN):
        pytest.skip("the checkout is not searchable by other users")
    p = pool_with_file(scratch, "held", "old\n")
    os.chmod(scratch, 0o755)
    prefix = f"/kura-held-{os.getpid()}"
    holder = subprocess.Popen(
        [KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "sh", "-c",
         f"echo new > {prefix}/t/f && echo held && read _"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "echo", "ran"],
                           capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
        assert r.returncode != 0 and "ran" not in r.stdout, (r.stdout, r.stderr)
        assert str(p) in r.stderr and "Permission denied" in r.stderr, r.stderr
        r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "cat", f"{prefix}/t/f"],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout) == (0, "new\n"), r.stderr
        holder.communicate("\n", timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert holder.returncode == 0
    assert ok("cat", f"{p}:/t/f").stdout == b"new\n"


def test_run_refuses_a_file_someone_holds_a_lock_on_that_is_no_pool(scratch):
    """A mount's lock on byte 0 is how `kura run` tells a pool in use, and
    then it only reads the superblock (kura_probe); any program may lock
    byte 0 of its own file, so that check must still refuse a non-pool."""
    f = scratch / "not-a-pool"
    f.write_bytes(b"just some data\n" * 100_000)
    locker = subprocess.Popen(
        ["python3", "-c", f"import fcntl, sys\nf = open('{f}')\nfcntl.lockf(f, fcntl.LOCK_SH, 1, 0)\n"
         "print('locked', flush=True)\nsys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline() == "locked\n"
        r = run("run", "--pool", f, "--mount", f"/kura-nopool-{os.getpid()}", "--", "echo", "ran")
        assert r.returncode != 0 and b"ran" not in r.stdout, (r.stdout, r.stderr)
        assert str(f) in err_text(r) and "not a kura pool" in err_text(r), err_text(r)
        locker.communicate("\n", timeout=60)
    finally:
        if locker.poll() is None:
            locker.kill()


@pytest.mark.parametrize("prefix", ["/", "//", "/kura/..", "/./x/../", "relative", "/" + "p" * 5000])
def test_run_refuses_a_prefix_it_could_not_serve(scratch, prefix):
    """A prefix that names the root once "." and ".." are taken lexically,
    as the interposition layer takes them, or that it cannot hold, is
    refused: the layer would drop it and the command would write to the
    host with no pool at all."""
    p = scratch / "prefix.pool"
    ok("mkfs", p, "--size", "16M")
    marker = scratch / "ran"
    r = run("run", "--pool", p, "--mount", prefix, "--", "touch", marker)
    assert r.returncode == 2 and "mount prefix" in err_text(r), err_text(r)
    assert not marker.exists()


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


def _dead_loader_dirs():
    """/dev/shm/kura-ld-<pid>-* whose process is gone (src/preload/ldlibs.c)."""
    dead = []
    for d in glob.glob("/dev/shm/kura-ld-*"):
        try:
            os.kill(int(os.path.basename(d).split("-")[2]), 0)
        except ProcessLookupError:
            dead.append(d)
        except (ValueError, IndexError, PermissionError):
            pass
    return dead


def test_run_removes_loader_copies_a_dead_program_left(scratch):
    """A program whose pool libraries were copied for its loader, and which
    died before it could remove the copies (the loader refused it: a symbol
    missing with LD_BIND_NOW), leaves nothing in /dev/shm after kura run."""
    p = scratch / "ld.pool"
    ok("mkfs", p, "--size", "64M")
    prefix = f"/kura-ld-{os.getpid()}"
    script = (f"cd {prefix} && echo 'int foo(void) {{ return 0; }}' > foo.c && "
              "echo 'int foo(void); int main(void) { return foo(); }' > m.c && "
              f"gcc -shared -fPIC -o libfoo.so foo.c && gcc -o m m.c -L. -lfoo -Wl,-rpath,{prefix} && ./m && "
              "echo 'int bar(void) { return 0; }' > foo.c && gcc -shared -fPIC -o libfoo.so foo.c && "
              "LD_BIND_NOW=1 ./m; echo rc=$?")
    r = subprocess.run([KURA_BIN, "run", "--pool", str(p), "--mount", prefix, "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert "rc=127" in r.stdout and "symbol lookup error" in r.stderr, (r.stdout, r.stderr)
    assert _dead_loader_dirs() == []


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
