"""make bench-report's machinery at the tiniest size (KURA_BENCH_TINY=1, one
run): every workload of bench/report.py must stand in report.md with every
system's figure and a ratio, or the reason it has none, and every group's
figure must be a valid PNG.  Timings are not checked: benchmarks measure,
tests check."""
import importlib.util
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("KURA_BUILD", ROOT / "build"))

if not (BUILD / "bin" / "kura").exists():
    pytest.skip(f"no kura in {BUILD}/bin; build first", allow_module_level=True)

NUMBER = r"[\d,]+(?:\.\d+)?(?:e[-+]\d+)?"
VALUE = re.compile(rf"^{NUMBER} \({NUMBER}–{NUMBER}\)$")
RATIO = re.compile(rf"^\*\*{NUMBER}×\*\*$")


def load_report_module():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_png(path):
    """A PNG signature, then chunks whose CRCs hold, IHDR first, IEND last."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, kinds = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind}"
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            assert width > 200 and height > 200, f"{path}: {width}x{height}"
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds, f"{path}: chunks {kinds}"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    # The disk's side must be on a disk, as in a real report: the scratch
    # directory in the build tree.
    work = BUILD / "scratch" / "test_bench_report" / f"work-{os.getpid()}"
    env = dict(os.environ, KURA_BENCH_TINY="1", KURA_BENCH_RUNS="1", KURA_REPORT_DIR=str(out),
               KURA_BENCH_DIR=str(work), KURA_BUILD=str(BUILD))
    env.pop("KURA_BENCH_ONLY", None)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py")], env=env, capture_output=True,
                       text=True, timeout=500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not work.exists(), "the work directory was left behind"
    return out, (out / "report.md").read_text()


def test_every_workload_has_both_systems_and_a_ratio_or_a_reason(report):
    _, text = report
    mod = load_report_module()
    jobs = mod.workloads(mod.SCALES["tiny"])
    assert sum(len(j.metrics) for j in jobs) >= 27
    for group in dict.fromkeys(j.group for j in jobs):
        assert f"\n## {group}\n" in text, f"no section for {group}"
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 10:
            rows[cells[0]] = cells
    header = rows.pop("workload")
    assert header[2:] == ["tmpfs", "kura mem", "kura mem / tmpfs", header[5], "kura op", f"kura op / {header[5]}",
                          "kura fsync", f"kura fsync / {header[5]}"], header
    for job in jobs:
        for m in job.metrics:
            assert m.label in rows, f"{m.label} is not in the report"
            cells = rows.pop(m.label)
            assert cells[1].startswith(m.unit), cells
            values, ratios = [cells[i] for i in (2, 3, 5, 6, 8)], [cells[i] for i in (4, 7, 9)]
            for v in values:
                assert VALUE.match(v) or v == "—", f"{m.label}: {v!r}"
            for r in ratios:
                assert RATIO.match(r) or r == "— (see below)", f"{m.label}: {r!r}"
            if "—" in values or "— (see below)" in ratios:
                assert re.search(rf"^- {re.escape(job.name)}: (not run: |failed on .*: )\S", text, re.M), \
                    f"{m.label}: no reason given"
    assert not rows, f"rows for no workload: {list(rows)}"


def test_every_group_has_a_valid_png(report):
    out, text = report
    pictures = re.findall(r"^!\[([^\]]+)\]\(([^)]+\.png)\)$", text, re.M)
    groups = {g for g, _ in pictures}
    mod = load_report_module()
    assert groups == {j.group for j in mod.workloads(mod.SCALES["tiny"])}
    for _, name in pictures:
        check_png(out / name)


def test_the_machine_is_described(report):
    _, text = report
    for what in ("CPU", "cores", "memory", "kernel", "disk"):
        assert re.search(rf"^\| {what} \| \S", text, re.M), f"no {what} in the report"
