"""What real programs found wrong in the LD_PRELOAD interposition layer
(src/preload/), one test each: descriptors and streams a program closes or
moves, strace logging into a pool, working directories removed, renamed or
deeper than PATH_MAX, FIFOs, scripts, shared libraries and /proc/self/exe of
programs stored in a pool, open flags and env -i.  Each docstring says what
"the old layer", the layer before the fix, did.  As in test_preload.py, most
run once on tmpfs and once under the prefix and require the same output.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import HERE, KURA_BIN, KURA_BUILD, PREFIX, TAG, bash_as_on_tmpfs



def test_closing_every_descriptor_keeps_the_pool(env, tmp_path):
    """close_all.c on a disk pool in fsync mode: after a loop closing every
    descriptor but its file's, and after closefrom, fsync still reaches the
    disk (the mount's own descriptors survived: the old layer let them go
    and fsync said EBADF), and a child that closes everything else and
    execs still hands the file over."""
    exe = tmp_path / "close_all"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "preload" / "close_all.c")], check=True)
    pool = Path(KURA_BUILD or tmp_path) / f"close-all-{TAG}.pool"
    subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "64M", "--force"], check=True, capture_output=True)
    try:
        e = dict(os.environ, KURA_SYNC="fsync")
        e.pop("LD_PRELOAD", None)
        r = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--", "bash", "-c", f"mkdir /kura/c && {exe} /kura/c"],
                           env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout == ("close loop: write 10, fsync ok\n closefrom: write 10, fsync ok\n"
                            "close loop closefrom\nexec'd cat: exit 0\n"), r.stdout + r.stderr
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        pool.unlink()


POOL_FDS = """
import os, sys
for fd in sorted(int(x) for x in os.listdir("/proc/self/fd")):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if fd > 2 and ("kura" in target or target == sys.argv[1]):
        kind = "pool" if target == sys.argv[1] else "table" if target.startswith("/dev/shm/kura-") else target
        print(kind, "inheritable" if os.get_inheritable(fd) else "close-on-exec")
"""


def test_exec_chain_leaves_no_pool_descriptors_behind(env, tmp_path):
    """Three execs in a row that hand a pool file over (stdout): the last
    image holds the pool's descriptors close-on-exec (the old layer left
    the description table inheritable, so every later exec leaked it) and
    the family's lock table once for the mount and once for its owner lock
    (the old layer kept one more per exec after the first)."""
    prog = tmp_path / "pool_fds.py"
    prog.write_text(POOL_FDS)
    out = f"{PREFIX}/chain.out"
    inner = f"exec python3 {prog} {env['pool']}"
    r = subprocess.run(["bash", "-c", f"bash -c 'exec bash -c \"exec bash -c \\\"{inner}\\\"\"' > {out}; cat {out}"],
                       env=env["env"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines and all(line.endswith("close-on-exec") for line in lines), r.stdout
    assert sum(line.startswith("table") for line in lines) <= 2, r.stdout


def _run_killing_group(cmd, env, timeout):
    """Runs cmd in a session of its own; on timeout kills the whole session
    (a deadlocked tracer and its stopped tracee would outlive the test)."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        pytest.fail(f"{' '.join(cmd)}: no end after {timeout} s")
    return p.returncode, out, err


@pytest.mark.skipif(not shutil.which("strace"), reason="strace is not installed (scripts/deps.sh installs it)")
@pytest.mark.parametrize("sync", ["memory", "op", "fsync"])
def test_strace_logging_into_the_pool_ends(env, tmp_path, sync):
    """strace -o FILE in the pool, tracing programs that use the pool: the
    tracer writes its log with the pool's mutex while the tracee stops at
    every system call.  The old layer registered a new process (and the
    file back end flushed, and wrote large writes home) with the mutex held
    across system calls, so the tracer waited for its own stopped tracee for
    ever.  Now the registration holds no mutex, and a tracer that would
    wait on its stopped tracee fails that write (EDEADLK) instead."""
    if sync == "memory":
        e, pool = env["env"], None
    else:
        pool = Path(KURA_BUILD or tmp_path) / f"strace-{sync}-{TAG}.pool"
        subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "128M", "--force"], check=True, capture_output=True)
        e = dict(os.environ, KURA_SYNC=sync)
        e.pop("LD_PRELOAD", None)
    d = f"{PREFIX}/strace-{sync}"
    script = (f"mkdir -p {d} && cd {d} && strace -f -o {d}/log sh -c 'touch a; echo x > b; cat b; "
              f"dd if=/dev/zero of=c bs=1M count=8 conv=fsync 2>/dev/null; sync' && cat {d}/log")
    cmd = ["bash", "-c", script]
    if pool is not None:
        cmd = [KURA_BIN, "run", "--pool", str(pool), "--mount", PREFIX, "--"] + cmd
    try:
        rc, out, err = _run_killing_group(cmd, e, 60)
        assert rc == 0, err
        assert "execve(" in out and "+++ exited with 0 +++" in out, out[-2000:] + err
    finally:
        if pool is not None:
            pool.unlink()


