"""Unmodified programs on kura, compared byte for byte with the same run on tmpfs.

Each scenario is a bash script in tests/programs/ (SCENARIO.sh).  It starts
with its working directory at $ROOT, an empty directory, and prints what it
did.  The harness runs it

  - on tmpfs: ROOT=/dev/shm/kura-programs-PID/tmpfs-SCENARIO/work
  - on kura:  ROOT=/kura-test-PID/work, with libkura.so preloaded
    (LD_PRELOAD, KURA_POOL=a fresh pool in /dev/shm, KURA_MOUNT=/kura-test-PID),
    launched from an empty kernel directory (the "sentinel")

and requires, for the kura run:
  1. the same exit status and the same output (stdout and stderr merged),
     byte for byte after normalisation;
  2. the same final tree: `kura export` of the pool's /work against the
     tmpfs tree (type, mode, size, link count, symlink target, sha256);
  3. `kura fsck` of the pool clean afterwards;
  4. nothing created in the sentinel directory nor at the prefix in the
     kernel's namespace;
  5. with the leak detector (always for LEAK_ALWAYS, for every scenario with
     KURA_LEAK_CHECK=1): the run under `strace -f -y` shows no system call
     naming a path under the prefix and none doing I/O on a kura placeholder
     descriptor (a memfd whose name starts with "kura").

Normalisation (the only one): the harness replaces $ROOT by @ROOT@ and the
prefix by @PREFIX@.  Everything else is the scripts' job, documented in
tests/programs/common.sh: no wall-clock times, directory sizes, block
counts or inode numbers are printed, and listings are sorted.

test_baseline runs each scenario twice on tmpfs under roots of different
lengths and requires identical results, so a scenario that is not
deterministic, or a normalisation gap, shows up without kura.  It runs even
when libkura.so has no interposition yet; the kura tests then skip.

Known failures are listed in XFAIL / LEAK_XFAIL (strict: a fixed program
makes the suite fail until its entry is removed).
"""

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROGS = HERE / "programs"
KURA_BIN = os.environ.get("KURA_BIN", "")
KURA_LIB = os.environ.get("KURA_LIB", "")
KURA_BUILD = os.environ.get("KURA_BUILD", "")

SCENARIOS = ["bash", "coreutils", "tar", "python", "sqlite", "git", "c_cpp", "make", "fio"]
# Programs known not to work on kura yet: scenario -> reason (strict xfail).
XFAIL = {}
# Leak-detector findings not fixed yet: scenario -> reason (strict xfail).
LEAK_XFAIL = {}
# Scenarios always traced for leaks; KURA_LEAK_CHECK=1 traces all of them.
LEAK_ALWAYS = {"bash", "coreutils", "python", "sqlite"}
# Files whose contents are file-system or root specific by design (git's
# index holds inode numbers and ctimes; a clone records the absolute path of
# its origin in its config and reflogs): compared by presence and type only.
CONTENT_EXEMPT = {"git": [re.compile(r"(^|/)\.git/index$"), re.compile(r"^clone/\.git/(config$|logs/)")]}

# Bound every program run; the whole suite takes well under this.
TIMEOUT = 300

if not KURA_BIN or not os.access(KURA_BIN, os.X_OK):
    pytest.skip(f"KURA_BIN is unset or not executable ({KURA_BIN!r})", allow_module_level=True)
for tool in ("bash", "gcc", "g++", "make", "tar", "sqlite3", "git", "fio", "strace", "python3"):
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed (scripts/deps.sh installs it)", allow_module_level=True)

PID = os.getpid()
BASE = Path(f"/dev/shm/kura-programs-{PID}")
PREFIX = f"/kura-test-{PID}"
LEAK_ALL = os.environ.get("KURA_LEAK_CHECK", "") not in ("", "0")


# ---------------------------------------------------------------- setup


@pytest.fixture(scope="module", autouse=True)
def base():
    shutil.rmtree(BASE, ignore_errors=True)
    (BASE / "home").mkdir(parents=True)
    (BASE / "tmp").mkdir()
    (BASE / "bin").mkdir()
    for cmd in (["gcc", "-O1", "-Wall", "-o", BASE / "bin/stdio_prog", PROGS / "stdio_prog.c"],
                ["g++", "-O1", "-std=c++17", "-o", BASE / "bin/fstream_prog", PROGS / "fstream_prog.cpp"]):
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    yield BASE
    if not os.environ.get("KURA_KEEP"):
        # The preload layer's lock table (src/preload/lock.c) is named after
        # its pool file and outlives it: ours go with our pools.
        for pool in BASE.glob("*.pool"):
            st = pool.stat()
            for kind in ("locks", "notify"):
                Path(f"/dev/shm/kura-{kind}-{st.st_dev:x}-{st.st_ino:x}").unlink(missing_ok=True)
        shutil.rmtree(BASE, ignore_errors=True)


