"""What every back-end shares: generic kernels and device functions, captured values (kernel
instances), scalar argument types, the uncached lookup. A back-end makes one :class:`Definitions`
(its decorators) and wraps :func:`uncached_lookup` in ``cached_lookup`` by a :class:`LookupSite`."""

from __future__ import annotations

import inspect
import pickle
import weakref
from collections.abc import Callable, Hashable, Iterable, MutableMapping
from typing import Any, ClassVar, NoReturn, Protocol, TypeVar, overload

import numpy as np

from . import world as _world
from .compiler import CompilerConfig, CompilerJob, compile_and_link, compile_only
from .locks import new_lock
from .lookup import specialize
from .methods import GenericFunction, Method, signature_of
from .suggest import decorator_keywords
from .types import (
    CONCRETE_SCALARS,
    DeviceArray,
    Struct,
    UnmatchableArray,
    WeakScalar,
    public_module,
    type_name,
)

__all__ = [
    "SCALAR_TYPES",
    "Decorator",
    "Definitions",
    "DeviceFunction",
    "Kernel",
    "KernelInstance",
    "LookupSite",
    "code_of",
    "kernel_of",
    "uncached_lookup",
    "unsupported_argument",
]

#: Argument types of scalars: a Python scalar type's is numpy's 64-bit one, a numpy type's itself.
SCALAR_TYPES: dict[type, type[np.generic]] = {
    int: np.int64,
    float: np.float64,
    bool: np.bool_,
    **{
        t: t
        for t in CONCRETE_SCALARS
        if issubclass(t, np.number | np.bool_) and not issubclass(t, np.timedelta64)
    },
}


#: The numpy types of the scalar values a kernel takes (an annotation is one or above one).
_SCALAR_VALUES = frozenset(SCALAR_TYPES.values())
#: Python scalar type -> (what its values dispatch as, what to annotate instead): its values
#: are weak (SPEC 8), so no argument has the Python type itself.
_PYTHON_SCALARS = {
    int: ("np.int64 or the concrete integer type", "np.int64, np.int32 or np.integer"),
    float: ("np.float64 or the concrete floating type", "np.float64, np.float32 or np.floating"),
    bool: ("np.bool_", "np.bool_"),
    complex: ("no type at all (it is not passed)", "np.complex128 or np.complexfloating"),
}


def unsupported_argument(value: object, accepted: str) -> TypeError:
    """The error for a launch argument of a type no kernel can take."""
    return TypeError(
        f"cannot pass a {type(value).__module__}.{type(value).__qualname__} to a kernel: "
        f"accepted are {accepted}"
    )


class _ByName:
    """Kernels and device functions pickle by name, as functions do (a worker imports its own)."""

    __module__: str
    __name__: str
    __qualname__: str
    _cells: tuple[Any, ...]  # its def's closure cells, held so their ids in its key stay theirs
    _definitions: Definitions  # the definitions that made it: it is theirs (Definitions.own)

    def __reduce__(self) -> str:
        if self._cells or "<locals>" in self.__qualname__:
            what = "kernel" if isinstance(self, Kernel) else "device function"
            raise pickle.PicklingError(
                f"{what} {self.__qualname__} of {self.__module__} was defined inside a "
                "function, so it cannot be pickled: it pickles by name, as functions do, and "
                "only a module-level definition has one a worker can import; define it at "
                "module level (pass values with kernel.capture(...) instead of a closure)"
            )
        return self.__qualname__


def _no_kernel(name: str, definitions: Definitions | None, callees: Any) -> Any:
    """``callees`` (of ``name``) as a tuple, refused if one is a kernel: it would compile as a
    callee taking no arguments, which no kernel method does. Not iterable: as given, for
    ``add_method`` to say what callees are."""
    try:
        callees = tuple(callees)
    except TypeError:
        return callees
    kernel = next((c for c in callees if isinstance(c, Kernel)), None)
    if kernel is not None:
        definitions = definitions or getattr(kernel, "_definitions", None)
        module = "its back-end" if definitions is None else definitions.module
        raise TypeError(
            f"{kernel.name} is a kernel; a callee is a device function: "
            f"@{module.rpartition('.')[2]}.device (in callees= of {name})"
        )
    return callees


