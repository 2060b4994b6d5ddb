#!/usr/bin/env python3
"""make bench-maps: 4 KiB random loads and stores through a shared map of a
file (bench/mapbench.c), kura on a memory pool in /dev/shm under `kura run`
against tmpfs, alternating the two, median of KURA_BENCH_RUNS runs (default
5).  Prints both and the ratio kura/tmpfs (higher is better; the target is
1.0: a kura map is the pool's own pages).  Nothing here asserts."""
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KURA = ROOT / "build" / "bin" / "kura"
MAPBENCH = ROOT / "build" / "bin" / "mapbench"
RUNS = int(os.environ.get("KURA_BENCH_RUNS", "5"))
MIB = os.environ.get("KURA_BENCH_MIB", "64")
OPS = os.environ.get("KURA_BENCH_OPS", "2000000")
POOL = f"/dev/shm/kura-mapbench-{os.getpid()}.pool"
TMPFS = f"/dev/shm/kura-mapbench-{os.getpid()}.file"


def rate(argv):
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"ops/s: (\d+)", out).group(1))


def main():
    subprocess.run([str(KURA), "mkfs", POOL, "--size", f"{int(MIB) * 2 + 64}M"], check=True, capture_output=True)
    try:
        kura, tmpfs = [], []
        for _ in range(RUNS):
            tmpfs.append(rate([str(MAPBENCH), TMPFS, MIB, OPS]))
            kura.append(rate([str(KURA), "run", "--pool", POOL, "--", str(MAPBENCH), "/kura/m", MIB, OPS]))
        k, t = statistics.median(kura), statistics.median(tmpfs)
        print(f"shared map, 4 KiB random load/store, {MIB} MiB file, {OPS} ops, median of {RUNS}:")
        print(f"  tmpfs {t:12.0f} ops/s  (min {min(tmpfs):.0f}, max {max(tmpfs):.0f})")
        print(f"  kura  {k:12.0f} ops/s  (min {min(kura):.0f}, max {max(kura):.0f})")
        print(f"  kura/tmpfs {k / t:.2f}x (target >= 1.0)")
    finally:
        for p in (POOL, TMPFS):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    sys.exit(main())
