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
from pathlib import Path

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import HERE, KURA_BIN, KURA_BUILD, PREFIX, TAG, bash_as_on_tmpfs, make_base, run_both


SECTIONS = ["files", "dirs", "paths", "stdio", "locks", "procs"]


@pytest.mark.parametrize("section", SECTIONS)
def test_calls(env, section):
    (rc0, out0), (rc1, out1) = run_both(env, section, lambda b: [env["calls"], section, b])
    assert rc0 == 0, out0
    assert (rc1, out1) == (rc0, out0)


CHILD_ENDS = r"""
import os, sys
b = sys.argv[1]
free = lambda: os.statvfs(b).f_bfree
os.close(os.open(b + "/f", os.O_RDWR | os.O_CREAT, 0o644))  # the metadata a file needs stays
os.unlink(b + "/f")
for end in ("exit", "_exit"):
    before = free()
    fd = os.open(b + "/f", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"z" * (64 * 4096))
    child = os.fork()
    if child == 0:  # holds the description it inherited, as the kernel's child does
        if end == "exit":
            sys.exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    os.close(fd)
    os.unlink(b + "/f")
    print(end, "space back:", free() >= before)
"""


def test_forked_child_lets_go_of_inherited_files(env, tmp_path):
    """An unlinked file's space comes back once the last process holding
    it has ended, however a forked child ended."""
    prog = tmp_path / "ends.py"
    prog.write_text(CHILD_ENDS)
    base, e = make_base(env, "kura", "childends")
    r = subprocess.run(["python3", str(prog), base], env=e, capture_output=True, text=True, timeout=60)
    assert r.stdout == "exit space back: True\n_exit space back: True\n", r.stdout + r.stderr


HOP = r"""
import os, sys
left = int(sys.argv[1])
if os.pread(3, 64, 0) != b"held by the last process of its family\n":
    print("lost at", left)
    sys.exit(1)
if left == 0:
    print("kept")
    sys.exit(0)
os.execv(sys.executable, [sys.executable, __file__, str(left - 1)])
"""


def test_exec_keeps_the_last_process_files(env, tmp_path):
    """A process alone in its family execs, again and again, holding an
    unlinked file open, while other processes mount the pool: each of them
    takes a dead family's counts back (reap.h).  The exec hands the family's
    lock over, so none may find it dead in between and free the file."""
    prog = tmp_path / "hop.py"
    prog.write_text(HOP)
    base, e = make_base(env, "kura", "exechop")
    mounters = subprocess.Popen(["bash", "-c", f"while :; do stat {base} >/dev/null; done"], env=e)
    try:
        r = subprocess.run(["bash", "-c", f"exec 3<>{base}/f && echo 'held by the last process of its family' >&3 "
                            f"&& rm {base}/f && exec python3 {prog} 30"],
                           env=e, capture_output=True, text=True, timeout=120)
    finally:
        mounters.kill()
        mounters.wait()
    assert (r.returncode, r.stdout) == (0, "kept\n"), r.stdout + r.stderr


DEVICES = r"""
cd "$B"
mknod null c 1 3 && mknod zero c 1 5 && mknod ro c 1 5 && chmod 444 ro
echo gone > null; cat null; echo "null: $?"
head -c 6 zero | od -An -tx1
stat -c '%F %t:%T %a' null zero
exec 3<> null && echo via3 >&3 && exec 3>&-
echo x > ro 2>/dev/null || echo "ro refused"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_device_nodes_open_their_device(env):
    bash_as_on_tmpfs(env, "devices", DEVICES, "00 00 00 00 00 00")


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


def test_own_functions_keep_their_names(env, tmp_path):
    """A library with a function named like one of kura's own (crc32c,
    fs_sync, alloc_block) keeps it: libkura.so, loaded first, exports only
    its API and the calls it interposes."""
    (tmp_path / "mine.c").write_text(
        "int crc32c(void) { return 1; }\nint fs_sync(void) { return 2; }\nint alloc_block(void) { return 3; }\n")
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\nint crc32c(void); int fs_sync(void); int alloc_block(void);\n"
        'int main(void) { printf("%d %d %d\\n", crc32c(), fs_sync(), alloc_block()); return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libmine.so"), str(tmp_path / "mine.c")],
                   check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "main"), str(tmp_path / "main.c"), "-L", str(tmp_path), "-lmine",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    r = subprocess.run([str(tmp_path / "main")], env=env["env"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "1 2 3\n"), r.stderr


DLCHECK = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
static void say(const char *what, void *h) {
    const char *e = dlerror();
    printf("%s: %s%s%s\n", what, h ? "handle" : "NULL", e ? " / " : "", e ? e : "");
}
int main(int argc, char **argv) {
    char lib[4096], missing[4096], bad[4096];
    snprintf(lib, sizeof lib, "%s/libx.so", argv[1]);
    snprintf(missing, sizeof missing, "%s/nothere.so", argv[1]);
    snprintf(bad, sizeof bad, "%s/notelf.so", argv[1]);
    /* First of all, before the program has called dlerror() at all. */
    void *first = dlopen(bad, RTLD_NOW); say("not ELF, first call", first);
    void *none = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); say("NOLOAD before", none);
    void *a = dlopen(lib, RTLD_NOW); say("first", a);
    void *b = dlopen(lib, RTLD_NOW); say("second", b);
    printf("same handle: %d\n", a == b);
    int *counter = dlsym(a, "counter"); ++*counter;
    int *again = dlsym(b, "counter"); printf("shared globals: %d\n", *again);
    say("missing symbol", dlsym(a, "no_such_symbol"));
    void *c = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); say("NOLOAD after", c);
    printf("NOLOAD same: %d\n", c == a);
    say("missing", dlopen(missing, RTLD_NOW));
    say("not ELF", dlopen(bad, RTLD_NOW));
    say("nothing pending", (void *)1);
    dlclose(c); dlclose(b); dlclose(a);
    return 0;
}
"""


