"""``cufunction`` (keyed by current context and compiler kwargs), ``launch`` and ``code_ptx``,
over the core's launch path generated per signature from ``templates/cuda_entry.py.j2``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import numpy as np

from ... import launching
from ...kernels import Kernel, KernelInstance, code_of, uncached_lookup
from ...types import Struct, WeakScalar, resolve_weak, weak_range
from . import _params
from . import _types as _types
from ._array import Array, cai_classes, cuarray_class, device_pointer, foreign
from ._compiler import COMPILER_KWARGS, compiler_config
from ._decorators import _definitions
from ._driver import Context, ContextKey, Stream, current_context, current_key, local
from ._module import LinkedKernel, launch_cooperative

#: launch options, in order, as launch and a HostKernel call take them
LAUNCH_OPTIONS = ("grid", "block", "stream", "shared_mem", "cooperative")


def _kwkey(kwargs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Compiler kwargs as a key: sorted pairs, sequences frozen to tuples so a later mutation
    cannot change what a cached entry means; unknown ones refused."""
    unknown = sorted(set(kwargs) - set(COMPILER_KWARGS))
    if unknown:
        raise _launcher.keyword_error(unknown)
    return tuple(sorted((k, _frozen(v)) for k, v in kwargs.items()))


def _frozen(v: Any) -> Any:
    return tuple(v) if isinstance(v, (Sequence, deque)) and not isinstance(v, (str, bytes)) else v


class HostKernel(launching.HostKernel):
    """A kernel ready to launch in one context: what :func:`cufunction` returns (CUDA.jl's
    ``HostKernel``). Call it like :func:`launch` without the kernel: ``hk(*args, grid=...,
    block=..., stream=None, shared_mem=0, cooperative=False)``. ``hk`` is the signature's
    generated call, bound to an instance of this class (``isinstance(hk, HostKernel)``
    holds), and carries its attributes:

    - ``function``: the driver's ``CUfunction``; ``name``: the kernel's name;
    - ``context``: the context it was loaded in, which it keeps alive (the caches hold it
      weakly), so it never launches into a gone one;
    - ``get_global(name)``, ``copy_to_global(name, array)``, ``copy_from_global(name, ...)``:
      the module's ``__constant__`` and ``__device__`` variables (see :class:`LinkedKernel`);
    - ``f``, ``tt``, ``where`` and ``linked`` (the :class:`LinkedKernel`).
    """

    linked: LinkedKernel
    function: Any
    context: Context
    name: str
    get_global: Callable[[str], tuple[int, int]]
    copy_to_global: Callable[[str, Any], None]
    copy_from_global: Callable[..., Any]

    def __init__(self, f: Any, where: Any, tt: tuple[type, ...], linked: LinkedKernel) -> None:
        super().__init__(f, where, tt, linked)
        self.function = linked.function
        self.context = linked.context
        self.name = linked.name
        self.get_global = linked.get_global
        self.copy_to_global = linked.copy_to_global
        self.copy_from_global = linked.copy_from_global

    def __repr__(self) -> str:
        return f"<HostKernel {launching.signature(self.name, self.tt)} in {self.context!r}>"


def _bounds(r: type) -> tuple[Any, Any]:
    bounds = weak_range(r)
    if bounds is None:
        raise TypeError(f"a parameter of type {r} has no range to check")
    return bounds


