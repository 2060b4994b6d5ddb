"""SQLite's batch-atomic commit on kura.  SQLite built with
SQLITE_ENABLE_BATCH_ATOMIC_WRITE asks the file system for F2FS's atomic
writes (F2FS_IOC_GET_FEATURES); kura says yes (src/preload/atomic.c), and
SQLite then commits a rollback-journal transaction that fits its page cache
as one atomic group, with no journal file at all.

scripts/sqlite-batch-atomic.sh builds tests/programs/sqlite_batch.c against
SQLite's amalgamation (Debian's source, scripts/sqlite-src.sh) with and
without the option; the program's VFS shim counts the journals SQLite opens,
the batch file controls it sends and the device characteristics it saw.
Checked on a memory pool (/dev/shm) and on a pool file on the disk (file
back end, KURA_SYNC as by default), beside tmpfs, where SQLite finds no
batch-atomic support and journals every transaction."""
import os
import random
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KURA_BIN = os.environ.get("KURA_BIN") or str(ROOT / "build" / "bin" / "kura")
KURA_LIB = os.environ.get("KURA_LIB") or str(ROOT / "build" / "lib" / "libkura.so")
BUILD = Path(os.environ.get("KURA_BUILD") or ROOT / "build")

if not (os.access(KURA_BIN, os.X_OK) and os.path.exists(KURA_LIB)):
    pytest.skip(f"{KURA_BIN} or {KURA_LIB} is not built", allow_module_level=True)

TAG = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
PREFIX = f"/kura-sqlbatch-{TAG}"


def clean_env(**extra):
    e = dict(os.environ)
    for k in ("LD_PRELOAD", "KURA_POOL", "KURA_MOUNT", "KURA_SYNC", "KURA_PERSIST", "KURA_DEBUG"):
        e.pop(k, None)
    e.update(extra)
    return e


@pytest.fixture(scope="module")
def prog():
    """The driver, built with and without SQLITE_ENABLE_BATCH_ATOMIC_WRITE."""
    env = clean_env()
    if os.environ.get("KURA_BUILD"):
        env["SQLITE_BATCH_DIR"] = str(BUILD / "sqlite-batch")
    r = subprocess.run([str(ROOT / "scripts" / "sqlite-batch-atomic.sh"), "build"], env=env,
                       capture_output=True, text=True, timeout=1200)
    if r.returncode == 77:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    d = Path(r.stdout.strip().splitlines()[-1])
    return {"batch": str(d / "sqlite_batch-batch"), "plain": str(d / "sqlite_batch-plain")}


def shm_leftovers(pool):
    """What kura keeps of a pool in /dev/shm: the engine's lock table
    (kura-DEV-INO, src/lock.c), the layer's (kura-locks-DEV-INO) and event
    ring (kura-notify-DEV-INO) and, for a pool file on a disk, the working
    copy (kura-copy-DEV-INO, src/journal.c)."""
    st = os.stat(pool)
    suffix = f"{st.st_dev:x}-{st.st_ino:x}"
    shm = Path("/dev/shm")
    return list(shm.glob(f"kura-{suffix}")) + list(shm.glob(f"kura-*-{suffix}"))


class Pool:
    def __init__(self, kind, size="256M"):
        self.kind = kind
        if kind == "memory":
            self.path = Path(f"/dev/shm/kura-sqlbatch-{TAG}-{kind}.pool")
        else:  # a pool file on the disk: the file back end
            (BUILD / "scratch").mkdir(parents=True, exist_ok=True)
            self.path = BUILD / "scratch" / f"sqlbatch-{TAG}-{kind}.pool"
        subprocess.run([KURA_BIN, "mkfs", str(self.path), "--size", size, "--force"], check=True,
                       capture_output=True)
        self.env = clean_env(LD_PRELOAD=KURA_LIB, KURA_POOL=str(self.path), KURA_MOUNT=PREFIX)

    def run(self, *argv, timeout=120):
        return subprocess.run([str(a) for a in argv], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd="/")

    def crash_machine(self):
        """What a crash of the machine takes: everything in shared memory
        (for a disk pool, its working copy with what no sync carried)."""
        for p in shm_leftovers(self.path):
            p.unlink()

    def close(self):
        """Writes a disk pool home, checks the pool, removes it."""
        try:
            subprocess.run([KURA_BIN, "gc", str(self.path)], capture_output=True, timeout=120)
            f = subprocess.run([KURA_BIN, "fsck", str(self.path)], capture_output=True, text=True, timeout=300)
            assert f.returncode == 0, f.stdout + f.stderr
        finally:
            for p in shm_leftovers(self.path):
                p.unlink(missing_ok=True)
            self.path.unlink()