XTRACE_SWITCH = r"""
cat > $B/t.sh <<'END'
set -x
for i in 1 2 3; do
  { set +x; } 2>/dev/null
  echo "round $i" >&2
  set -x
done
echo end
END
# Freed memory scribbled over: a use after free shows whatever the heap.
MALLOC_PERTURB_=165 bash $B/t.sh 2>$B/trace
cat $B/trace
"""


def test_std_stream_kept_while_stderr_is_elsewhere(env):
    """A shell started with stderr on a pool file keeps the address of its
    stderr stream (bash's xtrace stream is a copy of it), and each
    `2>/dev/null` moves fd 2 off the pool and back.  The old layer freed
    its stream for fd 2 at the first move: bash then traced into freed
    memory (the lines vanished; in the coreutils suite, heap corruption and
    SIGABRT), so the trace differs from tmpfs's."""
    bash_as_on_tmpfs(env, "xtrace", XTRACE_SWITCH, "+ for i in 1 2 3\nround 2\n+ for i in 1 2 3\nround 3")


# getcwd of a working directory that was removed, as Python reports it.
PY_GETCWD = r"""
python3 -c 'import os
try:
    os.getcwd()
except FileNotFoundError as e:
    print("getcwd:", e.strerror)'
"""

REMOVED_CWD = r"""
mkdir $B/gone && cd $B/gone && rmdir ../gone
readlink -e . ; echo "readlink -e: $?"
""" + PY_GETCWD


def test_getcwd_of_a_removed_directory(env):
    """getcwd in a working directory that was removed fails with ENOENT, as
    on Linux (coreutils' readlink -e . relies on it); the old layer answered
    the stale name."""
    bash_as_on_tmpfs(env, "cwdgone", REMOVED_CWD, "readlink -e: 1\ngetcwd: No such file or directory")


RENAMED_CWD = r"""
mkdir -p $B/a/b && cd $B/a/b && echo first > f
mv $B/a $B/x
cat f
/bin/pwd
readlink /proc/self/cwd
python3 -c 'import os; print(os.getcwd(), open("f").read().strip())'
bash -c 'cat f; /bin/pwd'
# The old name now leads to another directory; the working one stays.
mkdir -p $B/a/b && echo second > $B/a/b/f
cat f
cd -P .. && /bin/pwd && ls
# Removed after the rename: gone wherever it went.
mkdir $B/x/c && cd $B/x/c && mv $B/x $B/y && rmdir ../c
""" + PY_GETCWD


def test_working_directory_follows_a_rename_of_its_parent(env):
    """A working directory in a pool is the directory itself, as on Linux:
    after another process renames its parent, relative paths (in this
    process and in the programs it runs) still reach it, getcwd names it
    where it is now, and a new directory at the old name is not it.  The
    old layer kept only the name: every relative path failed with ENOENT,
    or reached the new directory."""
    bash_as_on_tmpfs(env, "cwdmoved", RENAMED_CWD, "first\nBASE/x/b\nBASE/x/b\nBASE/x/b first\nfirst\nBASE/x/b\n"
                     "first\nBASE/x\nb\ngetcwd: No such file or directory")


FIFO_FSTAT = r"""
cd $B
python3 -c '
import os, stat
os.mkfifo("q", 0o640)
r = os.open("q", os.O_RDONLY | os.O_NONBLOCK)
w = os.open("q", os.O_WRONLY)
a, f = os.lstat("q"), os.fstat(r)
print("same file:", (a.st_dev, a.st_ino) == (f.st_dev, f.st_ino), stat.filemode(f.st_mode))
os.fchmod(w, 0o604)
print("fchmod:", oct(os.lstat("q").st_mode & 0o777), oct(os.fstat(os.dup(r)).st_mode & 0o777))
os.rename("q", "q2")
print("renamed:", os.fstat(r).st_ino == a.st_ino, oct(os.fstat(r).st_mode & 0o777))'
# cp reads a FIFO's contents and checks that what it opened is what it saw.
mkdir src && mkfifo src/fifo
timeout 10 cp -R --copy-contents src dst & pid=$!
echo through the fifo > src/fifo
wait $pid && cat dst/fifo
"""