class _CUDALauncher(launching.Launcher):
    name = "cuda"
    template = "cuda_entry.py.j2"
    options = LAUNCH_OPTIONS
    defaults = ("required", "required", "none", "zero", "false")
    compiler_kwargs = tuple(COMPILER_KWARGS)
    front_attr = "_cuda_front"
    V = LinkedKernel
    host_class = HostKernel
    lookup_name = "cufunction"
    #: "array": a device array (its pointer is passed); "cls_dtype_1": a struct by value
    guard_kinds = {**launching.Launcher.guard_kinds, "array": True, "cls_dtype_1": True}

    def uncached_lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        token, kw = key
        return uncached_lookup(F, tt, compiler_config(kw, token.context()), token)

    def resolve(self, opts: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        return local.key or current_key(), opts

    def resolve_where(self, where_opt: Any) -> Any:
        return local.key or current_key()

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        return (where[0], _kwkey(kw)) if kw else where

    def where_table(self, where: Any, make: bool = True) -> dict[Any, Any] | None:
        # A where is (token, ()), without a __dict__: the table lives in the token, emptied
        # when the context is gone.
        token = where[0] if where.__class__ is tuple and where else None
        if token.__class__ is not ContextKey:
            return None
        return launching.table_in(token.table, self.front_attr, make)

    def guard_of(self, t: type) -> tuple[str, type, Any]:
        if isinstance(t, type) and issubclass(t, Array):
            # a CuArray by its class; a foreign one by class, then typestr, contiguity and mask
            return "array", cuarray_class(t.dtype), np.dtype(t.dtype).str
        if isinstance(t, type) and issubclass(t, Struct):
            return "cls_dtype_1", np.void, t.dtype  # np.void or a one-element array
        if isinstance(t, type) and issubclass(t, WeakScalar):
            return "cls", t.pytype, None
        return "cls", t, None

    def kinds(
        self, tt: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int
    ) -> tuple[list[str], list[str], dict[str, Any]]:
        namespace: dict[str, Any] = {
            **_params.namespace(resolved),
            "_local": local,
            "_pointer": device_pointer,  # a foreign array's, on the slow path
            "_cooperative": launch_cooperative,
            "_half": _types.half_bits,
            "_R": foreign,
            "_CAI": cai_classes,
        }
        kinds = []
        for i, (t, r) in enumerate(zip(tt, resolved)):
            if issubclass(t, Array):
                # cast: an array argument's concrete type is an Array class (Array[dtype])
                namespace[f"_own{i}"] = cuarray_class(cast("type[Array[Any]]", r).dtype)
                kinds.append("array")
            elif issubclass(t, Struct):
                dt = _params.struct_dtype(t)
                _types.struct_type(dt)  # native byte order (a cufunction's tt)
                namespace[f"_n{i}"] = dt.itemsize
                kinds.append("bytes")
            elif r is np.float16 and issubclass(t, WeakScalar):
                namespace[f"_lo{i}"], namespace[f"_hi{i}"] = _bounds(r)
                kinds.append("ranged_half")  # a Python float: range-checked, then its bits
            elif r is np.float16:
                kinds.append("half")
            elif issubclass(t, WeakScalar) and weak_range(resolve_weak(t, r)) is not None:
                namespace[f"_lo{i}"], namespace[f"_hi{i}"] = _bounds(r)
                kinds.append("ranged")
            else:
                _types.param_ctype(r)  # a type a CUDA parameter can have
                kinds.append("scalar")
        guards = [self.guard_of(t)[0] for t in tt[ncaptured:]]
        return guards, kinds, namespace


_launcher = _CUDALauncher(_definitions)
_site = _launcher.site  # the cached lookup's call site (tests count its misses)

#: a grid or block: an int, or a sequence of up to 3 ints
_Dims = int | Sequence[int]


class _Launch(Protocol):
    """The type of :func:`launch` (generated by the core)."""

    def __call__(
        self,
        f: Kernel | KernelInstance,
        /,
        *args: Any,
        grid: _Dims,
        block: _Dims,
        stream: Stream | None = None,
        shared_mem: int = 0,
        cooperative: bool = False,
        arch: str = ...,
        fastmath: bool = ...,
        maxregs: int = ...,
        lineinfo: bool = ...,
        options: str | Sequence[str] = ...,
    ) -> None: ...


launch: _Launch = _launcher.launch
launch.__doc__ = """``launch(f, *args, grid, block, stream=None, shared_mem=0, cooperative=False,
**compiler_kwargs)``: launch ``f`` (a kernel or kernel instance) on ``args``, ``grid`` blocks
of ``block`` threads (ints or tuples of up to 3), on ``stream`` (default: the legacy default
stream), in the calling thread's current context; a kernel instance's captured values come
first. ``cooperative=True`` launches with ``cuLaunchCooperativeKernel`` (grid-wide sync), a
grid too large to be resident at once being a ``ValueError``. Compiler kwargs:
``COMPILER_KWARGS``."""
launch.__module__ = __name__


def cufunction(
    f: Kernel | KernelInstance, tt: tuple[type, ...] = (), **compiler_kwargs: Any
) -> HostKernel:
    """The kernel ``f`` (a kernel or kernel instance) compiled for argument types ``tt``
    (without the captured values) and loaded in the current context, as a :class:`HostKernel`,
    looked up through ``cached_lookup`` with key (context, ``COMPILER_KWARGS``). Python
    ``int``/``float``/``bool`` in ``tt`` stand for the weak types."""
    # cast: _launcher.host_class is this module's HostKernel
    return cast(HostKernel, _launcher.function(f, tt, None, compiler_kwargs))


def code_ptx(
    f: Any, tt: tuple[type, ...] = (), *, arch: str | None = None, **compiler_kwargs: Any
) -> str:
    """The PTX of ``f`` for argument types ``tt`` (the ``@device_code_ptx`` analog). With
    ``arch`` (``"sm_90"``, ...) it needs no GPU; without, it targets the current device."""
    ctx = current_context() if arch is None else None
    if arch is not None:
        compiler_kwargs["arch"] = arch
    config = compiler_config(_kwkey(compiler_kwargs), ctx)
    F = _definitions.kernel_type(f)
    _definitions.own(F)
    ptx: str = code_of(F, _launcher.tt_of(tt, "code_ptx"), config).ptx
    return ptx
