"""Every code block of the documentation (docs/*.md) runs, as tests/test_readme.py runs the
README's: a block marked as continuing the one above runs in that block's namespace, and each
page's first block starts a fresh one. The build's world diagram is checked against its ranges.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_readme import _BLOCK, CONTINUED, FRAGMENT

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def _blocks(page: Path) -> list[tuple[int, str, str]]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        how = {FRAGMENT: "fragment", CONTINUED: "continued"}.get(m.group("before").strip(), "run")
        out.append((line, m.group("code"), how))
    return out


CASES = [(page, i) for page in PAGES for i in range(len(_blocks(page)))]


def test_the_docs_have_runnable_python_blocks():
    assert len(CASES) >= 8
    for page in PAGES:
        blocks = _blocks(page)
        assert not blocks or blocks[0][2] != "continued", page.name


SLOW_PAGES = {"processes"}  # worker processes: a spawn pool, a Dask cluster


@pytest.mark.parametrize(
    "page, i",
    [
        pytest.param(p, i, marks=[pytest.mark.slow] if p.stem in SLOW_PAGES else [])
        for p, i in CASES
    ],
    ids=[f"{p.stem}-{_blocks(p)[i][0]}" for p, i in CASES],
)
def test_docs_block_runs(page, i, monkeypatch):
    blocks = _blocks(page)
    start = i
    while blocks[start][2] == "continued":
        start -= 1
    chain = blocks[start : i + 1]
    compiled = [compile(code, f"{page.name}:{line}", "exec") for line, code, _ in chain]
    if chain[-1][2] == "fragment":
        return
    source = "".join(code for _, code, _ in chain)
    if "pyopencl" in source or "specializer.backends.opencl" in source:
        pytest.importorskip("pyopencl")
    if "dask" in source:
        pytest.importorskip("dask.distributed")
    if "specializer.backends import cuda" in source:
        pytest.importorskip("cuda.bindings.nvrtc")  # the `cuda` extra
    monkeypatch.setattr(sys, "path", list(sys.path))  # a block may add its own directory
    namespace = {"__name__": f"docs_{page.stem}_{chain[0][0]}"}
    for code in compiled:
        exec(code, namespace)


def test_the_world_diagram_draws_each_range_and_marks_the_open_ones():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from worlddiagram import draw, parse
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    text = draw(parse("a | 1 | 2\nb | 3 | *"))
    lines = text.splitlines()
    assert lines[0].split("|")[1].split() == ["1", "2", "3", "4"]
    assert lines[2] == "a | ========"  # worlds 1 and 2
    assert lines[3] == "b |         ========>"  # from world 3 on, still valid


def test_help_of_the_package_starts_with_a_launch_that_runs():
    import re
    import textwrap

    import specializer

    doc = specializer.__doc__ or ""
    head, _, rest = doc.partition("::\n\n")
    assert "\n\n" in head and len(head.splitlines()) <= 4  # the summary, then the start
    block = textwrap.dedent(re.match(r"(?:    .*\n|\n)+", rest).group(0))
    assert "from specializer.backends import opencl as cl" in block and "cl.launch(" in block
    pytest.importorskip("pyopencl")
    exec(compile(block, "specializer.__doc__", "exec"), {"__name__": "docs_package_help"})
