"""The python3 scenario (run by python.sh with the working directory at ROOT).

Prints only what is the same on every file system: names are sorted,
no inode numbers, directory sizes, block counts or wall-clock times.
"""
import hashlib
import io
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile

ROOT = os.environ["ROOT"]


def step(s):
    print(f"\n== {s}", flush=True)


def show(path):
    st = os.lstat(path)
    kind = stat.S_IFMT(st.st_mode)
    size = "-" if stat.S_ISDIR(st.st_mode) else st.st_size
    print(f"{path}: type={kind:o} mode={stat.S_IMODE(st.st_mode):o} size={size} nlink={st.st_nlink}")


step("open, read, write, seek")
with open("text.txt", "w") as f:
    for i in range(1000):
        f.write(f"line {i}\n")
with open("text.txt") as f:
    lines = f.readlines()
print(len(lines), lines[0].strip(), lines[-1].strip())
with open("text.txt", "a") as f:
    print("appended", file=f)
with open("text.txt", "rb") as f:
    f.seek(-9, io.SEEK_END)
    print(f.read(), f.tell())
    f.seek(5)
    print(f.read(6))
with open("text.txt", "r+b") as f:
    f.seek(5)
    f.write(b"XXXX")
    f.seek(0)
    print(f.readline())
with open("bin.dat", "wb") as f:
    f.write(bytes(range(256)) * 4096)
with open("bin.dat", "rb", buffering=0) as f:
    print(hashlib.sha256(f.read()).hexdigest(), f.seek(0, io.SEEK_END))
try:
    open("text.txt", "x")
except FileExistsError as e:
    print("x mode:", e.strerror)
try:
    open("missing/file", "w")
except FileNotFoundError as e:
    print("missing dir:", e.strerror)
with open("text.txt", "a+") as f:
    print("a+ tell:", f.tell())
    f.seek(0)
    print("a+ first:", f.readline().strip())

step("os level")
fd = os.open("raw.dat", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o640)
os.write(fd, b"0123456789")
os.pwrite(fd, b"ab", 3)
print(os.pread(fd, 10, 0), os.lseek(fd, 0, os.SEEK_CUR), os.lseek(fd, 100, os.SEEK_SET))
os.write(fd, b"end")
os.ftruncate(fd, 50)
os.fsync(fd)
st = os.fstat(fd)
print("fstat:", st.st_size, oct(stat.S_IMODE(st.st_mode)))
fd2 = os.dup(fd)
os.lseek(fd2, 0, os.SEEK_SET)
print("dup shares offset:", os.lseek(fd, 0, os.SEEK_CUR))
os.close(fd2)
os.close(fd)
os.truncate("raw.dat", 12)
print(open("raw.dat", "rb").read())
os.makedirs("deep/a/b/c", exist_ok=True)
os.makedirs("deep/a/b/c", exist_ok=True)
try:
    os.makedirs("deep/a")
except FileExistsError as e:
    print("makedirs:", e.strerror)
os.symlink("../raw.dat", "deep/link")
os.link("raw.dat", "deep/hard")
print("readlink:", os.readlink("deep/link"), "realpath:", os.path.relpath(os.path.realpath("deep/link")))
os.utime("raw.dat", ns=(1_000_000_001, 2_000_000_002))
st = os.stat("deep/hard")
print("utime:", st.st_atime_ns, st.st_mtime_ns, "nlink:", st.st_nlink)
os.chmod("raw.dat", 0o600)
show("raw.dat")
show("deep/link")
show("deep")
os.rename("deep/hard", "deep/a/hard2")
os.replace("text.txt", "deep/a/b/text.txt")
print("exists:", os.path.exists("text.txt"), os.path.isfile("deep/a/b/text.txt"), os.path.isdir("deep/a"),
      os.path.islink("deep/link"), os.path.getsize("deep/a/b/text.txt"))
print("access:", os.access("raw.dat", os.R_OK | os.W_OK), os.access("nope", os.F_OK))
print("listdir:", sorted(os.listdir("deep")))
print("scandir:", sorted((e.name, e.is_dir(), e.is_symlink()) for e in os.scandir("deep")))
os.chdir("deep/a")
print("cwd:", os.getcwd().replace(ROOT, "@ROOT@"), sorted(os.listdir(".")))
with open("b/rel.txt", "w") as f:
    f.write("relative\n")
