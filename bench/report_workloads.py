"""The workloads of bench/report.py: what each scale runs, and each workload
as a Job, the programs it runs, what they need made first (untimed) and how
their output becomes figures.  report.py runs them on every system and
draws the report; the systems, the machine and the drawing stay there."""
import re
import shlex

from common import BIN, BUILD, fio_figure, fio_options

FSLOAD = BIN / "fsload"
SPEEDTEST1 = BUILD / "bench" / "speedtest1"


# What each scale runs.  secs: the length of a time-bounded fio case or
# personality run; phase: of each metadata phase; db_secs: db_bench's
# --duration for its random writes (whole seconds; 0: db_writes writes).
# A {memory, disk} pair gives each pair of systems its own count: a disk
# pool in op mode syncs every call, so what memory does in a second takes
# it minutes.  Within a pair the work is the same.
SCALES = {
    "full": dict(secs=3, fio_mib=256, seq_mib=512, files=20000, entries=100000, phase=1,
                 speedtest=dict(memory=50, disk=5), db_secs=3, db_writes=dict(memory=200000, disk=3000),
                 db_keys=200000, fileset=1000),
    "quick": dict(secs=0.25, fio_mib=32, seq_mib=64, files=1000, entries=10000, phase=0.1,
                  speedtest=dict(memory=5, disk=1), db_secs=0, db_writes=dict(memory=20000, disk=300),
                  db_keys=20000, fileset=200),
    "tiny": dict(secs=0.1, fio_mib=4, seq_mib=8, files=500, entries=2000, phase=0.05,
                 speedtest=dict(memory=1, disk=1), db_secs=0, db_writes=dict(memory=1000, disk=50),
                 db_keys=2000, fileset=50),
}


class Metric:
    def __init__(self, label, unit, higher=True, pairs=None):
        self.label, self.unit, self.higher = label, unit, higher
        self.pairs = pairs  # what differs between the two pairs' work, if anything


class Job:
    """Programs run on every system in turn: setup(d, pair) makes what they
    need in the directory d (argv, or None), untimed; measure(d, pair) is
    timed by the programs themselves; parse(stdout) gives {label: value}.
    pair: "memory" or "disk", for counts that differ between the pairs."""

    def __init__(self, group, metrics, measure, parse, setup=None, needs=(), name=None):
        self.group, self.name, self.metrics = group, name or group, metrics
        self.measure, self.parse, self.setup, self.needs = measure, parse, setup, needs
        self.slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        self.missing = None  # why it cannot run, when it cannot

def chain(*argvs):
    """One shell command running each argv in turn while they succeed."""
    return ["sh", "-c", " && ".join(shlex.join(a) for a in argvs if a)]


# ---- the workloads ----------------------------------------------------------

def fio_time(secs):
    return f"{round(secs * 1000)}ms" if secs < 1 else f"{secs:g}"


