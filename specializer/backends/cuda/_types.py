"""Kernel argument types: what each argument dispatches as, its CUDA C spelling and ctypes type."""

from __future__ import annotations

import ctypes  # the kernel parameters' C types: how the parameter buffers lay them out
from typing import Any

import numpy as np

from ...kernels import SCALAR_TYPES, unsupported_argument
from ...types import CONCRETE_SCALARS, WEAK, Struct, weak_type
from ._array import (
    DLPACK_CUDA,
    Array,
    CuArray,
    argtypes,
    array_type,
    buffer_pointer,
    cai_classes,
    dlpack_pointer,
    foreign,
    is_cuda_core,
    strided_view,
    view_pointer,
)
from ._driver import available, current_context

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
    # cuda_fp16.h's __half: passed as its 16 bits (see half_bits)
    ("f", 2): ("__half", ctypes.c_uint16),
    ("f", 4): ("float", ctypes.c_float),
    ("f", 8): ("double", ctypes.c_double),
}


def _abi(t: type) -> tuple[str, type] | None:
    """The spelling and parameter type of the concrete scalar type ``t`` (None if it has none)."""
    if not isinstance(t, type) or t not in CONCRETE_SCALARS:
        return None
    dt = np.dtype(t)
    return _SCALAR_ABI.get((dt.kind, dt.itemsize))


#: value type -> argument type, for every scalar a kernel parameter can take
_SCALARS: dict[type, type[np.generic]] = {
    v: t for v, t in SCALAR_TYPES.items() if _abi(t) is not None
}

argtypes.update(_SCALARS)

#: the numpy scalar types a kernel parameter can take (each its own argument type)
_NUMPY_SCALARS = frozenset(_SCALARS.values())


def numpy_base(cls: type) -> type[np.generic] | None:
    """The first numpy scalar type a kernel takes in ``cls``'s MRO (``np.float64`` for
    ``class MyFloat(np.float64)``)."""
    for base in cls.__mro__:
        if base in _NUMPY_SCALARS:
            return base
    return None


def half_bits(value: Any) -> int:
    """The 16 bits of ``value`` as an IEEE half: what a ``__half`` parameter's field holds."""
    return int(np.float16(value).view(np.uint16))


#: what a launch accepts, for error messages
ACCEPTED = (
    "Python bool, int and float; numpy bool_, int8 to int64, uint8 to uint64, float16, "
    "float32 and float64 scalars (and their subclasses); a struct by value: a numpy "
    "structured scalar (np.void) or a 0-d or one-element array of a structured dtype, in "
    "native byte order; a CuArray, any object with __cuda_array_interface__ (CuPy, "
    "PyTorch, Numba) or a DLPack array on a CUDA device (__dlpack__, through cuda.core), "
    "holding a C- or F-contiguous numeric array in native byte order; cuda.core's "
    "StridedMemoryView, and its Buffer (as Array[np.uint8])"
)


def struct_type(dtype: np.dtype) -> type:
    """``Struct[dtype]`` for a struct by value (a ``ValueError`` if not in native byte order)."""
    if not dtype.isnative:
        raise ValueError(
            f"cannot pass a struct of dtype {dtype} by value: a field is not in native byte "
            f"order, and a kernel reads the device's; convert it with "
            f"value.astype(value.dtype.newbyteorder('='))"
        )
    return Struct[dtype]


def typeof(value: Any) -> type:
    """The argument type ``value`` dispatches as (SPEC section 8): Python ``int``/``float``/
    ``bool`` are the weak ``Weak[int]``/``Weak[float]``/``Weak[bool]`` (they take the type the
    method declares), numpy scalars their own type (a subclass its numpy base), numpy
    structured scalars ``Struct[dtype]``, device arrays ``Array[dtype]``; anything else is a
    ``TypeError``."""
    t: type | None = WEAK.get(value.__class__)
    if t is not None:
        return t
    if isinstance(value, np.void) or (
        isinstance(value, np.ndarray) and value.size == 1 and value.dtype.names is not None
    ):  # a struct by value: np.void, or a 0-d or one-element array (``rhs.view(double3)``)
        if value.dtype.names is None:
            raise unsupported_argument(value, ACCEPTED)
        return struct_type(value.dtype)
    t = argtypes.get(value.__class__)
    if t is not None:
        return t
    if isinstance(value, CuArray):
        return value.argtype
    if isinstance(value, np.generic):  # a subclass of a numpy scalar type: its numpy base
        t = numpy_base(value.__class__)
        if t is not None:
            return t
    else:
        weak = weak_type(value)  # a subclass of a Python scalar (an IntEnum, ...)
        if weak is not None:
            return weak
    try:
        cai = value.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as e:  # a property that raised: say so rather than hide it
        raise TypeError(
            f"reading __cuda_array_interface__ of a {type(value).__qualname__} failed: {e}"
        ) from e
    if cai is not None:
        t = _cai_type(value, cai)
        cai_classes.add(value.__class__)  # the fast path knows it now
        return t
    if is_cuda_core(value, "Buffer"):
        if not value.is_device_accessible:
            raise ValueError("cannot pass a cuda.core Buffer in host memory to a kernel")
        _check_device(value, value.device_id)
        foreign.setdefault(value.__class__, buffer_pointer)
        return array_type(np.uint8)
    if is_cuda_core(value, "StridedMemoryView"):
        t = _view_type(value)
        foreign.setdefault(value.__class__, view_pointer)
        return t
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        device = value.__dlpack_device__()
        if int(device[0]) not in DLPACK_CUDA:
            raise unsupported_argument(
                value, ACCEPTED + f" (this one is on DLPack device {device})"
            )
        if int(device[0]) == 2:  # kDLCUDA: one device's memory
            _check_device(value, int(device[1]))
        t = _view_type(strided_view(value))
        foreign.setdefault(value.__class__, dlpack_pointer)
        return t
    raise unsupported_argument(value, ACCEPTED)


