#!/usr/bin/env python3
"""make bench-report / make bench-quick: kura against the kernel with real
programs, in one run, drawn.

Five systems, taken in turn for every workload (the first one further on
each run), each figure the median of KURA_BENCH_RUNS runs (default 3) with
their minimum and maximum:

  tmpfs       a directory in /dev/shm
  kura mem    a memory pool in /dev/shm, under `kura run`
  <disk fs>   a directory on the disk that holds the build (ext4 here)
  kura op     a pool file beside it, KURA_SYNC=op (durable on return)
  kura fsync  the same pool, KURA_SYNC=fsync (durable at fsync, the default)

kura mem is set against tmpfs, the disk pool's two modes against the disk's
file system.  The workloads (bench/report_workloads.py) are fio, metadata
calls and filebench-like personalities (bench/fsload.c), SQLite's
speedtest1 built from Debian's source, and RocksDB's db_bench.  What a
workload needs but first makes (files to read, a directory to list) is
made and removed by separate, untimed processes; on the disk pool those
run in fsync mode.

Writes build/report/report.md (KURA_REPORT_DIR), a table per workload
group, the machine it ran on, and a PNG per group beside it.  A workload
that cannot run is listed with the reason.  Nothing asserts.

  --scale full     (make bench-report) about half an hour
  --scale quick    (make bench-quick) a few minutes
  KURA_BENCH_TINY=1  every workload a second or less (the test's size)

KURA_BENCH_DIR: where the disk pool and the disk's directory go (default
build/bench-report); KURA_BENCH_ONLY: a regular expression choosing
workloads by group or name.
"""
import argparse
import datetime
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import BUILD, KURA, ROOT, RUNS, alternate, kura_run, mkfs, summary
from report_workloads import SCALES, SPEEDTEST1, chain, describe, workloads

OUT = Path(os.environ.get("KURA_REPORT_DIR", BUILD / "report"))
DIR = Path(os.environ.get("KURA_BENCH_DIR", BUILD / "bench-report"))
SHM = Path(f"/dev/shm/kura-report-{os.getpid()}")
PREFIX = f"/kura-report-{os.getpid()}"
ONLY = re.compile(os.environ.get("KURA_BENCH_ONLY", ""))
TIMEOUT = 900  # seconds for any one process: a hang is a failure, not a stall


class Failure:
    def __init__(self, reason):
        self.reason = reason


# ---- the systems ------------------------------------------------------------

class System:
    """A place to run a job: a kernel directory, or a pool under `kura run`."""

    def __init__(self, name, pair, root, pool=None, mode=None):
        self.name, self.pair, self.root, self.pool, self.mode = name, pair, root, pool, mode
        self.kernel = pool is None

    def run(self, argv, untimed=False):
        kw = dict(capture_output=True, text=True, timeout=TIMEOUT)
        if self.kernel:
            return subprocess.run(argv, **kw)
        # What is not timed runs in fsync mode: op mode would sync each call.
        return kura_run(self.pool, PREFIX, argv, "fsync" if untimed and self.mode else self.mode, **kw)


def systems(disk_fs):
    mem_pool, disk_pool = SHM / "mem.pool", DIR / "disk.pool"
    return [
        System("tmpfs", "memory", str(SHM / "tmpfs")),
        System("kura mem", "memory", f"{PREFIX}/mem", mem_pool),
        System(disk_fs, "disk", str(DIR / "kernel")),
        System("kura op", "disk", f"{PREFIX}/op", disk_pool, "op"),
        System("kura fsync", "disk", f"{PREFIX}/fsync", disk_pool, "fsync"),
    ]


def checked(p, what):
    if p.returncode:
        tail = (p.stderr.strip() or p.stdout.strip())[-300:].replace("\n", " ")
        raise RuntimeError(f"{what} exited {p.returncode}: {tail}")
    return p