def test_dlopen_from_pool_as_from_disk(env, tmp_path):
    """dlopen of a library in the pool: one object however often it is
    opened (RTLD_NOLOAD finds it), and dlerror() naming the path asked for,
    after dlopen and after dlsym."""
    (tmp_path / "lib.c").write_text("int counter;\n")
    (tmp_path / "dl.c").write_text(DLCHECK)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libx.so"), str(tmp_path / "lib.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "dl"), str(tmp_path / "dl.c")], check=True)
    (tmp_path / "notelf.so").write_text("not a library\n")
    (rc0, out0), (rc1, out1) = run_both(
        env, "dlopen", lambda b: ["sh", "-c", f"cp {tmp_path}/libx.so {tmp_path}/notelf.so {b}/ && {tmp_path}/dl {b}"])
    assert rc0 == 0 and "same handle: 1" in out0 and "shared globals: 1" in out0, out0
    assert (rc1, out1) == (rc0, out0)


UNIX_SOCKETS = r"""import os, socket, sys, stat
base = sys.argv[1]
p = os.path.join(base, "s")
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(p); srv.listen(1)
st = os.lstat(p)
print("node:", stat.S_ISSOCK(st.st_mode), oct(st.st_mode & 0o777))
print("getsockname:", srv.getsockname().replace(base, "BASE"))
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(p)
a, _ = srv.accept()
c.sendall(b"ping"); print("got:", a.recv(4))
print("peername:", c.getpeername().replace(base, "BASE"))
try:
    socket.socket(socket.AF_UNIX).bind(p)
except OSError as e: print("bind again:", e.errno == 98)
os.unlink(p)
try:
    socket.socket(socket.AF_UNIX).connect(p)
except OSError as e: print("connect after unlink:", os.strerror(e.errno))
s2 = socket.socket(socket.AF_UNIX); s2.bind(p); s2.listen(1); print("rebind while old open: ok")
open(os.path.join(base, "f"), "w").close()
try:
    socket.socket(socket.AF_UNIX).connect(os.path.join(base, "f"))
except OSError as e: print("connect to a file:", os.strerror(e.errno))
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); dp = os.path.join(base, "d"); d.bind(dp)
e = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); e.sendto(b"dgram", dp); print("dgram:", d.recv(10))
os.unlink(dp); os.unlink(p); os.unlink(os.path.join(base, "f"))
print(sorted(os.listdir(base)))
"""


FIFOS = r"""import os, sys
base = sys.argv[1]
f = os.path.join(base, "fifo")
os.mkfifo(f, 0o600)
try:
    os.open(f, os.O_WRONLY | os.O_NONBLOCK)
except OSError as e:
    print("writer without reader:", os.strerror(e.errno))
pid = os.fork()
if pid == 0:
    with open(f, "w") as w:
        w.write("through the pipe\n")
    os._exit(0)
with open(f) as r:
    print("read:", r.read(), end="")
os.waitpid(pid, 0)
r = os.open(f, os.O_RDONLY | os.O_NONBLOCK)
w = os.open(f, os.O_WRONLY | os.O_NONBLOCK)
os.write(w, b"nonblocking\n")
print("read:", os.read(r, 100).decode(), end="")
os.close(w); os.close(r)
import stat
print("still a fifo:", stat.S_ISFIFO(os.stat(f).st_mode))
os.unlink(f)
print(sorted(os.listdir(base)))
"""


def test_fifos_carry_data_between_processes(env, tmp_path):
    """A FIFO in the pool is a kernel pipe for every process of the pool:
    blocking and non-blocking opens, data both ways, the node stays a FIFO."""
    prog = tmp_path / "fifos.py"
    prog.write_text(FIFOS)
    (rc0, out0), (rc1, out1) = run_both(env, "fifos", lambda b: ["python3", str(prog), b])
    assert rc0 == 0 and "read: through the pipe" in out0, out0
    assert (rc1, out1) == (rc0, out0)


def test_unix_sockets_at_pool_paths(env, tmp_path):
    """bind/connect/sendto/getsockname with a path in the pool behave as on
    tmpfs: the node appears, the path reaches the listener while it exists,
    unlinking it and binding again works with the old socket still open."""
    prog = tmp_path / "sockets.py"
    prog.write_text(UNIX_SOCKETS)
    (rc0, out0), (rc1, out1) = run_both(env, "sockets", lambda b: ["python3", str(prog), b])
    assert rc0 == 0 and "got: b'ping'" in out0, out0
    assert (rc1, out1) == (rc0, out0)


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
