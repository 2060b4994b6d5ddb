"""examples/kv, the key-value store whose batches are kura atomic groups:
its API against a dict model under kura and without it (reopen, growth,
deletes, aborts, the errors it promises), and processes killed at random
moments while they commit batches, after which the store must show exactly
the last batch committed or the one after it, on a memory pool and on a
disk pool in both durability modes.  The store is loaded into Python with
ctypes (this file is also the program the kura runs start).  Run through
ctest."""
import ctypes
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KURA_BIN = os.environ.get("KURA_BIN", "")
KURA_LIB = os.environ.get("KURA_LIB", "")
KURA_BUILD = os.environ.get("KURA_BUILD", "")

EINVAL, ENOENT, ERANGE, ENOSPC, E2BIG, ENOTSUP, EBUSY = 22, 2, 34, 28, 7, 95, 16
KV_ATOMIC, KV_SYNC = 1, 1


class Options(ctypes.Structure):
    _fields_ = [("capacity", ctypes.c_uint64), ("max_batch", ctypes.c_uint32), ("no_create", ctypes.c_int)]


class KV:
    """kv.h through ctypes; every call returns kv's result (0 or -errno)."""

    def __init__(self, lib):
        L = self.lib = ctypes.CDLL(lib)
        p, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
        L.kv_open.argtypes = [cp, ctypes.POINTER(Options), ctypes.POINTER(p)]
        L.kv_close.argtypes = [p]
        L.kv_put.argtypes = [p, cp, sz, cp, sz, ctypes.c_int]
        L.kv_get.argtypes = [p, cp, sz, ctypes.c_void_p, sz, ctypes.POINTER(sz)]
        L.kv_del.argtypes = [p, cp, sz, ctypes.c_int]
        L.kv_sync.argtypes = L.kv_abort.argtypes = L.kv_flags.argtypes = [p]
        L.kv_count.argtypes = L.kv_batches.argtypes = [p]
        L.kv_count.restype = L.kv_batches.restype = ctypes.c_uint64
        self.db = p()

    def open(self, path, capacity=0, max_batch=0):
        self.db = ctypes.c_void_p()
        o = Options(capacity, max_batch, 0)
        return self.lib.kv_open(str(path).encode(), ctypes.byref(o), ctypes.byref(self.db))

    def close(self):
        return self.lib.kv_close(self.db)

    def put(self, k, v, flags=0):
        return self.lib.kv_put(self.db, k, len(k), v, len(v), flags)

    def get(self, k, cap=100):
        buf = ctypes.create_string_buffer(max(cap, 1))
        n = ctypes.c_size_t(0)
        r = self.lib.kv_get(self.db, k, len(k), buf, cap, ctypes.byref(n))
        return r, (buf.raw[:n.value] if r == 0 else n.value)

    def delete(self, k, flags=0):
        return self.lib.kv_del(self.db, k, len(k), flags)

    def sync(self):
        return self.lib.kv_sync(self.db)

    def abort(self):
        return self.lib.kv_abort(self.db)

    def flags(self):
        return self.lib.kv_flags(self.db)

    def count(self):
        return self.lib.kv_count(self.db)

    def batches(self):
        return self.lib.kv_batches(self.db)


# ---- what the kura runs execute (python3 this-file MODE ...) ------------

