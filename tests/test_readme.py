"""Every code block of the README runs (or, where it says it is a fragment, compiles), so the
README cannot drift from the code. A block marked as continuing the one above runs in that
block's namespace, as a reader would run them one after the other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FRAGMENT = "<!-- fragment: compiled, not run -->"
CONTINUED = "<!-- continues the block above -->"
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[int, str, str]]:
    """(line, code, how: "run", "fragment" or "continued") of each python block."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        mark = m.group("before").strip()
        how = {FRAGMENT: "fragment", CONTINUED: "continued"}.get(mark, "run")
        out.append((line, m.group("code"), how))
    return out


BLOCKS = _blocks()


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 1
    assert BLOCKS[0][2] != "continued"


def _chain(i: int) -> list[tuple[int, str, str]]:
    """Block i with the blocks it continues, first to last."""
    start = i
    while BLOCKS[start][2] == "continued":
        start -= 1
    return BLOCKS[start : i + 1]


@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=[f"line{b[0]}" for b in BLOCKS])
def test_readme_block_runs(i):
    chain = _chain(i)
    compiled = [compile(code, f"README.md:{line}", "exec") for line, code, _ in chain]
    if chain[-1][2] == "fragment":
        return
    if any("pyopencl" in code for _, code, _ in chain):
        pytest.importorskip("pyopencl")
    namespace = {"__name__": f"readme_line{chain[0][0]}"}
    for code in compiled:
        exec(code, namespace)
