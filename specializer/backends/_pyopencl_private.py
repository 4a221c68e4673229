"""The private pyopencl attributes the OpenCL back-end uses, each for what it measurably buys.

- ``Kernel._set_arg_buf(index, obj)``: set an argument to a buffer-protocol object's bytes. The
  public ``set_arg`` tries several casts on a numpy scalar first: 99,168 host instructions a
  launch against 11,699 typed (``tools/bench_launch.py``, CPython 3.11). Without it the launch
  path gives ``set_arg`` the same bytes: correct, slower.
- ``Program._get_prg()``: the built ``_Program``, which, unlike the public wrapper, holds no
  ``Context``, so a context the user drops is freed; there is no public way to the raw program
  of a source that defines no kernel.
- ``pyopencl._PYOPENCL_NO_CACHE``: what ``PYOPENCL_NO_CACHE=1`` sets at pyopencl's import, read
  at each use. With no home directory (a container under an unknown uid) pyopencl's first
  ``Kernel`` fails to find pytools' cache directory, and pyopencl is usually imported before
  this back-end: :func:`cache_off_without_home` turns its disk caches off instead (SPEC 9).

Checked against the releases in ``CHECKED``; ``tests/test_pyopencl_private.py`` fails, naming
the attribute and these releases, when one changes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyopencl as cl

__all__ = ["CHECKED", "SET_ARG_BUF", "cache_off_without_home", "raw_program", "set_arg_buf"]

#: the pyopencl releases this module was checked against
CHECKED = ("2026.1.4",)

#: the name of the Kernel method that sets an argument's raw bytes
SET_ARG_BUF = "_set_arg_buf" if hasattr(cl.Kernel, "_set_arg_buf") else "set_arg"


def set_arg_buf(kernel: Any) -> Callable[[int, Any], None]:
    """``kernel``'s bound setter of an argument's raw bytes: ``setter(index, obj)``."""
    return getattr(kernel, SET_ARG_BUF)  # type: ignore[no-any-return]


def raw_program(program: cl.Program) -> Any:
    """The built program of ``program`` (after its build), which holds no ``Context`` object."""
    return program._get_prg()


def _no_home() -> bool:
    """Whether pytools (pyopencl's caches) finds no user cache directory: no absolute
    ``XDG_CACHE_HOME`` and no absolute home directory (``HOME``, else the passwd entry)."""
    if sys.platform == "win32" or os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):
        return False
    try:
        return not Path.home().is_absolute()
    except (RuntimeError, KeyError, OSError):
        return True


def cache_off_without_home() -> bool:
    """Turn pyopencl's own disk caches off where there is no home directory to keep them in
    (as ``PYOPENCL_NO_CACHE=1`` would have at its import); whether it did."""
    if not _no_home():
        return False
    cl._PYOPENCL_NO_CACHE = True
    return True
