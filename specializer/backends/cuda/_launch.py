"""``cufunction`` (keyed by current context and compiler kwargs), ``launch`` and ``code_ptx``,
over the core's launch path, its invokers generated per signature from
``templates/cuda_launch.py.j2``.
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
from ._decorators import definitions
from ._driver import Context, Stream, current_context, current_key, local
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


def _range(r: type) -> dict[str, Any]:
    """The bounds of a "ranged" kind's check, as its template's values (``_lo<i>``, ``_hi<i>``)."""
    bounds = weak_range(r)
    if bounds is None:
        raise TypeError(f"a parameter of type {r} has no range to check")
    return {"lo": bounds[0], "hi": bounds[1]}


class _CUDALauncher(launching.Launcher):
    name = "cuda"
    template = "cuda_launch.py.j2"
    options = {
        "grid": launching.REQUIRED,
        "block": launching.REQUIRED,
        "stream": None,
        "shared_mem": 0,
        "cooperative": False,
    }
    compiler_kwargs = COMPILER_KWARGS
    lookup_name = "cufunction"
    namespace = {
        "_local": local,
        "_current_key": current_key,
        "_pool": _params.pool_functions,
        "_cooperative": launch_cooperative,
        "_half": _types.half_bits,
        "_R": foreign,
        "_CAI": cai_classes,
        **_params.NAMESPACE,
    }

    def uncached_lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        token, kw = key
        return uncached_lookup(F, tt, compiler_config(kw, token.context()), token)

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        return (where[0], _kwkey(kw)) if kw else where

    def kind(self, t: type, r: type, captured: bool) -> launching.Kind:
        if issubclass(t, Array):
            # cast: an array argument's concrete type is an Array class (Array[dtype])
            dtype = cast("type[Array[Any]]", r).dtype
            cls = cuarray_class(dtype)  # a CuArray by its class; a foreign one by its interface
            return launching.Kind("array", cls, np.dtype(dtype).str, exact=device_pointer)
        if issubclass(t, Struct):
            dt = _params.struct_dtype(t)
            _types.struct_type(dt)  # native byte order (a cufunction's tt)
            return launching.Kind("bytes", np.void, dt, values={"n": dt.itemsize})
        if issubclass(t, WeakScalar):
            if r is np.float16:  # a Python float: range-checked, then its bits
                return launching.Kind("ranged_half", t.pytype, values=_range(r))
            if weak_range(resolve_weak(t, r)) is not None:
                return launching.Kind("ranged", t.pytype, values=_range(r))
        if r is np.float16:
            return launching.Kind("half", t)
        _types.param_ctype(r)  # a type a CUDA parameter can have
        return launching.Kind("scalar", t.pytype if issubclass(t, WeakScalar) else t)


_launcher = _CUDALauncher(definitions)
_site = _launcher.site  # the cached lookup's call site (tests count its misses)


class HostKernel(launching.HostKernel):
    """A kernel ready to launch in one context: what :func:`cufunction` returns (CUDA.jl's
    ``HostKernel``). Call it like :func:`launch` without the kernel: ``hk(*args, grid=...,
    block=..., stream=None, shared_mem=0, cooperative=False)``; it launches in its context
    whatever context is current. Attributes:

    - ``function``: the driver's ``CUfunction``; ``name``: the kernel's name;
    - ``context``: the context it was loaded in, which it keeps alive (the caches hold it
      weakly), so it never launches into a gone one;
    - ``get_global(name)``, ``copy_to_global(name, array)``, ``copy_from_global(name, ...)``:
      the module's ``__constant__`` and ``__device__`` variables (see :class:`LinkedKernel`);
    - ``f``, ``tt``, ``where`` and ``linked`` (the :class:`LinkedKernel`).
    """

    __call__ = _launcher.host_call

    linked: LinkedKernel
    function: Any
    context: Context
    name: str
    get_global: Callable[[str], tuple[int, int]]
    copy_to_global: Callable[[str, Any], None]
    copy_from_global: Callable[..., Any]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        linked = self.linked
        self.function = linked.function
        self.context = linked.context
        self.name = linked.name
        self.get_global = linked.get_global
        self.copy_to_global = linked.copy_to_global
        self.copy_from_global = linked.copy_from_global

    def __repr__(self) -> str:
        return f"<HostKernel {launching.signature(self.name, self.tt)} in {self.context!r}>"


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
    hk: HostKernel = _launcher.function(HostKernel, f, tt, {}, compiler_kwargs)
    return hk


def code_ptx(
    f: Any, tt: tuple[type, ...] = (), *, arch: str | None = None, **compiler_kwargs: Any
) -> str:
    """The PTX of ``f`` for argument types ``tt`` (the ``@device_code_ptx`` analog). With
    ``arch`` (``"sm_90"``, ...) it needs no GPU; without, it targets the current device."""
    ctx = current_context() if arch is None else None
    if arch is not None:
        compiler_kwargs["arch"] = arch
    config = compiler_config(_kwkey(compiler_kwargs), ctx)
    F = definitions.kernel_type(f)
    definitions.own(F)
    ptx: str = code_of(F, _launcher.tt_of(tt, "code_ptx"), config).ptx
    return ptx