def fio_job(s):
    """The fio cases in one fio run, one after another (stonewall), each
    reported apart (new_group).  Those writing without fsync come last, so
    that no case starts with another's dirty pages to write."""
    size, runtime = f"{s['fio_mib']}m", fio_time(s["secs"])
    cases = []  # (label, unit, direction, options)
    for n in (1, 2):
        cases.append((f"4 KiB random read, {n} job{'s' * (n > 1)}", "IOPS", "read", ["--rw=randread", f"--numjobs={n}"]))
    for n in (1, 2):
        cases.append((f"4 KiB random write + fsync each, {n} job{'s' * (n > 1)}", "IOPS", "write",
                      ["--rw=randwrite", f"--numjobs={n}", "--fsync=1"]))
    cases.append(("4 KiB random rewrite, fsync every 16", "IOPS", "write", ["--rw=randwrite", "--fsync=16"]))
    cases.append(("1 MiB sequential write + fsync", "MiB/s", "write",
                  ["--rw=write", "--bs=1m", f"--size={s['seq_mib']}m", "--filename=s.dat", "--end_fsync=1"]))
    for n in (1, 2):
        cases.append((f"4 KiB random write, {n} job{'s' * (n > 1)}", "IOPS", "write", ["--rw=randwrite", f"--numjobs={n}"]))

    def measure(d, pair):
        argv = ["fio"] + fio_options(d, size)
        for i, (_, _, _, opts) in enumerate(cases):
            timed = [] if "--rw=write" in opts else ["--time_based", f"--runtime={runtime}"]
            argv += [f"--name=c{i}", "--stonewall", "--new_group"] + timed + opts
        return argv

    def parse(out):
        got = {}
        for i, (label, unit, ddir, _) in enumerate(cases):
            v = fio_figure(out, ddir, "bw" if unit == "MiB/s" else "iops", job=f"c{i}")
            got[label] = v / 1024 if unit == "MiB/s" else v
        return got
    # The file fio would lay out itself, in 1 MiB writes (fio's own are of the block size).
    layout = lambda d, pair: ["dd", "if=/dev/zero", f"of={d}/f.dat", "bs=1M", f"count={s['fio_mib']}", "status=none"]
    return Job("fio", [Metric(label, unit) for label, unit, _, _ in cases], measure, parse, setup=layout,
               needs=("fio",))


META = [("create", "create empty file"), ("stat", "stat"), ("rename", "rename"), ("unlink", "unlink"),
        ("mkdir", "mkdir (a tree, fanout 10)"), ("dotdot", "stat \"../f\" beside the files"),
        ("readdir", "readdir (whole listings)")]


def meta_job(s):
    def parse(out):
        got = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) ([\d.]+) \d+$", out, re.M)}
        return {label: got[key] for key, label in META}
    return Job("metadata", [Metric(label, "entries/s" if key == "readdir" else "ops/s") for key, label in META],
               lambda d, pair: [str(FSLOAD), "meta", d, str(s["files"]), str(s["phase"])], parse,
               setup=lambda d, pair: [str(FSLOAD), "meta-setup", d, str(s["files"]), str(s["entries"])],
               needs=(FSLOAD,))


SPEEDTEST = [("delete", "speedtest1, rollback journal"), ("wal", "speedtest1, WAL")]


def speedtest_job(s):
    def parse(out):
        totals = [float(t) for t in re.findall(r"TOTAL\.+\s+([\d.]+)s", out)]
        return {label: t for (_, label), t in zip(SPEEDTEST, totals, strict=True)}
    size = f"--size {s['speedtest']['memory']} (memory), {s['speedtest']['disk']} (disk)"
    return Job("SQLite speedtest1", [Metric(label, "s", higher=False, pairs=size) for _, label in SPEEDTEST],
               lambda d, pair: chain(*([str(SPEEDTEST1), "--size", str(s["speedtest"][pair]), "--journal", j,
                                        f"{d}/{j}.db"] for j, _ in SPEEDTEST)),
               parse, needs=(SPEEDTEST1,))


DB_WRITES = ["fillseq", "fillrandom", "overwrite", "fillsync"]


def db_job(s):
    def db(d, benchmarks, *extra):
        return ["db_bench", f"--db={d}", f"--benchmarks={benchmarks}", f"--num={s['db_keys']}"] + list(extra)

    def measure(d, pair):
        # fillseq takes no --duration: --writes bounds it in any case.
        bound = [f"--writes={s['db_writes'][pair]}"]
        if s["db_secs"]:
            bound += [f"--duration={s['db_secs']}", "--ops_between_duration_checks=100"]
        return chain(db(f"{d}/w", ",".join(DB_WRITES), *bound),
                     db(f"{d}/r", "readrandom", "--use_existing_db=1", f"--reads={s['db_keys']}"))

    def parse(out):
        got = {m.group(1): 1e6 / float(m.group(2))
               for m in re.finditer(r"^(\w+)\s*:\s*([\d.]+) micros/op", out, re.M)}
        return {b: got[b] for b in DB_WRITES + ["readrandom"]}
    writes = f"--writes={s['db_writes']['memory']:,} (memory), {s['db_writes']['disk']:,} (disk)"
    counted = ["fillseq"] if s["db_secs"] else DB_WRITES
    return Job("RocksDB db_bench", [Metric(b, "ops/s", pairs=writes if b in counted else None)
                                    for b in DB_WRITES + ["readrandom"]], measure, parse,
               setup=lambda d, pair: db(f"{d}/r", "fillseq"), needs=("db_bench",))


