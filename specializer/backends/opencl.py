"""The OpenCL back-end: kernels written in OpenCL C, built by pyopencl, run on PoCL's CPU device.

The counterpart of KernelAbstractions' POCL back-end, over the core's interface:

- ``compile(job)`` joins the device source of the kernel and its callees into an
  :class:`OpenCLSource`, with the build options their methods return (a method may return a
  :class:`KernelSource` with ``options=``); nothing in it depends on a context.
- ``link(job, source, context)`` builds that source in one context with the methods' build
  options followed by the config's (the launch's ``options=``): one program per context,
  source and options, whatever the number of kernels in it; it returns a
  :class:`LinkedKernel`, which the core caches per (compiled code, context).
- ``launch``, ``clfunction`` and the ``HostKernel`` call are the core's launch path
  (:mod:`specializer.launching`), generated per signature from ``templates/opencl_entry.py.j2``:
  a launch whose kernel's front entry holds its lookup checks the world, the queue and each
  argument's class (and dtype), sets the arguments and enqueues, calling no ``typeof``.

Kernel arguments (SPEC section 8): ``pyopencl.array.Array`` (``Array[dtype]``, its buffer),
``pyopencl.Buffer`` (``Buffer``), ``pyopencl.LocalMemory`` (``LocalMemory``), ``pyopencl.Image``
(``Image``), ``pyopencl.Sampler`` (``Sampler``), numpy scalars (their exact type, a subclass its
numpy base), numpy structured scalars and 0-d arrays of one (``Struct[dtype]``, by value), and
Python ``int``/``float``/``bool`` (weak: they take the type the method declares, range-checked).
The slow path checks what no launch after it does: that arrays, buffers, images and samplers
are of the queue's context, and, when a kernel is linked, each kernel parameter's type as the
device reports it (kernel argument info) against the method's argument type.

Design notes on the launch path. pyopencl's ``Kernel.set_arg`` on a numpy scalar tries several
casts before it takes raw bytes; the launch path sets scalars with ``_set_arg_buf`` (a private
pyopencl attribute, like each one used, in :mod:`specializer.backends._pyopencl_private`; raw
bytes: a numpy scalar's own, or for a Python scalar the bytes ``struct`` packs into the declared C
type) and buffers with ``set_arg``, then calls ``enqueue_nd_range_kernel`` directly. Setting
the arguments and enqueueing are two steps that another thread must not interleave: each
launch takes a kernel object from its linked kernel's pool (``list.pop``, atomic under the GIL
and per-object locks alike) and gives it back after the enqueue, so concurrent launches use
different kernel objects, without a lock; a pool grows only to the number of launches ever in
flight at once. Each kernel object's record says what is set at each index without holding a
user's buffer, array, image, sampler, local memory or captured value (a weak reference to the
array, a local memory's size, a sampler's handle, an immutable scalar launch argument of an
exact type; a raw buffer, an image or a captured value is set on every launch), and is
cleared before an argument is set and stored after, so an interrupted launch never leaves it
naming a value that is not set (``templates/opencl_entry.py.j2`` has the details).
"""

from __future__ import annotations

import os
import re
import shlex
import struct
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast, overload

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.cltypes as _cltypes

from .. import includes, launching
from ..compiler import Backend, CompileError, CompilerConfig, CompilerJob, users_error
from ..kernels import (
    SCALAR_TYPES,
    Definitions,
    DeviceFunction,
    Kernel,
    KernelInstance,
    uncached_lookup,
    unsupported_argument,
)
from ..locks import new_lock
from ..suggest import decorator_keywords
from ..types import (
    WEAK,
    DeviceArray,
    EltypeT_co,
    Struct,
    WeakScalar,
    resolve_weak,
    type_name,
    weak_overflow,
    weak_type,
)
from . import _pyopencl_private as _private

_private.cache_off_without_home()  # no home: pyopencl's caches would fail every Kernel (SPEC 9)

__all__ = [
    "BACKEND",
    "Array",
    "Buffer",
    "HostKernel",
    "Image",
    "KernelSource",
    "LinkedKernel",
    "LocalMemory",
    "OpenCLBackend",
    "OpenCLSource",
    "Sampler",
    "Struct",
    "capture",
    "clfunction",
    "ctype",
    "default_queue",
    "device",
    "kernel",
    "launch",
    "set_default_queue",
    "typeof",
]


# -- argument types -----------------------------------------------------------------------


class Array(DeviceArray[EltypeT_co]):
    """Argument types of ``pyopencl.array.Array`` values: ``Array[np.float32]`` and its
    supertypes (``Array[np.floating]``, ``Array[np.number]``, ...) to dispatch on. A structured
    dtype is kept whole: ``Array[dtype]`` per layout, below ``Array[np.void]``, spelled
    ``Annotated[Array[np.void], dtype]`` in an annotation (as type checkers accept it)."""


