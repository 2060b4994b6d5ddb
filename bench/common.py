"""What the benchmark scripts share: where the build is, running a command
under `kura run`, fio's figures, alternated runs and their medians."""
import json
import os
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KURA_BUILD", ROOT / "build"))
BIN = BUILD / "bin"
KURA = BIN / "kura"
# Runs of every case; each figure is their median.
RUNS = int(os.environ.get("KURA_BENCH_RUNS", "3"))


def mkfs(pool, size):
    subprocess.run([str(KURA), "mkfs", str(pool), "--size", size, "--force"], check=True,
                   stdout=subprocess.DEVNULL)


def kura_env(mode=None):
    """The environment for `kura run`: KURA_SYNC=mode (op or fsync) when
    given, and the back end kura chooses for the pool's place."""
    env = dict(os.environ)
    env.pop("KURA_PERSIST", None)
    env.pop("KURA_SYNC", None)
    if mode:
        env["KURA_SYNC"] = mode
    return env


def kura_run(pool, prefix, argv, mode=None, **kw):
    """argv under `kura run`, the pool seen at prefix."""
    return subprocess.run([str(KURA), "run", "--pool", str(pool), "--mount", prefix, "--"] + list(argv),
                          env=kura_env(mode), **kw)


def fio_options(directory, size="64m", bs="4k"):
    """What every fio case here shares: one file in directory, psync, the
    jobs reported as one, JSON out."""
    return [f"--directory={directory}", "--filename=f.dat", f"--size={size}", f"--bs={bs}", "--ioengine=psync",
            "--group_reporting", "--invalidate=0", "--output-format=json"]


def fio_argv(directory, rw, bs="4k", size="64m", jobs=1, runtime=None, extra=()):
    """One fio case on one file shared by the jobs; time based when runtime
    (seconds, or a string with fio's units) is given."""
    argv = ["fio", "--name=b"] + fio_options(directory, size, bs) + [f"--rw={rw}", f"--numjobs={jobs}"]
    if runtime is not None:
        argv += ["--time_based", f"--runtime={runtime}"]
    return argv + list(extra)


def fio_figure(stdout, ddir="write", what="iops", job=None):
    """One figure of fio's JSON report (which may follow other output):
    what is iops or bw (KiB/s) of the read or write direction, of the job
    (group) of that name or the first."""
    jobs = json.loads(stdout[stdout.index("{"):])["jobs"]
    j = next(j for j in jobs if job is None or j["jobname"] == job)
    if j.get("error"):
        raise RuntimeError(f"fio job {j['jobname']}: error {j['error']}")
    return j[ddir][what]


def alternate(groups, runs=RUNS, progress=None):
    """Runs every case `runs` times: each run takes the groups in order and
    a group's cases in turn, starting one further on each run, so that a
    slow moment of the machine falls on all of them and no case always goes
    first.  groups: lists of (name, function); returns {name: [results]}."""
    got = {name: [] for group in groups for name, _ in group}
    for r in range(runs):
        for group in groups:
            k = r % len(group)
            for name, fn in group[k:] + group[:k]:
                got[name].append(fn())
        if progress:
            progress(r)
    return got


def summary(values):
    """(median, min, max)"""
    return statistics.median(values), min(values), max(values)
