#!/usr/bin/env python3
"""make bench-kv: the kv store of examples/kv (one mapped file, a batch of
puts an atomic group) against LevelDB (Debian's libleveldb-dev, through the
same driver: examples/kv/kvbench.c), db_bench's conventions: 16-byte keys,
100-byte values, random keys.

  fillrandom, readrandom: kv under `kura run` on a memory pool in /dev/shm
      (a commit every KURA_BENCH_KV_BATCH puts, default 10,000, and one at
      the end) against LevelDB on /dev/shm; KURA_BENCH_KV_NUM operations
      (default 1,000,000); readrandom reads what the fill left, in the same
      process, as db_bench does.
  fillsync: kv on a disk pool in the build directory (KURA_SYNC as kura's
      default, fsync) against LevelDB in a directory beside it (the same
      file system); KURA_BENCH_KV_SYNC_NUM puts (default 1,000), each
      durable before the next.

The systems alternate (common.alternate), each figure the median of
KURA_BENCH_RUNS runs (default 3); prints ops/s and kv/LevelDB (higher is
better), and for reference kv on a plain tmpfs file (not atomic there).
Nothing is asserted but that every store found the same keys."""
import os
import re
import shutil
import signal
import subprocess
import sys

from common import BUILD, ROOT, alternate, kura_env, mkfs, summary, KURA, RUNS

NUM = int(os.environ.get("KURA_BENCH_KV_NUM", "1000000"))
SYNC_NUM = int(os.environ.get("KURA_BENCH_KV_SYNC_NUM", "1000"))
BATCH = int(os.environ.get("KURA_BENCH_KV_BATCH", "10000"))
TIMEOUT = int(os.environ.get("KURA_BENCH_KV_TIMEOUT", "900"))
OUT = BUILD / "examples" / "kv"
KVBENCH, LDBBENCH = OUT / "kvbench", OUT / "kvbench-leveldb"
TAG = f"kura-kvbench-{os.getpid()}"
SHM = f"/dev/shm/{TAG}"
DISK = BUILD / TAG
MEM_POOL = f"{SHM}.pool"
DISK_POOL = DISK / "disk.pool"
LINE = re.compile(r"^(\w+)\s*:\s*(\d+) ops/s.*?(?:(\d+) of \d+ found)?\)$", re.M)


def build():
    r = subprocess.run(["make", "-s", "-C", str(ROOT / "examples" / "kv"), f"O={OUT}"], capture_output=True,
                       text=True)
    if r.returncode:
        sys.stderr.write(r.stdout + r.stderr)
        if "leveldb" in r.stderr:
            sys.stderr.write("bench/kv.py: LevelDB is missing: apt-get install -y libleveldb-dev\n")
        sys.exit(1)