def _callees_checked(
    gf: GenericFunction, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``add_method``'s arguments after ``signature`` (callees, localns), its callees checked
    (:func:`_no_kernel`)."""
    definitions = getattr(gf, "_definitions", None)
    if args:
        return (_no_kernel(gf.name, definitions, args[0]), *args[1:]), kwargs
    if "callees" in kwargs:
        return args, {**kwargs, "callees": _no_kernel(gf.name, definitions, kwargs["callees"])}
    return args, kwargs


class DeviceFunction(_ByName, GenericFunction):
    """A device function (callee): its one method takes no parameters and returns device
    source. ``@square.method`` replaces it, as running ``@device def square`` again does;
    ``square.delete_method(())`` removes it (a kernel calling it then fails to compile)."""

    def add_method(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        rest, kwargs = _callees_checked(self, args[1:], kwargs)  # after the signature
        args = (*args[:1], *rest)
        if not args and "signature" not in kwargs:
            try:
                params = list(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                params = []
            if params:
                raise TypeError(
                    f"device function {self.name} takes parameters ({', '.join(params)}): a "
                    "device function's body takes none and returns device source, which declares "
                    "the function's own C parameters"
                )
        return super().add_method(fn, *args, **kwargs)


class Kernel(_ByName, GenericFunction):
    """A generic kernel: methods return device source defining a kernel of this name.

    ``@k.method`` on a ``def`` of any name adds a method as ``@kernel`` does (the spelling type
    checkers accept); ``k.delete_method(signature)`` removes one; ``k.methods()`` lists them."""

    def __init__(self, name: str, typeof: Callable[[Any], type]) -> None:
        super().__init__(name)
        self.typeof = typeof
        self._closures: dict[tuple[type, ...], type[KernelInstance]] = {}

    def add_method(self, fn: Any, signature: Any = None, *args: Any, **kwargs: Any) -> Method:
        """Add ``fn`` as a method, its annotations checked as ``@kernel`` checks them."""
        args, kwargs = _callees_checked(self, args, kwargs)
        definitions = getattr(self, "_definitions", None)
        if signature is None and definitions is not None and callable(fn):
            localns = kwargs.get("localns", args[1] if len(args) > 1 else None)
            signature = definitions.kernel_signature(self.name, fn, localns)
        return super().add_method(fn, signature, *args, **kwargs)

    def capture(self, *values: Any) -> KernelInstance:
        """A kernel instance whose ``values`` are passed as leading arguments on every launch.
        Its type is what the lookup caches on; the instance is never stored."""
        tt = tuple(self.typeof(v) for v in values)
        cls = self._closures.get(tt)
        if cls is None:  # one type per tt: of two threads' types, setdefault keeps the first
            name = f"{self.name}[{', '.join(type_name(t) for t in tt)}]"
            made = type(
                name,
                (KernelInstance,),
                {
                    "__slots__": (),
                    "kernel": self,
                    "captured": tt,
                    "__module__": __name__,
                    "__init_subclass__": classmethod(_no_subclass),
                },
            )
            cls = self._closures.setdefault(tt, made)
        return cls(values)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"kernel {self.name} is not called directly: launch it with its back-end's "
            f"launch(kernel, *args, ...) (e.g. opencl.launch({self.name}, x, 3, "
            "global_size=n)), or look it up once with clfunction/cufunction and call that"
        )


def _no_subclass(cls: type, /, **kwargs: Any) -> None:
    raise TypeError(
        f"{cls.__mro__[1].__name__} is a kernel instance type (made by Kernel.capture): it "
        "is not subclassed (its launch cells are its own); capture other values instead"
    )


def _instance(kernel: Kernel, values: tuple[Any, ...]) -> KernelInstance:
    """Unpickle a kernel instance: the kernel's own capture of the values."""
    return kernel.capture(*values)


class KernelInstance:
    """A kernel with captured values (a closure). Made by :meth:`Kernel.capture`."""

    __slots__ = ("__weakref__", "values")
    kernel: ClassVar[Kernel]
    captured: ClassVar[tuple[type, ...]] = ()

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def __reduce__(self) -> Any:
        return (_instance, (self.kernel, self.values))

    def method(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Not here: methods belong to the kernel (``@kernel.method``)."""
        raise self._not_a_table("method", "@{k}.method")

    def delete_method(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Not here: methods belong to the kernel (``kernel.delete_method``)."""
        raise self._not_a_table("delete_method", "{k}.delete_method(signature)")

    def _not_a_table(self, what: str, instead: str) -> TypeError:
        k = self.kernel.name
        return TypeError(
            f"{what} of {type(self).__name__}: a kernel instance (made by capture) has no "
            f"methods of its own, it launches kernel {k}'s; use {instead.format(k=k)} on the "
            "kernel itself"
        )

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
    """Dispatch, compiled-code cache, handle for ``context``: what ``cached_lookup`` wraps."""
    return compile_and_link(_job(F, tt, config), context)[1]


def _job(F: Any, tt: tuple[type, ...], config: CompilerConfig) -> CompilerJob:
    kernel, captured = kernel_of(F)
    w = _world.current()
    return CompilerJob(kernel.methodinstance(captured + tt, w), config, w)


def code_of(F: Any, tt: tuple[type, ...], config: CompilerConfig) -> Any:
    """Dispatch, then the compiled-code cache: the artifact, linked nowhere (``code_ptx``)."""
    return compile_only(_job(F, tt, config)).artifact


_Key = tuple[str, str, type, frozenset[int]]
_F = TypeVar("_F", contravariant=True)
_G = TypeVar("_G", covariant=True)


class Decorator(Protocol[_F, _G]):
    """The type of a back-end's ``kernel`` (``_G`` a :class:`Kernel`) and ``device`` (``_G`` a
    :class:`DeviceFunction`): ``@kernel`` or ``@kernel(callees=[...], localns=locals())``."""

    @overload
    def __call__(
        self,
        fn: _F,
        *,
        callees: Iterable[DeviceFunction] = ...,
        localns: dict[str, Any] | None = ...,
    ) -> _G: ...
    @overload
    def __call__(
        self,
        fn: None = None,
        *,
        callees: Iterable[DeviceFunction] = ...,
        localns: dict[str, Any] | None = ...,
    ) -> Callable[[_F], _G]: ...


_KERNEL_DOC = """``@kernel`` or ``@kernel(callees=[device_fn, ...])``: define a kernel method.

A first ``def`` of a name in a module defines a generic kernel; another ``def`` of that name
adds a method, or replaces the one with the same signature (the world rises: the next launch
runs the new code). ``@fill.method`` on a ``def`` of any name (``def _``) adds a method the
same way, the spelling type checkers accept; ``fill.delete_method(signature)`` takes one back.
``callees`` names the device functions its source calls; ``localns=locals()`` lets string
annotations name the defining function's locals.

A Python ``int``, ``float`` or ``bool`` passed to a kernel takes the type the method declares.
An annotation no value can match (``int``, ``np.ndarray``, another back-end's ``Array``) is a
``TypeError`` here. The body is called once per method instance, with the concrete types bound
to its parameters, and returns the kernel's source."""
_DEVICE_DOC = """``@device`` or ``@device(callees=[...])``: define a device function (a callee).

It takes no parameters; its body returns device source that kernels listing it in
``callees=`` get before their own. Running its ``def`` again raises the world and recompiles
exactly the kernels that call it."""


class Definitions:
    """A back-end's ``kernel`` and ``device`` decorators and their definitions, keyed by the
    ``def``'s module, qualified name and closure cells (each run of a factory: its own kernel)."""

    def __init__(
        self,
        typeof: Callable[[Any], type],
        module: str = "this back-end",
        argtypes: Iterable[type] = (WeakScalar, Struct, DeviceArray),
        *,
        kernel_doc: str | None = None,
        device_doc: str | None = None,
    ) -> None:
        self.typeof = typeof
        self.module = module  # its decorators' and messages': "specializer.backends.opencl"
        #: the roots of ``typeof``'s argument types besides numpy scalars (annotations' bounds)
        self.argtypes = tuple(argtypes)
        #: (module, qualified name, class, ids of the closure cells) -> the definition; those
        #: with a closure weakly (a definition holds its cells, so their ids stay theirs)
        self._table: dict[_Key, GenericFunction] = {}
        self._closure_table: weakref.WeakValueDictionary[_Key, GenericFunction] = (
            weakref.WeakValueDictionary()
        )
        #: the class of this back-end's kernels (see :meth:`kernel_slots`)
        self.kernel_class: type[Kernel] = Kernel
        #: the attributes launchers over these definitions keep on kernels
        self.kernel_attrs: tuple[str, ...] = ()
        self._lock = new_lock(reentrant=False)
        self.kernel: Decorator[Callable[..., str], Kernel] = self._decorator(
            Kernel, "kernel", kernel_doc
        )
        self.device: Decorator[Callable[[], str], DeviceFunction] = self._decorator(
            DeviceFunction, "device", device_doc
        )

    def _define(
        self,
        cls: type,
        fn: Callable[..., Any],
        callees: Iterable[GenericFunction],
        localns: dict[str, Any] | None,
    ) -> Any:
        if not callable(fn):
            raise TypeError(f"@kernel and @device decorate functions, got {fn!r}")
        name = fn.__name__
        sig = self.kernel_signature(name, fn, localns) if cls is Kernel else None  # checked first
        callees = _no_kernel(name, self, callees)  # and these
        # A wrapping decorator's product is keyed by the def it wraps (SPEC 7), not by itself.
        try:
            inner: Callable[..., Any] = inspect.unwrap(fn)
        except ValueError:  # a cycle of __wrapped__: the function as it is
            inner = fn
        module = getattr(inner, "__module__", None) or ""
        qualname = getattr(inner, "__qualname__", name)
        cells = getattr(inner, "__closure__", None) or ()
        key = (module, qualname, cls, frozenset(map(id, cells)))
        table: MutableMapping[_Key, GenericFunction] = self._closure_table if cells else self._table
        with self._lock():
            gf = table.get(key)
            if gf is None:
                gf = self.kernel_class(name, self.typeof) if cls is Kernel else cls(name)
                gf.__module__, gf.__name__, gf.__qualname__ = module, name, qualname
                gf._cells = cells
                gf._definitions = self
                table[key] = gf
        if sig is not None:
            gf.add_method(fn, signature=sig, callees=callees)
        else:
            gf.add_method(fn, callees=callees, localns=localns)
        return gf

    def kernel_signature(
        self, name: str, fn: Callable[..., Any], localns: dict[str, Any] | None
    ) -> tuple[type, ...]:
        """``fn``'s signature as a method of kernel ``name``, each annotation checked (SPEC 8)."""
        sig = signature_of(fn, localns)
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        for param, t in zip(params, sig):
            why = self._unmatchable(t)
            if why is not None:
                raise TypeError(f"parameter {param!r} of kernel {name} is annotated {why}")
        return sig

    def device_functions(self) -> list[DeviceFunction]:
        """The device functions defined here (for a build error's hint)."""
        with self._lock():
            defined = [*self._table.values(), *self._closure_table.values()]
        return [gf for gf in defined if isinstance(gf, DeviceFunction)]

    def _unmatchable(self, t: type) -> str | None:
        """Why no argument can match annotation ``t``, saying what to write; None if some can."""
        if issubclass(t, UnmatchableArray):  # Array[int]: let through by the subscript
            return (
                f"{type_name(t)}, which no argument matches: an array's element type is a "
                f"numpy scalar type or dtype, and {type_name(t.element)} is none; annotate it "
                f"with {t.instead()}"
            )
        if t in _PYTHON_SCALARS:
            takes, instead = _PYTHON_SCALARS[t]
            return (
                f"{t.__name__}, which no argument matches: a Python {t.__name__} passed to a "
                f"kernel dispatches as {takes} that the method declares, and a numpy scalar as "
                f"its own type; annotate it with {instead}"
            )
        family = next((r for r in self.argtypes if issubclass(r, DeviceArray)), DeviceArray)
        arrays = f"{family.__name__}[dtype]" if family is not DeviceArray else "Array[dtype]"
        if issubclass(t, np.ndarray):
            return (
                f"{type_name(t)}, which no argument matches: a kernel takes device arrays, "
                f"not numpy arrays; annotate it with {self.module}'s {arrays} (for example "
                f"{arrays.replace('dtype', 'np.float32')})"
            )
        if any(issubclass(c, t) for c in _SCALAR_VALUES):
            return None  # a numpy scalar type, or above them (object, an ABC numpy registers with)
        if issubclass(t, np.generic):
            instead = "Struct[dtype] for a struct by value, or " if issubclass(t, np.void) else ""
            return (
                f"{type_name(t)}, which no argument matches: a kernel takes numeric and bool "
                f"scalars; annotate it with {instead}a numeric numpy type (np.float32, "
                "np.integer, ...)"
            )
        if any(issubclass(t, r) or issubclass(r, t) for r in self.argtypes):
            return None  # at, below or above one of this back-end's kinds
        if issubclass(t, DeviceArray):
            if family is DeviceArray:
                return None  # a back-end that did not name its family: not checked
            key = t._whole if t._whole is not None else t.eltype
            mine = family if key is None else family[key]
            return (
                f"{type_name(t)} of {public_module(t)}, another back-end's array type, which no "
                f"argument matches: annotate it with {self.module}'s {type_name(mine)}"
            )
        kinds = ", ".join(
            [
                "numpy scalar types (np.float32, np.integer, ...)",
                *(
                    f"{r.__name__}[dtype]" if r is family or r is Struct else type_name(r)
                    for r in self.argtypes
                    if r is not WeakScalar
                ),
            ]
        )
        return (
            f"{type_name(t)}, which is not an argument type of {self.module}: no argument "
            f"matches it; annotate it with one of {kinds}"
        )

    def kernel_slots(self, *names: str) -> None:
        """Give this back-end's kernels slots for ``names`` (a slot reads at one cost; a dict
        attribute on some kernels slows every kernel's). Kernels defined before keep theirs."""
        self.kernel_class = type(
            "Kernel", (Kernel,), {"__slots__": names, "__module__": Kernel.__module__}
        )

    def own(self, F: Any) -> Kernel:
        """The kernel of ``F`` (a kernel or kernel instance type), which must have been defined
        with these decorators: a kernel of another back-end is a ``TypeError``."""
        k = kernel_of(F)[0]
        if getattr(k, "_definitions", None) is not self:
            raise TypeError(
                f"kernel {k.name} was defined with another back-end's @kernel; launch it with "
                f"that back-end, or define it with {self.module}.kernel"
            )
        return k

    def capture(self, kernel: Kernel, *values: Any) -> KernelInstance:
        """``kernel.capture(*values)``, for a kernel defined with these decorators."""
        if not isinstance(kernel, Kernel):
            raise TypeError(
                f"capture takes a kernel (from {self.module}.kernel) and the values to pass "
                f"first on every launch, got {kernel!r}"
            )
        return self.own(kernel).capture(*values)

    def kernel_type(self, f: Any) -> Any:
        """``F`` of ``f``: a kernel, or a kernel instance's type (:meth:`own` checks it)."""
        if isinstance(f, Kernel):
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

    def _decorator(self, cls: type, name: str, doc: str | None) -> Any:
        """The ``kernel`` or ``device`` decorator, with the back-end's docstring."""
        what = f"@{self.module.rpartition('.')[2]}.{name}"

        def decorator(
            fn: Callable[..., Any] | None = None,
            *,
            callees: Iterable[GenericFunction] = (),
            localns: dict[str, Any] | None = None,
            **unknown: Any,
        ) -> Any:
            if unknown:  # (a misspelling: named, with the keywords it takes)
                raise decorator_keywords(what, unknown)
            if fn is None:
                return lambda f: self._define(cls, f, callees, localns)
            return self._define(cls, fn, callees, localns)

        decorator.__name__ = decorator.__qualname__ = name
        decorator.__module__ = self.module
        common = _KERNEL_DOC if cls is Kernel else _DEVICE_DOC
        decorator.__doc__ = f"{common}\n\n{inspect.cleandoc(doc)}" if doc else common
        return decorator


class LookupSite:
    """A back-end's one call site of the cached lookup: :meth:`lookup` is
    ``cached_lookup(lambda: link(F, tt, key), V, F, tt, key)`` (every key is a tuple)."""

    def __init__(
        self, definitions: Definitions, V: type, link: Callable[[Any, tuple[type, ...], Any], Any]
    ) -> None:
        self.definitions = definitions
        self.V = V
        self.link = link  # looked up on every miss, so a test may wrap it
        self._site = link.__code__

    def lookup(self, F: Any, tt: tuple[type, ...], key: tuple[Any, ...]) -> Any:
        """The cached lookup of (F, tt) for ``key`` in the task's world."""
        return specialize(self._site, self.V, F, tt, tuple)(key, lambda: self.link(F, tt, key))