os.chdir("..")
print("cwd:", os.getcwd().replace(ROOT, "@ROOT@"), open("a/b/rel.txt").read().strip())
os.chdir(ROOT)
try:
    os.rmdir("deep")
except OSError as e:
    print("rmdir:", e.strerror)
os.remove("deep/link")

step("os.walk")
for top, dirs, files in sorted(os.walk(".")):
    dirs.sort()
    print(top, dirs, sorted(files))
for top, dirs, files in os.walk(".", topdown=False):
    pass
print("walk bottom-up ok")

step("shutil")
shutil.copytree("deep", "deep2")
shutil.copy2("raw.dat", "deep2/raw-copy")
shutil.copyfile("bin.dat", "bin2.dat")
print("copyfile:", open("bin.dat", "rb").read() == open("bin2.dat", "rb").read())
shutil.move("deep2/raw-copy", "moved.dat")
print("copy2 keeps mtime:", os.stat("moved.dat").st_mtime_ns)
for top, dirs, files in sorted(os.walk("deep2")):
    print(top, sorted(dirs), sorted(files))
shutil.rmtree("deep2")
print("rmtree:", os.path.exists("deep2"))
print("disk_usage ok:", shutil.disk_usage(".").total > 0)

step("tempfile")
with tempfile.TemporaryDirectory(dir=".") as d:
    with tempfile.NamedTemporaryFile("w+", dir=d, delete=False) as f:
        f.write("temp data")
        name = f.name
    print("named temp:", open(name).read(), os.path.dirname(name) == os.path.abspath(d))
    fd, p = tempfile.mkstemp(dir=d, suffix=".x")
    os.write(fd, b"mkstemp")
    os.close(fd)
    print("mkstemp:", open(p, "rb").read(), oct(stat.S_IMODE(os.stat(p).st_mode)))
    with tempfile.TemporaryFile(dir=d) as t:
        t.write(b"anonymous")
        t.seek(0)
        print("TemporaryFile:", t.read())
    print("entries in tempdir:", len(os.listdir(d)))
print("tempdir removed:", not os.path.exists(d))
with tempfile.SpooledTemporaryFile(max_size=10, dir=".") as t:
    t.write(b"x" * 100)
    t.seek(0)
    print("spooled:", len(t.read()))

step("subprocess")
with open("sub.out", "w") as out:
    r = subprocess.run(["sh", "-c", "echo from sh; ls deep; echo err >&2"], stdout=out, stderr=subprocess.STDOUT)
print("rc:", r.returncode, open("sub.out").read().split())
with open("sub.out", "a") as out:
    subprocess.run(["seq", "3"], stdout=out, check=True)
with open("sub.out") as inp:
    print(subprocess.run(["wc", "-l"], stdin=inp, capture_output=True, text=True).stdout.strip())
p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=open("cat.out", "wb"))
p.communicate(b"piped through cat\n")
print("cat:", open("cat.out").read().strip())
print(subprocess.run("cat cat.out | tr a-z A-Z > upper.out && cat upper.out", shell=True,
                     capture_output=True, text=True).stdout.strip())
print(subprocess.check_output([sys.executable, "-c", "import os; print(sorted(os.listdir('.'))[:3], os.getcwd() == os.environ['ROOT'])"],
                              text=True).strip())

step("sqlite3 module")
con = sqlite3.connect("py.db")
con.execute("create table t(id integer primary key, name text, v real)")
with con:
    con.executemany("insert into t(name, v) values (?, ?)", ((f"n{i}", i / 7) for i in range(5000)))
with con:
    con.execute("update t set v = v * 2 where id % 3 = 0")
try:
    with con:
        con.execute("insert into t(name, v) values ('rolled back', 0)")
        raise RuntimeError
except RuntimeError:
    pass
print(con.execute("select count(*), round(sum(v), 3), max(name) from t").fetchone())
print(con.execute("pragma integrity_check").fetchone())
con.execute("create index i on t(name)")
print(con.execute("select id from t where name = 'n4321'").fetchone())
con.close()
con = sqlite3.connect("py.db")
print("reopened:", con.execute("select count(*) from t").fetchone())
con.execute("vacuum")
con.close()
print("db exists:", os.path.exists("py.db"), "journal left:", os.path.exists("py.db-journal"))
