"""Sphinx configuration: `sphinx-build -W -b html docs docs/_build/html`."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import specializer  # noqa: E402

project = "specializer"
author = "the specializer developers"
copyright = "2026, the specializer developers"
release = version = specializer.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "worlds"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_mock_imports = ["cuda"]
suppress_warnings = ["myst.xref_missing"]

try:
    import furo  # noqa: F401

    html_theme = "furo"
except ImportError:
    html_theme = "alabaster"
html_title = f"specializer {version}"


def _no_generic_class_signature(app, what, name, obj, options, signature, return_annotation):
    """An argument type (``Array``, ``Buffer``, ``Struct``, ...) is no value to create: its
    ``(*args, **kwargs)`` says nothing, so its entry shows no signature."""
    if what in ("class", "exception") and signature == "(*args, **kwargs)":
        return "", return_annotation
    return None


def setup(app):
    app.connect("autodoc-process-signature", _no_generic_class_signature)