def child_model(lib, path, seed, ops, atomic, out):
    """Random puts, gets, deletes, syncs, aborts and reopens against a dict;
    dumps the model (as committed: close commits) to out as JSON."""
    kv, rng = KV(lib), random.Random(seed)
    expect_flags = KV_ATOMIC if atomic else 0
    assert kv.open(path, capacity=64, max_batch=300) == expect_flags
    other = KV(lib)
    assert other.open(path) == -EBUSY  # one process (description) at a time
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 21))) for _ in range(1500)]
    model, committed, changes, batches = {}, {}, 0, 0

    def sync():
        nonlocal committed, changes, batches
        assert kv.sync() == 0
        batches += changes > 0
        committed, changes = dict(model), 0

    for i in range(ops):
        op = rng.random()
        k = rng.choice(keys)
        if op < 0.45:
            v = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 101)))
            r = kv.put(k, v)
            if r == -E2BIG:
                assert changes == 300, (i, changes)
            elif r == -ENOSPC:
                assert changes > 0, i  # a batch never begins on a full log
            else:
                assert r == 0 and changes < 300, (i, r, changes)
            if r:
                sync()
                r = kv.put(k, v)
                assert r == 0, (i, r)
            model[k] = v
            changes += 1
        elif op < 0.60:
            r = kv.delete(k)
            if k not in model:
                assert r == -ENOENT, (i, r)
                continue
            if r == -E2BIG:
                assert changes == 300
                sync()
                r = kv.delete(k)
            assert r == 0, (i, r)
            del model[k]
            changes += 1
        elif op < 0.80:
            if k in model and rng.random() < 0.2 and len(model[k]) > 0:
                assert kv.get(k, cap=len(model[k]) - 1) == (-ERANGE, len(model[k]))
            else:
                assert kv.get(k) == ((0, model[k]) if k in model else (-ENOENT, 0)), i
        elif op < 0.88:
            sync()
        elif op < 0.92:
            if atomic:
                assert kv.abort() == 0
                model, changes = dict(committed), 0
            else:
                assert kv.abort() == -ENOTSUP
        elif op < 0.95:
            assert kv.close() == 0
            batches += changes > 0
            committed, changes = dict(model), 0
            assert kv.open(path, max_batch=300) == expect_flags
        else:
            assert kv.put(b"k" * 21, b"v") == -EINVAL
            assert kv.put(b"k", b"v" * 101) == -EINVAL
            assert kv.get(b"k" * 21) == (-EINVAL, 0)
            assert kv.delete(b"k" * 21) == -EINVAL
        if i % 97 == 0:
            assert kv.count() == len(model), (i, kv.count(), len(model))
    for k in keys:
        assert kv.get(k) == ((0, model[k]) if k in model else (-ENOENT, 0))
    assert kv.close() == 0
    batches += changes > 0

    # The log grows between batches: a new store sized for 16 keys (a
    # 256 KiB log) takes 3,000 puts of 100-byte values in batches of up to
    # 300 (each batch begins with room for max_batch records), overwrites
    # and removals included, and reopens with them.
    full = str(path) + ".full"
    assert kv.open(full, capacity=16, max_batch=300) == expect_flags
    for n in range(3000):
        r = kv.put(b"full%d" % (n % 1000), b"%d" % n + b"v" * 96)
        if r == -E2BIG:
            assert kv.sync() == 0
            r = kv.put(b"full%d" % (n % 1000), b"%d" % n + b"v" * 96)
        assert r == 0, (n, r)
    for n in range(0, 1000, 10):
        r = kv.delete(b"full%d" % n)
        if r == -E2BIG:
            assert kv.sync() == 0
            r = kv.delete(b"full%d" % n)
        assert r == 0, (n, r)
    assert kv.count() == 900 and kv.close() == 0
    assert os.path.getsize(full) > 4096 + 256 * 1024  # it grew
    assert kv.open(full) == expect_flags
    assert kv.count() == 900
    assert all(kv.get(b"full%d" % n) == ((-ENOENT, 0) if n % 10 == 0 else (0, b"%d" % (n + 2000) + b"v" * 96))
               for n in range(1000))
    assert kv.close() == 0
    os.unlink(full)

    with open(out, "w") as f:
        json.dump({"model": {k.hex(): v.hex() for k, v in model.items()}, "batches": batches}, f)
    print("ok", ops)
    return 0


def child_check(lib, path, dump):
    """The store at path holds exactly the dumped model (after a new mount)."""
    kv = KV(lib)
    assert kv.open(path) >= 0
    d = json.load(open(dump))
    model = {bytes.fromhex(k): bytes.fromhex(v) for k, v in d["model"].items()}
    assert kv.count() == len(model), (kv.count(), len(model))
    assert kv.batches() == d["batches"], (kv.batches(), d["batches"])
    for k, v in model.items():
        assert kv.get(k) == (0, v), k
    assert kv.close() == 0
    print("ok")
    return 0


# Batch j leaves the store in state(j): NK keys of "generation" j % 3 (so
# every batch deletes the previous batch's keys and inserts new ones, and
# the log grows every few batches), all but every fifth, each with a value
# that names j.
NK = 400


def state(j):
    if j == 0:
        return {}
    return {b"%d.%d" % (k, j % 3): b"%d:%d:" % (j, k) + b"x" * (k % 60)
            for k in range(NK) if (k + j) % 5}