def once(job, system):
    """One timed run of job on system: {label: value}, or a Failure."""
    d = f"{system.root}/{job.slug}"
    t = time.monotonic()
    try:
        checked(system.run(chain(["mkdir", "-p", d], job.setup and job.setup(d, system.pair), ["sync", "-f", d]),
                           untimed=True), "setup")
        p = checked(system.run(job.measure(d, system.pair)), job.name)
        got = job.parse(p.stdout)
    except Exception as e:  # a failure is a result: the report says what it was
        got = Failure(str(e) or type(e).__name__)
    finally:
        try:
            system.run(["rm", "-rf", d], untimed=True)
        except subprocess.TimeoutExpired:
            pass
    took = time.monotonic() - t
    print(f"    {job.name:42} {system.name:10} {took:6.1f} s{'  FAILED: ' + got.reason if isinstance(got, Failure) else ''}",
          flush=True)
    return got


# ---- what is needed ---------------------------------------------------------

def build_speedtest1():
    """speedtest1 from Debian's SQLite source, linked against the system's
    libsqlite3; None, or why it cannot be had."""
    if SPEEDTEST1.exists():
        return None
    p = subprocess.run([str(ROOT / "scripts" / "sqlite-src.sh"), str(BUILD / "third_party")],
                       capture_output=True, text=True)
    src = p.stdout.strip()
    if not src:
        return ("Debian's SQLite source could not be had (scripts/sqlite-src.sh: "
                f"{p.stderr.strip() or 'nothing said'})")
    SPEEDTEST1.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["cc", "-O2", "-o", str(SPEEDTEST1), f"{src}/test/speedtest1.c", "-lsqlite3"],
                       capture_output=True, text=True)
    if p.returncode:
        return f"speedtest1.c did not build against the system's libsqlite3 (libsqlite3-dev): {p.stderr.strip()[-300:]}"
    return None


def missing(need, speedtest_reason):
    if need == SPEEDTEST1:
        return speedtest_reason
    if isinstance(need, Path):
        return None if need.exists() else f"{need} is not built (make)"
    if shutil.which(need):
        return None
    package = {"db_bench": "rocksdb-tools"}.get(need, need)
    return f"{need} is not installed (Debian package {package}; scripts/deps.sh installs it)"


def tool_versions():
    def first(argv, pattern):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            m = re.search(pattern, p.stdout + p.stderr)
            return m.group(1) if m else None
        except OSError:
            return None
    return [v for v in (
        first(["fio", "--version"], r"(fio-[\w.]+)"),
        first([str(SPEEDTEST1), "--size", "1", "--sqlonly", ":memory:"], r"(SQLite [\d.]+)"),
        first(["dpkg-query", "-W", "-f", "rocksdb-tools ${Version}", "rocksdb-tools"], r"(rocksdb-tools \S+)"),
    ) if v]


# ---- the machine ------------------------------------------------------------

