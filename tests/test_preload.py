"""Call-level tests of the LD_PRELOAD interposition layer (src/preload/).

Each check runs a small program once on a tmpfs directory and once under the
kura prefix with libkura.so preloaded, and requires the same output after the
base directory is replaced by BASE.  tests/preload/calls.c holds the C
checks (one section per area); shell and Python checks are inline.  The
program-level suite (bash, coreutils, git, sqlite...) is test_programs.py.
"""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KURA_BIN = os.environ.get("KURA_BIN", "")
KURA_LIB = os.environ.get("KURA_LIB", "")
KURA_BUILD = os.environ.get("KURA_BUILD", "")

if not (KURA_BIN and os.access(KURA_BIN, os.X_OK) and KURA_LIB and os.path.exists(KURA_LIB)):
    pytest.skip("KURA_BIN/KURA_LIB not set (run through ctest)", allow_module_level=True)
if not shutil.which("gcc"):
    pytest.skip("gcc is needed to build the call checks", allow_module_level=True)

TAG = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
PREFIX = f"/kura-preload-{TAG}"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pool = f"/dev/shm/kura-preload-{TAG}.pool"
    subprocess.run([KURA_BIN, "mkfs", pool, "--size", "128M"], check=True, capture_output=True)
    tmpfs = Path(f"/dev/shm/kura-preload-{TAG}-tmpfs")
    tmpfs.mkdir()
    build = tmp_path_factory.mktemp("bin")
    calls = build / "calls"
    subprocess.run(["gcc", "-O1", "-o", str(calls), str(HERE / "preload" / "calls.c")], check=True)
    e = dict(os.environ, KURA_POOL=pool, KURA_MOUNT=PREFIX, LD_PRELOAD=KURA_LIB)
    e.pop("KURA_DEBUG", None)
    yield {"pool": pool, "tmpfs": tmpfs, "calls": str(calls), "env": e}
    shutil.rmtree(tmpfs, ignore_errors=True)
    r = subprocess.run([KURA_BIN, "fsck", pool], capture_output=True, text=True)
    st = os.stat(pool)
    # The layer's lock table for this pool (lock.c names it after the pool file).
    locks = Path(f"/dev/shm/kura-locks-{st.st_dev:x}-{st.st_ino:x}")
    if locks.exists():
        locks.unlink()
    os.unlink(pool)
    assert r.returncode == 0, r.stdout + r.stderr


def run_both(env, name, argv_fn, shell=False, cwd=None):
    """argv_fn(base) -> command; returns (tmpfs output, kura output)."""
    outs = []
    for kind in ("tmpfs", "kura"):
        if kind == "tmpfs":
            base = str(env["tmpfs"] / name)
            os.makedirs(base)
            e = dict(os.environ)
            e.pop("LD_PRELOAD", None)
        else:
            base = f"{PREFIX}/{name}"
            e = env["env"]
            subprocess.run(["mkdir", base], env=e, check=True)
        cmd = argv_fn(base)
        r = subprocess.run(cmd, shell=shell, env=e, capture_output=True, text=True, timeout=120,
                           cwd=cwd or "/")
        outs.append((r.returncode, (r.stdout + r.stderr).replace(base, "BASE")))
    return outs


SECTIONS = ["files", "dirs", "paths", "stdio", "locks", "procs"]


@pytest.mark.parametrize("section", SECTIONS)
def test_calls(env, section):
    (rc0, out0), (rc1, out1) = run_both(env, section, lambda b: [env["calls"], section, b])
    assert rc0 == 0, out0
    assert (rc1, out1) == (rc0, out0)


def test_mmap(env):
    (_, out0), (_, out1) = run_both(env, "mmap", lambda b: [env["calls"], "mmap", b])
    assert out0 == "mmap mapped\n"
    assert out1 == "mmap ENODEV\n"  # MAP_SHARED; MAP_PRIVATE is served as a copy


SHELL = r"""
set -e
cd "$B"
echo one > f; echo two >> f; cat < f
cat <<EOF > here
a $((1+2))
EOF
cat here
{ echo x; /bin/echo y; printf 'z\n'; } > group; cat group
seq 1 500 | sort -r | head -3 > piped; cat piped
( cd "$B" && echo sub > subshell ); cat subshell
exec 3> fd3; echo via3 >&3; /bin/echo exec3 >&3; exec 3>&-; cat fd3
mkdir -p a/b/c; touch a/b/c/d; ln -s b a/l; ls a/l/c
cp -a a copy; find copy | sort
mv copy moved; rm -r moved; ls
wc -c < f
dd if=f of=g bs=1 skip=2 status=none; cat g
env -i /bin/cat f
cd a/b; pwd | sed "s#$B#BASE#"; cat ../../f | wc -l
"""