def child_writer(lib, path, max_batches):
    """Checks the store is in state(batches) (prints "state J" or "BAD
    ..."), then commits batches J+1, J+2, ... printing "committed I" after
    each, until killed or max_batches."""
    kv = KV(lib)
    flags = kv.open(path, capacity=NK)
    if flags < 0:
        print("BAD open", flags, flush=True)
        return 1
    j = kv.batches()
    want = state(j)
    bad = []
    if kv.count() != len(want):
        bad.append(f"count {kv.count()} != {len(want)}")
    for g in range(3):
        for k in range(NK):
            key = b"%d.%d" % (k, g)
            r = kv.get(key)
            exp = (0, want[key]) if key in want else (-ENOENT, 0)
            if r != exp and len(bad) < 5:
                bad.append(f"{key!r}: {r} != {exp}")
    print(("BAD state %d: " % j + "; ".join(bad)) if bad else f"state {j} flags {flags}", flush=True)
    if bad:
        return 1
    for i in range(j + 1, j + 1 + max_batches):
        prev, new = state(i - 1), state(i)
        for key in prev:
            if key not in new:
                assert kv.delete(key) == 0
        for key, v in new.items():
            assert kv.put(key, v) == 0
        assert kv.sync() == 0
        print("committed", i, flush=True)
    kv.close()
    return 0


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "model":
        sys.exit(child_model(args[0], args[1], int(args[2]), int(args[3]), args[4] == "1", args[5]))
    if mode == "check":
        sys.exit(child_check(*args))
    if mode == "writer":
        sys.exit(child_writer(args[0], args[1], int(args[2])))
    sys.exit(f"unknown mode {mode}")

# ---- the tests ---------------------------------------------------------

import pytest  # noqa: E402  (the kura runs above need only the standard library)

if not (KURA_BIN and os.access(KURA_BIN, os.X_OK) and KURA_LIB):
    pytest.skip("KURA_BIN/KURA_LIB not set (run through ctest)", allow_module_level=True)


@pytest.fixture(scope="module")
def libkv(tmp_path_factory):
    so = tmp_path_factory.mktemp("kvlib") / "libkv.so"
    subprocess.run(["gcc", "-O1", "-g", "-shared", "-fPIC", "-std=gnu11", "-Wall", "-Wextra", "-Werror",
                    "-I", str(ROOT / "include"), "-o", str(so), str(ROOT / "examples" / "kv" / "kv.c")],
                   check=True)
    return str(so)


def env_for(sync=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("KURA_PERSIST", None)
    env.pop("KURA_SYNC", None)
    if sync:
        env["KURA_SYNC"] = sync
    return env


def pool_path(kind, size):
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    if kind == "memory":
        pool = f"/dev/shm/kura-kv-{tag}.pool"
    else:
        pool = str((Path(KURA_BUILD) if KURA_BUILD else Path("/var/tmp")) / f"kura-kv-{tag}.pool")
    subprocess.run([KURA_BIN, "mkfs", pool, "--size", size], check=True, capture_output=True)
    return pool


def drop_pool(pool):
    subprocess.run([KURA_BIN, "gc", pool], capture_output=True)
    if os.path.exists(pool):
        os.unlink(pool)


def run_child(argv, pool=None, sync=None, timeout=120):
    cmd = [sys.executable, __file__] + argv
    if pool:
        cmd = [KURA_BIN, "run", "--pool", pool, "--"] + cmd
    r = subprocess.run(cmd, env=env_for(sync), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr
    return r


def test_model_under_kura(libkv, tmp_path):
    pool = pool_path("memory", "256M")
    try:
        dump = tmp_path / "model.json"
        run_child(["model", libkv, "/kura/db", "1", "6000", "1", str(dump)], pool)
        # A new mount: what the last close committed.
        run_child(["check", libkv, "/kura/db", str(dump)], pool)
        f = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        drop_pool(pool)


def test_model_without_kura(libkv, tmp_path):
    """An ordinary file: the same API, batches not atomic (kv_open says so,
    kv_abort cannot)."""
    dump = tmp_path / "model.json"
    run_child(["model", libkv, str(tmp_path / "db"), "2", "4000", "0", str(dump)])
    run_child(["check", libkv, str(tmp_path / "db"), str(dump)])


def kill_rounds(libkv, pool, path, rounds, sync=None, max_batches=40, seed=0):
    """Starts a writer (under kura when pool is given) rounds times, kills
    it at a random moment; each writer first checks the state the last one
    left.  Returns (states seen, batches committed, bad lines)."""
    rng = random.Random(seed)
    last = 0  # the highest batch a writer said it committed
    seen, bad = [], []
    for n in range(rounds + 1):
        cmd = [sys.executable, __file__, "writer", libkv, path, str(0 if n == rounds else max_batches)]
        if pool:
            cmd = [KURA_BIN, "run", "--pool", pool, "--"] + cmd
        p = subprocess.Popen(cmd, env=env_for(sync), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        lines = []

        def read():
            for line in p.stdout:
                lines.append(line)

        reader = threading.Thread(target=read)
        reader.start()
        if n < rounds:
            # Kill after a random number of batches and a random moment
            # into the next: in its stores, its commit, or a growth.
            after, t0 = rng.randrange(0, max_batches - 1), time.monotonic()
            while len(lines) < 1 + after and p.poll() is None and time.monotonic() - t0 < 60:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.02))
            # The writer itself: under kura, kura run's child.
            for pid in (descendants(p.pid) if pool else [p.pid]):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            reader.join()
            raise AssertionError(f"writer round {n} hung; output: {''.join(lines)[-500:]}")
        reader.join()
        err = p.stderr.read()
        assert lines, f"round {n}: no output; {err[-2000:]}"
        first = lines[0].split()
        if first[0] != "state":
            bad.append(f"round {n}: {lines[0].strip()}")
            break
        j = int(first[1])
        if not (last <= j <= last + 1):
            bad.append(f"round {n}: state {j}, but the last batch reported committed was {last}")
        seen.append(j)
        last = max([j] + [int(m.group(1)) for m in map(COMMITTED.fullmatch, lines[1:]) if m])
    return seen, last, bad


COMMITTED = re.compile(r"committed (\d+)\n")


def descendants(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                for c in f.read().split():
                    out += [int(c)] + descendants(int(c))
    except OSError:
        pass
    return out


@pytest.fixture(scope="module")
def kvbench(tmp_path_factory):
    exe = tmp_path_factory.mktemp("kvbench") / "kvbench"
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-I", str(ROOT / "include"), "-o", str(exe),
                    str(ROOT / "examples" / "kv" / "kvbench.c"), str(ROOT / "examples" / "kv" / "kv.c"), "-ldl"],
                   check=True)
    return str(exe)