def run(argv, env=None):
    """Figures of one kvbench run: {benchmark: ops/s, "found": n}; a run
    that hangs is killed after TIMEOUT seconds (its process group)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise SystemExit(f"bench/kv.py: hung for {TIMEOUT} s, killed: {' '.join(map(str, argv))}\n{out}{err}")
    if p.returncode:
        raise SystemExit(f"bench/kv.py: {' '.join(map(str, argv))} failed ({p.returncode}):\n{out}{err}")
    got = {}
    for name, rate, found in LINE.findall(out):
        got[name] = float(rate)
        if found:
            got["found"] = int(found)
    return got


def kv_memory():
    mkfs(MEM_POOL, "1G")
    try:
        return run([str(KURA), "run", "--pool", MEM_POOL, "--", str(KVBENCH), "--db=/kura/kv",
                    "--benchmarks=fillrandom,readrandom", f"--num={NUM}", f"--batch={BATCH}"], kura_env())
    finally:
        os.unlink(MEM_POOL)


def kv_tmpfs():
    """For reference: the same store on a plain tmpfs file, where batches
    are not atomic (kv_sync is an fdatasync)."""
    try:
        return run([str(KVBENCH), f"--db={SHM}.kv", "--benchmarks=fillrandom,readrandom", f"--num={NUM}",
                    f"--batch={BATCH}"])
    finally:
        if os.path.exists(f"{SHM}.kv"):
            os.unlink(f"{SHM}.kv")


def leveldb_shm():
    try:
        return run([str(LDBBENCH), f"--db={SHM}.ldb", "--benchmarks=fillrandom,readrandom", f"--num={NUM}"])
    finally:
        shutil.rmtree(f"{SHM}.ldb", ignore_errors=True)


# fillsync writes SYNC_NUM keys drawn from NUM, as db_bench does; the kv
# store (its log and index) is sized for what is written.  The disk pool is 4 GiB (sparse) so
# that its journal (1/64 of the pool) does not fill within the run: the
# figure is the commits' cost, not the checkpoints'.
def kv_disk():
    mkfs(DISK_POOL, "4G")
    try:
        return run([str(KURA), "run", "--pool", str(DISK_POOL), "--", str(KVBENCH), "--db=/kura/kv",
                    "--benchmarks=fillsync", f"--num={SYNC_NUM}", f"--range={NUM}", f"--capacity={SYNC_NUM}"],
                   kura_env())
    finally:
        subprocess.run([str(KURA), "gc", str(DISK_POOL)], capture_output=True)
        os.unlink(DISK_POOL)


def leveldb_disk():
    try:
        return run([str(LDBBENCH), f"--db={DISK / 'ldb'}", "--benchmarks=fillsync", f"--num={SYNC_NUM}",
                    f"--range={NUM}"])
    finally:
        shutil.rmtree(DISK / "ldb", ignore_errors=True)


def line(what, k, l, target=None):
    ks, ls = summary(k), summary(l)
    t = f"  (target >= {target}x)" if target else ""
    print(f"  {what:<11} kv {ks[0]:10.0f} ops/s ({ks[1]:.0f}-{ks[2]:.0f})   "
          f"LevelDB {ls[0]:10.0f} ops/s ({ls[1]:.0f}-{ls[2]:.0f})   kv/LevelDB {ks[0] / ls[0]:.2f}x{t}")


def main():
    build()
    DISK.mkdir(parents=True, exist_ok=True)
    try:
        got = alternate([[("kv", kv_memory), ("leveldb", leveldb_shm), ("kv-tmpfs", kv_tmpfs)],
                         [("kv-sync", kv_disk), ("leveldb-sync", leveldb_disk)]], RUNS,
                        progress=lambda r: print(f"run {r + 1} of {RUNS} done", file=sys.stderr))
    finally:
        shutil.rmtree(DISK, ignore_errors=True)
    kv, ldb = got["kv"], got["leveldb"]
    print(f"kv (examples/kv) vs LevelDB, 16-byte keys, 100-byte values, median of {RUNS} (min-max):")
    print(f"memory: kv under kura on a memory pool in /dev/shm (a commit every {BATCH} puts), "
          f"LevelDB on /dev/shm; {NUM} ops")
    line("fillrandom", [g["fillrandom"] for g in kv], [g["fillrandom"] for g in ldb], 2.4)
    line("readrandom", [g["readrandom"] for g in kv], [g["readrandom"] for g in ldb])
    t = got["kv-tmpfs"]
    print("  for reference, kv on a plain tmpfs file (no kura: batches NOT atomic): fillrandom "
          f"{summary([g['fillrandom'] for g in t])[0]:.0f} ops/s, readrandom "
          f"{summary([g['readrandom'] for g in t])[0]:.0f} ops/s")
    print(f"disk: kv on a disk pool in {BUILD} (KURA_SYNC default), LevelDB on the same file system; "
          f"{SYNC_NUM} puts, each durable")
    line("fillsync", [g["fillsync"] for g in got["kv-sync"]], [g["fillsync"] for g in got["leveldb-sync"]], 1.0)
    found = {g["found"] for g in kv + ldb + t}
    if len(found) != 1:
        print(f"MISMATCH: readrandom found {sorted(found)} keys (kv runs, LevelDB runs differ)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
