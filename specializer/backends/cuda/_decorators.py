"""The CUDA back-end's ``typeof`` and its ``@kernel``, ``@device`` and ``capture`` (the core's)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...kernels import Definitions, unsupported_argument
from ...types import WEAK, Struct, WeakScalar, weak_type
from . import _types
from ._array import Array

__all__ = ["capture", "device", "kernel", "typeof"]


def typeof(value: Any) -> type:
    """The argument type ``value`` dispatches as (SPEC section 8): Python ``int``/``float``/
    ``bool`` are the weak ``Weak[int]``/``Weak[float]``/``Weak[bool]`` (they take the type the
    method declares), numpy scalars their own type (a subclass its numpy base), numpy
    structured scalars ``Struct[dtype]``, device arrays ``Array[dtype]``; anything else is a
    ``TypeError``."""
    t = WEAK.get(value.__class__)
    if t is not None:
        return t
    if isinstance(value, np.void) or (
        isinstance(value, np.ndarray) and value.size == 1 and value.dtype.names is not None
    ):  # a struct by value: np.void, or a 0-d or one-element array (``rhs.view(double3)``)
        if value.dtype.names is None:
            raise unsupported_argument(value, _types.ACCEPTED)
        return _types.struct_type(value.dtype)
    if not isinstance(value, np.generic):  # a subclass of a Python scalar (an IntEnum, ...)
        weak = weak_type(value)
        if weak is not None:
            return weak
    return _types.typeof(value)


_definitions = Definitions(
    typeof,
    "specializer.backends.cuda",
    (WeakScalar, Struct, Array),
    kernel_doc="""Annotate each parameter with an argument type: ``Array[dtype]`` (a ``CuArray``
    or any array with ``__cuda_array_interface__`` or DLPack; ``Array[np.float32]``, or
    abstract ``Array[np.floating]``), a numpy scalar type (``np.float32``, ``np.float16`` for
    ``__half``, or abstract ``np.integer``, ``np.number``) or ``Struct[dtype]`` (a struct by
    value). The body returns CUDA C++ source that defines a ``__global__`` function named like
    the method (``extern "C"`` recommended), or a :class:`KernelSource` naming its entry (a
    template instance, in-memory headers).""",
    device_doc="The body returns CUDA C++ source defining ``__device__`` functions.",
)
kernel, device = _definitions.kernel, _definitions.device
#: ``capture(kernel, *values)``: a kernel instance passing ``values`` first on every launch.
capture = _definitions.capture
