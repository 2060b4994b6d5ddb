#!/usr/bin/env python3
"""make bench-maps: 4 KiB random loads and stores through a shared map of a
file (bench/mapbench.c), kura on a memory pool in /dev/shm under `kura run`
against tmpfs, alternating the two, median of KURA_BENCH_RUNS runs (default
5).  Prints both and the ratio kura/tmpfs (higher is better; the target is
1.0: a kura map is the pool's own pages).  Nothing here asserts."""
import os
import re
import subprocess
import sys

from common import BIN, alternate, kura_run, mkfs, summary

MAPBENCH = BIN / "mapbench"
RUNS = int(os.environ.get("KURA_BENCH_RUNS", "5"))
MIB = os.environ.get("KURA_BENCH_MIB", "64")
OPS = os.environ.get("KURA_BENCH_OPS", "2000000")
POOL = f"/dev/shm/kura-mapbench-{os.getpid()}.pool"
TMPFS = f"/dev/shm/kura-mapbench-{os.getpid()}.file"


def rate(p):
    return float(re.search(r"ops/s: (\d+)", p.stdout).group(1))


def main():
    mkfs(POOL, f"{int(MIB) * 2 + 64}M")
    out = dict(capture_output=True, text=True, check=True)
    try:
        got = alternate([[
            ("tmpfs", lambda: rate(subprocess.run([str(MAPBENCH), TMPFS, MIB, OPS], **out))),
            ("kura", lambda: rate(kura_run(POOL, "/kura", [str(MAPBENCH), "/kura/m", MIB, OPS], **out))),
        ]], RUNS)
        k, t = summary(got["kura"]), summary(got["tmpfs"])
        print(f"shared map, 4 KiB random load/store, {MIB} MiB file, {OPS} ops, median of {RUNS}:")
        print(f"  tmpfs {t[0]:12.0f} ops/s  (min {t[1]:.0f}, max {t[2]:.0f})")
        print(f"  kura  {k[0]:12.0f} ops/s  (min {k[1]:.0f}, max {k[2]:.0f})")
        print(f"  kura/tmpfs {k[0] / t[0]:.2f}x (target >= 1.0)")
    finally:
        for p in (POOL, TMPFS):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    sys.exit(main())
