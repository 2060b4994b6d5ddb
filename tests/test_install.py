"""make install, staged: what it puts where, and what a user of the installed
kura relies on.  The build is installed with `cmake --install` (what `make
install` runs; the Makefile's wiring of PREFIX and DESTDIR is checked with
`make -n`) into a DESTDIR under a prefix other than the configured one, so
that nothing may lean on compiled-in or build-tree paths.  Checked: the
files, the soname, pkg-config, a program built against the installed header
and library, kura --version, kura run preloading the installed library, the
man pages and the bash completion.  The version everywhere is the one CMake
configured (CMakeCache.txt), the pool format src/layout.h's."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KURA_BUILD", ROOT / "build"))
PREFIX = "/opt/kura-test"

PROGRAM = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <kura.h>
int main(int argc, char **argv)
{
	if (argc != 2 || kura_mkfs(argv[1], 16 << 20, 1) < 0)
		return 2;
	int err = 0;
	kura_fs *fs = kura_mount(argv[1], NULL, &err);
	if (!fs) {
		fprintf(stderr, "%s\n", kura_last_error());
		return 3;
	}
	int fd = kura_open(fs, "/hello", O_CREAT | O_RDWR, 0644);
	char buf[8] = { 0 };
	if (fd < 0 || kura_pwrite(fs, fd, "hi", 2, 0) != 2 || kura_pread(fs, fd, buf, sizeof buf - 1, 0) != 2)
		return 4;
	printf("%s format %u\n", buf, kura_format_version());
	kura_close(fs, fd);
	return kura_unmount(fs) < 0 ? 5 : 0;
}
"""


def cache_value(name):
    text = (BUILD / "CMakeCache.txt").read_text()
    m = re.search(rf"^{name}:\w+=(.*)$", text, re.M)
    assert m, f"{name} not in {BUILD}/CMakeCache.txt"
    return m.group(1)


VERSION = cache_value("CMAKE_PROJECT_VERSION")
MAJOR = VERSION.split(".")[0]
FORMAT = int(re.search(r"#define KURA_VERSION\s+(\d+)u", (ROOT / "src" / "layout.h").read_text()).group(1))