FOUND = re.compile(r"^readrandom .*?(\d+) of (\d+) found", re.M)


@pytest.mark.parametrize("sync", ["fsync", "op"])
def test_commits_across_journal_checkpoints(kvbench, tmp_path, sync):
    """20,000 puts, each its own group commit, on a 64 MiB disk pool whose
    1 MiB journal fills and checkpoints many times, some of them inside a
    commit while the store's pages are mapped in the group (which
    deadlocked until 7508209: the checkpoint's pread waited for the map
    table the commit held).  The store then finds what the same run finds
    on a plain file."""
    args = ["--benchmarks=fillsync,readrandom", "--num=20000", "--range=20000", "--capacity=20000"]
    plain = subprocess.run([kvbench, f"--db={tmp_path / 'plain'}"] + args, env=env_for(), capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    want = FOUND.search(plain.stdout)
    assert want and int(want.group(1)) > 0, plain.stdout
    pool = pool_path("disk", "64M")
    try:
        r = subprocess.run([KURA_BIN, "run", "--pool", pool, "--", kvbench, "--db=/kura/kv"] + args,
                           env=env_for(sync), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "kv, atomic" in r.stdout, r.stdout  # the store ran on kura, not a plain file
        got = FOUND.search(r.stdout)
        assert got and got.groups() == want.groups(), (r.stdout, plain.stdout)
        f = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        drop_pool(pool)


# Each writer's run keeps its journal traffic well below the 64 MiB journal
# of a 4 GiB pool (max_batches; the working copy costs only the blocks
# used), and every run's last unmount checkpoints: the kills land in
# commits, not checkpoints, which test_commits_across_journal_checkpoints
# covers.
@pytest.mark.parametrize("kind,sync,rounds", [("memory", None, 24), ("disk", "fsync", 8), ("disk", "op", 8)])
def test_killed_writers_leave_a_committed_batch(libkv, kind, sync, rounds):
    pool = pool_path(kind, "4G" if kind == "disk" else "512M")
    try:
        seen, last, bad = kill_rounds(libkv, pool, "/kura/db", rounds, sync=sync, seed=rounds,
                                      max_batches=40 if kind == "memory" else 20)
        assert not bad, bad
        assert last > rounds, (seen, last)  # the writers got somewhere
        f = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        drop_pool(pool)


def test_killed_writers_without_kura(libkv, tmp_path):
    """The same on an ordinary file, for comparison: a kill mid-batch can
    leave part of it (stores already in the file), which the check may or
    may not catch; nothing is asserted but that the runs happen."""
    seen, last, bad = kill_rounds(libkv, None, str(tmp_path / "db"), 6, seed=7)
    print(f"without kura: states {seen}, last committed {last}, torn: {bad[:2]}")