@pytest.fixture(params=["memory", "file"])
def pool(request):
    p = Pool(request.param)
    yield p
    p.close()


@pytest.fixture
def tmpfs_dir():
    d = Path(f"/dev/shm/kura-sqlbatch-{TAG}-tmpfs")
    d.mkdir()
    yield d
    subprocess.run(["rm", "-rf", str(d)], check=True)


def kv(r):
    """The driver's key=value lines; asserts it succeeded."""
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


# ------------------------------------------------------------------ commits


def test_batch_commit_writes_no_journal(prog, pool):
    """200 one-row transactions (journal_mode=DELETE, synchronous=FULL):
    SQLite sees SQLITE_IOCAP_BATCH_ATOMIC on kura and commits each as one
    batch (START/COMMIT_ATOMIC_WRITE), opening no journal; a new process
    then finds every row and an intact database."""
    db = f"{PREFIX}/batch.db"
    r = kv(pool.run(prog["batch"], "insert", db, 200))
    assert r["compiled_batch_atomic"] == "1"
    assert r["batch_atomic"] == "1", r
    assert (r["journal_opens"], r["begin_atomic"], r["commit_atomic"], r["rollback_atomic"]) == \
        ("0", "200", "200", "0"), r
    assert r["rows"] == "200"
    v = kv(pool.run(prog["batch"], "verify", db))
    assert (v["integrity"], v["rows"]) == ("ok", "200"), v
    # The build without the option on the same pool: a journal per commit.
    db = f"{PREFIX}/plain.db"
    r = kv(pool.run(prog["plain"], "insert", db, 200))
    assert (r["compiled_batch_atomic"], r["batch_atomic"], r["journal_opens"], r["begin_atomic"]) == \
        ("0", "0", "200", "0"), r
    v = kv(pool.run(prog["batch"], "verify", db))
    assert (v["integrity"], v["rows"]) == ("ok", "200"), v
    ls = pool.run("ls", "-a", PREFIX)
    assert sorted(ls.stdout.split()) == [".", "..", "batch.db", "plain.db"], ls.stdout + ls.stderr


def test_tmpfs_has_no_batch_atomic(prog, tmpfs_dir):
    """The same build on tmpfs, without kura: no F2FS ioctls there, so no
    batch-atomic commits and a journal per transaction (the checks above
    can fail)."""
    r = kv(subprocess.run([prog["batch"], "insert", str(tmpfs_dir / "t.db"), "200"], env=clean_env(),
                          capture_output=True, text=True, timeout=120))
    assert (r["compiled_batch_atomic"], r["batch_atomic"], r["journal_opens"], r["begin_atomic"]) == \
        ("1", "0", "200", "0"), r
    assert r["rows"] == "200"


def test_batch_commit_with_reads_through_a_map(prog, pool):
    """With PRAGMA mmap_size SQLite reads pages through a shared read-only
    map of the database, and inside each batch that grows the file it
    truncates the descriptor up and maps it again (the size hint,
    unixFileControl).  kura lets a description with a group be mapped, so
    no mmap is refused (SQLite would log it and go on without maps), every
    commit is still one batch, and every later reader, mapped or not,
    sees it."""
    db = f"{PREFIX}/mapped.db"
    env = dict(pool.env, SQLITE_BATCH_MMAP=str(64 << 20))
    run = lambda *a: subprocess.run([str(x) for x in a], env=env, capture_output=True, text=True,
                                    timeout=120, cwd="/")
    for _ in range(2):
        r = kv(run(prog["batch"], "insert", db, 150, 3000))
        assert (r["batch_atomic"], r["journal_opens"], r["commit_atomic"], r["mmap_failures"]) == \
            ("1", "0", "150", "0"), r
        v = kv(run(prog["batch"], "verify", db))
        assert (v["integrity"], v["mmap_failures"]) == ("ok", "0"), v
        assert int(v["mapped_reads"]) > 100, v
    assert v["rows"] == "300", v
    v = kv(pool.run(prog["batch"], "verify", db))
    assert (v["integrity"], v["rows"]) == ("ok", "300"), v


