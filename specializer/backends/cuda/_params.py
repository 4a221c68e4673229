"""Kernel parameters laid out once per signature, and the generated launcher that fills them.

``cuLaunchKernel`` takes the parameters as a ``void**``: an array of pointers, one
per parameter, to its value. cuda.bindings can build that from a
``(values, types)`` tuple, allocating and filling two C arrays on every call. Here
each signature's parameters get a :class:`ParamBuffer`, laid out once (a ctypes
structure with one field per parameter, C layout, and the ``void*`` array of the
fields' addresses), and a launcher generated from ``templates/cuda_launch.py.j2``
stores each argument into its field and passes the array's address, an int, which
the binding uses as is.

Threads: a buffer must not change while the driver reads it (during
``cuLaunchKernel``, which runs without the GIL). Each signature keeps a pool of
buffers; a launch takes one (``list.pop``, atomic), fills it, launches and gives it
back (``list.append``). Concurrent launches thus use different buffers, without a
lock (which would cost three times as much per launch and make threads wait on each
other); the pool holds as many buffers as launches of that signature ever ran at once.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import codegen
from ...types import type_name
from ._array import Array, cuarray_class, device_pointer
from ._driver import DEFAULT_STREAM, CUDAError, driver, stream_handle
from ._types import param_ctype

__all__ = ["ParamBuffer", "dim3", "launcher"]

_INT64 = np.iinfo(np.int64)


class ParamBuffer:
    """The parameters of one kernel signature: ``values``, a ctypes structure with field
    ``a<i>`` for parameter ``i``, and ``address``, the address of the ``void*`` array
    pointing at each field (what ``cuLaunchKernel`` takes as ``kernelParams``)."""

    __slots__ = ("address", "pointers", "tt", "values")

    def __init__(self, tt: tuple[type, ...]) -> None:
        self.tt = tt
        fields = [(f"a{i}", param_ctype(t)) for i, t in enumerate(tt)]
        struct = type("KernelParams", (ctypes.Structure,), {"_fields_": fields})
        self.values = struct()
        base = ctypes.addressof(self.values)
        offsets = [getattr(struct, f"a{i}").offset for i in range(len(tt))]
        self.pointers = (ctypes.c_void_p * len(tt))(*(base + o for o in offsets))
        self.address = ctypes.addressof(self.pointers)

    def layout(self) -> list[tuple[int, int]]:
        """(offset, size) of each parameter's field in ``values``."""
        struct = type(self.values)
        return [
            (getattr(struct, f"a{i}").offset, getattr(struct, f"a{i}").size)
            for i in range(len(self.tt))
        ]


def dim3(x: Any, what: str) -> tuple[int, int, int]:
    """A launch's ``grid=`` or ``block=`` as three positive ints."""
    try:
        if isinstance(x, bool):
            raise TypeError
        dims = (
            tuple(map(operator.index, x)) if isinstance(x, (tuple, list)) else (operator.index(x),)
        )
    except TypeError:
        raise TypeError(
            f"{what}= is a positive int or a tuple of 1 to 3 positive ints, got {x!r}"
        ) from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise ValueError(f"{what}= is a positive int or a tuple of 1 to 3 positive ints, got {x!r}")
    return (*dims, 1, 1)[:3]  # type: ignore[return-value]


def _overflow(fun: Any, i: int, value: int) -> None:
    raise OverflowError(
        f"parameter {i} of kernel {fun.name} (counting from 0, captured values first) is an "
        f"int64, and {value} does not fit in one"
    )


def _failed(err: Any, fun: Any, grid: Any, block: Any, shared_mem: Any) -> None:
    raise CUDAError(
        "cuLaunchKernel",
        err,
        f"launching kernel {fun.name} with grid={grid!r}, block={block!r}, "
        f"shared_mem={shared_mem!r} in {fun.context!r}",
    )


def _kind(t: type) -> str:
    if issubclass(t, Array):
        return "array"
    return "int64" if t is np.int64 else "scalar"


_launchers: dict[tuple[type, ...], Callable[..., None]] = {}
_lock = threading.Lock()


def _make(tt: tuple[type, ...]) -> Callable[..., None]:
    with _lock:
        fn = _launchers.get(tt)
        if fn is not None:
            return fn
        pool = [ParamBuffer(tt)]
        names = [type_name(t) for t in tt]
        namespace = {
            "_take": pool.pop,
            "_give": pool.append,
            "_new": functools.partial(ParamBuffer, tt),
            "_launch": driver.cuLaunchKernel,
            "_pointer": device_pointer,
            "_dim3": dim3,
            "_stream": stream_handle,
            "_null": DEFAULT_STREAM,
            "_lo": int(_INT64.min),
            "_hi": int(_INT64.max),
            "_overflow": _overflow,
            "_failed": _failed,
        }
        for i, t in enumerate(tt):  # the CuArray class of each array parameter's element type
            if issubclass(t, Array):
                namespace[f"_own{i}"] = cuarray_class(t.eltype)
        fn = codegen.generate(
            "cuda_launch.py.j2",
            ("cuda_launch", *names),
            namespace,
            f"CUDA launcher for ({', '.join(names)})",
            kinds=[_kind(t) for t in tt],
        )
        _launchers[tt] = fn
        return fn


def launcher(tt: tuple[type, ...]) -> Callable[..., None]:
    """The generated launcher of signature ``tt`` (every parameter, captured ones first):
    ``fn(fun, grid, block, shared_mem, stream, args)`` launches ``fun.function`` on the
    tuple ``args``."""
    return _launchers.get(tt) or _make(tt)
