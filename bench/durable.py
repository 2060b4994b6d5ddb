#!/usr/bin/env python3
"""make bench-durable: kura on a disk against the kernel file system of the
same disk, in one run, alternating the systems, medians of several runs.

The pool lives in KURA_BENCH_DIR (default build/bench-durable, on the disk
that holds the checkout); the kernel's side is a directory beside it.  Each
figure is the median of KURA_BENCH_RUNS runs (default 3) of every case, the
cases taken in turn within each run so that a slow moment of the machine
falls on all of them.  Ratios are kura over kernel, higher is better, with
the issue's target beside each; nothing here asserts (benchmarks measure,
tests check).

  device      fio 4 KiB randwrite, O_DIRECT|O_SYNC: what the disk does durably
  ext4 O_SYNC fio 4 KiB randwrite, O_SYNC (the promise of KURA_SYNC=op)
  ext4        fio 4 KiB randwrite with fsync after each write, and without
  kura op     fio under `kura run`, KURA_SYNC=op, fsync after each write
  kura fsync  fio under `kura run`, KURA_SYNC=fsync, with and without fsync
  sqlite3     1,000 single-insert transactions (journal_mode=DELETE,
              synchronous=FULL), and a 200k-row table with an index
  metadata    create/stat/unlink of empty files, kura's memory back end
              (bench/metabench) against tmpfs

KURA_BENCH_ONLY (a regular expression) picks cases by name, "metadata"
the last one: KURA_BENCH_ONLY='2 jobs' make bench-durable.

The pool stays mounted through the run, as the kernel's file system is: a
holder process keeps it (see held_pool), so each case's `kura run` joins
the working copy instead of loading the pool into it and checkpointing it
at exit, which a lone `kura run` does and which no ext4 case pays.  What a
first mount costs is measured apart ("first mount").
"""
import re
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, BUILD, KURA, RUNS, alternate, fio_argv, fio_figure, kura_env, kura_run, mkfs

METABENCH = BIN / "metabench"
DIR = Path(os.environ.get("KURA_BENCH_DIR", BUILD / "bench-durable"))
SECS = int(os.environ.get("KURA_BENCH_SECONDS", "4"))
# A regular expression: only the cases (and ratios) whose names it finds.
ONLY = re.compile(os.environ.get("KURA_BENCH_ONLY", ""))
PREFIX = f"/kura-bench-{os.getpid()}"
POOL = DIR / "bench.pool"
HOST = DIR / "host"


def run(mode, argv, **kw):
    """argv under `kura run` in KURA_SYNC=mode, or for the kernel (mode None)."""
    return kura_run(POOL, PREFIX, argv, mode, **kw) if mode else subprocess.run(argv, **kw)


def fio(where, mode, jobs, extra):
    """IOPS of 4 KiB random writes on a 64 MiB file; mode None: the kernel."""
    directory = str(HOST) if mode is None else PREFIX
    p = run(mode, fio_argv(directory, "randwrite", jobs=jobs, runtime=SECS, extra=extra),
            capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"fio ({where}) failed: {p.stderr.strip()[:300]}")
    return fio_figure(p.stdout)


INSERTS = "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS t(x);\n" + \
    "".join(f"INSERT INTO t VALUES({i});\n" for i in range(1000))
BUILD_200K = """PRAGMA journal_mode=DELETE;
DROP TABLE IF EXISTS kv;
CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 200000)
  INSERT INTO kv SELECT i, printf('value-%08d', (i * 7919) % 200003), i % 1000 FROM c;
CREATE INDEX kv_n ON kv(n);"""


def sqlite_ms(mode, name, script):
    """Milliseconds for sqlite3 to run script on a fresh database."""
    directory = str(HOST) if mode is None else PREFIX
    db = f"{directory}/{name}.db"
    run(mode, ["rm", "-f", db, db + "-journal"], check=True)
    t = time.monotonic()
    p = run(mode, ["sqlite3", db], input=script, capture_output=True, text=True)
    ms = (time.monotonic() - t) * 1000
    if p.returncode:
        raise RuntimeError(f"sqlite3 failed: {p.stderr.strip()[:300]}")
    return ms