def test_shell(env):
    (rc0, out0), (rc1, out1) = run_both(env, "shell", lambda b: ["bash", "-c", f"B={b}\n" + SHELL])
    assert rc0 == 0, out0
    assert (rc1, out1) == (rc0, out0)


PY = r"""
import os, sys, shutil, subprocess, tempfile
b = sys.argv[1]
os.chdir(b)
with open("p.txt", "w") as f:
    f.write("hello\n" * 3)
print(open("p.txt").read().count("hello"), os.path.getsize("p.txt"))
os.makedirs("t/u/v")
open("t/u/v/w", "w").close()
print(sorted((r.replace(b, "BASE"), sorted(d), sorted(f)) for r, d, f in os.walk(b)))
shutil.copytree("t", "t2"); shutil.rmtree("t")
print(sorted(os.listdir(".")))
with open("sub.out", "w") as o:
    subprocess.run(["echo", "from child"], stdout=o, check=True)
print(open("sub.out").read().strip())
fd, name = tempfile.mkstemp(dir=b)
os.write(fd, b"tmp"); os.close(fd)
print(os.stat(name).st_size, os.path.dirname(name) == b)
print(os.getcwd().replace(b, "BASE"))
"""


def test_python(env):
    (rc0, out0), (rc1, out1) = run_both(env, "python", lambda b: ["python3", "-c", PY, b])
    assert rc0 == 0, out0
    assert (rc1, out1) == (rc0, out0)


def test_outside_prefix_untouched(env, tmp_path):
    """Paths leaving the prefix ("..", other dirs) reach the kernel."""
    host = tmp_path / "host.txt"
    host.write_text("kernel\n")
    e = env["env"]
    r = subprocess.run(["cat", f"{PREFIX}/..{host}"], env=e, capture_output=True, text=True)
    assert r.stdout == "kernel\n"
    r = subprocess.run(["sh", "-c", f"mkdir -p {PREFIX}/o && cd {PREFIX}/o && cat ../..{host}"], env=e,
                       capture_output=True, text=True)
    assert r.stdout == "kernel\n", r.stderr
    assert not os.path.exists(PREFIX)  # nothing was created in the kernel's namespace


