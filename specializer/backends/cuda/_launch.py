"""Kernels, the cached lookup (``cufunction``), the launch, and PTX reflection.

``cufunction`` is CUDA.jl's, over the core: the lookup (dispatch in the task's
world, the compiled-code cache, the load into the context) wrapped in
``cached_lookup`` with key (current context, compiler kwargs). ``launch`` is the
``@cuda`` analog: ``typeof`` of each argument, that lookup, then the generated
launcher of the signature. Both first check ``f``'s front entry (its newest lookup,
see :func:`specializer.kernels.set_front`) in their own frame: a hit calls nothing.
"""

from __future__ import annotations

from typing import Any

from ...kernels import (
    NO_FRONT,
    Definitions,
    Kernel,
    KernelInstance,
    LookupSite,
    code_of,
    uncached_lookup,
)
from ...types import type_name
from ...world import WORLD as _WORLD
from ._array import ARGTYPES
from ._compiler import LinkedKernel, compiler_config
from ._driver import Context, current_context, current_key, local
from ._types import typeof

__all__ = ["HostKernel", "capture", "code_ptx", "cufunction", "device", "kernel", "launch"]

_definitions = Definitions(typeof, "specializer.backends.cuda")

#: ``@kernel`` / ``@kernel(callees=[...])``: define a kernel method. The method body is
#: called once per method instance with the concrete argument types bound to its
#: parameters, and returns CUDA C source defining a ``__global__`` function of the
#: method's name (``extern "C"`` recommended).
kernel = _definitions.kernel
#: ``@device`` / ``@device(callees=[...])``: define a device function (a callee); its
#: body returns CUDA C source. Redefining it recompiles the kernels that call it.
device = _definitions.device
#: ``capture(kernel, *values)``: ``kernel.capture(*values)``, a kernel instance whose values
#: are passed as leading kernel arguments on every launch.
capture = _definitions.capture