def out_of(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return ""


def machine(disk_dir):
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    cores = len(re.findall(r"^processor\s*:", cpuinfo, re.M))
    mem = int(re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M).group(1))
    mount = (out_of(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", str(disk_dir)]).splitlines() or [""])[0].split()
    source, fstype = mount if len(mount) == 2 else ("?", "disk fs")
    dev = source
    parent = out_of(["lsblk", "-no", "PKNAME", source]).splitlines()
    if parent and parent[0]:
        dev = "/dev/" + parent[0]
    disk = out_of(["lsblk", "-dno", "NAME,SIZE,ROTA,MODEL", dev]).split(None, 3)
    if len(disk) >= 3:
        desc = f"{disk[0]}, {disk[1]}, {'rotational' if disk[2] == '1' else 'non-rotational'} per the kernel"
        desc += f", model {disk[3]}" if len(disk) > 3 else ""
    else:
        desc = dev
    shm = out_of(["df", "-h", "--output=size", "/dev/shm"]).splitlines()[-1:] or ["?"]
    return {
        "CPU": model.group(1) if model else "?",
        "cores": str(cores),
        "memory": f"{mem / 2**20:.1f} GiB",
        "kernel": Path("/proc/sys/kernel/osrelease").read_text().strip(),
        "disk": f"{source} ({fstype}) holding {disk_dir}: {desc}",
        "/dev/shm": f"tmpfs, {shm[0].strip()}",
    }, fstype


# ---- the report -------------------------------------------------------------

def fmt(v):
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def times(r):
    """A ratio as the report writes it: two decimals, or two digits when small."""
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def ratio(kura, kernel, higher):
    """kura's speed over the kernel's: > 1, kura is faster."""
    if kura is None or kernel is None or kura <= 0 or kernel <= 0:
        return None
    return kura / kernel if higher else kernel / kura


def figures(results, job, system, label):
    """(median, min, max) of label over the runs that gave it, or None."""
    values = [r[label] for r in results[(job.name, system.name)] if not isinstance(r, Failure)]
    return summary(values) if values else None


def rows_of(group_jobs, results, syss):
    """(metric, {system: figures or None}) a metric, and the notes that say
    why figures are missing: a line a job and reason."""
    rows, notes = [], []
    for job in group_jobs:
        if job.missing:
            notes.append(f"- {job.name}: not run: {job.missing}")
        else:
            failed = {}  # reason: where
            for s in syss:
                runs = results[(job.name, s.name)]
                for reason in sorted({r.reason for r in runs if isinstance(r, Failure)}):
                    n = sum(isinstance(r, Failure) and r.reason == reason for r in runs)
                    failed.setdefault(reason, []).append(f"{s.name} ({n} of {len(runs)} runs)")
            notes += [f"- {job.name}: failed on {', '.join(where)}: {reason}" for reason, where in failed.items()]
        rows += [(m, {s.name: None if job.missing else figures(results, job, s, m.label) for s in syss})
                 for m in job.metrics]
    return rows, notes


def cell(st):
    if st is None:
        return "—"
    med, lo, hi = st
    return f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})"


def table(rows, notes, syss):
    kern = {p: next(s.name for s in syss if s.pair == p and s.kernel) for p in ("memory", "disk")}
    head, cols = ["workload", "unit"], []
    for s in syss:
        head.append(s.name)
        cols.append(("value", s))
        if not s.kernel:
            head.append(f"{s.name} / {kern[s.pair]}")
            cols.append(("ratio", s))
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, stats in rows:
        cells = [m.label, m.unit + ("" if m.higher else " (lower is better)")]
        for what, s in cols:
            if what == "value":
                cells.append(cell(stats[s.name]))
            else:
                k, b = stats[s.name], stats[kern[s.pair]]
                r = ratio(k and k[0], b and b[0], m.higher)
                cells.append(f"**{times(r)}**" if r is not None else "— (see below)")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out + ([""] + notes if notes else []))