def test_kura_run(env):
    """`kura run` sets the environment and the command sees the pool."""
    r = subprocess.run([KURA_BIN, "run", "--pool", env["pool"], "--mount", PREFIX + "-run", "--",
                        "sh", "-c", f"echo hi > {PREFIX}-run/r && cat {PREFIX}-run/r && echo $KURA_MOUNT"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"hi\n{PREFIX}-run\n"
    r = subprocess.run([KURA_BIN, "run", "--pool", env["pool"], "--", "no-such-program-xyz"],
                       capture_output=True, text=True)
    assert r.returncode == 127


def test_concurrent_processes(env):
    """Several preloaded processes append to one file at once; a SIGKILLed
    one does not wedge the others."""
    e = env["env"]
    f = f"{PREFIX}/conc"
    subprocess.run(["sh", "-c", f": > {f}"], env=e, check=True)
    procs = [subprocess.Popen(["sh", "-c", f"for i in $(seq 200); do echo {n}-$i >> {f}; done"], env=e)
             for n in range(4)]
    victim = subprocess.Popen(["sh", "-c", f"while :; do echo k >> {PREFIX}/victim; done"], env=e)
    for p in procs:
        assert p.wait(timeout=120) == 0
    victim.kill()
    victim.wait()
    r = subprocess.run(["sh", "-c", f"grep -c -- - {f}; echo after > {PREFIX}/after && cat {PREFIX}/after"],
                       env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == "800\nafter\n", r.stderr


def test_exec_and_dlopen_from_pool(env, tmp_path):
    """Binaries, scripts and shared libraries stored in the pool run (the
    layer copies them to a memfd for the kernel and ld.so)."""
    (tmp_path / "lib.c").write_text("int answer(void) { return 42; }\n")
    (tmp_path / "main.c").write_text(
        '#include <dlfcn.h>\n#include <stdio.h>\n'
        'int main(int c, char **v) { void *h = dlopen(v[1], RTLD_NOW);\n'
        ' if (!h) { puts("dlopen failed"); return 1; }\n'
        ' int (*f)(void) = (int (*)(void))dlsym(h, "answer"); printf("%d\\n", f()); return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libx.so"), str(tmp_path / "lib.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "main"), str(tmp_path / "main.c")], check=True)
    d = f"{PREFIX}/bin"
    script = (f"mkdir -p {d} && cp {tmp_path}/libx.so {tmp_path}/main {d}/ && "
              f"{d}/main {d}/libx.so && printf '#!/bin/sh\\necho script $1\\n' > {d}/s && chmod +x {d}/s && "
              f"{d}/s arg && cd {d} && PATH={d}:$PATH s viapath")
    r = subprocess.run(["sh", "-c", script], env=env["env"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "42\nscript arg\nscript viapath\n"), r.stderr


# Every tests/preload/*.c but calls.c is a self-contained program: its output
# on tmpfs and under the prefix must agree.
SMALL_PROGRAMS = sorted(p.stem for p in (HERE / "preload").glob("*.c") if p.stem != "calls")


@pytest.mark.parametrize("prog", SMALL_PROGRAMS)
def test_small_programs(env, tmp_path, prog):
    exe = tmp_path / prog
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(exe), str(HERE / "preload" / f"{prog}.c")], check=True)
    (rc0, out0), (rc1, out1) = run_both(env, prog, lambda b: [str(exe), b])
    assert rc0 == 0, out0
    assert (rc1, out1) == (rc0, out0)


SYMLINKS = r"""
cd "$B"
mkdir d tree "$H/dir"
echo inside > x; echo hostfile > "$H/file"; echo hf > "$H/dir/f"
UP=../../../../../../../../../..
ln -s "$B/x" in                      # absolute, into the prefix
ln -s "$H/file" out                  # absolute, out to the host
ln -s "$H/dir" hd                    # a host directory
ln -s "$UP$H/file" d/up              # relative, climbing out
ln -s "$UP$B/x" d/back               # climbing out and back in
ln -s "$H/hb" c; ln -s "$B/x" "$H/hb"        # out, back in through a host link
ln -s "$H/hl" loop; ln -s "$B/loop" "$H/hl"  # a loop across the boundary
ln -s "$UP$B/dl" dl                          # a loop out of the pool by ".." and back
ln -s "$B/self" self; ln -s "$B/nowhere" dangling
for l in in out hd d/up d/back c loop dl self dangling; do
  echo "== $l -> $(readlink $l)"
  realpath "$l" 2>&1; cat "$l" 2>&1; stat -L -c "%F %s" "$l" 2>&1; stat -c %F "$l"
done
ls -L hd; ls -L 2>&1; ls -lL in out | awk '{print $1, $5, $NF}'
echo new > hd/new; cat "$H/dir/new"
echo more >> c; cat x
test -d hd/ && echo dir-through-link; test -e loop || echo loop-absent
exec 3> fd3   # from here on children mount by inheriting it (kura_mount_inherit)
find -L . 2>&1 | sort
(cd hd && pwd -P && /bin/pwd && ls)
(cd d && cat up back)
mv hd/f moved && cat moved && ls hd
ln hd/new hard 2>&1 | sed 's/.*: //'
mkdir "$H/made" && ln -s "$H/made" md && mkdir md/sub && touch md/sub/t && rm md/sub/t && rmdir md/sub && ls -a "$H/made"
ln -s "$B/x" tree/in; ln -s "$H/file" tree/out; ln -s "$UP$H/file" tree/up; ln -s ../x tree/rel
cp -a tree tree2; find tree2 -type l -printf '%p -> %l\n' | sort; cat tree2/in tree2/out tree2/up tree2/rel
cp -a tree "$H/tcopy"; find "$H/tcopy" -type l -printf "%f -> %l\n" | sort
cp -aL tree tree3; find tree3 -type f | sort
"""


def test_symlinks_across_prefix(env, tmp_path):
    """Absolute symlink targets are host paths, as programs store them: into
    the prefix, out to the host, ".." above the pool's root, chains that
    cross back in through a host link, loops across the boundary; readlink
    shows the stored text; realpath, cat, ls -L, find -L, cp -a agree with
    tmpfs."""
    outs = []
    for kind in ("tmpfs", "kura"):
        host = tmp_path / kind
        host.mkdir()
        if kind == "tmpfs":
            base = str(env["tmpfs"] / "symlinks")
            os.makedirs(base)
            e = dict(os.environ)
            e.pop("LD_PRELOAD", None)
        else:
            base = f"{PREFIX}/symlinks"
            e = env["env"]
            subprocess.run(["mkdir", base], env=e, check=True)
        r = subprocess.run(["bash", "-c", f"B={base}\nH={host}\n" + SYMLINKS], env=e, capture_output=True,
                           text=True, timeout=120, cwd="/")
        outs.append((r.returncode, (r.stdout + r.stderr).replace(base, "BASE").replace(str(host), "HOST")))
    (rc0, out0), (rc1, out1) = outs
    assert rc0 == 0, out0
    assert "== c -> HOST/hb\nBASE/x\ninside\n" in out0  # the scenario means what it says
    assert "Too many levels of symbolic links" in out0
    assert (rc1, out1) == (rc0, out0)
