"""What the README and the pages in docs/ tell a newcomer to type is what works: every install
line is the README's (the venv's pip, ``editable_mode=compat``, which type checkers follow),
tools run from ``.venv/bin`` (not on ``PATH`` unless the venv is activated), each of the
README's two commands makes the venv it uses, the extras are listed as pyproject.toml has
them, and the reference's module data entries carry their own text and the code's values."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMPAT = "--config-settings editable_mode=compat"
TOOLS = ("pip", "pip3", "pytest", "mypy", "pyright", "ruff", "sphinx-build")

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")


def _code(page: Path) -> list[tuple[int, str, bool]]:
    """(line, text, in a shell block) of each shell line and inline code span of a page (Python
    blocks are tests/test_docs.py's)."""
    text = page.read_text(encoding="utf-8")
    out = []
    prose = text
    for m in _FENCE.finditer(text):
        prose = prose.replace(m.group(0), "\n" * m.group(0).count("\n"))
        if m.group(1) in ("sh", "bash", "console", ""):
            first = text.count("\n", 0, m.start(2)) + 1
            lines = m.group(2).splitlines()
            out += [(first + i, s, True) for i, s in enumerate(lines) if s.strip()]
    for m in _SPAN.finditer(prose):
        out.append((prose.count("\n", 0, m.start()) + 1, m.group(1), False))
    return out


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT)}:{line}"


def test_every_install_line_is_the_readmes():
    seen = 0
    for page in PAGES:
        for line, code, _ in _code(page):
            for m in re.finditer(r"(\S*)pip install\b[^&#]*", code):
                seen += 1
                assert m.group(1) == ".venv/bin/", (_where(page, line), m.group(0))
                if " -e " in m.group(0):
                    assert COMPAT in m.group(0), (_where(page, line), m.group(0))
    assert seen >= 6


def test_tools_are_run_from_the_venv():
    """A tool as a command: a shell line, or a code span with its arguments (a span that only
    names it, `mypy`, is a name)."""
    tool = r"(?:^|&&|\|\||;)\s*(" + "|".join(map(re.escape, TOOLS)) + ")"
    command = {True: re.compile(tool + r"(?=\s|$)"), False: re.compile(tool + r"(?=\s+\S)")}
    for page in PAGES:
        for line, code, in_block in _code(page):
            m = command[in_block].search(code)
            assert m is None, f"{_where(page, line)}: run {m.group(1)} as .venv/bin/{m.group(1)}"


def _two_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Two commands\n", 1)[1].split("\n## ", 1)[0]
    block = _FENCE.search(section)
    assert block is not None and block.group(1) == "sh"
    return [s for s in block.group(2).splitlines() if s.strip()]


@pytest.mark.parametrize(
    "i, extras, runs",
    [(0, {"opencl"}, "-m specializer demo"), (1, {"opencl", "cuda", "test"}, "-m pytest")],
)
def test_each_of_the_two_commands_makes_the_venv_it_uses(i, extras, runs):
    commands = _two_commands()
    assert len(commands) == 2
    command = commands[i].split("#", 1)[0].strip()
    subprocess.run(["bash", "-n", "-c", command], check=True)  # one line of valid shell
    steps = [s.strip() for s in re.split(r"&&|\|\|", command)]
    assert steps[0] == "[ -d .venv ]" and steps[1].startswith("python3 -m venv "), command
    install = re.fullmatch(r"\.venv/bin/pip install -e '\.\[([a-z,]+)\]' " + COMPAT, steps[2])
    assert install is not None, steps[2]
    assert set(install.group(1).split(",")) == extras
    assert steps[3] == f".venv/bin/python {runs}" and len(steps) == 4


def _extras() -> dict[str, list[str]]:
    """pyproject.toml's extras, each with its packages' names (read without tomllib: 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    table = re.sub(r"#[^\n]*", "", table)
    out = {}
    for m in re.finditer(r"^(\w+) = \[(.*?)\]$", table, re.S | re.M):
        out[m.group(1)] = re.findall(r'"([A-Za-z0-9_.-]+)', m.group(2))
    return out


def test_the_extras_are_listed_as_pyproject_has_them():
    extras = _extras()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = re.search(r"^Extras: (.*?)\.", readme, re.M)
    assert line is not None
    assert re.findall(r"`(\w+)`", line.group(1)) == list(extras)
    start = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    listed = re.search(r"`test` \(([^)]*)\)", start)
    assert listed is not None
    assert re.split(r", | and ", listed.group(1)) == extras["test"]


def _data_entries(page: str) -> dict[str, tuple[str | None, str]]:
    """name: (:value:, text) of each ``py:data`` entry of a reference page."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    out = {}
    for m in re.finditer(r"^\.\. py:data:: (\S+)\n((?:   .*\n|\n)*)", text, re.M):
        body = m.group(2)
        value = re.search(r"^   :value: (.*)$", body, re.M)
        out[m.group(1)] = (value.group(1) if value else None, body)
    return out


@pytest.mark.parametrize("backend", ["opencl", "cuda"])
def test_the_references_launch_options_and_compiler_kwargs_are_the_codes(backend):
    module = pytest.importorskip(f"specializer.backends.{backend}")
    entries = _data_entries(f"reference-{backend}.md")
    value, _ = entries["LAUNCH_OPTIONS"]
    assert value is not None and ast.literal_eval(value) == module.LAUNCH_OPTIONS
    _, text = entries["COMPILER_KWARGS"]
    assert re.findall(r"^   - ``(\w+)``:", text, re.M) == list(module.COMPILER_KWARGS)


def test_no_module_data_entry_shows_its_types_docstring():
    """autodoc gives module data the ``#:`` comment above its assignment in the module it
    names, else its value's docstring: for a tuple or a dict, Python's text about tuples."""
    analyzer = pytest.importorskip("sphinx.pycode").ModuleAnalyzer
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^\.\. autodata:: (\S+)\.(\w+)$", text, re.M):
            modname, name = m.groups()
            value = getattr(importlib.import_module(modname), name)
            if value.__doc__ != type(value).__doc__:  # its own docstring
                continue
            comments = analyzer.for_module(modname).find_attr_docs()
            assert ("", name) in comments, f"{page.name}: {m.group(0)} shows {type(value)}'s text"


def test_entries_under_a_module_are_named_once():
    """Under ``.. py:module:: m``, ``.. py:data:: m.NAME`` would be ``m.m.NAME``."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for module in re.findall(r"^\.\. py:module:: (\S+)$", text, re.M):
            doubled = re.search(rf"^\.\. py:\w+:: {re.escape(module)}\.", text, re.M)
            assert doubled is None, f"{page.name}: {doubled.group(0)}: name it without the module"