def clean_env(**extra):
    """The environment without anything that could put kura under a test's
    programs from elsewhere."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "KURA_POOL",
                                                              "KURA_MOUNT", "PKG_CONFIG_PATH")}
    env.update(extra)
    return env


def need(*tools):
    for t in tools:
        assert shutil.which(t), f"{t} is needed (scripts/deps.sh installs it)"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    need("cmake")
    dest = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", PREFIX],
                       env=clean_env(DESTDIR=str(dest)), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return dest / PREFIX.lstrip("/")


@pytest.fixture
def pool(staged):
    """A fresh pool in /dev/shm made by the installed kura."""
    path = Path(f"/dev/shm/kura-test-install-{os.getpid()}.pool")
    r = subprocess.run([str(staged / "bin" / "kura"), "mkfs", str(path), "--size", "16M", "--force"],
                       env=clean_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    yield path
    path.unlink(missing_ok=True)


def test_make_install_passes_prefix_and_destdir():
    need("make")
    for args, want in ((["DESTDIR=/stage", "PREFIX=/opt/k"], "DESTDIR=/stage cmake --install build --prefix /opt/k"),
                       ([], "DESTDIR= cmake --install build --prefix /usr/local")):
        r = subprocess.run(["make", "-n", "-C", str(ROOT), "install", *args], env=clean_env(),
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert want in r.stdout.splitlines(), r.stdout


def test_files_are_installed(staged):
    for rel in ("bin/kura", "lib/libkura_core.a", "include/kura.h", "lib/pkgconfig/kura.pc",
                "share/man/man1/kura.1", "share/man/man3/kura.3", "share/bash-completion/completions/kura"):
        assert (staged / rel).is_file(), rel
    assert os.access(staged / "bin" / "kura", os.X_OK)
    assert (staged / "include" / "kura.h").read_text() == (ROOT / "include" / "kura.h").read_text()
    # libkura.so -> libkura.so.MAJOR -> libkura.so.MAJOR.MINOR.PATCH, the
    # only real file.
    lib = staged / "lib"
    assert os.readlink(lib / "libkura.so") == f"libkura.so.{MAJOR}"
    assert os.readlink(lib / f"libkura.so.{MAJOR}") == f"libkura.so.{VERSION}"
    real = lib / f"libkura.so.{VERSION}"
    assert real.is_file() and not real.is_symlink()


def test_soname(staged):
    need("readelf")
    r = subprocess.run(["readelf", "-d", str(staged / "lib" / "libkura.so")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"Library soname: [libkura.so.{MAJOR}]" in r.stdout, r.stdout


def test_pkg_config(staged):
    need("pkg-config")
    env = clean_env(PKG_CONFIG_PATH=str(staged / "lib" / "pkgconfig"))
    out = {}
    for q in ("--modversion", "--cflags", "--libs"):
        r = subprocess.run(["pkg-config", q, "kura"], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[q] = r.stdout.split()
    assert out["--modversion"] == [VERSION]
    # The paths point into the staged tree, however it was relocated.
    assert [os.path.realpath(f[2:]) for f in out["--cflags"]] == [os.path.realpath(staged / "include")]
    assert "-lkura" in out["--libs"]
    assert [os.path.realpath(f[2:]) for f in out["--libs"] if f.startswith("-L")] == [
        os.path.realpath(staged / "lib")]


def test_program_built_with_pkg_config(staged, tmp_path):
    need("pkg-config", "gcc", "readelf")
    env = clean_env(PKG_CONFIG_PATH=str(staged / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "kura"], env=env, capture_output=True, text=True)
    assert flags.returncode == 0, flags.stderr
    src = tmp_path / "p.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "p"
    cc = subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src), *flags.stdout.split(),
                         f"-Wl,-rpath,{staged / 'lib'}"], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    dyn = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
    assert f"Shared library: [libkura.so.{MAJOR}]" in dyn, dyn
    pool = Path(f"/dev/shm/kura-test-install-c-{os.getpid()}.pool")
    try:
        r = subprocess.run([str(exe), str(pool)], env=clean_env(), capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (0, f"hi format {FORMAT}\n"), r.stderr
    finally:
        pool.unlink(missing_ok=True)


def test_installed_kura_version(staged):
    for arg in ("--version", "version"):
        r = subprocess.run([str(staged / "bin" / "kura"), arg], env=clean_env(), capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (0, f"kura {VERSION} (pool format {FORMAT})\n"), r.stderr


def test_installed_kura_run_preloads_installed_library(staged, pool, tmp_path):
    kura = str(staged / "bin" / "kura")
    (tmp_path / "f").write_text("from the pool\n")
    r = subprocess.run([kura, "import", str(tmp_path / "f"), f"{pool}:/f"], env=clean_env(),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([kura, "run", "--pool", str(pool), "--", "cat", "/kura/f"], env=clean_env(),
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "from the pool\n"), r.stderr
    # The library mapped is the staged one, not the build tree's.
    r = subprocess.run([kura, "run", "--pool", str(pool), "--", "cat", "/proc/self/maps"], env=clean_env(),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    libs = {line.split()[-1] for line in r.stdout.splitlines() if "libkura" in line}
    assert libs == {str(staged / "lib" / f"libkura.so.{VERSION}")}, libs


def test_man_pages_render(staged):
    need("groff", "man")
    for page in ("man1/kura.1", "man3/kura.3"):
        path = staged / "share" / "man" / page
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(path)], capture_output=True, text=True)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        r = subprocess.run(["man", "-l", str(path)], env=clean_env(MANPAGER="cat", PAGER="cat", MANWIDTH="80"),
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        section = page[-1]
        assert lines[0].startswith(f"KURA({section})") and "NAME" in lines, r.stdout[:400]
        # The footer names the version CMake configured.
        assert f"kura {VERSION}" in lines[-1], lines[-1]


def cli_commands(staged):
    """The commands the installed kura's --help lists."""
    out = subprocess.run([str(staged / "bin" / "kura"), "--help"], env=clean_env(), capture_output=True,
                         text=True).stdout
    commands = re.findall(r"^  kura (\S+)", out, re.M)
    assert len(commands) >= 10, out
    return commands


