"""Argument kinds: ``Array[dtype]``, ``Buffer``, ``LocalMemory``, ``Image``, ``Sampler``;
what a value dispatches as (``typeof``), its OpenCL C type (``ctype``) and how a scalar packs."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.cltypes as _cltypes

from ...kernels import SCALAR_TYPES, unsupported_argument
from ...types import (
    CONCRETE_SCALARS,
    WEAK,
    DeviceArray,
    EltypeT_co,
    Struct,
    WeakScalar,
    type_name,
    weak_type,
)


class Array(DeviceArray[EltypeT_co]):
    """Argument types of ``pyopencl.array.Array`` values: ``Array[np.float32]`` and its
    supertypes (``Array[np.floating]``, ``Array[np.number]``, ...) to dispatch on. A structured
    dtype is kept whole: ``Array[dtype]`` per layout, below ``Array[np.void]``, spelled
    ``Annotated[Array[np.void], dtype]`` in an annotation (as type checkers accept it)."""


class ArgType:
    """Base of the argument types that stand for one kind of pyopencl object."""

    __argtype_name__: ClassVar[str]
    #: how to make one, for a MethodError given another kind where every method takes one
    __argtype_hint__: ClassVar[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


class Buffer(ArgType):
    """The argument type of a raw ``pyopencl.Buffer``: a ``__global``/``__constant`` pointer."""

    __argtype_name__ = "Buffer"
    __argtype_hint__ = "pass a pyopencl.Buffer (an array's is its .data)"


class LocalMemory(ArgType):
    """The argument type of ``pyopencl.LocalMemory(nbytes)``: a ``__local T *`` parameter."""

    __argtype_name__ = "LocalMemory"
    __argtype_hint__ = "pass pyopencl.LocalMemory(nbytes), nbytes the bytes each work group gets"


class Image(ArgType):
    """The argument type of a ``pyopencl.Image``: an ``image2d_t``/``image3d_t``/... parameter."""

    __argtype_name__ = "Image"
    __argtype_hint__ = "pass a pyopencl.Image"


class Sampler(ArgType):
    """The argument type of a ``pyopencl.Sampler``: a ``sampler_t`` parameter."""

    __argtype_name__ = "Sampler"
    __argtype_hint__ = "pass a pyopencl.Sampler"


_ACCEPTED = (
    "pyopencl.array.Array (C- or F-contiguous, native byte order), pyopencl.Buffer, "
    "pyopencl.LocalMemory, pyopencl.Image, pyopencl.Sampler, numpy scalars, numpy structured "
    "scalars (np.void, or a 0-d array of a structured dtype such as pyopencl.cltypes.float4), "
    "and Python int, float and bool"
)

#: value class -> argument type, for the classes that alone decide it (one dict lookup)
_BY_CLASS: dict[type, type] = {
    **{t: t for t in SCALAR_TYPES.values() if t in CONCRETE_SCALARS},
    **WEAK,
    cl.Buffer: Buffer,
    cl.LocalMemory: LocalMemory,
    cl.Sampler: Sampler,
    cl.Image: Image,
}
#: argument type -> the value class its guard checks, where that is not the type itself
GUARD_CLASS: dict[type, type] = {t: cls for cls, t in _BY_CLASS.items() if cls is not t}
_array_types: dict[np.dtype, type[DeviceArray[Any]]] = {}


def _foreign_order(dtype: np.dtype, path: str = "") -> str | None:
    """Where ``dtype`` holds a value in non-native byte order (``''``, or a field's path
    ``'a.b'``), or None; subarrays too, of which numpy's ``isnative`` says True."""
    if dtype.subdtype is not None:
        return _foreign_order(dtype.subdtype[0], path)
    if dtype.names is not None and dtype.fields is not None:  # (numpy sets both or neither)
        for name in dtype.names:
            found = _foreign_order(dtype.fields[name][0], f"{path}.{name}" if path else name)
            if found is not None:
                return found
        return None
    return None if dtype.isnative else path


def _byte_order_error(what: str, dtype: np.dtype, where: str, fix: str) -> ValueError:
    field = f" (field {where!r})" if where else ""
    return ValueError(
        f"{what} of dtype {dtype} has a value in non-native byte order{field}: kernels read "
        f"native-order values; pass {fix}.astype({fix}.dtype.newbyteorder('='))"
    )


def _array_type(dtype: np.dtype) -> type[DeviceArray[Any]]:
    t = _array_types.get(dtype)
    if t is None:
        where = _foreign_order(dtype)
        if where is not None:
            raise _byte_order_error("an array", dtype, where, "arr")
        t = _array_types.setdefault(dtype, cast(Any, Array)[dtype])  # (a value: not for checkers)
    return t


def _scalar_base(cls: type) -> type | None:
    """The numpy scalar type a subclass of one (``class MyFloat(np.float64)``) takes."""
    for base in cls.__mro__:
        if base in CONCRETE_SCALARS and base in _BY_CLASS:
            return base
    return None


