"""Shared maps of kura files through the interposition layer (src/preload/map.c):
coherence with tmpfs, across processes, on memory and disk pools; real
programs that map (SQLite WAL with mmap_size, LMDB, RocksDB, Python);
pinning, ENOMEM, kill -9 and msync durability.  Run through ctest."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import HERE, KURA_BIN, KURA_BUILD, KURA_LIB, TAG, bash_as_on_tmpfs, make_base, run_both


def test_mmap(env):
    (_, out0), (_, out1) = run_both(env, "mmap", lambda b: [env["calls"], "mmap", b])
    assert out0 == "mmap mapped\n"
    assert out1 == out0


PY_MMAP = r"""
import mmap, os, sys, subprocess
p = sys.argv[1] + "/m"
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, 3 * 4096)
m = mmap.mmap(fd, 0)
m[0:5] = b"hello"
# another process reads what the map stored, with read()
print(subprocess.run(["head", "-c", "5", p], capture_output=True).stdout)
# and stores through its own map, which this one sees
subprocess.run([sys.executable, "-c",
    "import mmap,os,sys; f=os.open(sys.argv[1], os.O_RDWR); n=mmap.mmap(f, 0); n[4096:4099]=b'abc'; n.flush()", p])
print(m[4096:4099], os.pread(fd, 3, 4096))
m.resize(5 * 4096)
m[5 * 4096 - 1] = 0x7a
print(os.fstat(fd).st_size, os.pread(fd, 1, 5 * 4096 - 1))
m.close()
os.unlink(p)
"""


def test_python_mmap_across_processes(env, tmp_path):
    prog = tmp_path / "pymmap.py"
    prog.write_text(PY_MMAP)
    (rc0, out0), (rc1, out1) = run_both(env, "pymmap", lambda b: ["python3", str(prog), b])
    assert rc0 == 0 and "b'abc' b'abc'" in out0, out0
    assert (rc1, out1) == (rc0, out0)


SQLITE_WAL = r"""
cd "$B"
sqlite3 db 'pragma journal_mode=wal; pragma mmap_size=268435456; create table t(x); insert into t values(0);'
(echo 'pragma busy_timeout=10000; pragma mmap_size=268435456;'; seq 1 300 | sed 's/.*/insert into t values(&);/') | sqlite3 db &
(echo 'pragma busy_timeout=10000; pragma mmap_size=268435456;'; seq 1 300 | sed 's/.*/insert into t values(-&);/') | sqlite3 db &
for i in $(seq 20); do sqlite3 db 'pragma busy_timeout=10000; pragma mmap_size=268435456; select count(*) >= 1 from t;'; done | sort | uniq -c
wait
sqlite3 db 'pragma mmap_size=268435456; select count(*), sum(x), sum(abs(x)) from t; pragma integrity_check;'
"""


@pytest.mark.skipif(not shutil.which("sqlite3"), reason="sqlite3 is not installed")
def test_sqlite_wal_with_mmap_two_writers(env):
    bash_as_on_tmpfs(env, "sqlitewal", SQLITE_WAL, "601|0|90300")


@pytest.mark.parametrize("sync", ["op", "fsync"])
def test_shared_maps_on_a_disk_pool(env, tmp_path, sync):
    """The same program as test_small_programs[shared_maps], on the file
    back end (a working copy and a journal) in both durability modes."""
    exe = tmp_path / "shared_maps"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "preload" / "shared_maps.c")], check=True)
    base, _ = make_base(env, "tmpfs", f"maps-disk-{sync}")
    ref = subprocess.run([str(exe), base], capture_output=True, text=True, timeout=60)
    pool = Path(KURA_BUILD or tmp_path) / f"maps-{TAG}-{sync}.pool"
    subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "64M", "--force"], check=True, capture_output=True)
    try:
        e = dict(os.environ, KURA_SYNC=sync)
        e.pop("LD_PRELOAD", None)
        r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--", "bash", "-c", f"mkdir /kura/m && {exe} /kura/m"],
                           env=e, capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout.replace("/kura/m", base)) == (ref.returncode, ref.stdout), r.stderr
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        pool.unlink()


def crash_after(tmp_path, name, sync, prog):
    """Runs prog (Python, preloaded, the pool at /kura) on a new disk pool in
    KURA_SYNC=sync mode; prog kills itself, then the machine "crashes" (its
    shared memory, the working copy, is gone).  Returns /f as the next
    mount finds it, once fsck has found the pool whole."""
    pool = Path(KURA_BUILD or tmp_path) / f"{name}-{sync}-{TAG}.pool"
    subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "64M", "--force"], check=True, capture_output=True)
    try:
        # Not under `kura run`, which would write the working copy home
        # once its command died.
        e = dict(os.environ, KURA_SYNC=sync, LD_PRELOAD=KURA_LIB, KURA_POOL=str(pool), KURA_MOUNT="/kura")
        r = subprocess.run(["python3", "-c", prog], env=e, capture_output=True, text=True, timeout=60)
        assert r.returncode == -9, r.stdout + r.stderr
        st = pool.stat()
        for leftover in Path("/dev/shm").glob(f"kura-*-{st.st_dev:x}-{st.st_ino:x}"):
            leftover.unlink()  # what a crash of the machine takes
        c = subprocess.run([KURA_BIN, "cat", f"{pool}:/f"], capture_output=True, timeout=60)
        assert c.returncode == 0, c.stderr
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
        return c.stdout
    finally:
        pool.unlink()


def test_msync_makes_map_stores_durable_on_a_disk_pool(tmp_path):
    """A process stores through a map of a file on a disk pool, msyncs,
    and dies; the machine crashes.  The next mount replays the journal: the
    synced stores are there."""
    prog = ("import mmap, os\n"
            "fd = os.open('/kura/f', os.O_RDWR | os.O_CREAT, 0o644)\n"
            "os.ftruncate(fd, 3 * 4096)\n"
            "m = mmap.mmap(fd, 0)\n"
            "m[4096:4104] = b'durable!'\n"
            "m.flush()\n"
            "m[0:4] = b'lost'\n"
            "os.kill(os.getpid(), 9)\n")
    f = crash_after(tmp_path, "msync", "fsync", prog)
    assert f[4096:4104] == b"durable!", f[4090:4110]
    assert f[0:4] == b"\0" * 4, f[0:4]  # never synced: the crash took it


@pytest.mark.parametrize("sync", ["op", "fsync"])
def test_fsync_after_munmap_makes_map_stores_durable(tmp_path, sync):
    """As on Linux, stores of a map that munmap ended are the file's and a
    later fsync of it makes them durable: the machine crashes after the
    fsync, and the next mount finds them."""
    prog = ("import mmap, os\n"
            "fd = os.open('/kura/f', os.O_RDWR | os.O_CREAT, 0o644)\n"
            "os.ftruncate(fd, 3 * 4096)\n"
            "m = mmap.mmap(fd, 0)\n"
            "m[4096:4104] = b'unmapped'\n"
            "m.close()\n"
            "os.fsync(fd)\n"
            "os.kill(os.getpid(), 9)\n")
    f = crash_after(tmp_path, "munmap", sync, prog)
    assert f[4096:4104] == b"unmapped", f[4090:4110]


MAP_SPACE = r"""
import mmap, os, sys
b = sys.argv[1]
free = lambda: os.statvfs(b).f_bfree
def cycle():
    before = free()
    fd = os.open(b + "/s", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x" * (256 * 4096))
    m = mmap.mmap(fd, 0)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # its map, inherited, is not the truncating process's
        os.read(r, 1)
        os._exit(0 if m[4096 * 100] == ord("x") else 1)
    os.ftruncate(fd, 0)   # the maps' blocks must not be reused while they exist
    held = before - free()
    os.ftruncate(fd, 4096)
    os.pwrite(fd, b"y" * 4096 * 64, 4096)  # new blocks, not the mapped ones
    os.write(w, b"!")
    print("held", held >= 256, "other map keeps its bytes", os.waitpid(child, 0)[1] == 0)
    m.close()
    os.close(fd)
    os.unlink(b + "/s")
    return free()
# The first round may leave an inode block for later files; the second
# must give back all it took.
first = cycle()
print("given back", cycle() == first)
"""


def test_mapped_blocks_pinned_then_given_back(env, tmp_path):
    prog = tmp_path / "space.py"
    prog.write_text(MAP_SPACE)
    base, e = make_base(env, "kura", "mapspace")
    r = subprocess.run(["python3", str(prog), base], env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == "held True other map keeps its bytes True\n" * 2 + "given back True\n", r.stdout + r.stderr
    f = subprocess.run([KURA_BIN, "fsck", env["pool"]], capture_output=True, text=True)
    assert f.returncode == 0, f.stdout + f.stderr


def test_shared_map_of_a_sparse_file_beyond_the_pool(tmp_path):
    """A sparse file larger than the pool's free space maps, as on Linux:
    its holes get blocks when first touched, not at mmap (none is taken
    then), and a store the full pool cannot take raises SIGBUS, as on a
    full tmpfs.  Stores that fit are the file's; removing the file gives
    the space back, and nothing else is lost."""
    pool = Path(f"/dev/shm/kura-mapfull-{TAG}.pool")
    subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "16M"], check=True, capture_output=True)
    prog = ("import mmap, os\n"
            "fd = os.open('/kura/big', os.O_RDWR | os.O_CREAT, 0o644)\n"
            "os.ftruncate(fd, 64 << 20)\n"
            "m = mmap.mmap(fd, 0)\n"
            "print('mapped', os.fstat(fd).st_blocks)\n"
            "m[8192:8197] = b'store'\n"
            "print(os.pread(fd, 5, 8192), m[0], m[(64 << 20) - 1])\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    for i in range(0, 64 << 20, 4096):\n"
            "        m[i] = 1\n"
            "    os._exit(0)\n"
            "print('filling every page:', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
            "print(os.pread(fd, 5, 8192))\n"
            "m.close()\n"
            "os.unlink('/kura/big')\n"
            "small = os.open('/kura/small', os.O_RDWR | os.O_CREAT, 0o644)\n"
            "os.write(small, b'still works')\n"
            "print(os.pread(small, 11, 0))\n")
    try:
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--", "python3", "-c", prog], env=e,
                           capture_output=True, text=True, timeout=120)
        assert r.stdout == ("mapped 0\nb'store' 0 0\nfilling every page: -7\nb'\\x01tore'\n"
                            "b'still works'\n"), r.stdout + r.stderr
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        pool.unlink()


def small_pool_run(name, size, argv, timeout=300):
    """argv under kura run on a pool of its own (/kura), then fsck."""
    pool = Path(f"/dev/shm/kura-{name}-{TAG}.pool")
    subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", size], check=True, capture_output=True)
    try:
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--", *argv], env=e, capture_output=True,
                           text=True, timeout=timeout)
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
        return r
    finally:
        pool.unlink()


FSX = shutil.which("fsx") or os.path.expanduser("~/.cargo/bin/fsx")


def test_fsx_with_maps_in_a_small_pool(tmp_path):
    """fsx maps the file for its mapped reads and never unmaps them; its
    truncations must not keep the blocks they cut off for those maps once
    nothing can show them (in a 32 MiB pool, 20,000 operations ran out of
    space after some thousands when they did)."""
    if not os.access(FSX, os.X_OK):
        pytest.skip("no fsx (cargo install fsx)")
    r = small_pool_run("fsxmaps", "32M", [FSX, "-N", "20000", "-S", "7", "-P", str(tmp_path), "/kura/f"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


TRUNC_UNDER_ANOTHERS_MAP = r"""
import mmap, os, sys
fd = os.open("/kura/f", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"A" * (64 * 4096))
mine = mmap.mmap(fd, 0)              # this process maps the file too
ready, go, said = os.pipe(), os.pipe(), os.pipe()
child = os.fork()
if child == 0:
    theirs = mmap.mmap(fd, 64 * 4096)
    os.write(ready[1], b"x")
    os.read(go[0], 1)
    os.write(said[1], theirs[0:1])   # a SIGBUS would end the child here
    os._exit(0)
os.read(ready[0], 1)
os.ftruncate(fd, 0)                  # cut off while the child maps it
os.ftruncate(fd, 64 * 4096)          # and grown again by this process
other = os.open("/kura/fill", os.O_RDWR | os.O_CREAT, 0o644)
try:                                 # every free block taken by another file
    while True:
        os.write(other, b"Z" * 65536)
except OSError:
    pass
os.write(go[1], b"x")
os.close(said[1])
saw = os.read(said[0], 1)
os.waitpid(child, 0)
# Kept for the child, its page still shows what was cut off, never the
# other file's bytes (the layer lets kept blocks go only when the
# truncating process holds every map of the file).
print("child saw", saw)
"""


def test_truncation_keeps_blocks_another_process_maps(tmp_path):
    prog = tmp_path / "t.py"
    prog.write_text(TRUNC_UNDER_ANOTHERS_MAP)
    r = small_pool_run("truncmap", "8M", ["python3", str(prog)], timeout=120)
    assert r.stdout == "child saw b'A'\n", r.stdout + r.stderr


MAPS_CUT_STEP_BY_STEP = r"""
import mmap, os
def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
fd = os.open("/kura/f", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"A" * (8 * 4096))
kept = [mmap.mmap(fd, 8 * 4096) for _ in range(500)]
before = mappings()
for pages in range(7, -1, -1):       # each truncation cuts a page off every map
    os.ftruncate(fd, pages * 4096)
print(mappings() - before)
"""


def test_maps_cut_by_truncations_do_not_multiply_mappings(tmp_path):
    """Pages a truncation puts past the end of 500 maps are mappings of
    their own (SIGBUS there needs them); cut a page at a time, each map's
    pieces must still merge, or a program keeping maps of a file it shrinks
    runs into vm.max_map_count (fsx did, 3,000 mappings per 20,000 steps
    more than on tmpfs).  Each map was one mapping and may become two."""
    prog = tmp_path / "cut.py"
    prog.write_text(MAPS_CUT_STEP_BY_STEP)
    r = small_pool_run("cutmaps", "16M", ["python3", str(prog)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(r.stdout) <= 500, f"{r.stdout.strip()} more mappings after the truncations"


def test_kill_while_mapped(env, tmp_path):
    prog = tmp_path / "killed.py"
    prog.write_text("import mmap, os, sys\n"
                    "fd = os.open(sys.argv[1] + '/k', os.O_RDWR | os.O_CREAT, 0o644)\n"
                    "os.ftruncate(fd, 1 << 20)\n"
                    "m = mmap.mmap(fd, 0)\n"
                    "os.unlink(sys.argv[1] + '/k')\n"
                    "m[:6] = b'killed'\n"
                    "os.kill(os.getpid(), 9)\n")
    base, e = make_base(env, "kura", "killmapped")
    r = subprocess.run(["python3", str(prog), base], env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == -9, r.stderr
    ls = subprocess.run(["ls", "-A", base], env=e, capture_output=True, text=True)
    assert ls.stdout == "", ls.stdout
    f = subprocess.run([KURA_BIN, "fsck", env["pool"]], capture_output=True, text=True)
    assert f.returncode == 0, f.stdout + f.stderr


LMDB = r"""
cd "$B"
mkdir db
seq 1 3000 | awk 'BEGIN{print "VERSION=3\nformat=print\ntype=btree\nHEADER=END"} {print " key" $1; print " value" $1} END{print "DATA=END"}' > dump
mdb_load -f dump db
mdb_stat db | grep -i entries
mdb_dump -p db | md5sum
mdb_dump -p db | grep -c value
# mdb_copy writes the database out of its map with write()
mkdir db2 db3
mdb_copy db db2 && mdb_dump -p db2 | md5sum
mdb_copy -c db db3 && mdb_dump -p db3 | md5sum
"""


@pytest.mark.skipif(not shutil.which("mdb_load"), reason="lmdb-utils is not installed")
def test_lmdb(env):
    bash_as_on_tmpfs(env, "lmdb", LMDB, "3000")


DB_BENCH = r"""
db_bench --db="$B/rdb" --benchmarks=fillseq,overwrite,readrandom,readseq --num=20000 --mmap_read=1 \
  --compression_type=none --seed=7 --threads=1 2>&1 | grep -E '^readrandom|rror' | sed 's/:.*(/: (/'
"""


@pytest.mark.skipif(not shutil.which("db_bench"), reason="rocksdb-tools is not installed")
def test_rocksdb_db_bench_with_mmap_reads(env):
    bash_as_on_tmpfs(env, "dbbench", DB_BENCH, "(20000 of 20000 found)")