def test_man_page_names_every_command(staged):
    commands = cli_commands(staged)
    page = (staged / "share" / "man" / "man1" / "kura.1").read_text()
    for c in commands:
        # groff wants "\-" for a hyphen in a command name.
        name = re.escape(c).replace(r"\-", r"\\?-")
        assert re.search(rf"^\.B {name} ", page, re.M), f"kura.1 does not describe '{c}'"
    header = (ROOT / "include" / "kura.h").read_text()
    page3 = (staged / "share" / "man" / "man3" / "kura.3").read_text()
    for fn in re.findall(r"\b(kura_\w+)\(", header):
        assert f"{fn}(" in page3, f"kura.3 does not name {fn}"


def complete(staged, line, cwd):
    """What the installed completion offers for `line`, as bash would ask it
    (COMP_WORDS split at ':' as readline's word breaks do)."""
    comp = staged / "share" / "bash-completion" / "completions" / "kura"
    script = (f"source {comp}\n"
              'COMP_LINE=$1 COMP_POINT=${#1}\n'
              'COMP_WORDS=($(sed "s/:/ : /g" <<<"$1")); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n'
              '[[ $1 == *" " ]] && COMP_CWORD=${#COMP_WORDS[@]}\n'
              '_kura kura\n'
              '((${#COMPREPLY[@]})) && printf "%s\\n" "${COMPREPLY[@]}"; true\n')
    r = subprocess.run(["bash", "--norc", "-c", script, "bash", line], cwd=cwd, capture_output=True, text=True,
                       env=clean_env(PATH=f"{staged / 'bin'}:{os.environ['PATH']}"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return sorted(r.stdout.split("\n")[:-1])


def test_bash_completion(staged, pool, tmp_path):
    comp = staged / "share" / "bash-completion" / "completions" / "kura"
    r = subprocess.run(["bash", "--norc", "-c", f"source {comp}; complete -p kura"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("complete ") and "-F _kura" in r.stdout, r.stdout + r.stderr
    assert r.stdout.split()[-1] == "kura"

    assert complete(staged, "kura ", tmp_path) == sorted(cli_commands(staged) + ["help", "version", "--help",
                                                                               "--version"])
    assert complete(staged, "kura i", tmp_path) == ["import", "info"]
    assert complete(staged, "kura mkfs --", tmp_path) == ["--force", "--help", "--mode", "--size"]
    assert complete(staged, "kura ls -", tmp_path) == ["--help", "-a", "-l"]
    assert complete(staged, "kura run --", tmp_path) == ["--", "--help", "--mount", "--pool"]
    # Pool files, and directories on the way to them; nothing else.
    (tmp_path / "a.pool").touch()
    (tmp_path / "notes.txt").touch()
    (tmp_path / "sub").mkdir()
    assert complete(staged, "kura fsck ", tmp_path) == ["a.pool", "sub/"]
    assert complete(staged, "kura ls a", tmp_path) == ["a.pool:"]
    # POOL:/path: the path part listed from the pool by the installed kura;
    # bash gets back what follows the ':', quoted for the line.
    kura = str(staged / "bin" / "kura")
    src = tmp_path / "tree"
    (src / "a dir").mkdir(parents=True)
    (src / "alpha").write_text("a\n")
    (src / "a dir" / "inner").write_text("i\n")
    r = subprocess.run([kura, "import", str(src), f"{pool}:/t"], env=clean_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert complete(staged, f"kura ls {pool}:/", tmp_path) == ["/t/"]
    assert complete(staged, f"kura cat {pool}:/t/a", tmp_path) == ["/t/a\\ dir/", "/t/alpha"]
    assert complete(staged, f"kura cat {pool}:/t/a\\ dir/", tmp_path) == ["/t/a\\ dir/inner"]
    assert complete(staged, f"kura export {pool}:/t /no", tmp_path) == []
