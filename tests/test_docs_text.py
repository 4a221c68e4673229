"""What the README and the pages in docs/ tell a newcomer is what works: the reference's module
data entries carry their own text and the code's values."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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