def plot(path, title, rows, syss, runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"tmpfs": "#b0b0b0", "kura mem": "#1f77b4", "kura op": "#ff7f0e", "kura fsync": "#2ca02c"}
    kern = {p: next(s.name for s in syss if s.pair == p and s.kernel) for p in ("memory", "disk")}
    n = len(rows)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.9 * nrows + 0.9), squeeze=False)
    xs = [0, 1, 2.5, 3.5, 4.5]  # a gap between the memory pair and the disk trio
    for ax, (m, stats) in zip(axes.flat, rows):
        for x, s in zip(xs, syss):
            st = stats[s.name]
            colour = colours.get(s.name, "#505050")
            if st is None:
                ax.text(x, 0.02, "not run" if all(v is None for v in stats.values()) else "failed",
                        transform=ax.get_xaxis_transform(), ha="center", rotation=90, fontsize=8)
                continue
            med, lo, hi = st
            ax.bar(x, med, width=0.8, color=colour, label=s.name,
                   yerr=[[med - lo], [hi - med]], capsize=3, ecolor="black")
            if not s.kernel:
                base = stats[kern[s.pair]]
                r = ratio(med, base and base[0], m.higher)
                if r is not None:
                    ax.annotate(times(r), (x, hi), textcoords="offset points", xytext=(0, 3),
                                ha="center", fontsize=8, fontweight="bold")
        ax.set_title(m.label, fontsize=9)
        if m.pairs:  # the two pairs did different amounts of work: say so under the bars
            ax.set_xlabel(m.pairs, fontsize=8)
        ax.set_ylabel(m.unit + ("" if m.higher else " (lower is better)"), fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels([s.name for s in syss], rotation=30, ha="right", fontsize=8)
        lows = [stats[s.name][1] for s in syss if stats[s.name]]
        highs = [stats[s.name][2] for s in syss if stats[s.name]]
        if lows and min(lows) > 0:
            # Log, for a disk syncing each call sits beside memory; the bars
            # start a decade below the lowest, so their lengths mean something,
            # and the top leaves room for the ratios.
            ax.set_yscale("log")
            bottom = math.floor(math.log10(min(lows))) - 1
            top = math.log10(max(highs))
            ax.set_ylim(10 ** bottom, 10 ** (top + 0.12 * (top - bottom)))
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_xlim(-0.7, 5.2)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours.get(s.name, "#505050")) for s in syss]
    fig.legend(handles, [s.name for s in syss], loc="upper center", ncol=len(syss), fontsize=9,
               bbox_to_anchor=(0.5, 1 - 0.22 / (3.9 * nrows + 0.9)))
    fig.suptitle(f"{title}: median of {runs} runs, bars min–max, log scale; "
                 f"× = kura / kernel (higher: kura faster)", fontsize=10, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / (3.9 * nrows + 0.9)))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(rec, plot_error):
    """report.md and the PNGs from a record of runs (results.json); the
    report's text."""
    scale, runs = rec["scale"], rec["runs"]
    jobs = [j for j in workloads(SCALES[scale]) if j.name in rec["jobs"]]
    for j in jobs:
        j.missing = rec["jobs"][j.name]
    syss = systems(rec["fstype"])
    results = {(j.name, sy.name): [Failure(r["failed"]) if "failed" in r else r
                                   for r in rec["results"].get(f"{j.name}|{sy.name}", [])]
               for j in jobs for sy in syss}
    groups = list(dict.fromkeys(j.group for j in jobs))
    desc = describe(SCALES[scale])
    kern_disk = syss[2].name
    lines = [
        "# kura against the kernel",
        "",
        f"`{'make bench-quick' if scale == 'quick' else 'make bench-report' if scale == 'full' else 'bench/report.py'}`"
        f" (scale {scale}), {rec['date']}, commit {rec['commit']}, {rec['minutes']:.1f} minutes.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
    ] + [f"| {k} | {v} |" for k, v in rec["machine"].items()] + [
        f"| tools | {', '.join(rec['tools']) or '?'} |",
        "",
        "## Systems",
        "",
        "- **tmpfs**: a directory in /dev/shm.",
        "- **kura mem**: a pool in /dev/shm (memory back end), the programs under `kura run`.",
        f"- **{kern_disk}**: a directory on the disk, beside the pool ({rec['dir']}).",
        "- **kura op**: a pool file on that disk (file back end), `KURA_SYNC=op`: every call durable on return.",
        "- **kura fsync**: the same pool, `KURA_SYNC=fsync` (the default): durable at fsync, as the kernel's.",
        "",
        f"Every cell is the median of {runs} runs, the systems taken in turn for each workload, with the "
        "fastest and slowest run in brackets.  The ratio is kura's speed over the kernel's on the same medium "
        f"(kura mem over tmpfs, the disk pool over {kern_disk}; for times, the kernel's time over kura's): "
        "above 1, kura is faster.  Programs report their own timings, so `kura run`'s start (mounting) "
        "and end (writing a disk pool's working copy home) are not counted; a kernel file system's "
        "write-back after the program ends is not either.",
    ]
    if plot_error:
        lines += ["", f"**No plots:** {plot_error}"]
    for g in groups:
        gjobs = [j for j in jobs if j.group == g]
        rows, notes = rows_of(gjobs, results, syss)
        png = re.sub(r"[^a-z0-9]+", "-", g.lower()).strip("-") + ".png"
        if not plot_error:
            plot(OUT / png, g, rows, syss, runs)
        lines += ["", f"## {g}", "", desc[g], ""]
        if not plot_error:
            lines += [f"![{g}]({png})", ""]
        lines.append(table(rows, notes, syss))
    (OUT / "report.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def plotting():
    """None when matplotlib can be had, or why not."""
    if importlib.util.find_spec("matplotlib"):
        return None
    return ("matplotlib is not installed for this Python (Debian package python3-matplotlib; "
            "scripts/deps.sh installs it)")


def mem_pool_size():
    """The memory pool's size.  tmpfs may fill all of /dev/shm, and the
    webserver personality appends to its log as fast as the system runs:
    kura's 1.3M ops/s wrote 1.9 GB in the 3 s with one process, and a 2 GiB
    pool ran out once the second process joined.  Half of /dev/shm's free
    space, from 2 to 16 GiB: a pool in memory takes pages only as it fills."""
    st = os.statvfs(SHM)
    half = st.f_bavail * st.f_frsize // 2
    return str(max(2 << 30, min(16 << 30, half)))


def measure(scale):
    """Every workload on every system, alternated: the record render() takes."""
    s = SCALES[scale]
    t0 = time.monotonic()
    speedtest_reason = build_speedtest1()
    jobs = [j for j in workloads(s) if ONLY.search(j.group) or ONLY.search(j.name)]
    for j in jobs:
        j.missing = next((r for r in (missing(n, speedtest_reason) for n in j.needs) if r), None)
    shutil.rmtree(DIR, ignore_errors=True)
    (DIR / "kernel").mkdir(parents=True)
    (SHM / "tmpfs").mkdir(parents=True)
    info, fstype = machine(DIR)
    syss = systems(fstype)
    mkfs(SHM / "mem.pool", mem_pool_size())
    mkfs(DIR / "disk.pool", "4G")
    print(f"bench-report: scale {scale}, {RUNS} runs; disk pool and {fstype} directory in {DIR}, "
          f"memory pool and tmpfs directory in {SHM}")
    for j in jobs:
        if j.missing:
            print(f"    {j.name}: not run: {j.missing}")
    groups = [[(f"{j.name}|{sy.name}", lambda j=j, sy=sy: once(j, sy)) for sy in syss]
              for j in jobs if not j.missing]
    try:
        results = alternate(groups, RUNS, progress=lambda r: print(f"  run {r + 1}/{RUNS} done", flush=True))
    finally:
        for sy in syss:
            if sy.pool:
                sy.run(["true"])  # lets kura run tidy the pool's shared state
        shutil.rmtree(SHM, ignore_errors=True)
        shutil.rmtree(DIR, ignore_errors=True)
    return {
        "scale": scale, "runs": RUNS, "fstype": fstype, "dir": str(DIR), "machine": info, "tools": tool_versions(),
        "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "commit": out_of(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "?",
        "minutes": (time.monotonic() - t0) / 60,
        "jobs": {j.name: j.missing for j in jobs},
        "results": {k: [{"failed": r.reason} if isinstance(r, Failure) else r for r in v] for k, v in results.items()},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=SCALES, default="full")
    ap.add_argument("--replot", action="store_true", help="only write the report again from its results.json")
    args = ap.parse_args()
    # Debian's matplotlib lives in the system's Python; another python3 (a
    # pyenv shim, say) hands over to it.
    if plotting() and Path("/usr/bin/python3").exists() and sys.executable != "/usr/bin/python3" and \
            subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True).returncode == 0:
        os.execv("/usr/bin/python3", ["/usr/bin/python3", __file__] + sys.argv[1:])
    if args.replot:
        rec = json.loads((OUT / "results.json").read_text())
    else:
        if not KURA.exists():
            sys.exit("bench-report: build first (make)")
        if os.path.exists(PREFIX):
            sys.exit(f"bench-report: {PREFIX} exists in the kernel's namespace")
        rec = measure("tiny" if os.environ.get("KURA_BENCH_TINY") else args.scale)
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)
        (OUT / "results.json").write_text(json.dumps(rec, indent=1) + "\n")
    for png in OUT.glob("*.png"):
        png.unlink()
    text = render(rec, plotting())
    print()
    print(text)
    print(f"\nbench-report: {OUT / 'report.md'}")


if __name__ == "__main__":
    main()