def test_fstat_of_an_open_fifo_is_its_pool_node(env):
    """fstat, fchmod and fchown of a FIFO opened in a pool answer for its
    node, as on Linux: the old layer showed the kernel's private FIFO behind
    it (another device, inode and mode), and cp --copy-contents refused the
    FIFO as "replaced while being copied"."""
    bash_as_on_tmpfs(env, "fifostat", FIFO_FSTAT, "same file: True prw-r-----\nfchmod: 0o604 0o604\n"
                     "renamed: True 0o604\nthrough the fifo")


SCRIPTS = r"""
cd $B
ln -s "$(command -v python3)" py
printf '#!%s/py -u\nimport sys; print(sys.argv)\n' $B > s.py && chmod +x s.py
./s.py a b; $B/s.py c
printf '#!%s/s.py x\n' $B > s2 && chmod +x s2 && ./s2 y
printf '#!/bin/sh\necho "$0" "$@"\n' > s3 && chmod +x s3 && ./s3 1 2 && $B/s3 3
printf '#!/usr/bin/env python3\nimport sys; print(sys.argv)\n' > s4 && chmod +x s4 && ./s4 q
chmod -x s.py; ./s.py; echo "not executable: $?"
"""


def test_scripts_in_a_pool_see_their_path(env):
    """A script whose #! interpreter lies in a pool runs (the old layer left
    it to the kernel, which cannot see the interpreter: a venv's pip failed
    with "required file not found"), interpreters that are scripts nest as
    on Linux, and a pool script's interpreter is given the script's path as
    $0 / argv[0], not /dev/fd/N."""
    bash_as_on_tmpfs(env, "scripts", SCRIPTS, "['./s.py', 'a', 'b']\n['BASE/s.py', 'c']\n"
                     "['BASE/s.py', 'x', './s2', 'y']\n./s3 1 2\nBASE/s3 3\n['./s4', 'q']\n")


DEEP_CWD = r"""
cd $B
python3 -c '
import os, subprocess
d = "x" * 200
for i in range(30):
    os.mkdir(d)
    os.chdir(d)
open("f", "w").write("deep")
print(os.getcwd().count(d), open("f").read(), os.path.isdir("../" + d), os.listdir("."))
print(subprocess.run(["pwd", "-P"], capture_output=True, text=True).stdout.count(d))
try:
    os.readlink("/proc/self/cwd")
except OSError as e:
    print("readlink:", e.strerror)
os.chdir("..")
print(os.getcwd().count(d))'
chmod -R u+rwx $B/x* && rm -rf $B/x* && ls -A $B && echo gone
"""


def test_working_directory_deeper_than_path_max(env):
    """A working directory in a pool may lie deeper than PATH_MAX, as on
    Linux: relative paths, getcwd, /proc/self/cwd and the programs it runs
    work there, and fts (chmod -R, rm -rf) walks such a tree back up
    through "..".  The old layer kept the working directory as a name of
    at most PATH_MAX bytes: chdir failed past it, and rm -rf left half the
    tree ("fts_read failed: File name too long")."""
    bash_as_on_tmpfs(env, "deepcwd", DEEP_CWD, "30 deep True ['f']\n30\nreadlink: File name too long\n29\ngone")


SHARED_LIBS = r"""
cd $B && mkdir sub
printf 'int bar(void) { return 2; }\n' > sub/bar.c
printf 'int bar(void);\nint foo(void) { return 40 + bar(); }\n' > foo.c
printf '#include <stdio.h>\n#include <stdlib.h>\nint foo(void);\nint main(void) { const char *p = getenv("LD_LIBRARY_PATH"); printf("%%d %%s\\n", foo(), p ? p : "unset"); return 0; }\n' > main.c
gcc -shared -fPIC -Wl,-soname,libbar.so.1 -o sub/libbar.so.1 sub/bar.c
gcc -shared -fPIC -Wl,-soname,libfoo.so -o libfoo.so foo.c -Lsub -l:libbar.so.1 '-Wl,-rpath,$ORIGIN/sub'
gcc -o rpath main.c -L. -lfoo "-Wl,-rpath,$B"
gcc -o origin main.c -L. -lfoo '-Wl,-rpath,$ORIGIN'
gcc -o bare main.c -L. -lfoo
./rpath; ./origin; LD_LIBRARY_PATH=$B ./bare | sed "s|$B|B|"; LD_LIBRARY_PATH=.:/nowhere ./bare
python3 -c 'import subprocess; print(subprocess.run(["./origin"], capture_output=True, text=True).stdout, end="")'
python3 -c 'import os; os.execve(os.open("./origin", os.O_RDONLY), ["origin"], dict(os.environ))'
./bare; echo "without a path: $?"
printf '#include <stdio.h>\n__attribute__((constructor)) static void hi(void) { puts("preloaded"); }\n' > pre.c
gcc -shared -fPIC -o libpre.so pre.c
LD_PRELOAD=./libpre.so bash -c 'echo "${KURA_LIBDIR:-none} ${KURA_PRELOAD:-none} ${KURA_CWD:-none} ${LD_PRELOAD##* }"' 3<pre.c
"""


