"""Call-level tests of the LD_PRELOAD interposition layer (src/preload/).

Each check runs a small program once on a tmpfs directory and once under the
kura prefix with libkura.so preloaded, and requires the same output after the
base directory is replaced by BASE.  tests/preload/calls.c holds the C
checks (one section per area); shell and Python checks are inline.  What
real programs found wrong in the layer, a test each, is
test_preload_regress.py; the program-level suite (bash, coreutils, git,
sqlite...) is test_programs.py.
"""

import os
import subprocess

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import HERE, KURA_BIN, PREFIX, bash_as_on_tmpfs, make_base, run_both


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


def test_a_prefix_the_layer_drops_is_said_under_kura_debug(env):
    """A prefix set by hand that names / ("//", "/x/..") or is relative is
    dropped, the others served; KURA_DEBUG says which and why."""
    e = dict(env["env"], KURA_DEBUG="1", KURA_MOUNT=f"//:/x/..:rel:{PREFIX}")
    r = subprocess.run(["sh", "-c", f"echo seen > {PREFIX}/dropped && cat {PREFIX}/dropped"], env=e,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "seen\n", r.stderr
    said = [line for line in r.stderr.splitlines() if "KURA_MOUNT" in line]
    assert any("'//'" in line and "names /" in line for line in said), r.stderr
    assert any("'/x/..'" in line and "names /" in line for line in said), r.stderr
    assert any("'rel'" in line and "absolute" in line for line in said), r.stderr
    assert not os.path.exists(PREFIX)


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
