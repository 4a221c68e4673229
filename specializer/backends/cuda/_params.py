"""Kernel parameters laid out once per signature (a ctypes structure, the ``void*`` array of its
fields' addresses): a launch stores each argument and passes one int to ``cuLaunchKernel``.

A buffer must not change while the driver reads it (``cuLaunchKernel`` runs without the GIL):
each launch takes one from its signature's pool (``list.pop``, atomic) and gives it back, so
concurrent launches never share one, without a lock (which would cost three times as much).
"""

from __future__ import annotations

import ctypes  # the buffer cuLaunchKernel reads: C structs and a void* array, no interpreter
import functools
import operator
from typing import Any

import numpy as np

from ...launching import REQUIRED
from ...locks import new_lock
from ...types import Struct, describe_parameter, weak_overflow
from ._driver import DEFAULT_STREAM, CUDAError, driver, stream_handle
from ._types import param_ctype


class ParamBuffer:
    """The parameters of one kernel signature: ``values``, a ctypes structure with field
    ``a<i>`` for parameter ``i``; ``fields``, their addresses; ``address``, that of the
    ``void*`` array of them (``cuLaunchKernel``'s ``kernelParams``)."""

    __slots__ = ("address", "fields", "pointers", "tt", "values")

    def __init__(self, tt: tuple[type, ...]) -> None:
        self.tt = tt
        fields = [(f"a{i}", field_ctype(t)) for i, t in enumerate(tt)]
        struct = type("KernelParams", (ctypes.Structure,), {"_fields_": fields})
        self.values = struct()
        base = ctypes.addressof(self.values)
        offsets = [getattr(struct, f"a{i}").offset for i in range(len(tt))]
        self.fields = [base + o for o in offsets]
        self.pointers = (ctypes.c_void_p * len(tt))(*self.fields)
        self.address = ctypes.addressof(self.pointers)

    def layout(self) -> list[tuple[int, int]]:
        """(offset, size) of each parameter's field in ``values``."""
        struct = type(self.values)
        return [
            (getattr(struct, f"a{i}").offset, getattr(struct, f"a{i}").size)
            for i in range(len(self.tt))
        ]


#: a ctypes type of each alignment, to align a struct's bytes as the kernel lays it out
_CARRIERS = {
    1: ctypes.c_uint8,
    2: ctypes.c_uint16,
    4: ctypes.c_uint32,
    8: ctypes.c_uint64,
    16: ctypes.c_longdouble,
}


def struct_dtype(t: type[Struct]) -> np.dtype:
    """The layout of struct argument type ``t`` (plain ``Struct`` has none)."""
    if t.dtype is None:
        raise TypeError(f"{t!r} has no layout: a parameter's struct type is Struct[dtype]")
    return t.dtype


def struct_alignment(dtype: np.dtype) -> int:
    """The alignment CUDA C gives a struct of this layout: a vector of 2 or 4 equal fields
    (``float4``) its size, at most 16 (``vector_types.h``); any other struct its most aligned
    field's (a dtype with ``align=True`` has C's offsets)."""
    names, by_name = dtype.names, dtype.fields
    if names is None or by_name is None:
        raise TypeError(f"a struct parameter's dtype is a structured dtype, got {dtype}")
    fields = [by_name[n][0] for n in names]
    if len(fields) in (2, 4) and all(f == fields[0] and f.subdtype is None for f in fields):
        return min(dtype.itemsize, 16)
    return dtype.alignment


_struct_ctypes: dict[np.dtype, type] = {}


def field_ctype(t: type) -> type:
    """A parameter's ctypes type: a struct's bytes in a union with a carrier of its alignment."""
    if isinstance(t, type) and issubclass(t, Struct):
        dt = struct_dtype(t)
        ct = _struct_ctypes.get(dt)
        if ct is None:
            align = struct_alignment(dt)
            carrier = _CARRIERS.get(align, ctypes.c_uint8)
            fields = [("raw", ctypes.c_ubyte * dt.itemsize), ("align", carrier)]
            ct = _struct_ctypes.setdefault(
                dt, type("StructParam", (ctypes.Union,), {"_fields_": fields})
            )
        return ct
    return param_ctype(t)


def dim3(x: Any, what: str) -> tuple[int, int, int]:
    """A launch's ``grid=`` or ``block=`` as three positive ints."""
    if x is REQUIRED:  # (a HostKernel call, or a launch that hit its cell's entry)
        raise TypeError(f"{what}= is a required launch option: a positive int or a tuple of 1 to 3")
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


def overflow(linked: Any, i: int, value: Any) -> None:
    """A weak value out of its parameter's range (a "ranged" kind's check): the core's error."""
    raise weak_overflow(value, linked.tt[i], describe_parameter(linked, i))


def failed(err: Any, linked: Any, grid: Any, block: Any, shared_mem: Any) -> None:
    raise CUDAError(
        "cuLaunchKernel",
        err,
        f"launching kernel {linked.name} with grid={grid!r}, block={block!r}, "
        f"shared_mem={shared_mem!r} in {linked.context!r}",
    )


_pools: dict[tuple[type, ...], list[ParamBuffer]] = {}
_pools_lock = new_lock(reentrant=False)


def pool(tt: tuple[type, ...]) -> list[ParamBuffer]:
    """The parameter buffers of signature ``tt``, shared by every kernel of that signature."""
    p = _pools.get(tt)
    if p is None:
        with _pools_lock():
            p = _pools.setdefault(tt, [ParamBuffer(tt)])
    return p


def pool_functions(tt: tuple[type, ...]) -> tuple[Any, Any, Any]:
    """Take, give back and make a parameter buffer of signature ``tt`` (an invoker's setup)."""
    p = pool(tt)
    return p.pop, p.append, functools.partial(ParamBuffer, tt)


#: what every invoker uses, bound as globals of its module
NAMESPACE: dict[str, Any] = {
    "_launch": driver.cuLaunchKernel,
    "_dim3": dim3,
    "_stream": stream_handle,
    "_null": DEFAULT_STREAM,
    "_overflow": overflow,
    "_failed": failed,
    "_memmove": ctypes.memmove,
}