def persona_jobs(s):
    def job(persona):
        labels = {n: f"{persona}, {n} process{'es' * (n > 1)}" for n in (1, 2)}
        return Job("filebench-like personalities", [Metric(label, "ops/s") for label in labels.values()],
                   lambda d, pair: [str(FSLOAD), "run", d, persona, str(s["fileset"]), "1,2", str(s["secs"])],
                   lambda out: {labels[int(m.group(1))]: float(m.group(2))
                                for m in re.finditer(r"^procs (\d+) ops/s ([\d.]+)", out, re.M)},
                   setup=lambda d, pair: [str(FSLOAD), "fileset", d, persona, str(s["fileset"])],
                   needs=(FSLOAD,), name=persona)
    return [job(p) for p in ("fileserver", "varmail", "webserver")]


def workloads(s):
    return [fio_job(s), meta_job(s), speedtest_job(s), db_job(s)] + persona_jobs(s)


def describe(s):
    """What each group ran, at this scale."""
    dw = s["db_writes"]
    db = (f"--duration={s['db_secs']} (fillseq: --writes={dw['memory']:,} on memory, {dw['disk']:,} on disk)"
          if s["db_secs"] else f"--writes={dw['memory']:,} on memory, {dw['disk']:,} on disk")
    st = s["speedtest"]
    return {
        "fio": f"fio 3 in one run a system, psync, buffered: the random cases on one {s['fio_mib']} MiB file "
               f"(laid out first, untimed) shared by the jobs, {s['secs']} s each; the sequential write is "
               f"{s['seq_mib']} MiB in 1 MiB writes and an fsync at the end (timed); the rewrite overwrites "
               "4 KiB blocks at random with an fsync every 16.",
        "metadata": f"bench/fsload.c: create {s['files']:,} empty files, stat {s['files']:,} (round after round), "
                    f"rename and unlink them, mkdir a tree of {s['files']:,} directories, stat one of the created files "
                    f"as \"../f0000000\" from a directory beside them, and list a directory of "
                    f"{s['entries']:,} entries again and again; each phase stops after {s['phase']} s (the disk "
                    "pool in op mode syncs every call).",
        "SQLite speedtest1": f"speedtest1 from Debian's SQLite source against the system's libsqlite3, "
                             f"--size {st['memory']} on memory and {st['disk']} on disk, journal_mode DELETE or WAL, "
                             "default synchronous (FULL); the figure is its TOTAL time.",
        "RocksDB db_bench": f"db_bench (Debian's rocksdb-tools), 100-byte values, {s['db_keys']:,} keys; "
                            f"fillseq, fillrandom, overwrite and fillsync (a sync each write) in one run, {db}; "
                            f"then readrandom reads {s['db_keys']:,} keys of a database fillseq made first (untimed).",
        "filebench-like personalities": f"bench/fsload.c after filebench's fileserver (128 KiB files), varmail "
                                        f"(16 KiB, fsync) and webserver (16 KiB reads, a shared log) with "
                                        f"{s['fileset']:,} files made first (untimed), {s['secs']} s a run, with "
                                        "one process and then two on the same files; an op is a filebench "
                                        "flowop (open, whole-file read, append, fsync...); two processes work "
                                        "on disjoint halves of the files.",
    }