class _ArgType:
    """Base of the argument types that stand for one kind of pyopencl object."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


class Buffer(_ArgType):
    """The argument type of a raw ``pyopencl.Buffer``: a ``__global``/``__constant`` pointer."""

    __argtype_name__ = "Buffer"
    #: how to make one, for a MethodError given another kind where every method takes one
    __argtype_hint__ = "pass a pyopencl.Buffer (an array's is its .data)"


class LocalMemory(_ArgType):
    """The argument type of ``pyopencl.LocalMemory(nbytes)``: a ``__local T *`` parameter."""

    __argtype_name__ = "LocalMemory"
    #: how to make one, for a MethodError given another kind where every method takes one
    __argtype_hint__ = "pass pyopencl.LocalMemory(nbytes), nbytes the bytes each work group gets"


class Image(_ArgType):
    """The argument type of a ``pyopencl.Image``: an ``image2d_t``/``image3d_t``/... parameter."""

    __argtype_name__ = "Image"
    #: how to make one, for a MethodError given another kind where every method takes one
    __argtype_hint__ = "pass a pyopencl.Image"


class Sampler(_ArgType):
    """The argument type of a ``pyopencl.Sampler``: a ``sampler_t`` parameter."""

    __argtype_name__ = "Sampler"
    #: how to make one, for a MethodError given another kind where every method takes one
    __argtype_hint__ = "pass a pyopencl.Sampler"


_ACCEPTED = (
    "pyopencl.array.Array (C- or F-contiguous, native byte order), pyopencl.Buffer, "
    "pyopencl.LocalMemory, pyopencl.Image, pyopencl.Sampler, numpy scalars, numpy structured "
    "scalars (np.void, or a 0-d array of a structured dtype such as pyopencl.cltypes.float4), "
    "and Python int, float and bool"
)
_CONCRETE = frozenset(np.sctypeDict.values())

#: value class -> argument type, for the classes that alone decide it (one dict lookup)
_BY_CLASS: dict[type, type] = {
    **{t: t for t in SCALAR_TYPES.values() if t in _CONCRETE},
    **WEAK,
    cl.Buffer: Buffer,
    cl.LocalMemory: LocalMemory,
    cl.Sampler: Sampler,
    cl.Image: Image,
}
#: argument type -> the value class its guard checks, where that is not the type itself
_GUARD_CLASS: dict[type, type] = {
    t: cls for cls, t in _BY_CLASS.items() if cls is not t and cls is not cl.Image
} | {Image: cl.Image}
_array_types: dict[np.dtype, type[DeviceArray[Any]]] = {}


def _foreign_order(dtype: np.dtype, path: str = "") -> str | None:
    """Where ``dtype`` holds a value in non-native byte order (``''`` for the dtype itself,
    else the field's path, ``'a.b'``), or None. Fields and subarrays are looked into:
    numpy's ``isnative`` says True of a big-endian subarray field."""
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
        if base in _CONCRETE and base in _BY_CLASS:
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


def _c_type(t: Any) -> tuple[str, str]:
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
        if t not in _CONCRETE:  # np.floating, np.number, ...: numpy's abstract scalar types
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

    A numpy scalar value stands for its type (``ctype(np.float32(1)) == "float"``); the
    ``np.generic`` and ``Struct`` in its annotation are what a type checker sees a method's
    parameter as (``v: np.number``), where the body gets the type itself."""
    if isinstance(t, np.generic):
        return _c_type(t.dtype if isinstance(t, np.void) else type(t))[0]
    return _c_type(t)[0]


def _packer(t: type) -> Callable[[Any], bytes]:
    """Packs a value into the bytes of parameter type ``t`` (converting, never reinterpreting)."""
    fmt = _c_type(t)[1]
    if len(fmt) == 2:  # complex: (real, imag)
        pack2 = struct.Struct("=" + fmt).pack
        return lambda v: pack2(v.real, v.imag)
    return struct.Struct("=" + fmt).pack


# -- compile and link ---------------------------------------------------------------------


class KernelSource(str):
    """A method's OpenCL C source with the build options it needs: ``KernelSource(source,
    options=("-DT=float",))``, the options built from the method's concrete types.

    ``options`` are OpenCL build options: a sequence of str, or one str split by shell rules
    as pyopencl splits it (``"-DVAL='1+2' -DW=1"`` is two options). They are part of the
    program's key (two element types, two option sets: two programs), and the launch's own
    ``options=`` are added after them. A device function (callee) may return one too: the
    options of every part of the program apply to the whole program, the callees' first
    (dependencies first), then the kernel's, then the launch's. An option that is not a str
    is a ``TypeError`` naming the method when its kernel is compiled. A ``KernelSource`` is a
    ``str`` (its source), so the core treats it as any source."""

    __slots__ = ("options",)
    options: tuple[Any, ...]

    def __new__(cls, source: str, *, options: str | Sequence[str] = ()) -> KernelSource:
        if not isinstance(source, str):
            raise TypeError(f"KernelSource takes the source as a str, got {type(source).__name__}")
        self = super().__new__(cls, source)
        self.options = _split_options(options, "KernelSource options=")
        return self

    def __repr__(self) -> str:
        return f"KernelSource({str.__repr__(self)}, options={self.options!r})"


def _split_options(options: Any, what: str) -> tuple[Any, ...]:
    """``options`` as a tuple: a str split by shell rules, as pyopencl's build splits one; a
    sequence as it is (its items are checked where the method is known)."""
    if isinstance(options, str):
        try:
            return tuple(shlex.split(options))
        except ValueError as e:
            raise ValueError(f"{what}{options!r} do not split as shell words: {e}") from None
    if not isinstance(options, Sequence) or isinstance(options, (bytes, bytearray)):
        raise TypeError(
            f"{what} are OpenCL build options, a str or a sequence of str, got {options!r}"
        )
    return tuple(options)


def _method_options(job: CompilerJob, sources: Sequence[str]) -> tuple[str, ...]:
    """The build options the job's method bodies returned with their sources (each a
    :class:`KernelSource`), the callees' first: what the launch's options are added to."""
    out: list[str] = []
    for mi, part in zip((*job.callees, job.mi), sources):
        options = getattr(part, "options", ())
        for o in options:
            if not isinstance(o, str):
                what = "kernel" if mi is job.mi else "device function"
                name = mi.method.gf.name
                raise TypeError(
                    f"OpenCL {what} {name}: its method "
                    f"{launching.signature(name, mi.method.signature)} returned KernelSource "
                    f"options={options!r} for {launching.signature(name, mi.tt)}: {o!r} "
                    f"({type(o).__name__}) is not a build option; options are str, such as "
                    "'-DT=float'"
                )
        out.extend(options)
    return tuple(out)


@dataclass(frozen=True)
class OpenCLSource:
    """The compiled artifact: the OpenCL C program of one kernel and its callees, and the
    build options their methods returned (the launch's are added to them when it is built)."""

    name: str
    source: str
    options: tuple[str, ...] = ()


def _nothing() -> None:
    """What a pool record holds at an index where nothing is known to be set: calling it, as
    the check of an array's weak reference does, gives no array."""


class LinkedKernel:
    """A kernel built in one context: the lookup's result, cached per (compiled code, context).

    It holds no kernel instance (only types went into it), so caching it keeps no captured
    value alive. ``pool`` holds the kernel objects launches take and give back (see the
    module's design notes); ``bound`` the launch path of each lookup signature (the core's).
    """

    __slots__ = (
        "__weakref__",
        "bound",
        "built",
        "ck",
        "context_ptr",
        "kernel",
        "name",
        "params",
        "pool",
        "program",
        "source",
        "tt",
    )

    def __init__(
        self,
        name: str,
        tt: tuple[type, ...],
        ck: _ContextKey,
        built: _Built,
        kernel: Any,
        source: str,
    ) -> None:
        self.name = name
        self.tt = tt  # every kernel parameter's concrete type, captured ones first
        self.ck = ck  # the context's key: it holds the context weakly
        self.built = built  # shared by the kernels of one program; keeps it in _programs
        self.program = built.program
        context = ck.context()  # alive: its kernel is being linked in it
        assert context is not None
        self.context_ptr = context.int_ptr  # what a new array is checked against
        self.kernel = kernel
        self.source = source
        self.params = _param_names(source, name)
        self.bound: dict[tuple[type, ...], Any] = {}
        # Launches use kernel objects of their own: ``kernel`` is the user's to inspect.
        self.pool: list[list[Any]] = [self.new_record()]

    @property
    def context(self) -> cl.Context | None:
        """The context it was built in (``None`` once the user dropped that context)."""
        return self.ck.context()

    def new_record(self) -> list[Any]:
        """A pool record with a new kernel object: ``[set_arg, set_buf, kernel, <nothing set
        at each index>]`` (see ``templates/opencl_entry.py.j2``)."""
        knl = cl.Kernel(self.program, self.name)
        return [
            knl.set_arg,
            _private.set_arg_buf(knl),
            knl,
            *([_nothing] * len(self.tt)),
            (_nothing,),  # no global size is that object
        ]

    def __repr__(self) -> str:
        return f"<LinkedKernel {launching.signature(self.name, self.tt)} in {self.context!r}>"


def _param_names(source: str, name: str) -> list[str]:
    """The parameter names of ``__kernel ... name(...)`` in ``source``, for messages (best
    effort: empty when the source does not spell them plainly)."""
    m = re.search(r"\b(?:__)?kernel\b[^;{]*?\b" + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if not m:
        return []
    names = []
    for p in m.group(1).split(","):
        w = re.findall(r"[A-Za-z_]\w*", p)
        names.append(w[-1] if w else "?")
    return names


def _describe(linked: LinkedKernel, i: int) -> str:
    name = linked.params[i] if i < len(linked.params) else None
    what = f"parameter {i}" + (f" ({name})" if name else "")
    return f"{what} of kernel {launching.signature(linked.name, linked.tt)}"


def _bad_array(linked: LinkedKernel, i: int, a: cla.Array) -> None:
    if a.context is not None and a.context.int_ptr != linked.context_ptr:
        raise ValueError(
            f"the array for {_describe(linked, i)} is an array of {a.context!r}, but the "
            f"kernel runs in {linked.context!r}: a kernel can use only memory of its queue's "
            "context: make it on a queue of that context, or launch on a queue of its context"
        )
    if a.offset:
        what = f"starts at byte {a.offset} of its buffer (a view)"
    else:
        what = f"is not contiguous (shape {a.shape}, strides {a.strides})"
    raise ValueError(
        f"the array for {_describe(linked, i)} {what}: a kernel gets a buffer pointer, so pass "
        "a C- or F-contiguous array that starts at its buffer's start (for a view, view.copy())"
    )


def _work_group_problem(
    linked: LinkedKernel, g: tuple[int, ...], ls: tuple[int, ...]
) -> str | None:
    """Which rule a local size the device refused breaks, and what to do (None: not found)."""
    lss = ls[0] if len(ls) == 1 else ls
    for d, (n, m) in enumerate(zip(g, ls)):
        if n % m:
            at = "" if len(g) == 1 else f" in dimension {d} of local_size {ls}, global_size {g}"
            return (
                f"local_size {m} does not divide global_size {n} ({n} % {m} = {n % m}){at}: "
                f"pick a local size that divides it, or pad global_size to a multiple of {m} "
                f"({-(-n // m) * m}) and have the kernel skip the work-items past {n}"
            )
    items = int(np.prod(ls))
    for device in linked.program.get_info(cl.program_info.DEVICES):
        if items > device.max_work_group_size:
            return (
                f"local_size {lss} has {items} work-items, more than the device's limit of "
                f"{device.max_work_group_size} per work group ({device.name.strip()}): use a "
                "smaller local size"
            )
        for d, (m, most) in enumerate(zip(ls, device.max_work_item_sizes)):
            if m > most:
                return (
                    f"local_size {lss} has {m} work-items in dimension {d}, more than the "
                    f"device's limit of {most} there ({device.name.strip()}): use a smaller "
                    "local size"
                )
        info = cl.kernel_work_group_info
        most = linked.kernel.get_work_group_info(info.WORK_GROUP_SIZE, device)
        if items > most:
            return (
                f"local_size {lss} has {items} work-items, more than the {most} this kernel "
                f"takes on {device.name.strip()} (it uses too many registers or too much local "
                "memory for more): use a smaller local size"
            )
        reqd = tuple(linked.kernel.get_work_group_info(info.COMPILE_WORK_GROUP_SIZE, device))
        if any(reqd) and reqd != ls + (1,) * (3 - len(ls)):
            want = reqd[0] if len(ls) == 1 else reqd[: len(ls)]
            return (
                f"the kernel's source declares reqd_work_group_size{reqd}, and local_size is "
                f"{lss}: launch with local_size={want} or change the attribute"
            )
    return None


# RuntimeError: pyopencl's std::bad_cast for a work size past size_t (an int global_size is
# not range-checked before the enqueue: checking costs every launch, a failure only itself)
_FAILURES = (cl.Error, struct.error, OverflowError, TypeError, RuntimeError)


def _failed(
    linked: LinkedKernel,
    values: tuple[Any, ...],
    error: Exception,
    global_size: Any = None,
    local_size: Any = None,
) -> Exception | None:
    """The error that says which argument a failed launch could not set, or which work size
    the device refused, and why; None for another failure (re-raised as it is). Returned, not
    raised, so the launch raises it from its own frame (one library frame fewer)."""
    if isinstance(error, RuntimeError) and not isinstance(error, cl.Error):
        try:
            _sizes(global_size, local_size, None)  # a size past size_t: a ValueError naming it
        except ValueError as e:
            return _size_error(linked, e)
    if isinstance(error, cl.Error) and "INVALID_WORK_GROUP_SIZE" in str(error):
        g, ls, _ = _sizes(global_size, local_size, None)
        try:
            why = _work_group_problem(linked, g, ls) if ls is not None else None
        except cl.Error:  # a device that does not say: the rules, then
            why = None
        return ValueError(
            f"kernel {launching.signature(linked.name, linked.tt)}: "
            + (
                why
                or f"the device refused local_size={local_size!r} with global_size="
                f"{global_size!r}: a local size must divide the global size in each "
                "dimension, fit the device's and the kernel's work-group limits, and match a "
                "reqd_work_group_size attribute"
            )
        )
    for i, (t, v) in enumerate(zip(linked.tt, values)):
        if isinstance(error, (struct.error, OverflowError)) and isinstance(v, (int, float)):
            try:
                _packer(t)(v)
            except (struct.error, OverflowError):
                return weak_overflow(v, t, _describe(linked, i))  # the core's error
    if isinstance(error, cl.Error) and "clSetKernelArg" in str(error):
        probe = cl.Kernel(linked.program, linked.name)
        for i, (t, v) in enumerate(zip(linked.tt, values)):
            try:
                _set_one(probe, i, t, v)
            except cl.Error as e:
                return TypeError(
                    f"OpenCL refused the value for {_describe(linked, i)}, typed "
                    f"{type_name(t)} by the method's signature: {e}. The kernel source "
                    "declares that parameter with another type or size: make the "
                    "annotation match the C declaration"
                )
    return None


def _set_one(knl: Any, i: int, t: type, v: Any) -> None:
    if isinstance(v, cla.Array):
        knl.set_arg(i, v.base_data)
    elif isinstance(v, (int, float)) and not isinstance(v, np.generic):
        _private.set_arg_buf(knl)(i, _packer(t)(v))
    elif isinstance(v, (np.generic, np.ndarray)):
        _private.set_arg_buf(knl)(i, v)
    else:
        knl.set_arg(i, v)


def _build_log(program: cl.Program, context: cl.Context, error: Exception) -> str:
    # A source build (PoCL's path) keeps the failed program, whose log is the compiler's
    # text alone; otherwise pyopencl's message carries the log.
    built = program
    if built is not None:
        logs = []
        for dev in context.devices:
            try:
                # pyopencl's Program.get_build_info is unannotated (it forwards *args)
                log = built.get_build_info(dev, cl.program_build_info.LOG).strip()  # type: ignore[no-untyped-call]
            except cl.Error:
                continue
            if log:
                logs.append(f"on {dev.name}:\n{log}")
        if logs:
            return "\n".join(logs)
    return str(error)


def _numbered(source: str) -> str:
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


_IMPLICIT = re.compile(r"implicit declaration of function '(\w+)'")


def _callee_hint(log: str) -> str:
    """A hint for a build log that says a device function of this back-end was implicitly
    declared: it is missing from the kernel's ``callees=``."""
    names = sorted({n for n in _IMPLICIT.findall(log) if n in _device_names()})
    if not names:
        return ""
    listed = ", ".join(names)
    return (
        f"\nhint: {listed} {'is a device function' if len(names) == 1 else 'are device functions'}"
        f" of this back-end that the kernel calls but does not list: add "
        f"{'it' if len(names) == 1 else 'them'} to @kernel(callees=[{listed}])"
    )


def _device_names() -> set[str]:
    return {gf.name for gf in _definitions.device_functions()}


# One program per (context, source, build options, the user headers it includes): kernels
# whose methods return the same source with the same options are built once. The options are
# the methods' own (a KernelSource's) followed by the launch's. Kept weakly: a program lives while
# a linked kernel uses it.
_programs: weakref.WeakKeyDictionary[
    cl.Context, weakref.WeakValueDictionary[tuple[str, tuple[str, ...], tuple[str, str]], _Built]
] = weakref.WeakKeyDictionary()
_programs_lock = new_lock(reentrant=False)


_ARG_INFO = "-cl-kernel-arg-info"


def _build_options_for(options: tuple[str, ...], context: cl.Context) -> tuple[str, ...]:
    """The options a program is built with: ``-I`` directories made absolute (pyopencl and
    the device compiler would resolve a relative one against whatever directory they run
    in), and ``-cl-kernel-arg-info`` where every device of the context takes it (OpenCL
    1.2 and later), for :func:`_check_params`."""
    out: list[str] = []
    it = iter(options)
    for o in it:
        if o == "-I":
            d = next(it, None)
            out += ["-I"] if d is None else ["-I", os.path.abspath(d)]
        elif o.startswith("-I"):
            out.append("-I" + os.path.abspath(o[2:]))
        else:
            out.append(o)
    if _ARG_INFO not in out and all(_opencl_version(d) >= (1, 2) for d in context.devices):
        out.append(_ARG_INFO)
    return tuple(out)


def _opencl_version(device: cl.Device) -> tuple[int, int]:
    m = re.match(r"OpenCL (\d+)\.(\d+)", device.version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _headers_digest(source: str, build: tuple[str, ...]) -> tuple[str, str]:
    """What the user headers ``source`` includes hold (SPEC 3): the contents of each file
    it includes from the ``-I`` directories and the current directory, recursively. PoCL
    searches the current directory first (it adds ``-I.``); other compilers may search it
    last or not at all: both orders are keyed, so a header found either way counts."""
    dirs = includes.include_dirs(build)
    cwd = os.getcwd()
    return (
        includes.digest(source, [cwd, *dirs]),
        includes.digest(source, [*dirs, cwd]),
    )


class _Built:
    """A built program (the raw handle) and the kernels it defines: what linked kernels share."""

    __slots__ = ("__weakref__", "names", "program")

    def __init__(self, program: Any, names: str) -> None:
        self.program = program
        self.names = names


class OpenCLBackend(Backend):
    """Compiles kernels to OpenCL C source and builds them per context with pyopencl."""

    name = "opencl"

    def compile(self, job: CompilerJob) -> OpenCLSource:
        sources = job.device_sources()
        for mi, text in zip((*job.callees, job.mi), sources):
            if "\0" in text:  # the OpenCL compiler would build the text before it alone
                line = text.count("\n", 0, text.index("\0")) + 1
                what = "kernel" if mi is job.mi else "device function"
                raise CompileError(
                    f"the source of OpenCL {what} {launching.signature(mi.method.gf.name, mi.tt)}"
                    f" has a NUL character on its line {line}: OpenCL C source is text, and "
                    "a compiler would read it only up to there"
                )
        return OpenCLSource(job.name, "\n\n".join(sources), _method_options(job, sources))

    def _build(self, job: CompilerJob, artifact: OpenCLSource, context: cl.Context) -> _Built:
        source = artifact.source
        # cast: this back-end's configs are all made by _config, from a tuple of build options;
        # the methods' own options come first, the launch's are added to them
        options = artifact.options + tuple(cast("tuple[str, ...]", job.config.options))
        build = _build_options_for(options, context)
        # The user's options: what building adds to them is the same for every program of
        # the context, but for -I directories made absolute, which the digest names.
        key = (source, options, _headers_digest(source, build))
        with _programs_lock():
            table = _programs.get(context)
            if table is None:
                table = _programs[context] = weakref.WeakValueDictionary()
            built = table.get(key)
        if built is not None:
            return built
        program = cl.Program(context, source)
        try:
            program.build(options=list(build))
        except cl.Error as e:
            log = _build_log(program, context, e)
            raise CompileError(
                f"OpenCL kernel {launching.signature(job.name, job.mi.tt)} does not build "
                f"(build options: {' '.join(options) or 'none'}):\n{log}{_callee_hint(log)}\n"
                f"--- its source (the callees', then the kernel's) ---\n{_numbered(source)}"
            ) from None
        raw = _private.raw_program(program)
        built = _Built(raw, raw.get_info(cl.program_info.KERNEL_NAMES) or "")
        with _programs_lock():
            built = table.setdefault(key, built)
        return built

    def link(self, job: CompilerJob, artifact: Any, context: Hashable) -> LinkedKernel:
        if not isinstance(context, _ContextKey):
            raise TypeError(f"an OpenCL kernel is linked for a context key, got {context!r}")
        ctx = context.context()
        if ctx is None:
            raise RuntimeError("the context of this lookup was dropped")
        signature = launching.signature(job.name, job.mi.tt)
        built = self._build(job, artifact, ctx)
        try:
            knl = cl.Kernel(built.program, job.name)
        except cl.Error:
            raise CompileError(
                f"the source of OpenCL kernel {signature} defines no __kernel named "
                f"{job.name!r} (it defines: {built.names or 'none'}); a method body returns "
                "source that defines a __kernel function named like the method"
            ) from None
        nargs = knl.get_info(cl.kernel_info.NUM_ARGS)
        if nargs != len(job.mi.tt):
            raise CompileError(
                f"OpenCL kernel {job.name} takes {nargs} parameter(s), but its method's "
                f"signature {signature} has {len(job.mi.tt)} (captured values count): "
                "annotate one parameter per kernel parameter"
            )
        _check_params(job, knl, ctx, artifact.source)
        return LinkedKernel(job.name, job.mi.tt, context, built, knl, artifact.source)

    def relink(self, job: CompilerJob, artifact: Any, context: Hashable, linked: Any) -> Any:
        # The program is kept per included headers' contents: after an edit (and a new
        # world: a redefinition or bump()), the kernel is built again.
        ctx = context.context() if isinstance(context, _ContextKey) else None
        built = None if ctx is None else self._build(job, artifact, ctx)
        if built is None or built is linked.built:
            return linked
        return self.link(job, artifact, context)  # finds `built` (held here) in _programs


# The kernel's own parameter types (SPEC 8), from kernel argument info: OpenCL C's scalar
# types (vectors of them: 2, 3 (stored as 4), 4, 8 or 16), and what kind each is.
_SCALAR_PARAMS: dict[str, tuple[str, int]] = {
    **{n: ("int", 1) for n in ("char", "uchar", "signed char", "unsigned char", "bool")},
    **{n: ("int", 2) for n in ("short", "ushort", "unsigned short")},
    **{n: ("int", 4) for n in ("int", "uint", "unsigned int", "unsigned")},
    **{n: ("int", 8) for n in ("long", "ulong", "unsigned long")},
    "half": ("float", 2),
    "float": ("float", 4),
    "double": ("float", 8),
}
_ADDRESS_BITS_PARAMS = ("size_t", "ptrdiff_t", "intptr_t", "uintptr_t")
_VECTOR = re.compile(r"([a-z]+)(2|3|4|8|16)")
_COMPLEX_PARAMS = {"cfloat_t": "float2", "cdouble_t": "double2"}  # pyopencl-complex.h
_POINTERS: dict[int, str] = {
    cl.kernel_arg_address_qualifier.GLOBAL: "__global",
    cl.kernel_arg_address_qualifier.CONSTANT: "__constant",
    cl.kernel_arg_address_qualifier.LOCAL: "__local",
}
_QUALIFIERS = frozenset(
    {"const", "volatile", "restrict", "__restrict", "__private", "private", "__global"}
    | {"global", "__constant", "constant", "__local", "local"}
)
_PART_NAMES = {v: k for k, v in _SCALAR_PARAMS.items() if " " not in k and k[0] != "u"}
_PART_NAMES[("int", 1)] = "char"


class _Layout(NamedTuple):
    """How a type holds its values: the (kind, size) of each part (None: a struct of mixed
    fields), how many parts (n), its size and its alignment in bytes."""

    part: tuple[str, int] | None
    n: int
    size: int
    align: int

    def __str__(self) -> str:
        if self.part is None:
            return f"a struct of mixed fields ({self.size} bytes)"
        name = _PART_NAMES.get(self.part, f"{self.part[1]}-byte {self.part[0]}")
        return name if self.n == 1 else f"{name}{self.n}"


# Source scanning for the names argument info reports: typedefs and structs the program's own
# text defines (comments removed; preprocessor conditions are not evaluated).
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRUCTS = re.compile(r"\b(typedef\s+)?struct\b\s*(\w+\s*)?(\{[^{}]*\})\s*(\w+)?\s*;")
_TYPEDEFS = re.compile(r"\btypedef\s+([\w\s]+?)\s+(\w+)\s*;")
_FIELD = re.compile(
    r"((?:\w+\s+)*?\w+)\s+(\w+(?:\s*\[\s*\d+\s*\])?(?:\s*,\s*\w+(?:\s*\[\s*\d+\s*\])?)*)"
)


def _source_types(source: str) -> dict[str, str]:
    """Each typedef and struct name ``source`` defines -> what it names (a type's name, or a
    struct's ``{...}`` body); a name defined twice differently names nothing (``""``)."""
    text = _COMMENTS.sub(" ", source)
    found: list[tuple[str, str]] = []
    for m in _STRUCTS.finditer(text):
        if m[2]:
            found.append((f"struct {m[2].strip()}", m[3]))
        if m[1] and m[4]:
            found.append((m[4], m[3]))
    found += [(m[2], " ".join(m[1].split())) for m in _TYPEDEFS.finditer(text)]
    types: dict[str, str] = {}
    for name, what in found:
        types[name] = what if types.get(name, what) == what else ""
    return types


def _layout(name: str, address_bits: int, types: dict[str, str], depth: int = 0) -> _Layout | None:
    """The layout of the type spelled ``name`` (qualifiers and a pointer's ``*`` dropped), or
    None where it is not known: ``void``, a name the source does not define plainly."""
    name = " ".join(w for w in name.replace("*", " ").split() if w not in _QUALIFIERS)
    name = _COMPLEX_PARAMS.get(name, name) if name not in types else name
    if name in _SCALAR_PARAMS or name in _ADDRESS_BITS_PARAMS:
        part = _SCALAR_PARAMS.get(name, ("int", address_bits // 8))
        return _Layout(part, 1, part[1], part[1])
    m = _VECTOR.fullmatch(name)
    if m and m[1] in _SCALAR_PARAMS:
        part, n = _SCALAR_PARAMS[m[1]], int(m[2]) + (m[2] == "3")
        return _Layout(part, n, part[1] * n, part[1] * n)
    what = types.get(name, "")
    if depth > 8 or not what:
        return None
    if what[0] != "{":
        return _layout(what, address_bits, types, depth + 1)
    return _struct_layout(what[1:-1], address_bits, types, depth + 1)


def _struct_layout(
    body: str, address_bits: int, types: dict[str, str], depth: int
) -> _Layout | None:
    """The layout of a struct of fields ``body``, as C lays it out; None unless every field
    is of a known type (no pointers, bit fields, attributes or sizes from macros)."""
    size = align = count = 0
    parts = set()
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = _FIELD.fullmatch(decl)
        field = m and _layout(m[1], address_bits, types, depth)
        if not m or field is None:
            return None
        for declarator in m[2].split(","):
            length = int(re.sub(r"\D", "", declarator.partition("[")[2]) or 1)
            size = -(-size // field.align) * field.align + field.size * length
            align, count = max(align, field.align), count + field.n * length
            parts.add(field.part)
    if not align:
        return None
    size = -(-size // align) * align
    part = parts.pop() if len(parts) == 1 else None
    if part is None or count * part[1] != size:  # mixed, or padded: compared by size alone
        return _Layout(None, 1, size, align)
    return _Layout(part, count, size, align)


def _dtype_layout(dt: np.dtype) -> _Layout | None:
    """The layout of a numpy dtype's values: a scalar, a complex (two floats), a subarray or
    struct of equal packed parts (a ``pyopencl.cltypes`` vector), or another struct."""
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        inner = _dtype_layout(base)
        return inner and inner._replace(n=inner.n * int(np.prod(shape)), size=dt.itemsize)
    if dt.names is None:
        kind = "float" if dt.kind in "fc" else "int" if dt.kind in "biu" else ""
        n = 2 if dt.kind == "c" else 1
        return _Layout((kind, dt.itemsize // n), n, dt.itemsize, dt.alignment) if kind else None
    fields = [_dtype_layout(dt.fields[n][0]) for n in dt.names] if dt.fields else []
    parts = {f.part if f else None for f in fields}
    count = sum(f.n for f in fields if f)
    part = parts.pop() if len(parts) == 1 else None
    if part is not None and count * part[1] == dt.itemsize:
        return _Layout(part, count, dt.itemsize, dt.alignment)
    return _Layout(None, 1, dt.itemsize, dt.alignment)


def _param_kind(
    name: str, address: int, address_bits: int, types: dict[str, str] | None = None
) -> tuple[str, int, _Layout | None]:
    """(kind, size, layout) of a kernel parameter of type ``name`` in address space
    ``address``, resolving names with ``types`` (:func:`_source_types`): kind is "image",
    "sampler", "__global"/"__constant"/"__local" (a pointer; layout: its elements'), "int" or
    "float" (a scalar), "vector" (equal parts), "struct", or "unknown" (nothing is checked)."""
    name = " ".join(name.split())
    if name.startswith("image") and name.endswith("_t"):
        return "image", 0, None
    if name == "sampler_t":
        return "sampler", 0, None
    layout = _layout(name, address_bits, types or {})
    if name.endswith("*") or address in _POINTERS:
        return _POINTERS.get(address, "__global"), 0, layout
    if layout is None:
        return "unknown", 0, None
    if layout.part is None:
        return "struct", layout.size, layout
    return (layout.part[0] if layout.n == 1 else "vector"), layout.size, layout


def _param_mismatch(t: type, kind: str, size: int, layout: _Layout | None = None) -> str | None:
    """Why an argument of type ``t`` cannot be a parameter of (kind, size, layout), or None
    when it can (or may: only clear mismatches are refused)."""
    if kind == "unknown":
        return None
    if isinstance(t, type) and issubclass(t, (Array, Buffer)):
        if kind not in ("__global", "__constant"):
            return "a buffer is a __global pointer"
        dt = t.dtype if issubclass(t, Array) and t.eltype in _CONCRETE else None
        theirs = None if dt is None else _dtype_layout(dt)
        if layout is None or theirs is None or _same_elements(theirs, layout):
            return None
        return f"the array's elements are {theirs}, the parameter's are {layout}"
    if t is LocalMemory:
        return None if kind == "__local" else "local memory is a __local pointer"
    if t is Image:
        return None if kind == "image" else "an image is an image parameter"
    if t is Sampler:
        return None if kind == "sampler" else "a sampler is a sampler_t parameter"
    if kind in ("image", "sampler", "__global", "__constant", "__local"):
        return "a value passed by value cannot be a pointer, an image or a sampler"
    if isinstance(t, type) and issubclass(t, Struct):
        if t.dtype is None:
            raise TypeError(f"{t!r} has no layout: a parameter's struct type is Struct[dtype]")
        dt = t.dtype
    elif isinstance(t, type) and issubclass(t, np.generic):
        dt = np.dtype(t)
    else:
        return None
    if dt.itemsize != size:
        return f"they differ in size ({dt.itemsize} and {size} bytes)"
    theirs = _dtype_layout(dt)
    if layout is None or theirs is None:
        return None
    if kind in ("int", "float") and dt.names is None and dt.kind != "c":
        arg_kind = "floating-point" if dt.kind == "f" else "integer"
        if arg_kind != {"float": "floating-point"}.get(kind, "integer"):
            article = "an" if arg_kind == "integer" else "a"
            return f"the argument is of {article} {arg_kind} type, the parameter is not"
    if theirs.part == layout.part and (theirs.n == layout.n or layout.part is None):
        return None
    return f"the argument holds {theirs}, the parameter {layout}"


def _same_elements(a: _Layout, p: _Layout) -> bool:
    """Whether an array of elements ``a`` can be what a pointer to ``p`` points at: parts of
    one kind and size (a ``float4 *`` takes an array of floats, four a vector), or structs of
    mixed fields of one size."""
    if a.part is None or p.part is None:
        return a.part == p.part and a.size == p.size
    return a.part == p.part


def _check_params(job: CompilerJob, knl: Any, context: cl.Context, source: str = "") -> None:
    """Each kernel parameter's type, as the device reports it, against the argument type
    the method's signature gives it (SPEC 8): a clear mismatch in kind or size (an array's
    elements, a vector's parts) is a TypeError, before anything is enqueued. Typedef and
    struct names are resolved from ``source``. Once per linked kernel (a miss); devices that
    report no argument info are not checked."""
    address_bits = min(d.address_bits for d in context.devices)
    info = cl.kernel_arg_info
    types = _source_types(source)
    for i, t in enumerate(job.mi.tt):
        try:
            name = knl.get_arg_info(i, info.TYPE_NAME)
            address = knl.get_arg_info(i, info.ADDRESS_QUALIFIER)
        except cl.Error:  # no argument info: built without -cl-kernel-arg-info
            return
        why = _param_mismatch(t, *_param_kind(name, address, address_bits, types))
        if why is None:
            continue
        try:
            pname = knl.get_arg_info(i, info.NAME)
        except cl.Error:
            pname = ""
        space = _POINTERS.get(address, "")
        declared = f"{space} {name}" if space and "*" in name else name
        theirs = type_name(t)
        if isinstance(t, type) and issubclass(t, np.generic):
            try:
                theirs += f" (OpenCL C {_c_type(t)[0]})"
            except TypeError:  # a type OpenCL C does not spell
                pass
        raise users_error(
            TypeError(
                f"kernel {launching.signature(job.name, job.mi.tt)}: parameter {i}"
                f"{f' ({pname})' if pname else ''} is declared {declared!r} in the kernel source, "
                f"but the method's signature gives it {theirs}: {why}. Make the annotation match "
                "the C declaration (or the declaration the annotation); nothing was launched"
            )
        )


BACKEND = OpenCLBackend()
_configs: dict[tuple[str, ...], CompilerConfig] = {}


def _config(options: tuple[str, ...]) -> CompilerConfig:
    config = _configs.get(options)
    if config is None:
        config = _configs.setdefault(options, CompilerConfig(BACKEND, options))
    return config


#: launch options, in order, as launch and a HostKernel call take them
LAUNCH_OPTIONS = ("global_size", "local_size", "global_offset", "wait_for", "queue")
#: compiler keyword arguments
COMPILER_KWARGS = ("options",)
#: how an unknown keyword's message names them
_COMPILER_HELP = (
    "the compiler option is options=(build options, ...), e.g. options=('-cl-fast-relaxed-math',)"
)


def _build_options(compiler_kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The build options from compiler keyword arguments (only ``options`` is one)."""
    unknown = sorted(set(compiler_kwargs) - set(COMPILER_KWARGS))
    if unknown:
        raise _launcher.keyword_error(unknown)
    options = compiler_kwargs["options"]
    if isinstance(options, str):  # split by shell rules, as pyopencl's build splits a str
        try:
            return tuple(shlex.split(options))
        except ValueError as e:
            raise ValueError(f"options={options!r} do not split as shell words: {e}") from None
    if isinstance(options, Sequence) and all(isinstance(o, str) for o in options):
        return tuple(options)
    raise TypeError(
        f"options are OpenCL build options, a str or a sequence of str, got {options!r}"
    )


# -- queues and contexts ------------------------------------------------------------------

_default_queue: list[cl.CommandQueue | None] = [None]  # the default queue, read by the launch path
_default_lock = new_lock(reentrant=False)


def _pocl_cpu_device() -> cl.Device:
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    for p in platforms:
        if "portable computing language" in p.name.lower() or "pocl" in p.vendor.lower():
            try:
                devices = p.get_devices(device_type=cl.device_type.CPU)
            except cl.Error:
                continue
            if devices:
                return devices[0]
    found = ", ".join(p.name for p in platforms) or "none"
    raise RuntimeError(
        f"no PoCL CPU device found (OpenCL platforms: {found}): install it with "
        "`pip install pocl-binary-distribution` (or `pip install specializer[opencl]`), "
        "or pick a queue with specializer.backends.opencl.set_default_queue(queue)"
    )


def default_queue() -> cl.CommandQueue:
    """The queue launches use when given none: the one set with :func:`set_default_queue`,
    else a queue on PoCL's CPU device (created on first use, then kept). In a fork of a
    process that used the device, the fork error (see :func:`launch`)."""
    _launcher.check_fork()  # using a queue is using the device
    queue = _default_queue[0]
    if queue is None:
        with _default_lock():
            queue = _default_queue[0]
            if queue is None:
                queue = _default_queue[0] = cl.CommandQueue(cl.Context([_pocl_cpu_device()]))
    return queue


def set_default_queue(queue: cl.CommandQueue | None) -> None:
    """Make launches given no queue use ``queue`` (``None``: a queue on PoCL's CPU device)."""
    if queue is not None and not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"expected a pyopencl.CommandQueue or None, got {queue!r}")
    if queue is not None:
        _launcher.check_fork()  # a queue of the user's is a device in use
    with _default_lock():
        _default_queue[0] = queue


class _ContextKey:
    """What lookups key on for one context: compared by identity, holding the context only
    weakly (through the queues it was seen with), so no cache keeps a context the user
    dropped alive. ``key`` is the lookup key without build options.

    Each queue keeps its context's key in its own ``__dict__`` (see :func:`_table`), and the
    key learns when each queue's context object dies (a queue's ``context`` lives with the
    queue); when the last one it saw has, the context is forgotten: what was linked for it,
    and the lookup results keyed by it, are dropped (:func:`_forget`). A later queue of a
    context still alive gets a new key (and links again)."""

    __slots__ = ("__weakref__", "key", "name", "ptr", "refs")

    def __init__(self, context: cl.Context) -> None:
        self.ptr = context.int_ptr
        self.name = repr(context)
        self.key = (self, ())
        self.refs: dict[
            int, weakref.ref[cl.Context]
        ] = {}  # id -> a weak reference to a context object

    def context(self) -> cl.Context | None:
        """A live object of the context (None once every queue it was seen with is gone)."""
        for ref in list(self.refs.values()):
            ctx = ref()
            if ctx is not None:
                return ctx
        return None

    def watch(self, context: cl.Context) -> None:
        ref = weakref.ref(context)
        self.refs[id(ref)] = ref
        weakref.finalize(context, _release, self, id(ref))

    def __repr__(self) -> str:
        return f"<context key of {self.name}>"


# Per live context (by its cl_context address: a context that is alive keeps its address)
# its key. Queues are not weakly referenceable, so the library keeps no table of queues:
# what it keeps for a queue lives in the queue's own __dict__, and goes with it.
_context_keys: dict[int, _ContextKey] = {}
_keys_lock = new_lock(reentrant=False)
_TABLE = "_specializer"  # the attribute of a queue that holds what is kept for it


def _key(queue: cl.CommandQueue) -> tuple[_ContextKey, tuple[str, ...]]:
    """(the queue's context key, no build options)."""
    if not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
    t = _launcher.where_table(queue)  # in the queue's own __dict__: it goes with the queue
    if t is None:  # (where_table is None only for a where without a __dict__)
        raise TypeError(f"queue {queue!r} has no __dict__ to keep its context key in")
    key: tuple[_ContextKey, tuple[str, ...]] | None = t.get("key")
    if key is None:
        ctx = queue.context  # the queue's own context object: it dies with the queue
        with _keys_lock():
            ck = _context_keys.get(ctx.int_ptr)
            if ck is None:
                ck = _context_keys[ctx.int_ptr] = _ContextKey(ctx)
            ck.watch(ctx)
            key = t.setdefault("key", ck.key)
    return key


def _release(ck: _ContextKey, ref_id: int) -> None:
    """A queue the context key was seen with is gone; when it was the last, so is the
    context for this library. Runs from the garbage collector in any thread: no lock (each
    step is one atomic dict operation; a race can only forget a context still in use,
    which then links again under a new key)."""
    ck.refs.pop(ref_id, None)
    if not ck.refs:
        if _context_keys.get(ck.ptr) is ck:
            _context_keys.pop(ck.ptr, None)
        _forget(ck)


def _forget(ck: _ContextKey) -> None:
    """A context is gone: what was built and linked for it goes too, with the kernel
    objects of each linked kernel's pool (they refer to it)."""
    for linked in launching.forget(ck):
        linked.pool.clear()  # a launch still running with it takes a new kernel object


_SIZE_MAX = int(np.iinfo(np.uintp).max)  # the host's size_t, which pyopencl converts to


def _not_ints(what: str, v: Any, d: Any) -> TypeError:
    fix = f": pass {what}={int(d)}" if isinstance(d, float) and d.is_integer() else ""
    return TypeError(
        f"{what} is an int or a tuple of 1 to 3 ints (Python or numpy integers), got {v!r}{fix}"
    )


def _dims(v: Any, what: str, least: int) -> tuple[int, ...]:
    if v is launching.REQUIRED:  # (a HostKernel call, or a launch that hit its front entry)
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


def _sizes(global_size: Any, local_size: Any, global_offset: Any) -> tuple[Any, Any, Any]:
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


def _size_error(linked: LinkedKernel, error: BaseException) -> Exception | None:
    """A work size's error (from :func:`_sizes`) naming the kernel, which the launch raises
    from its own frame; None for another error (raised as it is)."""
    named = f"kernel {launching.signature(linked.name, linked.tt)}: {error}"
    if type(error) is TypeError:
        return TypeError(named)
    return ValueError(named) if type(error) is ValueError else None


def _same_context(linked: LinkedKernel, queue: Any) -> cl.CommandQueue:
    """A queue given to a HostKernel call: it must be in the context the kernel was built in."""
    if not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
    if _key(queue)[0] is not linked.ck:
        raise ValueError(
            f"kernel {linked.name} was looked up in {linked.context!r}, but the queue is in "
            f"{queue.context!r}: look it up with clfunction(f, tt, queue=queue)"
        )
    return queue


# -- the launch path ----------------------------------------------------------------------

_definitions = Definitions(
    typeof, __name__, (WeakScalar, Struct, Array, Buffer, LocalMemory, Image, Sampler)
)


@overload
def kernel(
    fn: Callable[..., str],
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Kernel: ...
@overload
def kernel(
    fn: None = None,
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Callable[[Callable[..., str]], Kernel]: ...
def kernel(
    fn: Callable[..., Any] | None = None,
    *,
    callees: Iterable[Any] = (),
    localns: dict[str, Any] | None = None,
    **unknown: Any,
) -> Any:
    """``@kernel`` or ``@kernel(callees=[device_fn, ...])``: define a kernel method.

    A first ``def`` of a name in a module defines a generic kernel; another ``def`` of that
    name adds a method (a more specific signature), or replaces the one with the same
    signature (the world rises: the next launch runs the new code). ``@fill.method`` on a
    ``def`` of any name (``def _``) adds a method to ``fill`` the same way, the spelling type
    checkers accept (a second ``def fill`` is a redefinition to them);
    ``fill.delete_method(signature)`` takes one back.

    Annotate each parameter with an argument type: ``Array[dtype]`` (a pyopencl array;
    ``Array[np.float32]``, or abstract ``Array[np.floating]``, ``Array[np.number]``), a numpy
    scalar type (``np.float32``, or abstract ``np.integer``, ``np.number``), ``Struct[dtype]``
    (a struct or vector by value, e.g. ``pyopencl.cltypes.float4``), ``Buffer``,
    ``LocalMemory``, ``Image`` or ``Sampler``. A Python ``int``, ``float`` or ``bool`` passed
    to a kernel takes the type the method declares. An annotation no value can match
    (``int``, ``np.ndarray``, another back-end's ``Array``) is a ``TypeError`` here.

    The body is called once per method instance, with the concrete types bound to its
    parameters (``x.dtype``, ``v`` is ``np.float32``), and returns OpenCL C source that defines
    a ``__kernel`` function named like the method, its parameters in the same order
    (:func:`ctype` spells a type). ``callees`` names the device functions it calls;
    ``localns=locals()`` lets string annotations name the defining function's locals.
    """
    if unknown:  # (a misspelling: named, with the keywords it takes)
        raise decorator_keywords("@opencl.kernel", unknown)
    return _definitions.kernel(fn, callees=callees, localns=localns)


@overload
def device(
    fn: Callable[[], str],
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> DeviceFunction: ...
@overload
def device(
    fn: None = None,
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Callable[[Callable[[], str]], DeviceFunction]: ...
def device(
    fn: Callable[..., Any] | None = None,
    *,
    callees: Iterable[Any] = (),
    localns: dict[str, Any] | None = None,
    **unknown: Any,
) -> Any:
    """``@device`` or ``@device(callees=[...])``: define a device function (a callee).

    It takes no parameters; its body returns OpenCL C source defining helper functions that
    kernels listing it in ``callees=`` call. Running its ``def`` again raises the world and
    recompiles exactly the kernels that call it.
    """
    if unknown:  # (a misspelling: named, with the keywords it takes)
        raise decorator_keywords("@opencl.device", unknown)
    return _definitions.device(fn, callees=callees, localns=localns)


#: ``capture(kernel, *values)``: a kernel instance passing ``values`` first on every launch.
capture = _definitions.capture


class HostKernel(launching.HostKernel):
    """``clfunction``'s result: the cached :class:`LinkedKernel` with the live kernel ``f``.

    Call it like :func:`launch`, with arguments of the types it was looked up for:
    ``hk(*args, global_size=..., local_size=None, global_offset=None, wait_for=None,
    queue=None)`` (default: the queue of the lookup). A kernel instance's captured values are
    passed first, from ``f``, on each call.
    """

    linked: LinkedKernel
    where: cl.CommandQueue

    @property
    def queue(self) -> cl.CommandQueue:
        return self.where

    @property
    def kernel(self) -> Any:
        """A ``pyopencl.Kernel`` of this kernel, to inspect (launches set the arguments of
        kernel objects of their own, from the linked kernel's pool)."""
        return self.linked.kernel

    @property
    def program(self) -> Any:
        return self.linked.program

    @property
    def context(self) -> cl.Context | None:
        return self.linked.context


class _OpenCLLauncher(launching.Launcher):
    name = "opencl"
    template = "opencl_entry.py.j2"
    options = LAUNCH_OPTIONS
    defaults = ("required", "none", "none", "none", "none")
    lifted = compiler_kwargs = COMPILER_KWARGS
    compiler_help = _COMPILER_HELP
    where_name = "queue"
    where_attr = _TABLE
    front_attr = "_opencl_front"
    V = LinkedKernel
    host_class = HostKernel
    lookup_name = "clfunction"
    #: "cls_dtype_0d": a struct by value (np.void, or a 0-d array as pyopencl.cltypes makes)
    guard_kinds = {**launching.Launcher.guard_kinds, "cls_dtype_0d": True}

    def link(self, F: Any, tt: tuple[type, ...], key: tuple[_ContextKey, tuple[str, ...]]) -> Any:
        return uncached_lookup(F, tt, _config(key[1]), key[0])

    def resolve(self, opts: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        queue = opts[4]
        if queue is None:
            queue = default_queue()
            opts = (*opts[:4], queue)
        elif not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
        return queue, opts

    def check_args(self, where: Any, f: Any, args: tuple[Any, ...]) -> None:
        # The slow path of a launch also checks that no argument lives in another context
        # than the queue's (what a launch with its front entry, for the same queue and
        # argument types, no longer checks).
        _check_contexts(where, f, args)

    def resolve_where(self, where_opt: Any) -> Any:
        return self.resolve((None, None, None, None, where_opt))[0]

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        key = _key(where)
        return (key[0], _build_options(kw)) if kw else key

    def guard_of(self, t: type) -> tuple[str, type, Any]:
        if isinstance(t, type) and issubclass(t, Array):
            return "cls_dtype", cla.Array, t.dtype
        if isinstance(t, type) and issubclass(t, Struct):
            return "cls_dtype_0d", np.void, t.dtype
        cls = _GUARD_CLASS.get(t)
        if cls is not None:
            return "cls", cls, None
        return "cls", t, None

    def kinds(
        self, tt: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int
    ) -> tuple[list[str], list[str], dict[str, Any]]:
        namespace: dict[str, Any] = {
            "_default_queue": _default_queue,
            "_enqueue": cl.enqueue_nd_range_kernel,
            "_sizes": _sizes,
            "_size_error": _size_error,
            "_same_context": _same_context,
            "_bad_array": _bad_array,
            "_failed": _failed,
            "_FAILURES": _FAILURES,
            "_nothing": _nothing,
            "_ref": weakref.ref,
        }
        kinds = []
        # A record holds no captured value (the instance's): those are set on every launch.
        for i, (t, r) in enumerate(zip(tt, resolved)):
            if issubclass(t, Array):
                kinds.append("array")
            elif issubclass(t, LocalMemory):
                kinds.append("local")
            elif issubclass(t, Sampler):
                kinds.append("sampler")
            elif issubclass(t, _ArgType):
                kinds.append("object")
            elif issubclass(t, Struct):
                kinds.append("bytes")
            elif issubclass(t, WeakScalar):
                namespace[f"_pack{i}"] = _packer(resolve_weak(t, r))
                namespace[f"_S{i}"] = t.pytype
                kinds.append("packed" if i >= ncaptured else "packed_each")
            else:
                _c_type(r)  # a type OpenCL has, so its numpy scalar's bytes are the argument
                namespace[f"_S{i}"] = t
                kinds.append("scalar" if i >= ncaptured else "bytes")
        guards = [self.guard_of(t)[0] for t in tt[ncaptured:]]
        return guards, kinds, namespace


_launcher = _OpenCLLauncher(_definitions)


def _check_contexts(queue: cl.CommandQueue, f: Any, args: tuple[Any, ...]) -> None:
    """A launch's arrays, buffers, images and samplers (captured ones too) must be of the
    queue's context: a ValueError naming the argument (OpenCL would run the kernel on them,
    and plain pyopencl does not check either)."""
    ctx = queue.context.int_ptr
    captured = f.values if isinstance(f, KernelInstance) else ()
    for what, values in (("captured value", captured), ("argument", args)):
        for i, v in enumerate(values):
            if not isinstance(v, (cla.Array, cl.MemoryObjectHolder, cl.Sampler)):
                continue
            try:
                other = v.context
            except cl.Error:
                continue
            if other is not None and other.int_ptr != ctx:
                kind = "an array" if isinstance(v, cla.Array) else f"a {type(v).__name__}"
                name = f.name if isinstance(f, Kernel) else f.kernel.name
                counted = "" if what == "captured value" else " (counting launch arguments from 0)"
                raise ValueError(
                    f"{what} {i} of kernel {name}{counted} is {kind} of {other!r}, but the "
                    f"queue is in {queue.context!r}: a kernel can use only memory of its "
                    "queue's context: make it on a queue of that context, or launch on a "
                    "queue of its context"
                )


def clfunction(
    f: Kernel | KernelInstance,
    tt: Iterable[type] = (),
    queue: cl.CommandQueue | None = None,
    **compiler_kwargs: Any,
) -> HostKernel:
    """The kernel ``f`` (a kernel or kernel instance) for argument types ``tt`` in the context of
    ``queue`` (default :func:`default_queue`), built with ``options=(...)`` if given.

    The lookup (dispatch in the task's world, the compiled-code cache, the kernel for the
    context) runs through ``cached_lookup`` with key (context, build options); a hit takes no
    lock and hashes nothing. ``tt`` excludes a kernel instance's captured values; Python
    ``int``/``float``/``bool`` in it stand for the weak types. Each call returns a new
    HostKernel of the cached result (nothing else is kept).
    """
    # cast: _launcher.host_class is this module's HostKernel
    return cast(HostKernel, _launcher.function(f, tt, queue, compiler_kwargs))


#: a launch's sizes: an int, or a sequence of up to 3 ints
_Sizes = int | Sequence[int]


class _Launch(Protocol):
    """The type of :func:`launch` (generated by the core, so typed here for type checkers)."""

    def __call__(
        self,
        f: Kernel | KernelInstance,
        /,
        *args: Any,
        global_size: _Sizes,
        local_size: _Sizes | None = None,
        global_offset: _Sizes | None = None,
        wait_for: Sequence[cl.Event] | None = None,
        queue: cl.CommandQueue | None = None,
        options: str | Sequence[str] = ...,
    ) -> cl.Event: ...


launch: _Launch = _launcher.launch
launch.__doc__ = """``launch(f, *args, global_size, local_size=None, global_offset=None,
wait_for=None, queue=None, **compiler_kwargs)``: launch kernel ``f`` (a kernel or kernel
instance) on ``args`` and return the ``pyopencl.Event``.

``global_size``/``local_size``/``global_offset`` are an int or up to 3 ints (``local_size=None``
lets OpenCL choose); ``wait_for`` is a list of events to wait for; ``queue`` defaults to
:func:`default_queue`; ``options=(...)`` are build options (the one compiler keyword)."""
launch.__module__ = __name__
_site = _launcher.site  # the one call site of the cached lookup (tests count its misses)