def test_writers_in_three_processes(prog, pool):
    """Three processes commit 300 transactions each into one database, each
    through its own descriptor's groups; SQLite's locks take them in turn,
    and each reads what the others' groups committed (the change counter
    on page 1 came in the group too): every row is there, the database
    intact."""
    db = f"{PREFIX}/shared.db"
    kv(pool.run(prog["batch"], "insert", db, 1))
    ws = [subprocess.Popen([prog["batch"], "insert", db, "300"], env=pool.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd="/") for _ in range(3)]
    for w in ws:
        out = w.communicate(timeout=120)[0]
        assert w.returncode == 0, out
        r = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        assert (r["batch_atomic"], r["journal_opens"], r["commit_atomic"]) == ("1", "0", "300"), r
    v = kv(pool.run(prog["batch"], "verify", db))
    assert (v["integrity"], v["rows"]) == ("ok", "901"), v


# ---------------------------------------------------------- rollback, abort


def test_rollback_leaves_the_database_unchanged(prog, pool):
    """ROLLBACK after inserts, updates and deletes, once within the page
    cache (nothing reached the file: SQLite has no batch to abort) and once
    spilled into the file through a journal: the file is byte for byte
    what it was."""
    r = kv(pool.run(prog["batch"], "rollback", f"{PREFIX}/rb.db"))
    assert r["batch_atomic"] == "1", r
    assert (r["small_rows"], r["spilled_rows"], r["integrity"], r["file_unchanged"]) == \
        ("200", "200", "ok", "1"), r


@pytest.mark.parametrize("how", ["full", "ioerr"])
def test_failed_batch_is_aborted(prog, pool, how):
    """A write of the batch fails (the VFS shim answers SQLITE_FULL or
    SQLITE_IOERR_WRITE for it after 4 writes went into the group).  While
    the group is open, another descriptor sees the file as committed and
    the group's own sees the group; SQLite then aborts it
    (F2FS_IOC_ABORT_VOLATILE_WRITE) and the file is again as committed,
    through both.  SQLITE_FULL fails the commit, leaving the database as it
    was; SQLITE_IOERR makes SQLite commit through a journal instead."""
    r = kv(pool.run(prog["batch"], "abort", f"{PREFIX}/abort-{how}.db", how))
    assert (r["batch_atomic"], r["fired"], r["begin_atomic"], r["rollback_atomic"]) == ("1", "1", "1", "1"), r
    assert (r["isolated"], r["own_sees_group"], r["aborted_discarded"], r["own_sees_file_after_abort"]) == \
        ("1", "1", "1", "1"), r
    assert r["integrity"] == "ok"
    if how == "full":
        assert (r["commit_rc"], r["rows_after"], r["file_unchanged"], r["journal_opens"]) == \
            ("13", r["rows_before"], "1", "0"), r
    else:
        assert (r["commit_rc"], r["rows_after"], r["journal_opens"]) == ("0", "500", "1"), r


def test_transaction_larger_than_a_group_fails_whole(prog):
    """A 16 MiB pool has a 256 KiB log: a group carries about 2 MiB
    (README, Atomic groups).  A 3 MiB transaction (the page cache made
    large enough to hold it) commits through a journal in the build without
    batch commits.  In the batch build the write that overflows the group
    fails with ENOSPC, which SQLite takes for a full disk (SQLITE_FULL, 13)
    rather than falling back to a journal: the documented limit.  What must
    hold is that the failed transaction left nothing: the rows before it,
    and a clean database."""
    p = Pool("memory", size="16M")
    try:
        r = kv(p.run(prog["plain"], "big", f"{PREFIX}/plain.db", 3))
        assert (r["commit_rc"], r["rows"]) == ("0", "778"), r
        r = kv(p.run(prog["batch"], "big", f"{PREFIX}/batch.db", 3))
        assert r["batch_atomic"] == "1", r
        assert (r["commit_rc"], r["rows"], r["integrity"]) == ("13", "10", "ok"), r
    finally:
        p.close()