def _kwkey(kwargs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Compiler kwargs as a key: sorted pairs, lists frozen so a later mutation cannot
    change what a cached entry means."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))


def _link(F: Any, tt: tuple[type, ...], key: tuple[Context, tuple[tuple[str, Any], ...]]) -> Any:
    """The uncached lookup: dispatch, the compiled-code cache, the load into the context."""
    _definitions.own(F)
    ctx, kw = key
    return uncached_lookup(F, tt, compiler_config(kw, ctx), ctx)


_site = LookupSite(_definitions, LinkedKernel, _link)


def _front_miss(
    f: Any, tt: Any, key: tuple[Any, ...], compiler_kwargs: dict[str, Any], host: bool
) -> tuple[LinkedKernel, HostKernel | None]:
    """What ``launch`` and ``cufunction`` do when ``f``'s front entry does not hold their
    lookup: the cached lookup, then (without compiler kwargs) a new front entry. Returns the
    linked kernel, and with ``host`` the HostKernel for ``f``."""
    make = HostKernel if host else None
    if compiler_kwargs:
        return _site.miss(f, tt, None, (key[0], _kwkey(compiler_kwargs)), make)
    return _site.miss(f, tt, key, key, make)


def _argtypes(args: tuple[Any, ...]) -> tuple[type, ...]:
    """The argument types of ``args``: ``tuple(map(typeof, args))``, unrolled for up to six
    arguments whose classes decide their types (one dict lookup each), which costs a quarter
    of the call per argument that ``map`` makes."""
    T = ARGTYPES
    try:
        n = len(args)
        if n == 3:
            a, b, c = args
            return (T[a.__class__], T[b.__class__], T[c.__class__])
        if n == 2:
            a, b = args
            return (T[a.__class__], T[b.__class__])
        if n == 4:
            a, b, c, d = args
            return (T[a.__class__], T[b.__class__], T[c.__class__], T[d.__class__])
        if n == 1:
            return (T[args[0].__class__],)
        if n == 5:
            a, b, c, d, e = args
            return (T[a.__class__], T[b.__class__], T[c.__class__], T[d.__class__], T[e.__class__])
        if n == 6:
            a, b, c, d, e, g = args
            return (
                T[a.__class__],
                T[b.__class__],
                T[c.__class__],
                T[d.__class__],
                T[e.__class__],
                T[g.__class__],
            )
    except KeyError:  # a foreign array, or a subclass of a scalar type
        pass
    return tuple(map(typeof, args))


def cufunction(
    f: Kernel | KernelInstance, tt: tuple[type, ...] = (), **compiler_kwargs: Any
) -> HostKernel:
    """The kernel ``f`` (a kernel or kernel instance) compiled for argument types ``tt``
    (without the captured values) and loaded in the current context, as a
    :class:`HostKernel`. The lookup (dispatch in the task's world, the compiled-code cache,
    the load into the context) runs through ``cached_lookup`` with key (context, compiler
    kwargs); see ``COMPILER_KWARGS`` for the kwargs."""
    key = local.key or current_key()
    # The front entry: the newest lookup of f (see kernels.set_front), checked here inline.
    try:
        w, k, t, linked, hk = f.front
    except (AttributeError, TypeError, ValueError):  # not a kernel: _front_miss says so
        w, k, t, linked, hk = NO_FRONT
    if w is _WORLD[0] and k is key and (t is tt or t == tt) and not compiler_kwargs:
        if hk is not None:
            return hk
        if isinstance(f, KernelInstance):  # the live f with the cached result
            return HostKernel(f, t, linked)
    return _front_miss(f, tt, key, compiler_kwargs, True)[1]


def launch(
    f: Kernel | KernelInstance,
    /,
    *args: Any,
    grid: Any,
    block: Any,
    stream: Any = None,
    shared_mem: int = 0,
    **compiler_kwargs: Any,
) -> None:
    """Launch ``f`` (a kernel or kernel instance) on ``args``: ``typeof`` of each argument,
    the cached lookup, then the signature's launcher. ``grid`` blocks of ``block`` threads
    (ints or tuples of up to 3), on ``stream`` (default: the legacy default stream), in the
    calling thread's current context; a kernel instance's captured values come first."""
    tt = _argtypes(args)
    key = local.key or current_key()
    try:
        w, k, t, fun, _ = f.front  # f's newest lookup (see kernels.set_front), checked inline
    except (AttributeError, TypeError, ValueError):  # not a kernel: _front_miss says so
        w, k, t, fun, _ = NO_FRONT
    if not (w is _WORLD[0] and k is key and t == tt) or compiler_kwargs:
        fun = _front_miss(f, tt, key, compiler_kwargs, False)[0]
    if f.__class__ is Kernel:
        params = args
    elif isinstance(f, KernelInstance):
        params = f.values + args
    else:  # a kernel instance's type has its front entry too, but is not a kernel
        raise _definitions.not_a_kernel(f)
    fun.launch(fun, grid, block, shared_mem, stream, params)


def code_ptx(
    f: Kernel | KernelInstance,
    tt: tuple[type, ...] = (),
    *,
    arch: str | None = None,
    **compiler_kwargs: Any,
) -> str:
    """The PTX of ``f`` for argument types ``tt`` (the ``@device_code_ptx`` analog). With
    ``arch`` (``"sm_90"``, ...) it needs no GPU; without, it targets the current device."""
    ctx = None
    if arch is None:
        ctx = current_context()
    else:
        compiler_kwargs["arch"] = arch
    config = compiler_config(_kwkey(compiler_kwargs), ctx)
    F = _definitions.kernel_type(f)
    _definitions.own(F)
    return code_of(F, tt, config).ptx


class HostKernel:
    """A kernel ready to launch in one context: what :func:`cufunction` returns (the analog
    of CUDA.jl's ``HostKernel``). Call it like :func:`launch`, without the kernel."""

    __slots__ = ("f", "linked", "tt")

    def __init__(
        self, f: Kernel | KernelInstance, tt: tuple[type, ...], linked: LinkedKernel
    ) -> None:
        self.f = f
        self.tt = tt
        self.linked = linked

    @property
    def function(self) -> Any:
        """The driver's ``CUfunction``."""
        return self.linked.function

    @property
    def context(self) -> Context:
        return self.linked.context

    @property
    def name(self) -> str:
        return self.linked.name

    def __call__(
        self, *args: Any, grid: Any, block: Any, stream: Any = None, shared_mem: int = 0
    ) -> None:
        tt = _argtypes(args)
        if tt != self.tt:
            raise TypeError(
                f"kernel {self.name} was looked up for ({', '.join(map(type_name, self.tt))}), "
                f"called with ({', '.join(map(type_name, tt))}): use cufunction(f, tt) for "
                "those types, or launch(f, *args, ...)"
            )
        f, linked = self.f, self.linked
        linked.launch(
            linked,
            grid,
            block,
            shared_mem,
            stream,
            args if f.__class__ is Kernel else f.values + args,
        )

    def __repr__(self) -> str:
        return f"<HostKernel {self.name}({', '.join(map(type_name, self.tt))}) in {self.context!r}>"