class held_pool:
    """Keeps the pool mounted while the block runs: a shell under `kura run`
    whose working directory is in the pool, waiting on its stdin."""

    def __enter__(self):
        self.p = subprocess.Popen([str(KURA), "run", "--pool", str(POOL), "--mount", PREFIX, "--", "sh", "-c",
                                   f"cd {PREFIX} && echo held && read _"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=kura_env("fsync"))
        if self.p.stdout.readline().strip() != "held":
            self.p.kill()
            raise RuntimeError("bench-durable: could not hold the pool mounted")
        return self

    def __exit__(self, *exc):
        self.p.stdin.close()
        self.p.wait()


def first_mount_ms():
    """Milliseconds for `kura run` of a program touching the pool when no
    other process has it mounted: the working copy is loaded then (all the
    pool's data) and checkpointed at exit."""
    t = time.monotonic()
    run("fsync", ["ls", PREFIX], check=True, stdout=subprocess.DEVNULL)
    return (time.monotonic() - t) * 1000


def metadata():
    """Cycles/s of create+stat+unlink: (tmpfs, kura memory back end), each
    the best of three repetitions in which the two take turns (metabench's
    way: kura's side lasts 25 ms against tmpfs's 250, and one repetition
    of each, one after the other, let a slow spell of the VM fall on one
    side only: ratios of 6.0 to 12.3 in consecutive runs)."""
    pool = f"/dev/shm/kura-bench-durable-{os.getpid()}.pool"
    p = subprocess.run([str(METABENCH), "--pool", pool, "--files", "20000", "--ops", "20000", "--reps", "3"],
                       capture_output=True, text=True)
    Path(pool).unlink(missing_ok=True)
    for line in p.stdout.splitlines():
        if line.startswith("create+stat+unlink"):
            f = line.split()
            return float(f[-3]), float(f[-2])
    raise RuntimeError(f"metabench gave no figures: {p.stdout[-300:]} {p.stderr[-300:]}")


# name: (function returning the figure, higher is better)
CASES = {
    "device (O_DIRECT|O_SYNC)": (lambda: fio("device", None, 1, ["--direct=1", "--sync=1"]), True),
    "ext4 O_SYNC, 1 job": (lambda: fio("ext4", None, 1, ["--sync=1"]), True),
    "kura op, 1 job": (lambda: fio("kura", "op", 1, ["--fsync=1"]), True),
    "ext4 O_SYNC, 2 jobs": (lambda: fio("ext4", None, 2, ["--sync=1"]), True),
    "kura op, 2 jobs": (lambda: fio("kura", "op", 2, ["--fsync=1"]), True),
    "ext4 fsync each": (lambda: fio("ext4", None, 1, ["--fsync=1"]), True),
    "kura fsync each": (lambda: fio("kura", "fsync", 1, ["--fsync=1"]), True),
    "ext4 no fsync": (lambda: fio("ext4", None, 1, []), True),
    "kura fsync, no fsync": (lambda: fio("kura", "fsync", 1, []), True),
    "ext4 sqlite 1k tx (ms)": (lambda: sqlite_ms(None, "ins", INSERTS), False),
    "kura fsync sqlite 1k tx (ms)": (lambda: sqlite_ms("fsync", "ins", INSERTS), False),
    "kura op sqlite 1k tx (ms)": (lambda: sqlite_ms("op", "ins", INSERTS), False),
    "ext4 sqlite 200k build (ms)": (lambda: sqlite_ms(None, "build", BUILD_200K), False),
    "kura fsync sqlite 200k build (ms)": (lambda: sqlite_ms("fsync", "build", BUILD_200K), False),
    "kura op sqlite 200k build (ms)": (lambda: sqlite_ms("op", "build", BUILD_200K), False),
}

# (label, kura case, kernel case, target ratio)
RATIOS = [
    ("op, fsync each write, 1 job / ext4 O_SYNC", "kura op, 1 job", "ext4 O_SYNC, 1 job", 1.0),
    ("op, 1 job / device limit", "kura op, 1 job", "device (O_DIRECT|O_SYNC)", 0.8),
    ("op, 2 jobs / ext4 O_SYNC 2 jobs", "kura op, 2 jobs", "ext4 O_SYNC, 2 jobs", 1.5),
    ("fsync mode, fsync each / ext4 fsync each", "kura fsync each", "ext4 fsync each", 1.2),
    ("fsync mode, no fsync / ext4 no fsync", "kura fsync, no fsync", "ext4 no fsync", 3.0),
    ("fsync mode, sqlite 1k transactions", "kura fsync sqlite 1k tx (ms)", "ext4 sqlite 1k tx (ms)", 1.5),
    ("op mode, sqlite 1k transactions", "kura op sqlite 1k tx (ms)", "ext4 sqlite 1k tx (ms)", None),
    ("fsync mode, sqlite 200k-row build", "kura fsync sqlite 200k build (ms)", "ext4 sqlite 200k build (ms)", 1.0),
    ("op mode, sqlite 200k-row build", "kura op sqlite 200k build (ms)", "ext4 sqlite 200k build (ms)", None),
]


def main():
    for tool in ("fio", "sqlite3"):
        if not shutil.which(tool):
            sys.exit(f"bench-durable: {tool} is not installed (scripts/deps.sh installs it)")
    if not KURA.exists() or not METABENCH.exists():
        sys.exit("bench-durable: build first (make)")
    if os.path.exists(PREFIX):
        sys.exit(f"bench-durable: {PREFIX} exists in the kernel's namespace")
    shutil.rmtree(DIR, ignore_errors=True)
    HOST.mkdir(parents=True)
    mkfs(POOL, "1G")
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(DIR)], capture_output=True, text=True).stdout.strip()
    dev = subprocess.run(["df", "--output=source", str(DIR)], capture_output=True, text=True).stdout.split()[-1]
    print(f"bench-durable: pool and kernel directory in {DIR} ({fs} on {dev}); {RUNS} runs of {SECS} s each, "
          f"cases alternated")
    cases = [(name, fn) for name, (fn, _) in CASES.items() if ONLY.search(name)]
    with_meta = bool(ONLY.search("metadata"))
    groups = [g for g in (cases, [("metadata", metadata)] if with_meta else []) if g]
    try:
        with held_pool():
            got = alternate(groups, progress=lambda r: print(f"  run {r + 1}/{RUNS} done", flush=True))
        if ONLY.search("first mount"):
            got["first mount (ms)"] = [first_mount_ms() for _ in range(RUNS)]
    finally:
        run("op", ["true"])
        shutil.rmtree(DIR, ignore_errors=True)
    meta = got.pop("metadata", [])
    med = {name: statistics.median(v) for name, v in got.items()}
    print(f"\n{'case':40} {'median':>10} {'min':>10} {'max':>10}")
    for name, v in got.items():
        print(f"{name:40} {med[name]:10.0f} {min(v):10.0f} {max(v):10.0f}")
    print(f"\n{'ratio (kura / kernel, higher is better)':52} {'ratio':>7} {'target':>7}")
    for label, k, e, target in RATIOS:
        if k not in med or e not in med:
            continue
        hi = CASES[k][1]
        ratio = med[k] / med[e] if hi else med[e] / med[k]
        mark = "" if target is None else ("  met" if ratio >= target else "  NOT met")
        print(f"{label:52} {ratio:7.2f} {target if target else '':>7}{mark}")
    if not meta:
        return
    tm = statistics.median(m[0] for m in meta)
    km = statistics.median(m[1] for m in meta)
    r = km / tm
    print(f"{'memory back end create+stat+unlink / tmpfs':52} {r:7.2f} {10.0:>7}{'  met' if r >= 10 else '  NOT met'}"
          f"   ({km:.0f} vs {tm:.0f} cycles/s)")


if __name__ == "__main__":
    main()
