"""The whole-program benchmark (tools/bench_workload.py) runs and its five ways of writing the
program agree; the benchmarks page opens with the figure drawn from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
DOCS = CHECKOUT / "docs"


@pytest.mark.slow
def test_workload_benchmark_quick_run_agrees_across_variants(tmp_path):
    pytest.importorskip("pyopencl")
    out = tmp_path / "workload.json"
    run = subprocess.run(
        [sys.executable, str(CHECKOUT / "tools" / "bench_workload.py"), "--quick", "--json", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # the script asserts each variant's final arrays against typed pyopencl's and numpy's
    assert "checked: every variant's u and acc match numpy's" in run.stdout
    figures = json.loads(out.read_text(encoding="utf-8"))
    keys = [row["key"] for row in figures["rows"]]
    assert keys == ["launch", "hostkernel", "pyopencl typed", "elementwise", "array"]
    baseline = next(row for row in figures["rows"] if row["key"] == "pyopencl typed")
    assert baseline["wall_ratio"] == 1.0
    assert all(row["wall_us"] > 0 for row in figures["rows"])


def test_benchmarks_page_opens_with_the_figure_and_the_png_is_there():
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert "](benchmarks.png)" in text[: text.index("How long each takes")]
    png = DOCS / "benchmarks.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < 200_000