def typeof(value: Any) -> type:
    """The kernel argument type of ``value`` (SPEC section 8): a numpy scalar's own type (a
    subclass's numpy base), ``Weak[int]``/``Weak[float]``/``Weak[bool]`` for Python scalars,
    ``Array[dtype]`` for a pyopencl array, ``Buffer``, ``LocalMemory``, ``Image``, ``Sampler``,
    and ``Struct[dtype]`` for a struct by value."""
    t = _BY_CLASS.get(value.__class__)
    if t is not None:
        return t
    if isinstance(value, cla.Array):
        return _array_type(value.dtype)
    if isinstance(value, np.void) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.names is not None
    ):
        if value.dtype.names is None:
            raise TypeError(
                f"a numpy void scalar of dtype {value.dtype} has no fields: a struct by value "
                "is a structured scalar (np.void of a structured dtype, or a 0-d array of one)"
            )
        where = _foreign_order(value.dtype)
        if where is not None:
            raise _byte_order_error("a struct by value", value.dtype, where, "value")
        return Struct[value.dtype]
    if isinstance(value, np.generic):
        base = _scalar_base(value.__class__)
        if base is not None:
            return base
    if isinstance(value, cl.MemoryObjectHolder):  # a sub-buffer, a pooled buffer, ...
        return Image if isinstance(value, cl.Image) else Buffer
    weak = weak_type(value)  # a subclass of a Python scalar (an IntEnum, ...)
    if weak is not None:
        return weak
    raise unsupported_argument(value, _ACCEPTED)


# (dtype kind, itemsize) -> (OpenCL C type, struct format of one value)
_C_TYPES: dict[tuple[str, int], tuple[str, str]] = {
    # OpenCL forbids bool kernel parameters; numpy stores a bool as one byte, 0 or 1.
    ("b", 1): ("uchar", "?"),
    ("i", 1): ("char", "b"),
    ("u", 1): ("uchar", "B"),
    ("i", 2): ("short", "h"),
    ("u", 2): ("ushort", "H"),
    ("i", 4): ("int", "i"),
    ("u", 4): ("uint", "I"),
    ("i", 8): ("long", "q"),
    ("u", 8): ("ulong", "Q"),
    ("f", 2): ("half", "e"),
    ("f", 4): ("float", "f"),
    ("f", 8): ("double", "d"),
    # pyopencl's complex types: #include <pyopencl-complex.h> in the kernel source (for
    # cdouble_t, #define PYOPENCL_DEFINE_CDOUBLE before it).
    ("c", 8): ("cfloat_t", "ff"),
    ("c", 16): ("cdouble_t", "dd"),
}


_VECTORS = {v: k for k, v in vars(_cltypes).items() if isinstance(v, np.dtype) and v.names}


def c_type(t: Any) -> tuple[str, str]:
    """The OpenCL C type and struct format of a scalar type (a numpy type or dtype)."""
    if isinstance(t, type) and issubclass(t, DeviceArray):
        raise TypeError(
            f"ctype spells scalar types; {type_name(t)} is an array type: "
            "use ctype(x.dtype) for its element type"
        )
    if isinstance(t, type) and issubclass(t, WeakScalar):
        t = t.default
    if isinstance(t, type) and issubclass(t, Struct) and t.dtype is not None:
        t = t.dtype
    if isinstance(t, np.dtype) and t.names is not None:
        name = _VECTORS.get(t)
        if name is None:
            raise TypeError(
                f"ctype spells scalar and vector types; {t} is a struct: declare it in the "
                "kernel source (its fields are in x.dtype.fields)"
            )
        return name, ""
    if isinstance(t, type) and t in SCALAR_TYPES:
        dt = np.dtype(SCALAR_TYPES[t])
    elif isinstance(t, type) and issubclass(t, np.generic):
        if t not in CONCRETE_SCALARS:  # np.floating, np.number, ...: numpy's abstract scalar types
            base = _scalar_base(t)
            if base is None:
                raise TypeError(
                    f"{type_name(t)} is abstract: OpenCL needs a concrete type such as "
                    "np.float32 (a method body gets the concrete types bound to its parameters)"
                )
            t = base
        dt = np.dtype(t)
    elif isinstance(t, np.dtype):
        dt = t
    else:
        raise TypeError(f"ctype takes a numpy scalar type or dtype, got {t!r}")
    spelled = _C_TYPES.get((dt.kind, dt.itemsize))
    if spelled is None:
        raise TypeError(
            f"OpenCL has no type for {dt.name}; supported are bool, int8..int64, uint8..uint64, "
            "float16, float32, float64, complex64 and complex128, and pyopencl.cltypes vectors"
        )
    return spelled


def ctype(t: type[np.generic] | np.generic | np.dtype[Any] | type[Struct] | Struct) -> str:
    """Spell a scalar or vector type in OpenCL C: ``ctype(np.float32) == "float"``,
    ``ctype(np.dtype("int64")) == "long"``, ``ctype(np.bool_) == "uchar"``,
    ``ctype(pyopencl.cltypes.float4) == "float4"``; complex types are pyopencl's ``cfloat_t``
    and ``cdouble_t``, which need ``#include <pyopencl-complex.h>`` in the kernel source.
    A numpy scalar value stands for its type (``ctype(np.float32(1)) == "float"``), as a type
    checker sees a method's parameter (``v: np.number``) where the body gets the type."""
    if isinstance(t, np.generic):
        return c_type(t.dtype if isinstance(t, np.void) else type(t))[0]
    return c_type(t)[0]


def packer(t: type) -> Callable[[Any], bytes]:
    """Packs a value into the bytes of parameter type ``t`` (converting, never reinterpreting)."""
    fmt = c_type(t)[1]
    if len(fmt) == 2:  # complex: (real, imag)
        pack2 = struct.Struct("=" + fmt).pack
        return lambda v: pack2(v.real, v.imag)
    return struct.Struct("=" + fmt).pack
