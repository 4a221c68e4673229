"""Kernel argument types: numpy scalar types and interned parametric array types.

Scalars are numpy scalar classes, whose hierarchy gives the subtype relation
(``np.float32 < np.floating < np.number < np.generic``). Device arrays are
classes made by subscripting an array family, interned so that each
``Array[T]`` is one class, built along numpy's hierarchy so that ``issubclass``
answers ``Array[np.float32] <: Array[np.floating] <: Array[np.generic]``.
Each back-end has its own family (a subclass of :class:`DeviceArray`).

Every argument type pickles by reference: ``Array[np.float32]`` as its family (a class of
its back-end's module) subscripted with its element type, so that it unpickles, in this or
another process, to the same interned class (``clfunction(k, tt)`` in a spawn worker, with
``tt`` sent from the parent).
"""

from __future__ import annotations

import copyreg
import operator
from typing import Any, ClassVar, cast

import numpy as np

from .locks import new_lock

__all__ = [
    "WEAK",
    "DeviceArray",
    "Struct",
    "Weak",
    "WeakScalar",
    "is_subtype",
    "public_module",
    "resolve_weak",
    "type_name",
    "weak_type",
]

_intern_lock = new_lock()


def _scalar_type(t: Any) -> type[np.generic]:
    if isinstance(t, np.dtype):
        return t.type
    if isinstance(t, type) and issubclass(t, np.generic):
        return t
    raise TypeError(
        f"an array's element type is a numpy scalar type or dtype (np.float32, np.floating, ...), "
        f"got {t!r}"
    )


def _whole_dtype(t: Any) -> np.dtype | None:
    """``t`` as a dtype where the scalar type alone would lose what it is: a structured or
    other void dtype (its fields and layout). ``None`` for a dtype its scalar type names."""
    if not isinstance(t, np.dtype):
        return None
    if t.byteorder not in ("=", "|") and t.isnative is False:
        raise ValueError(
            f"dtype {t} has non-native byte order: kernels read native-order values "
            "(convert with arr.astype(arr.dtype.newbyteorder('='))"
        )
    if t.kind == "V":
        return t
    return None


def _numpy_parents(t: type) -> list[type]:
    return [b for b in t.__bases__ if isinstance(b, type) and issubclass(b, np.generic)]


class _ArrayMeta(type):
    """Metaclass of array families: ``Family[T]`` returns the interned class for T.

    ``T`` is a numpy scalar type or dtype. A structured (or other void) dtype is kept whole, so
    two struct layouts are two types, both below ``Family[np.void]``."""

    def __getitem__(cls, eltype: Any) -> type[DeviceArray]:
        family: type[DeviceArray] = cls._family_root  # type: ignore[attr-defined]
        whole = _whole_dtype(eltype)
        t: Any = whole if whole is not None else _scalar_type(eltype)
        cached = family._interned.get(t)
        if cached is not None:
            return cached
        with _intern_lock():
            cached = family._interned.get(t)
            if cached is not None:
                return cached
            if whole is not None:
                bases: tuple[type, ...] = (family[np.void],)
                ns = {"eltype": whole.type, "_whole": whole, "__module__": family.__module__}
                name = f"{family.__name__}[{whole}]"
            else:
                bases = tuple(map(family.__getitem__, _numpy_parents(t))) or (family,)
                ns = {"eltype": t, "__module__": family.__module__}
                name = f"{family.__name__}[{type_name(t)}]"
            # An _ArrayMeta instance whose bases are the family's classes: a DeviceArray class.
            cls_ = cast("type[DeviceArray]", _ArrayMeta(name, bases, ns))
            family._interned[t] = cls_
            return cls_

    def __repr__(cls) -> str:
        return cls.__name__

    @property
    def dtype(cls) -> np.dtype | None:
        """``Array[np.float32].dtype``, on the class itself."""
        return cast("type[DeviceArray]", cls)._dtype()  # every class of it is a DeviceArray