def base_env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KURA_", "LD_PRELOAD", "GIT_", "MAKE"))}
    e.pop("MFLAGS", None)
    e.update(
        PROG_DIR=str(PROGS), BIN_DIR=str(BASE / "bin"), HOME=str(BASE / "home"),
        TMPDIR=str(BASE / "tmp"), LC_ALL="C", TZ="UTC", PYTHONDONTWRITEBYTECODE="1",
    )
    return e


def kura(*args, check=True):
    r = subprocess.run([KURA_BIN, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, f"kura {' '.join(map(str, args))}: {r.returncode}\n{r.stdout}{r.stderr}"
    return r


def mkpool(name):
    pool = BASE / f"{name}.pool"
    kura("mkfs", pool, "--size", "1G", "--force")
    return pool


_interposition = None


def interposition():
    """None if libkura.so serves the prefix, else why not."""
    global _interposition
    if _interposition is None:
        _interposition = _probe()
    return _interposition or None


def _probe():
    if not KURA_LIB or not os.path.exists(KURA_LIB):
        return f"KURA_LIB {KURA_LIB!r} does not exist"
    pool = mkpool("probe")
    prefix = f"/kura-probe-{PID}"
    env = dict(base_env(), LD_PRELOAD=KURA_LIB, KURA_POOL=str(pool), KURA_MOUNT=prefix)
    try:
        r = subprocess.run(["stat", "-c", "%F", prefix], env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "libkura.so: `stat PREFIX` timed out"
    if r.returncode != 0 or r.stdout.strip() != "directory":
        return (f"libkura.so has no working interposition yet: `stat {prefix}` with LD_PRELOAD "
                f"gave exit {r.returncode}: {(r.stdout + r.stderr).strip()[:200]}")
    return ""


def need_interposition():
    why = interposition()
    if why:
        pytest.skip(why)


# ---------------------------------------------------------------- running


class Run:
    def __init__(self, rc, out, root, tree=None, log=None, pool=None, sentinel=None):
        self.rc, self.out, self.root, self.tree = rc, out, root, tree
        self.log, self.pool, self.sentinel = log, pool, sentinel


SCRIPT = 'mkdir -p "$ROOT" && cd "$ROOT" && exec bash "$PROG_DIR/$1.sh"'


def normalise(data, root):
    data = data.replace(root.encode(), b"@ROOT@")
    return data.replace(PREFIX.encode(), b"@PREFIX@")


def run_tmpfs(name, tag):
    root = BASE / f"{tag}-{name}" / "work"
    r = subprocess.run(["bash", "-c", SCRIPT, "scenario", name], env=dict(base_env(), ROOT=str(root)),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT, cwd=BASE)
    return Run(r.returncode, normalise(r.stdout, str(root)), str(root), tree=manifest(root, name))


_runs = {}


def tmpfs_run(name):
    if (name, "tmpfs") not in _runs:
        _runs[name, "tmpfs"] = run_tmpfs(name, "tmpfs")
    return _runs[name, "tmpfs"]


def kura_run(name):
    if (name, "kura") in _runs:
        return _runs[name, "kura"]
    pool = mkpool(f"kura-{name}")
    root = f"{PREFIX}/work"
    sentinel = BASE / f"sentinel-{name}"
    sentinel.mkdir()
    kenv = {"LD_PRELOAD": KURA_LIB, "KURA_POOL": str(pool), "KURA_MOUNT": PREFIX}
    env = dict(base_env(), ROOT=root)
    cmd = ["bash", "-c", SCRIPT, "scenario", name]
    log = None
    if LEAK_ALL or name in LEAK_ALWAYS:
        # strace itself must not be preloaded: -E gives the variables to the tracee only.
        log = BASE / f"strace-{name}.log"
        cmd = ["strace", "-f", "-qq", "-y", "-s", "256", "-e", "trace=%file,%desc,%process,%network",
               "-o", str(log), *[a for k, v in kenv.items() for a in ("-E", f"{k}={v}")], *cmd]
    else:
        env.update(kenv)
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT, cwd=sentinel)
        rc, out = r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", e.stdout or b""
    export = BASE / f"export-{name}"
    x = kura("export", f"{pool}:/work", export, check=False)
    tree = manifest(export, name) if x.returncode == 0 else {"<export failed>": x.stderr}
    run = Run(rc, normalise(out, root), root, tree=tree, log=log, pool=pool, sentinel=sentinel)
    _runs[name, "kura"] = run
    return run


def manifest(top, name):
    """Every object below top: type, mode, size, link count, target, sha256."""
    exempt = CONTENT_EXEMPT.get(name, [])
    top = Path(top)
    out = {}
    if not top.is_dir():
        return {"<missing>": str(top)}
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            p = Path(dirpath) / n
            rel = str(p.relative_to(top))
            st = os.lstat(p)
            m = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", oct(m))
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                if any(x.search(rel) for x in exempt):
                    out[rel] = ("file", "content exempt")
                else:
                    out[rel] = ("file", oct(m), st.st_size, st.st_nlink,
                                hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", oct(st.st_mode))
    return out


def text_diff(a, b, la, lb):
    import difflib
    d = difflib.unified_diff(a.decode(errors="replace").splitlines(), b.decode(errors="replace").splitlines(),
                             la, lb, lineterm="", n=2)
    lines = list(d)
    return "\n".join(lines[:150]) + ("\n..." if len(lines) > 150 else "")


def tree_diff(a, b):
    keys = sorted(set(a) | set(b))
    return "\n".join(f"{k}: tmpfs={a.get(k)} kura={b.get(k)}" for k in keys if a.get(k) != b.get(k))[:6000]


def compare(ref, got, what):
    assert got.rc == ref.rc and got.out == ref.out, (
        f"{what}: exit {ref.rc} vs {got.rc}; output differs:\n{text_diff(ref.out, got.out, 'tmpfs', what)}")
    assert got.tree == ref.tree, f"{what}: final trees differ:\n{tree_diff(ref.tree, got.tree)}"


def params(table):
    return [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=table[s])) if s in table else s
            for s in SCENARIOS]


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("name", SCENARIOS)
def test_baseline(name):
    """The scenario is deterministic on tmpfs under roots of different lengths."""
    a = tmpfs_run(name)
    b = run_tmpfs(name, "tmpfs-baseline-longer-root")
    assert a.rc == 0, f"{name} failed on tmpfs (exit {a.rc}):\n{a.out.decode(errors='replace')[-3000:]}"
    compare(a, b, "second tmpfs run")


@pytest.mark.parametrize("name", params(XFAIL))
def test_program(name):
    """Same output, exit status and final tree on kura as on tmpfs; pool fsck-clean."""
    need_interposition()
    ref = tmpfs_run(name)
    got = kura_run(name)
    compare(ref, got, "kura")
    r = kura("fsck", got.pool, check=False)
    assert r.returncode == 0, f"fsck after {name}: {r.stdout}{r.stderr}"


# ---------------------------------------------------------------- leak detector

# System calls allowed on a placeholder: managing the descriptor itself.
PLACEHOLDER_OK = {"close", "dup", "dup2", "dup3", "close_range", "poll", "ppoll", "select", "pselect6",
                  "memfd_create", "execve", "execveat", "exit_group"}
FCNTL_OK = {"F_GETFD", "F_SETFD", "F_GETFL", "F_SETFL", "F_DUPFD", "F_DUPFD_CLOEXEC", "F_ADD_SEALS",
            "F_GET_SEALS"}
# Calls whose string arguments are data, not paths.
DATA_CALLS = {"read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
              "pwritev2", "sendto", "sendmsg", "recvfrom", "recvmsg", "sendmmsg", "recvmmsg", "getcwd"}
ONE_PATH = {"execve", "execveat", "readlink", "readlinkat"}  # only the first string is a path
LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
# Placeholders are memfds named "kura..."; the engine's own shared state
# (kura_state_fd(), "kura-ofiles") is a memfd it maps legitimately.
PLACEHOLDER = re.compile(r"<[^<>]*memfd:kura(?!-ofiles)[^<>]*>")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def leaks_in(log, prefix):
    """(line, why) for every traced call that touched kura's namespace in the kernel."""
    found = []
    for line in Path(log).read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if not m:
            continue
        if m.group(2):  # "<... name resumed> rest": the start line was checked already
            continue
        call, args = m.group(4), m.group(5)
        # Drop the return value (strace decorates returned descriptors too).
        args = re.sub(r"\)\s+=\s+.*$", "", args)
        if call not in DATA_CALLS:
            strings = STRING.findall(args)
            if call in ONE_PATH:
                strings = strings[:1]
            for s in strings:
                if s == prefix or s.startswith(prefix + "/"):
                    found.append((line, f"{call} names a path under the prefix"))
                    break
        if PLACEHOLDER.search(args) and call not in PLACEHOLDER_OK:
            if call in ("fcntl", "fcntl64"):
                cmd = re.match(r"[^,]*,\s*(\w+)", args)
                if cmd and cmd.group(1) in FCNTL_OK:
                    continue
            found.append((line, f"{call} on a kura placeholder"))
    return found


def test_leak_detector_self_test(tmp_path):
    """The parser flags what it must and nothing else (a canned strace log)."""
    log = tmp_path / "log"
    log.write_text(
        '100 openat(AT_FDCWD, "/kura-x/work/a", O_RDONLY) = -1 ENOENT (No such file or directory)\n'
        '100 memfd_create("kura", MFD_CLOEXEC|MFD_ALLOW_SEALING) = 3</memfd:kura (deleted)>\n'
        '100 fcntl(3</memfd:kura (deleted)>, F_ADD_SEALS, F_SEAL_SEAL|F_SEAL_GROW) = 0\n'
        '100 dup2(3</memfd:kura (deleted)>, 1</dev/pts/0>) = 1</memfd:kura (deleted)>\n'
        '100 write(1</memfd:kura (deleted)>, "hello", 5 <unfinished ...>\n'
        '101 write(2</dev/null>, "/kura-x/work/b", 14) = 14\n'
        '101 execve("/bin/ls", ["ls", "/kura-x/work"], 0x7ffd /* 20 vars */) = 0\n'
        '100 <... write resumed>) = -1 EBADF (Bad file descriptor)\n'
        '101 newfstatat(AT_FDCWD, "/kura-xy", 0x7ff, 0) = -1 ENOENT (No such file or directory)\n'
        '101 getdents64(4</memfd:kura-dir (deleted)>, 0x5555, 32768) = 0\n'
        '101 fcntl(5</memfd:kura (deleted)>, F_SETLK, {l_type=F_WRLCK}) = 0\n'
        '101 close(5</memfd:kura (deleted)>) = 0\n'
        '102 mmap(NULL, 4194304, PROT_READ|PROT_WRITE, MAP_SHARED, 5</memfd:kura-ofiles>(deleted), 0) = 0x7f\n'
        '101 mkdir("/kura-x", 0755) = 0\n')
    got = [(line.split()[1].split("(")[0], why) for line, why in leaks_in(log, "/kura-x")]
    assert got == [("openat", "openat names a path under the prefix"),
                   ("write", "write on a kura placeholder"),
                   ("getdents64", "getdents64 on a kura placeholder"),
                   ("fcntl", "fcntl on a kura placeholder"),
                   ("mkdir", "mkdir names a path under the prefix")], got


@pytest.mark.parametrize("name", params(LEAK_XFAIL))
def test_no_leaks(name):
    """Nothing meant for kura reached the kernel (strace -f -y, sentinel, prefix)."""
    need_interposition()
    if not (LEAK_ALL or name in LEAK_ALWAYS):
        pytest.skip("traced only with KURA_LEAK_CHECK=1")
    run = kura_run(name)
    problems = []
    if run.log and run.log.exists():
        found = leaks_in(run.log, PREFIX)
        problems += [f"{why}: {line}" for line, why in found[:30]]
        if len(found) > 30:
            problems.append(f"... {len(found) - 30} more")
    else:
        problems.append("no strace log")
    left = sorted(os.listdir(run.sentinel))
    if left:
        problems.append(f"created in the kernel working directory: {left[:10]}")
    if os.path.lexists(PREFIX):
        problems.append(f"{PREFIX} exists in the kernel's namespace")
    assert not problems, f"{name}: {len(problems)} leak(s), log {run.log}:\n" + "\n".join(problems)


def test_kura_run_tool():
    """`kura run --pool P --mount M -- CMD` runs CMD on kura."""
    need_interposition()
    pool = mkpool("runtool")
    prefix = f"/kura-run-{PID}"
    r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--mount", prefix, "--", "bash", "-c",
                        f"echo hi > {prefix}/f && cat {prefix}/f && ls {prefix}"],
                       env=base_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert (r.returncode, r.stdout) == (0, "hi\nf\n"), r.stdout + r.stderr
    assert kura("cat", f"{pool}:/f").stdout == "hi\n"
