"""What every back-end shares: generic kernels and device functions, captured values
(kernel instances), scalar argument types, and the uncached kernel lookup.

A back-end makes one :class:`Definitions` (its ``kernel`` and ``device``
decorators), maps values to argument types with its own ``typeof`` (built on
:data:`SCALAR_TYPES`), and wraps :func:`uncached_lookup` in ``cached_lookup``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, ClassVar

import numpy as np

from . import world as _world
from .compiler import CompilerConfig, CompilerJob, compile_and_link, compile_only
from .lookup import specialize
from .methods import GenericFunction
from .types import type_name

__all__ = [
    "NO_FRONT",
    "SCALAR_TYPES",
    "Definitions",
    "DeviceFunction",
    "Kernel",
    "KernelInstance",
    "LookupSite",
    "code_of",
    "kernel_of",
    "set_front",
    "uncached_lookup",
    "unsupported_argument",
]

#: Argument types of scalar values: Python scalars map to numpy's 64-bit types, and every
#: numpy scalar type to itself.
SCALAR_TYPES: dict[type, type[np.generic]] = {
    int: np.int64,
    float: np.float64,
    bool: np.bool_,
    **{
        t: t
        for t in set(np.sctypeDict.values())
        if issubclass(t, np.number | np.bool_) and not issubclass(t, np.timedelta64)
    },
}


def unsupported_argument(value: object, accepted: str) -> TypeError:
    """The error for a launch argument of a type no kernel can take."""
    return TypeError(
        f"cannot pass a {type(value).__module__}.{type(value).__qualname__} to a kernel: "
        f"accepted are {accepted}"
    )


#: The front entry of a lookup target that has none: its world is no world, so it never hits.
NO_FRONT: tuple[Any, ...] = (object(), None, None, None, None)


def set_front(
    F: Any, w: int | None, where: Any, tt: tuple[type, ...], result: Any, host: Any = None
) -> None:
    """Publish ``F``'s front entry: ``(w, where, tt, result, host)``.

    The front entry is a back-end's inline copy of its newest cached lookup for ``F`` (a
    kernel, or a kernel instance's type): the launch path compares ``entry[0] is WORLD[0]``,
    ``entry[1] is where`` (its queue, or context key) and ``entry[2] == tt`` in its own frame,
    and takes ``result`` without calling anything. On any difference it runs the cached lookup
    (``cached_lookup``/``specialize``, which keeps four entries and checks the key by value)
    and publishes the new entry here. ``host`` is what the back-end returns for a plain kernel
    (its ``HostKernel``); it stays ``None`` for a kernel instance's type, whose values live in
    the instance.

    ``w`` must be ``world.WORLD[0]`` as read *before* that lookup ran. The lookup then ran in
    that world or a newer one; if newer, ``w`` is no longer the latest world and never will be
    again, so the entry can never hit. ``None`` (a task pinned, a compile hook or precompile
    mode active) publishes nothing: those lookups must not be remembered. (:meth:`LookupSite.miss`
    also publishes only if ``WORLD[0]`` is still ``w`` after the lookup, so nothing is
    remembered when one of those is on by the time the lookup returns either.) The entry is
    one tuple, replaced whole: a thread reads the old one or the new one, never a mix.
    """
    if w is not None:
        F.front = (w, where, tt, result, host)


class DeviceFunction(GenericFunction):
    """A device function (callee): its methods take no parameters and return device source."""


class Kernel(GenericFunction):
    """A generic kernel: methods return device source defining a kernel of this name."""

    def __init__(self, name: str, typeof: Callable[[Any], type]) -> None:
        super().__init__(name)
        self.typeof = typeof
        #: The back-end's newest lookup of this kernel (see :func:`set_front`).
        self.front: tuple[Any, ...] = NO_FRONT
        self._closures: dict[tuple[type, ...], type[KernelInstance]] = {}
        self._closures_lock = threading.Lock()

    def capture(self, *values: Any) -> KernelInstance:
        """A kernel instance whose ``values`` are passed as leading arguments on every launch.

        Its type (one per kernel and captured types) is what the lookup caches on; the
        instance itself is never stored, so dropping it frees the values.
        """
        tt = tuple(self.typeof(v) for v in values)
        cls = self._closures.get(tt)
        if cls is None:
            with self._closures_lock:
                cls = self._closures.get(tt)
                if cls is None:
                    name = f"{self.name}[{', '.join(type_name(t) for t in tt)}]"
                    cls = type(
                        name,
                        (KernelInstance,),
                        {
                            "__slots__": (),
                            "kernel": self,
                            "captured": tt,
                            "__module__": __name__,
                        },
                    )
                    self._closures[tt] = cls
        return cls(values)


class KernelInstance:
    """A kernel with captured values (a closure). Made by :meth:`Kernel.capture`."""

    __slots__ = ("__weakref__", "values")
    kernel: ClassVar[Kernel]
    captured: ClassVar[tuple[type, ...]] = ()
    #: The back-end's newest lookup of this kernel instance type (see :func:`set_front`).
    front: ClassVar[tuple[Any, ...]] = NO_FRONT

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def __repr__(self) -> str:
        return f"<{type(self).__name__} capturing {self.values!r}>"


def kernel_of(F: Any) -> tuple[Kernel, tuple[type, ...]]:
    """The kernel and captured argument types of ``F`` (a kernel, or a kernel instance's type)."""
    if isinstance(F, Kernel):
        return F, ()
    if isinstance(F, type) and issubclass(F, KernelInstance) and F is not KernelInstance:
        return F.kernel, F.captured
    raise TypeError(f"expected a kernel or a kernel instance, got {F!r}")


def uncached_lookup(F: Any, tt: tuple[type, ...], config: CompilerConfig, context: Hashable) -> Any:
    """Dispatch in the task's world, then the compiled-code cache, then the handle for
    ``context``: the lookup a back-end wraps in ``cached_lookup``."""
    return compile_and_link(_job(F, tt, config), context)[1]


def _job(F: Any, tt: tuple[type, ...], config: CompilerConfig) -> CompilerJob:
    kernel, captured = kernel_of(F)
    w = _world.current()
    return CompilerJob(kernel.methodinstance(captured + tt, w), config, w)


def code_of(F: Any, tt: tuple[type, ...], config: CompilerConfig) -> Any:
    """Dispatch in the task's world, then the compiled-code cache: the artifact, linked
    nowhere (what a back-end's ``code_ptx`` and similar reflection return from)."""
    return compile_only(_job(F, tt, config)).artifact


class Definitions:
    """A back-end's ``kernel`` and ``device`` decorators, with their tables by module and name.

    ``@kernel`` defines a generic kernel, or adds a method to the one of that name in that
    module; running a ``def`` again with the same signature replaces the method.
    """

    def __init__(self, typeof: Callable[[Any], type], module: str = "this back-end") -> None:
        self.typeof = typeof
        self.module = module  # for messages: "specializer.backends.opencl"
        self._table: dict[tuple[str, str, type], GenericFunction] = {}
        self._lock = threading.Lock()

    def _define(self, cls: type, fn: Callable[..., Any], callees: Iterable[GenericFunction]) -> Any:
        if not callable(fn):
            raise TypeError(f"@kernel and @device decorate functions, got {fn!r}")
        name = fn.__name__
        key = (getattr(fn, "__module__", None) or "", name, cls)
        with self._lock:
            gf = self._table.get(key)
            if gf is None:
                gf = cls(name, self.typeof) if cls is Kernel else cls(name)
                self._table[key] = gf
        gf.add_method(fn, callees=callees)
        return gf

    def own(self, F: Any) -> Kernel:
        """The kernel of ``F`` (a kernel or kernel instance type), which must have been defined
        with these decorators: a kernel of another back-end is a ``TypeError``."""
        k = kernel_of(F)[0]
        if k.typeof is not self.typeof:
            raise TypeError(
                f"kernel {k.name} was defined with another back-end's @kernel; launch it with "
                f"that back-end, or define it with {self.module}.kernel"
            )
        return k

    def capture(self, kernel: Kernel, *values: Any) -> KernelInstance:
        """``kernel.capture(*values)``, for a kernel defined with these decorators: a kernel
        instance whose values are passed as leading arguments on every launch."""
        if not isinstance(kernel, Kernel):
            raise TypeError(
                f"capture takes a kernel (from {self.module}.kernel) and the values to pass "
                f"first on every launch, got {kernel!r}"
            )
        return self.own(kernel).capture(*values)

    def kernel_type(self, f: Any) -> Any:
        """``F`` of ``f``: a kernel itself, or a kernel instance's type (not yet checked to be
        one of these decorators'; :meth:`own` does that)."""
        if f.__class__ is Kernel:
            return f
        if isinstance(f, KernelInstance):
            return f.__class__
        raise self.not_a_kernel(f)

    def not_a_kernel(self, f: Any) -> TypeError:
        """The error for launching ``f``, which is neither a kernel nor a kernel instance."""
        return TypeError(
            f"expected a kernel or a kernel instance, got {f!r}: define kernels with "
            f"{self.module}.kernel, and kernel instances with kernel.capture(...)"
        )

    def kernel(
        self, fn: Callable[..., Any] | None = None, *, callees: Iterable[GenericFunction] = ()
    ) -> Any:
        """``@kernel`` or ``@kernel(callees=[...])``: define a kernel method."""
        if fn is None:
            return lambda f: self._define(Kernel, f, callees)
        return self._define(Kernel, fn, callees)

    def device(
        self, fn: Callable[..., Any] | None = None, *, callees: Iterable[GenericFunction] = ()
    ) -> Any:
        """``@device`` or ``@device(callees=[...])``: define a device function (a callee)."""
        if fn is None:
            return lambda f: self._define(DeviceFunction, f, callees)
        return self._define(DeviceFunction, fn, callees)


class LookupSite:
    """A back-end's one call site of the cached lookup, with the front entries in front of it.

    ``link(F, tt, key)`` is the uncached lookup (usually ``uncached_lookup`` with the config
    and context the key names). :meth:`lookup` is ``cached_lookup(lambda: link(F, tt, key), V,
    F, tt, key)`` with ``link`` as the call site and the specialized function kept per
    (F, tt), so a lookup does not search for it by the key's type and ``V`` too (every key is
    a tuple). :meth:`miss` is what a launch does when ``f``'s front entry does not hold its
    lookup. The front entry itself is checked inline by the back-end, in its own frame.
    """

    def __init__(
        self, definitions: Definitions, V: type, link: Callable[[Any, tuple[type, ...], Any], Any]
    ) -> None:
        self.definitions = definitions
        self.V = V
        self.link = link  # looked up on every miss, so a test may wrap it
        self._site = link.__code__
        self._specialized: dict[tuple[Any, tuple[type, ...]], Callable[..., Any]] = {}

    def lookup(self, F: Any, tt: tuple[type, ...], key: tuple[Any, ...]) -> Any:
        """The cached lookup of (F, tt) for ``key`` in the task's world."""
        fn = self._specialized.get((F, tt))
        if fn is None:
            fn = self._specialized.setdefault((F, tt), specialize(self._site, self.V, F, tt, tuple))

        def lookup() -> Any:
            return self.link(F, tt, key)

        return fn(key, lookup)

    def miss(
        self,
        f: Any,
        tt: Any,
        where: Any,
        key: tuple[Any, ...],
        host: Callable[[Any, tuple[type, ...], Any], Any] | None = None,
    ) -> tuple[Any, Any]:
        """The cached lookup for ``f`` (a kernel or kernel instance), then, unless ``where``
        is ``None`` (a lookup with compiler options, which front entries do not hold), ``F``'s
        new front entry. Returns the result, and ``host(f, tt, result)`` if ``host`` is given
        (kept in the entry for a plain kernel, and reused while ``where``, ``tt`` and the
        result stay the same)."""
        if type(tt) is not tuple:
            tt = tuple(tt)
        F = self.definitions.kernel_type(f)
        w = _world.WORLD[0]  # before the lookup: see set_front
        result = self.lookup(F, tt, key)
        made = None
        if F is f:  # a plain kernel: keep its host while the lookup's result is the same
            _, old_where, old_tt, old_result, made = F.front
            if not (old_result is result and old_where is where and old_tt == tt):
                made = None
        if made is None and host is not None:
            made = host(f, tt, result)
        # Publish only if WORLD[0] is still w: not when a pin, a hook or precompile mode is on
        # by now (nothing may be remembered then), nor when the world rose during the lookup.
        if where is not None and _world.WORLD[0] is w:
            set_front(F, w, where, tt, result, made if F is f else None)
        return result, made