# ------------------------------------------------------------------ crashes

# SQLITE_BATCH_ROUNDS=N for a longer run (a multiple of 6 covers every kind of kill).
ROUNDS = int(os.environ.get("SQLITE_BATCH_ROUNDS", "36"))


def test_killed_writer_leaves_a_prefix_of_its_commits(prog, pool):
    """A writer commits transactions of 1 to 150 rows (up to 330 KB; every
    16th, 3000 rows, is larger than SQLite's page cache and goes through a
    journal), each also cutting earlier transactions' rows and updating a
    summary row, and is SIGKILLed, ROUNDS times, going on each time from
    where the database is: half the rounds at a random moment from outside,
    half by itself inside a batch (before one of its writes, or just before
    or just after COMMIT_ATOMIC_WRITE).  On the disk pool the machine
    "crashes" too each time (the working copy in /dev/shm is dropped, the
    next mount replays the journal).  After each: integrity_check passes,
    every transaction up to the summary's is there whole with its exact
    bytes, none after it, and every commit SQLite had returned is there;
    the one in flight is there if and only if COMMIT_ATOMIC_WRITE had
    returned (at most, when killed from outside).  The writer runs with
    synchronous=EXTRA: under FULL, SQLite leaves the unlink that commits a
    journaled transaction to the next sync, on kura as on ext4, and a
    machine crash before it may bring the journal back."""
    db = f"{PREFIX}/crash.db"
    rng = random.Random(TAG)
    out = BUILD / "scratch" / f"sqlbatch-crash-{TAG}.out"
    out.parent.mkdir(parents=True, exist_ok=True)
    seen_batch = seen_journal = in_flight = 0
    where = {}
    last = 0
    try:
        for rnd in range(ROUNDS):
            inside = rnd % 2 == 1
            argv = [prog["batch"], "crash", db]
            if inside:  # in turn: before a write, before, after the commit
                at = ("write", "precommit", "postcommit")[rnd // 2 % 3]
                argv += [str(rng.randrange(1, 1 << 30)), "10" if at == "write" else "100", at]
            with open(out, "w") as f:
                w = subprocess.Popen(argv, env=pool.env, stdout=f, stderr=subprocess.STDOUT, cwd="/")
                if inside:
                    w.wait(timeout=120)
                else:
                    # The first commits once the pool is mounted, then any moment.
                    deadline = time.monotonic() + 60
                    while "committed" not in out.read_text() and w.poll() is None:
                        assert time.monotonic() < deadline, out.read_text()
                        time.sleep(0.01)
                    time.sleep(rng.uniform(0.0, 0.5))
                    w.kill()
                    w.wait()
            text = out.read_text()
            assert w.returncode == -9, text[-2000:]
            acked = [tuple(map(int, m)) for m in re.findall(r"committed (\d+) batch=(\d+) journal=(\d+)", text)]
            start = int(re.search(r"^start (\d+)", text, re.M).group(1))
            k, batch, journal = acked[-1] if acked else (start - 1, 0, 0)
            seen_batch += batch
            seen_journal += journal
            if pool.kind == "file":
                pool.crash_machine()
            c = kv(pool.run(prog["batch"], "crashcheck", db, timeout=300))
            assert c["integrity"] == "ok", c
            got = int(c["last"])
            how = "outside"
            if inside:
                how = re.search(r"^selfkill (\w+)$", text, re.M).group(1)
                due = k + 1 if how == "postcommit" else k
                assert got == due, f"round {rnd}: killed at {how} in transaction {k + 1}; the database ends at {got}"
            else:
                assert k <= got <= k + 1, f"round {rnd}: SQLite had committed {k}; the database ends at {got}"
                in_flight += got == k + 1
            where[how] = where.get(how, 0) + 1
            assert got >= last
            last = got
    finally:
        out.unlink(missing_ok=True)
    # The kills fell among batch commits and journal commits alike.
    assert seen_batch >= ROUNDS and seen_journal >= 1, (seen_batch, seen_journal)
    print(f"{pool.kind}: {last} transactions, {seen_batch} batch commits, {seen_journal} journal "
          f"commits; kills: {where}, {in_flight} from outside after a commit SQLite had not returned")
