"""Work sizes: a launch's ``global_size``, ``local_size`` and ``global_offset``, checked and
converted to what pyopencl takes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import launching

_SIZE_MAX = int(np.iinfo(np.uintp).max)  # the host's size_t, which pyopencl converts to


def _not_ints(what: str, v: Any, d: Any) -> TypeError:
    fix = f": pass {what}={int(d)}" if isinstance(d, float) and d.is_integer() else ""
    return TypeError(
        f"{what} is an int or a tuple of 1 to 3 ints (Python or numpy integers), got {v!r}{fix}"
    )


def _dims(v: Any, what: str, least: int) -> tuple[int, ...]:
    if v is launching.REQUIRED:  # (a HostKernel call, or a launch that hit its cell's entry)
        raise TypeError(f"{what} is a required launch option: an int or a tuple of 1 to 3 ints")
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        v = (v,)
    elif not isinstance(v, (tuple, list)):
        raise _not_ints(what, v, v)
    if not 1 <= len(v) <= 3:
        raise ValueError(f"{what} has {len(v)} dimensions, got {v!r}: OpenCL takes 1 to 3")
    out = []
    for d in v:
        if not isinstance(d, (int, np.integer)) or isinstance(d, (bool, np.bool_)):
            raise _not_ints(what, v, d)
        if d < least:
            raise ValueError(
                f"{what} must be {'positive' if least else 'non-negative'} in every dimension, "
                f"got {tuple(v)!r}: "
                + (
                    "a work size counts work-items, at least 1 (with no work, skip the launch)"
                    if least
                    else "an offset counts work-items, from 0"
                )
            )
        if d > _SIZE_MAX:
            raise ValueError(
                f"{what} {tuple(v)!r} is out of range: a work size is a size_t, at most "
                f"2**{_SIZE_MAX.bit_length()} - 1 in each dimension"
            )
        out.append(int(d))
    return tuple(out)


def sizes(global_size: Any, local_size: Any, global_offset: Any) -> tuple[Any, Any, Any]:
    """The work sizes, checked before anything is enqueued; errors name the parameter."""
    g = _dims(global_size, "global_size", 1)
    ls = None if local_size is None else _dims(local_size, "local_size", 1)
    go = None if global_offset is None else _dims(global_offset, "global_offset", 0)
    for what, v in (("local_size", ls), ("global_offset", go)):
        if v is not None and len(v) != len(g):
            raise ValueError(
                f"{what} {v!r} has {len(v)} dimension(s), global_size {g!r} has {len(g)}"
            )
    if ls is not None and any(x > y for x, y in zip(ls, g)):
        raise ValueError(f"local_size {ls!r} is larger than global_size {g!r}")
    return g, ls, go