def _check_device(value: Any, device_id: int) -> None:
    """A ``ValueError`` when ``value``'s memory is not on the current context's device."""
    if not available():
        return
    ordinal = current_context().ordinal
    if device_id != ordinal:
        raise ValueError(
            f"cannot pass a {type(value).__module__}.{type(value).__qualname__} in the memory of "
            f"device {device_id} to a kernel launched on device {ordinal} (the current "
            f"context's): copy it, or launch in a context of device {device_id}"
        )


def _view_type(v: Any) -> type:
    """The argument type of a cuda.core StridedMemoryView, with the checks of an array."""
    if not v.is_device_accessible:
        raise ValueError(
            "cannot pass an array in host memory to a kernel (a StridedMemoryView that is not "
            "device accessible): copy it to the device first"
        )
    if getattr(v, "device_id", None) is not None and v.device_id >= 0:
        _check_device(v, v.device_id)
    dtype = np.dtype(v.dtype)
    strides = None if v.strides is None else tuple(s * dtype.itemsize for s in v.strides)
    return _cai_type(v, {"typestr": dtype.str, "shape": tuple(v.shape), "strides": strides})


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
    if not dtype.isnative:
        raise ValueError(
            f"cannot pass a {what} of {dtype} (non-native byte order) to a kernel: a kernel "
            "reads elements in the device's byte order; pass a copy in native byte order"
        )
    if strides is not None and not _contiguous(shape, tuple(strides), dtype.itemsize):
        raise ValueError(
            f"cannot pass a non-contiguous {what} of {dtype} (shape {shape}, strides "
            f"{tuple(strides)}) to a kernel: a kernel gets a pointer to C- or F-contiguous "
            "elements; pass a contiguous copy"
        )
    try:
        return array_type(dtype)
    except TypeError as e:
        raise TypeError(f"cannot pass a {what} of {dtype} to a kernel: {e}") from None


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether ``strides`` lay ``shape`` out C- or F-contiguously (numpy's rule: strides of
    length-1 dimensions and of empty arrays do not matter)."""
    if len(strides) != len(shape):
        return False
    if any(d == 0 for d in shape):
        return True
    for order in (reversed(range(len(shape))), range(len(shape))):  # C, then F
        step = itemsize
        for i in order:
            if shape[i] != 1:
                if strides[i] != step:
                    break
                step *= shape[i]
        else:
            return True
    return False


def _scalar_type(t: Any) -> type[np.generic]:
    if isinstance(t, np.dtype):
        return t.type
    if t in (bool, int, float):
        return _SCALARS[t]
    if isinstance(t, type) and issubclass(t, np.generic):
        return numpy_base(t) or t  # a subclass of a numpy scalar type spells as its base
    raise TypeError(f"expected a numpy scalar type or dtype, got {t!r}")


def ctype(t: Any) -> str:
    """How CUDA C spells the scalar type ``t`` (a numpy scalar type or dtype):
    ``ctype(np.float32) == "float"``, ``ctype(np.int64) == "long long"``,
    ``ctype(np.float16) == "__half"`` (which needs ``#include <cuda_fp16.h>``)."""
    abi = _abi(_scalar_type(t))
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
    abi = _abi(t)  # None for anything but a concrete numpy scalar type
    if abi is None:
        raise TypeError(f"a CUDA kernel cannot take a parameter of type {t!r}")
    return abi[1]
