"""Extended attributes and POSIX ACLs through the interposition layer, each
call's answer against the disk's file system, and the tools that carry
them (cp -a, rsync -X, tar --xattrs, setfacl/getfacl).  Run through ctest."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from preload_common import env  # noqa: F401 (the fixture)
from preload_common import KURA_BIN, KURA_BUILD, TAG, bash_as_on_tmpfs, make_base


XATTRS = r"""import os, sys, errno
b = sys.argv[1]
f = b + "/f"; d = b + "/d"
open(f, "w").write("x")
os.mkdir(d)
os.symlink("f", b + "/l")
def tryit(what, fn):
    try:
        r = fn()
        print(what, "->", r)
    except OSError as e:
        print(what, "->", errno.errorcode[e.errno])
tryit("set", lambda: os.setxattr(f, "user.a", b"1"))
tryit("get", lambda: os.getxattr(f, "user.a"))
tryit("set create again", lambda: os.setxattr(f, "user.a", b"2", os.XATTR_CREATE))
tryit("set replace missing", lambda: os.setxattr(f, "user.b", b"2", os.XATTR_REPLACE))
tryit("set replace", lambda: os.setxattr(f, "user.a", b"22", os.XATTR_REPLACE))
tryit("set b", lambda: os.setxattr(f, "user.b", b""))
tryit("list", lambda: sorted(os.listxattr(f)))
tryit("get missing", lambda: os.getxattr(f, "user.zz"))
tryit("remove", lambda: os.removexattr(f, "user.a"))
tryit("remove missing", lambda: os.removexattr(f, "user.a"))
tryit("list after", lambda: sorted(os.listxattr(f)))
tryit("no namespace", lambda: os.setxattr(f, "foo", b"1"))
tryit("empty user", lambda: os.setxattr(f, "user.", b"1"))
tryit("long name", lambda: os.setxattr(f, "user." + "n" * 251, b"1"))
tryit("ok name 255", lambda: os.setxattr(f, "user." + "n" * 250, b"1"))
tryit("big value", lambda: os.setxattr(f, "user.big", b"v" * 70000))
tryit("too much", lambda: os.setxattr(f, "user.big", b"v" * 5000))
tryit("dir", lambda: os.setxattr(d, "user.d", b"dir"))
tryit("dir get", lambda: os.getxattr(d, "user.d"))
tryit("symlink user nofollow", lambda: os.setxattr(b + "/l", "user.s", b"1", follow_symlinks=False))
tryit("symlink follow get", lambda: os.getxattr(b + "/l", "user.b"))
tryit("trusted", lambda: os.setxattr(f, "trusted.t", b"t"))
tryit("security", lambda: os.setxattr(f, "security.s", b"s"))
tryit("list all", lambda: sorted(os.listxattr(f)))
fd = os.open(f, os.O_RDONLY)
tryit("fget", lambda: os.getxattr(fd, "trusted.t"))
tryit("flist", lambda: sorted(os.listxattr(fd)))
os.close(fd)
tryit("missing file", lambda: os.getxattr(b + "/nope", "user.a"))
os.unlink(f)
open(f, "w").write("y")
tryit("new file list", lambda: os.listxattr(f))
"""


def test_extended_attributes_as_on_ext4(env, tmp_path):
    """Each call's answer (value or errno) as the disk's file system gives it
    (tmpfs took user.* only in Linux 6.6)."""
    prog = tmp_path / "xattrs.py"
    prog.write_text(XATTRS)
    ref_dir = Path(KURA_BUILD or tmp_path) / f"xattr-ref-{TAG}"
    ref_dir.mkdir()
    try:
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        ref = subprocess.run(["python3", str(prog), str(ref_dir)], env=e, capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(ref_dir, ignore_errors=True)
    if "set -> ENOTSUP" in ref.stdout:
        pytest.skip("the reference file system has no user.* attributes")
    base, e = make_base(env, "kura", "xattrs")
    r = subprocess.run(["python3", str(prog), base], env=e, capture_output=True, text=True, timeout=60)
    assert ref.returncode == 0 and "get -> b'1'" in ref.stdout, ref.stdout + ref.stderr
    assert (r.returncode, r.stdout) == (0, ref.stdout), r.stderr
    # An ACL must be one, as ext4 checks (test_posix_acls_as_on_ext4 has the rest).
    acl = subprocess.run(["python3", "-c", "import os,sys; os.setxattr(sys.argv[1], 'system.posix_acl_access', b'x')",
                          base + "/f"], env=e, capture_output=True, text=True)
    assert "Invalid argument" in acl.stderr, acl.stderr


XATTR_TOOLS = r"""
cd "$B"
mkdir src; echo hi > src/a
python3 -c "import os; os.setxattr('src/a', 'user.color', b'blue'); os.setxattr('src', 'user.dir', b'yes')"
cp -a src cp; rsync -aX src/ rs/; tar --xattrs -cf x.tar src; mkdir t; tar --xattrs -xf x.tar -C t
for f in cp/a rs/a t/src/a; do python3 -c "import os,sys; print(sys.argv[1], os.getxattr(sys.argv[1], 'user.color'))" $f; done
python3 -c "import os; print(sorted(os.listxattr('cp')))"
"""


def test_extended_attributes_survive_cp_rsync_tar(env):
    probe = env["tmpfs"] / "xattr-probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.p", b"1")
    except OSError:
        pytest.skip("tmpfs here has no user.* attributes (Linux < 6.6)")
    if not shutil.which("rsync"):
        pytest.skip("rsync is not installed")
    bash_as_on_tmpfs(env, "xattrtools", XATTR_TOOLS, "t/src/a b'blue'")


ACLS = r"""cd "$B"
umask 022
echo secret > f; chmod 644 f
setfacl -m u:nobody:--- f; getfacl -n f | sed '/^# file/d'
ls -l f | cut -c1-11
su nobody -s /bin/sh -c "cat $B/f" 2>&1 | sed "s#$B#BASE#"
setfacl -m u:nobody:r f; su nobody -s /bin/sh -c "cat $B/f" 2>&1 | sed "s#$B#BASE#"
chmod 600 f; getfacl -n f | sed '/^# file/d'; su nobody -s /bin/sh -c "cat $B/f" 2>&1 | sed "s#$B#BASE#"
setfacl -b f; getfacl -n f | sed '/^# file/d'; ls -l f | cut -c1-11
mkdir d; chmod 777 d; setfacl -d -m u:nobody:rwx,g::r-x,o::--- d; getfacl -n d | sed '/^# file/d'
touch d/new; mkdir d/sub; getfacl -n d/new d/sub | sed '/^# file/d'; ls -ld d/new d/sub | cut -c1-11
su nobody -s /bin/sh -c "echo hi > $B/d/new && cat $B/d/new" 2>&1 | sed "s#$B#BASE#"
setfacl -m u:nobody:rw f 2>&1; su nobody -s /bin/sh -c "setfacl -m u:nobody:rwx $B/f" 2>&1 | sed "s#$B#BASE#"
cp -a f g; getfacl -n g | sed '/^# file/d'
setfacl -m m::r f; getfacl -n f | sed '/^# file/d'
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setfacl"), reason="needs root and the acl tools")
def test_posix_acls_as_on_ext4(tmp_path):
    """setfacl/getfacl, and what the user nobody may then do, as on the
    disk's file system: a named user denied and allowed, chmod and the
    mask, default ACLs inherited by files and directories, refusals."""
    ref = Path(KURA_BUILD or tmp_path) / f"acl-ref-{TAG}"
    ref.mkdir(mode=0o777)
    ref.chmod(0o777)
    pool = Path(f"/dev/shm/kura-acl-{TAG}.pool")
    try:
        probe = subprocess.run(["su", "nobody", "-s", "/bin/sh", "-c", f"test -x {ref}"])
        if probe.returncode != 0:
            pytest.skip("the user nobody cannot reach the reference directory")
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        want = subprocess.run(["bash", "-c", f"B={ref}\n" + ACLS], env=e, capture_output=True, text=True,
                              timeout=120)
        if "Operation not supported" in want.stdout + want.stderr:
            pytest.skip("the disk's file system has no ACLs")
        # Others may use the pool, as the user nobody must.
        subprocess.run([KURA_BIN, "mkfs", str(pool), "--size", "64M", "--mode", "0666"], check=True,
                       capture_output=True)
        got = subprocess.run([KURA_BIN, "run", "--pool", str(pool), "--", "bash", "-c",
                              "mkdir -m 777 /kura/a && B=/kura/a\n" + ACLS], env=e, capture_output=True,
                             text=True, timeout=120)
        assert "secret" in want.stdout and "user:65534:---" in want.stdout, want.stdout + want.stderr
        assert got.stdout + got.stderr == want.stdout + want.stderr
        f = subprocess.run([KURA_BIN, "fsck", str(pool)], capture_output=True, text=True)
        assert f.returncode == 0, f.stdout + f.stderr
    finally:
        shutil.rmtree(ref, ignore_errors=True)
        if pool.exists():
            pool.unlink()
