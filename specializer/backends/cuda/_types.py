"""Kernel argument types: what each launch argument dispatches as, how CUDA C spells it,
and how it is laid out in a kernel's parameter buffer.

``typeof`` runs on every launch for every argument, so its common cases (a Python
or numpy scalar, a :class:`CuArray`) are one dict lookup or one class check.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...kernels import SCALAR_TYPES, unsupported_argument
from ._array import ARGTYPES, Array, CuArray, array_type

__all__ = ["ACCEPTED", "ctype", "param_ctype", "typeof"]

# (numpy kind, item size) -> (CUDA C spelling, ctypes type of the kernel parameter)
_SCALAR_ABI: dict[tuple[str, int], tuple[str, type]] = {
    ("b", 1): ("bool", ctypes.c_bool),
    ("i", 1): ("signed char", ctypes.c_int8),
    ("u", 1): ("unsigned char", ctypes.c_uint8),
    ("i", 2): ("short", ctypes.c_int16),
    ("u", 2): ("unsigned short", ctypes.c_uint16),
    ("i", 4): ("int", ctypes.c_int32),
    ("u", 4): ("unsigned int", ctypes.c_uint32),
    ("i", 8): ("long long", ctypes.c_int64),
    ("u", 8): ("unsigned long long", ctypes.c_uint64),
    ("f", 4): ("float", ctypes.c_float),
    ("f", 8): ("double", ctypes.c_double),
}


def _abi(t: type) -> tuple[str, type] | None:
    """The spelling and parameter type of the concrete scalar type ``t`` (None if it has none,
    or if ``t`` is abstract, like ``np.floating``)."""
    if not isinstance(t, type) or not issubclass(t, np.generic) or t.__subclasses__():
        return None  # abstract (np.floating, ...): numpy has no dtype for it
    dt = np.dtype(t)
    return _SCALAR_ABI.get((dt.kind, dt.itemsize)) if dt.type is t else None


#: value type -> argument type, for every scalar a kernel parameter can take
_SCALARS: dict[type, type[np.generic]] = {
    v: t for v, t in SCALAR_TYPES.items() if _abi(t) is not None
}

ARGTYPES.update(_SCALARS)

#: what a launch accepts, for error messages
ACCEPTED = (
    "Python bool, int and float; numpy bool_, int8 to int64, uint8 to uint64, float32 and "
    "float64 scalars; a CuArray or any object with __cuda_array_interface__ (CuPy, PyTorch, "
    "Numba) holding a C-contiguous numeric array"
)


def typeof(value: Any) -> type:
    """The argument type ``value`` dispatches as: Python ``int``/``float``/``bool`` are
    ``np.int64``/``np.float64``/``np.bool_``, numpy scalars their own type, device arrays
    ``Array[dtype]``; anything else is a ``TypeError``."""
    t = ARGTYPES.get(value.__class__)
    return _typeof_other(value) if t is None else t


def _typeof_other(value: Any) -> type:
    if isinstance(value, CuArray):
        return value.argtype
    for base in (bool, int, float):  # subclasses of Python scalars (an IntEnum, ...)
        if isinstance(value, base):
            return _SCALARS[base]
    try:
        cai = value.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as e:  # a property that raised: say so rather than hide it
        raise TypeError(
            f"reading __cuda_array_interface__ of a {type(value).__qualname__} failed: {e}"
        ) from e
    if cai is None:
        raise unsupported_argument(value, ACCEPTED)
    return _cai_type(value, cai)


def _cai_type(value: Any, cai: Any) -> type:
    what = f"{type(value).__module__}.{type(value).__qualname__}"
    try:
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        mask = cai.get("mask")
    except Exception as e:
        raise TypeError(f"the __cuda_array_interface__ of a {what} is malformed: {e}") from None
    if mask is not None:
        raise TypeError(f"cannot pass a masked array ({what}) to a kernel")
    if strides is not None and tuple(strides) != _contiguous_strides(shape, dtype.itemsize):
        raise TypeError(
            f"cannot pass a non-contiguous {what} (strides {tuple(strides)}) to a kernel: "
            "a kernel gets a pointer to C-contiguous elements; pass a contiguous copy"
        )
    try:
        return array_type(dtype)
    except TypeError as e:
        raise TypeError(f"cannot pass a {what} of {dtype} to a kernel: {e}") from None


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def _scalar_type(t: Any) -> type[np.generic]:
    if isinstance(t, np.dtype):
        return t.type
    if t in (bool, int, float):
        return _SCALARS[t]
    if isinstance(t, type) and issubclass(t, np.generic):
        return t
    raise TypeError(f"expected a numpy scalar type or dtype, got {t!r}")


def ctype(t: Any) -> str:
    """How CUDA C spells the scalar type ``t`` (a numpy scalar type or dtype):
    ``ctype(np.float32) == "float"``, ``ctype(np.int64) == "long long"``."""
    st = _scalar_type(t)
    abi = _abi(st)
    if abi is None:
        supported = ", ".join(sorted({f"np.{v.__name__}" for v in _SCALARS.values()}))
        raise TypeError(
            f"no CUDA C spelling for {t!r}: ctype takes a concrete type ({supported}); "
            "in a generic method, pass the parameter (bound to the concrete type) or its dtype"
        )
    return abi[0]


def param_ctype(t: type) -> type:
    """The ctypes type of a kernel parameter of argument type ``t`` (a pointer for arrays)."""
    if isinstance(t, type) and issubclass(t, Array):
        return ctypes.c_uint64
    abi = _abi(t) if isinstance(t, type) and issubclass(t, np.generic) else None
    if abi is None:
        raise TypeError(f"a CUDA kernel cannot take a parameter of type {t!r}")
    return abi[1]
