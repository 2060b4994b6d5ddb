"""make install into a staging directory (DESTDIR and PREFIX), and what a
user of the installed kura relies on: the files, the soname, pkg-config, a
program built against the installed header and library, kura --version,
kura run finding its library, the man pages and the bash completion."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KURA_BUILD", ROOT / "build"))

PROGRAM = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <kura.h>
int main(int argc, char **argv)
{
	if (kura_mkfs(argv[1], 16 << 20, 1))
		return 1;
	kura_fs *fs = kura_mount(argv[1], NULL, NULL);
	int fd = kura_open(fs, "/hello", O_CREAT | O_RDWR, 0644);
	char buf[8] = { 0 };
	if (kura_pwrite(fs, fd, "hi", 2, 0) != 2 || kura_pread(fs, fd, buf, sizeof buf, 0) != 2)
		return 1;
	printf("%s format %u\n", buf, kura_format_version());
	kura_close(fs, fd);
	return kura_unmount(fs);
}
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    if not shutil.which("cmake"):
        pytest.skip("cmake is needed")
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", "/opt/kura-test"],
                       env=dict(os.environ, DESTDIR=str(dest)), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return dest / "opt" / "kura-test"


def test_files_are_installed(staged):
    for rel in ("bin/kura", "lib/libkura.so", "lib/libkura_core.a", "include/kura.h", "lib/pkgconfig/kura.pc",
                "share/man/man1/kura.1", "share/man/man3/kura.3", "share/bash-completion/completions/kura"):
        assert (staged / rel).exists(), rel
    assert os.access(staged / "bin" / "kura", os.X_OK)


def test_soname(staged):
    if not shutil.which("readelf"):
        pytest.skip("readelf is needed")
    r = subprocess.run(["readelf", "-d", str(staged / "lib" / "libkura.so")], capture_output=True, text=True)
    assert "Library soname: [libkura.so.0]" in r.stdout, r.stdout
    real = os.path.basename(os.path.realpath(staged / "lib" / "libkura.so"))
    assert real.startswith("libkura.so.0.") and real.count(".") == 4, real  # libkura.so.0.MINOR.PATCH


def test_program_built_with_pkg_config(staged, tmp_path):
    if not shutil.which("pkg-config") or not shutil.which("gcc"):
        pytest.skip("pkg-config and gcc are needed")
    env = dict(os.environ, PKG_CONFIG_PATH=str(staged / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "kura"], env=env, capture_output=True, text=True)
    assert flags.returncode == 0, flags.stderr
    src = tmp_path / "p.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "p"
    cc = subprocess.run(["gcc", "-o", str(exe), str(src)] + flags.stdout.split(), capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    pool = f"/dev/shm/kura-install-{os.getpid()}.pool"
    try:
        r = subprocess.run([str(exe), pool], env=dict(os.environ, LD_LIBRARY_PATH=str(staged / "lib")),
                           capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.startswith("hi format "), r.stdout + r.stderr
    finally:
        if os.path.exists(pool):
            os.unlink(pool)


def test_installed_kura_runs(staged):
    kura = str(staged / "bin" / "kura")
    v = subprocess.run([kura, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("kura ") and "pool format" in v.stdout, v.stdout
    pool = f"/dev/shm/kura-install-run-{os.getpid()}.pool"
    try:
        subprocess.run([kura, "mkfs", pool, "--size", "16M"], check=True, capture_output=True)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        r = subprocess.run([kura, "run", "--pool", pool, "--", "sh", "-c", "echo in > /kura/f && cat /kura/f"],
                           env=env, capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (0, "in\n"), r.stderr
    finally:
        if os.path.exists(pool):
            os.unlink(pool)


def test_man_pages_render(staged):
    if not shutil.which("groff"):
        pytest.skip("groff is needed")
    for page in ("man1/kura.1", "man3/kura.3"):
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", str(staged / "share" / "man" / page)],
                           capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "" and "kura" in r.stdout, r.stderr


def test_bash_completion_registers(staged):
    comp = staged / "share" / "bash-completion" / "completions" / "kura"
    r = subprocess.run(["bash", "-c", f"source {comp}; complete -p kura; "
                        "COMP_WORDS=(kura mk); COMP_CWORD=1; _kura; echo ${COMPREPLY[@]}"],
                       capture_output=True, text=True)
    assert "complete -F _kura kura" in r.stdout and "mkfs" in r.stdout, r.stdout + r.stderr
