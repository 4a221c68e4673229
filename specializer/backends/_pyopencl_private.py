"""The private pyopencl attributes the OpenCL back-end uses, each for what it measurably buys.

Everything else it uses is public (``pyopencl.Kernel``, ``pyopencl.enqueue_nd_range_kernel``,
``pyopencl.Buffer``, ... are the very objects of ``pyopencl._cl``; the launch path checks an
array's layout through the public ``Array.flags`` and only when an index gets a new array).

- ``Kernel._set_arg_buf(index, obj)``: set a kernel argument to the bytes of a buffer-protocol
  object (a numpy scalar, or the bytes ``struct`` packs a Python scalar into). The public
  ``Kernel.set_arg`` tries several casts on a numpy scalar before it takes its bytes: a launch
  setting one that way costs 99,168 host instructions against 11,699 with its scalar types
  declared (``tools/bench_launch.py``, "pyopencl untyped" against "pyopencl typed", CPython
  3.11). Without it (a release that drops it) the launch path gives ``set_arg`` the same
  bytes: correct, slower.
- ``Program._get_prg()``: the built ``_Program`` of a ``pyopencl.Program``. The public wrapper
  holds its ``Context`` object; the built program the caches keep must not, or no context the
  user drops would be freed (``tests/test_opencl.py``: a dropped context is freed, its
  reference count back to one). A release without it fails the test below: there is no
  public way to the raw program of a source that defines no kernel.

- ``pyopencl._PYOPENCL_NO_CACHE``: what ``PYOPENCL_NO_CACHE=1`` in the environment sets when
  pyopencl is imported, read again at each use. pyopencl keeps its kernels' invokers (and on
  some platforms its programs) in a cache that pytools puts under the user's cache directory;
  with no home directory (``HOME`` unset, no passwd entry, no absolute ``XDG_CACHE_HOME``: a
  container under an unknown uid) its first ``pyopencl.Kernel`` raises "could not determine the
  home directory", and pyopencl is usually imported (``import pyopencl.array``) before this
  back-end could set the variable. :func:`cache_off_without_home` sets the flag there, so a
  program with no home builds and runs with pyopencl's disk caches off (SPEC 9). A release
  without the flag fails the test below.

Checked against the pyopencl releases in ``CHECKED``; ``tests/test_pyopencl_private.py``
fails, naming the attribute and these releases, when one changes.
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