def test_programs_with_shared_libraries_in_a_pool(env):
    """A program built in a pool against shared libraries built there runs,
    found as the loader finds them (RPATH, $ORIGIN, LD_LIBRARY_PATH, a
    library needing another), as does one LD_PRELOAD names there, and the
    program (bash too, whose own setenv cannot undo ours) sees its own
    LD_LIBRARY_PATH and LD_PRELOAD.  The old
    layer left the loader to look for them in the kernel's namespace:
    "cannot open shared object file", so no project with a shared library
    could run its programs or tests in a pool."""
    bash_as_on_tmpfs(env, "shlibs", SHARED_LIBS, "42 unset\n42 unset\n42 B\n42 .:/nowhere\n42 unset\n42 unset\n"
                     "without a path: 127\npreloaded\nnone none none ./libpre.so\n")


UNKNOWN_OPEN_BITS = r"""
python3 -c '
import os, sys
# Bits 2 to 4 are no O_ flag: Linux ignores them (dd keeps private flags there).
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | 0x1c, 0o644)
os.write(fd, b"kept\n")
print("flags ignored:", fcntl_flags := __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL) & 0x1c)
os.close(fd)' $B/f
cat $B/f
echo abcdefghijklm | dd oseek=8B bs=5 of=$B/g 2>/dev/null && od -An -c $B/g
"""


def test_open_ignores_bits_linux_does_not_know(env):
    """open with bits no O_ flag uses succeeds as on Linux, which drops
    them; the old layer said EINVAL (coreutils' dd oseek=8B failed)."""
    bash_as_on_tmpfs(env, "openbits", UNKNOWN_OPEN_BITS, "flags ignored: 0\nkept\n")


SELF_EXE = r"""
cp "$(command -v readlink)" $B/rl
$B/rl /proc/self/exe
cd $B && ./rl -f /proc/self/exe
printf '#!/bin/sh\nreadlink /proc/$$/exe\n' > $B/s.sh && chmod +x $B/s.sh && $B/s.sh
"""


def test_proc_self_exe_of_a_pool_program(env):
    """A binary run from the pool reads its own path in /proc/self/exe, as
    on tmpfs (stdbuf finds its library beside itself so, and many programs
    their data); the old layer showed the kernel's copy,
    /memfd:exec-from-pool.  A script's names its interpreter, as there."""
    bash_as_on_tmpfs(env, "selfexe", SELF_EXE, "BASE/rl\nBASE/rl\n/usr/bin/dash")


EMPTY_ENV = r"""
cd $B && echo hi > f
env -i A=B env
env -i A=B /bin/sh -c 'cat f; env -i C=D env; /bin/sh -c "cat $0/f"' $B
"""


def test_env_i_shows_only_what_it_was_given(env):
    """A program started with an environment it chose (env -i) sees just
    that, as on tmpfs, and still reaches the pool, as do the programs it
    starts: the layer puts LD_PRELOAD and KURA_* back for the new image and
    that image takes them out again.  The old layer left them in (coreutils'
    env -S tests saw four lines for one)."""
    bash_as_on_tmpfs(env, "envi", EMPTY_ENV, "A=B\nhi\nC=D\nhi\n")


SOFT_FSIZE_LIMIT = r"""
ulimit -S -f 100
echo hi > $B/x
cat $B/x
python3 -c 'import subprocess, sys
r = subprocess.run(["dd", "if=/dev/zero", "of=" + sys.argv[1], "bs=1k", "count=200"], stderr=subprocess.DEVNULL)
print("dd:", r.returncode)' $B/y
stat -c %s $B/y
python3 -c 'import sys; open(sys.argv[1], "w").write("a" * 1000)' $B/z; stat -c %s $B/z
exec cat $B/z | wc -c
"""


def test_programs_under_a_soft_file_size_limit(env):
    """After `ulimit -S -f`, the programs a shell runs write up to the limit
    and get SIGXFSZ past it, as on tmpfs; kura's own files (the lock table,
    the descriptor state, a disk pool's journal) are not the program's, and
    mounting the pool in each new image must not meet the limit (it died of
    SIGXFSZ, or answered EFBIG, before media_limit.c)."""
    bash_as_on_tmpfs(env, "softfsize", SOFT_FSIZE_LIMIT, "hi\ndd: -25\n102400\n1000\n1000")