class DeviceArray(metaclass=_ArrayMeta):
    """Base of the array families. A back-end subclasses it once: ``class Array(DeviceArray)``.

    ``Array[np.float32]`` is then a class with ``eltype`` (``np.float32``) and
    ``dtype`` (``np.dtype('float32')``); it is never instantiated, it is a type to
    dispatch on and to hand to a kernel method's body.
    """

    eltype: ClassVar[type[np.generic] | None] = None
    _interned: ClassVar[dict[Any, type[DeviceArray]]]
    _family_root: ClassVar[type[DeviceArray]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "eltype" not in cls.__dict__:  # a new family, not one of its parametric classes
            cls._interned = {}
            cls._family_root = cls

    _whole: ClassVar[np.dtype | None] = None

    @classmethod
    def _dtype(cls) -> np.dtype | None:
        if cls._whole is not None:
            return cls._whole
        return None if cls.eltype is None else np.dtype(cls.eltype)

    def __new__(cls, *args: Any, **kwargs: Any) -> DeviceArray:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not an array to create")


class _StructMeta(type):
    """Metaclass of the struct types: ``Struct[dtype]`` is the interned type of that layout."""

    def __getitem__(cls, dtype: Any) -> type[Struct]:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"Struct[...] takes a structured numpy dtype, got {dtype!r}") from None
        if dt.names is None:
            raise TypeError(
                f"Struct[...] takes a structured numpy dtype (with fields), got {dt}: "
                "pass plain scalars as numpy scalars"
            )
        _whole_dtype(dt)  # refuses a non-native byte order
        cached = _structs.get(dt)
        if cached is not None:
            return cached
        with _intern_lock():
            cached = _structs.get(dt)
            if cached is None:
                ns = {"dtype": dt, "__module__": __name__}
                # an _StructMeta instance with Struct as its base: a Struct class
                cached = cast("type[Struct]", _StructMeta(f"Struct[{dt}]", (Struct,), ns))
                _structs[dt] = cached
            return cached

    def __repr__(cls) -> str:
        return cls.__name__


