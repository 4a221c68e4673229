"""The private pyopencl attributes the OpenCL back-end uses, each for what it measurably buys.

- ``Kernel._set_arg_buf(index, obj)``: sets an argument to a buffer-protocol object's bytes,
  where the public ``set_arg`` tries casts first: 11,699 host instructions a launch against
  99,168 (``tools/bench_launch.py``, CPython 3.11). Without it, ``set_arg`` gets the bytes.
- ``Program._get_prg()``: the built program, which unlike the public wrapper holds no
  ``Context`` (a dropped context is freed), even for a source that defines no kernel.
- ``CommandQueue._info_cache_context``: the context object ``queue.context`` returns, which
  pyopencl caches on the queue at the first read; read without the property's Python frame,
  a launch on a given queue finds its context's key in about 1,100 fewer instructions
  (``tools/bench_launch.py``, CPython 3.11). Without it, ``queue.context``.
- ``pyopencl._PYOPENCL_NO_CACHE``: what ``PYOPENCL_NO_CACHE=1`` sets at pyopencl's import (which
  usually comes first), read at each use: with no home directory pyopencl's first ``Kernel``
  fails to find pytools' cache directory, so :func:`cache_off_without_home` sets it (SPEC 9).

Checked against the releases in ``CHECKED``; ``tests/test_pyopencl_private.py`` fails, naming
the attribute and these releases, when one changes."""

from __future__ import annotations

import operator
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyopencl as cl

__all__ = [
    "CHECKED",
    "QUEUE_CONTEXT",
    "SET_ARG_BUF",
    "cache_off_without_home",
    "queue_context",
    "raw_program",
    "set_arg_buf",
]

#: the pyopencl releases this module was checked against
CHECKED = ("2026.1.4",)

#: the name of the Kernel method that sets an argument's raw bytes
SET_ARG_BUF = "_set_arg_buf" if hasattr(cl.Kernel, "_set_arg_buf") else "set_arg"


#: the attribute a queue caches its context object in, at the first read of ``queue.context``
QUEUE_CONTEXT = "_info_cache_context"


#: ``queue_context(queue)``: the context object ``queue.context`` returns, where the queue has
#: cached it (an AttributeError before its first read, and for what is not a queue); a C
#: callable, so a launch on a given queue reads it without a frame
queue_context: Callable[[Any], Any] = operator.attrgetter(QUEUE_CONTEXT)


def set_arg_buf(kernel: Any) -> Callable[[int, Any], None]:
    """``kernel``'s bound setter of an argument's raw bytes: ``setter(index, obj)``."""
    return getattr(kernel, SET_ARG_BUF)  # type: ignore[no-any-return]


def raw_program(program: cl.Program) -> Any:
    """The built program of ``program`` (after its build), which holds no ``Context`` object."""
    return program._get_prg()


def cache_off_without_home() -> bool:
    """Turn pyopencl's disk caches off (as ``PYOPENCL_NO_CACHE=1`` would) where pytools finds
    no cache directory: no absolute ``XDG_CACHE_HOME`` nor home (``HOME``, else the passwd
    entry); whether it did."""
    if sys.platform == "win32" or os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):
        return False
    try:
        if Path.home().is_absolute():
            return False
    except (RuntimeError, KeyError, OSError):
        pass
    cl._PYOPENCL_NO_CACHE = True
    return True