class Struct(metaclass=_StructMeta):
    """The argument type of a struct or vector passed by value: a numpy structured scalar
    (``np.void`` of a structured dtype, or a 0-d array of one, as ``pyopencl.cltypes``'
    ``make_float4`` returns). ``Struct[dtype]`` is one type per layout, below ``Struct``; its
    ``dtype`` is the whole structured dtype, to write the declaration from."""

    dtype: ClassVar[np.dtype | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Struct:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


_structs: dict[np.dtype, type[Struct]] = {}


class _WeakMeta(type):
    """Metaclass of the weak scalar types: ``Weak[int]`` is the one for Python ``int``."""

    def __getitem__(cls, pytype: type) -> type[WeakScalar]:
        try:
            return WEAK[pytype]
        except (KeyError, TypeError):
            raise TypeError(f"Weak[...] takes int, float or bool, got {pytype!r}") from None

    def __repr__(cls) -> str:
        return cls.__name__


class WeakScalar(metaclass=_WeakMeta):
    """The argument type of a Python ``int``, ``float`` or ``bool``: a scalar with no width of
    its own (numpy's NEP 50 treats Python scalars the same way).

    It dispatches as :attr:`default` (``np.int64``, ``np.float64``, ``np.bool_``) where an
    applicable method takes that type (or an abstract type above it) for the parameter;
    otherwise it takes the concrete type of :attr:`family` that the most specific applicable
    method declares there. The value is converted to that type on every launch, with a range
    check. Never instantiated: it is a type to dispatch on.
    """

    #: the Python type whose values have this argument type
    pytype: ClassVar[type]
    #: what it dispatches as where a method takes it (or an abstract type above it)
    default: ClassVar[type[np.generic]]
    #: the numpy types whose concrete members it may take when declared
    family: ClassVar[type[np.generic]]

    def __new__(cls, *args: Any, **kwargs: Any) -> WeakScalar:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


_CONCRETE_SCALARS = frozenset(np.sctypeDict.values())


def _weak(pytype: type, default: type[np.generic], family: type[Any]) -> type[WeakScalar]:
    ns = {"pytype": pytype, "default": default, "family": family, "__module__": __name__}
    # an _WeakMeta instance with WeakScalar as its base: a WeakScalar class
    return cast("type[WeakScalar]", _WeakMeta(f"Weak[{pytype.__name__}]", (WeakScalar,), ns))


#: Python scalar type -> its weak argument type.
WEAK: dict[type, type[WeakScalar]] = {
    int: _weak(int, np.int64, np.integer),
    float: _weak(float, np.float64, np.floating),
    bool: _weak(bool, np.bool_, np.bool_),
}
Weak = WeakScalar  # ``Weak[int]``, ``Weak[float]``, ``Weak[bool]``


def weak_type(value: Any) -> type[WeakScalar] | None:
    """The weak type of an instance of a subclass of a Python scalar (an ``IntEnum``, ...),
    as of the scalar itself: ``bool`` before ``int``; None for anything else. A back-end's
    ``typeof`` asks it after ``WEAK.get(type(value))`` and its own types."""
    for py in (bool, int, float):
        if isinstance(value, py):
            return WEAK[py]
    return None


def _reduce_argtype(cls: Any) -> str | tuple[Any, ...]:
    """Pickle an argument type by reference: a root (``cl.Array``, ``Struct``, ``WeakScalar``)
    by its name in its module, a parametric one as its root subscripted (``Array[np.float32]``
    is ``operator.getitem(Array, np.float32)``), so that it unpickles to the interned class."""
    meta = type(cls)  # (tested, not cls: cls keeps its attributes for the type checker)
    if issubclass(meta, _ArrayMeta) and "eltype" in cls.__dict__:
        key = cls._whole if cls._whole is not None else cls.eltype
        return operator.getitem, (cls._family_root, key)
    if issubclass(meta, _StructMeta) and cls is not Struct:
        return operator.getitem, (Struct, cls.dtype)
    if issubclass(meta, _WeakMeta) and cls is not WeakScalar:
        return operator.getitem, (WeakScalar, cls.pytype)
    name: str = cls.__qualname__
    return name  # a root: the class its module defines


# A metaclass's own __reduce__ is not asked (pickle saves any class as a global): the
# reduction goes in copyreg's table, which pickle consults first.
for _meta in (_ArrayMeta, _StructMeta, _WeakMeta):
    copyreg.pickle(_meta, _reduce_argtype)


def resolve_weak(t: type, declared: type) -> type:
    """The concrete argument type that a value of argument type ``t`` takes for a parameter
    declared ``declared``: ``t`` itself unless ``t`` is weak; for a weak type, ``declared`` if
    that is a concrete member of its family, else its default (``np.int64``, ...)."""
    if not (isinstance(t, type) and issubclass(t, WeakScalar)):
        return t
    if (
        isinstance(declared, type)
        and issubclass(declared, t.family)
        and declared in _CONCRETE_SCALARS
        and declared is not t.default
        and not issubclass(t.default, declared)
    ):
        return declared
    return t.default


def is_subtype(a: type, b: type) -> bool:
    """``a <: b`` for kernel argument types."""
    return issubclass(a, b)


def public_module(t: type) -> str:
    """``t``'s module up to its first private part, as users import it:
    ``specializer.backends.cuda`` for a class of ``specializer.backends.cuda._array``."""
    parts = t.__module__.split(".")
    cut = next((i for i, p in enumerate(parts) if p.startswith("_")), len(parts))
    return ".".join(parts[:cut]) or t.__module__


def type_name(t: Any) -> str:
    """A short readable name for a type in messages: ``np.float32``, ``Array[np.float32]``."""
    if isinstance(t, type):
        short = t.__dict__.get("__argtype_name__")
        if isinstance(short, str):  # a back-end's own argument type: cl.Buffer is "Buffer"
            return short
        if isinstance(t, (_ArrayMeta, _WeakMeta, _StructMeta)):
            return t.__name__
        if t.__module__ == "numpy":
            return f"np.{t.__name__}"
        if t.__module__ == "builtins":
            return t.__name__
        return f"{t.__module__}.{t.__qualname__}"
    return repr(t)
