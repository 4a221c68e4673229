"""Kernel argument types: numpy scalar types and interned parametric array types.

Scalars are numpy scalar classes, whose hierarchy gives the subtype relation
(``np.float32 < np.floating < np.number < np.generic``). Device arrays are
classes made by subscripting an array family, interned so that each
``Array[T]`` is one class, built along numpy's hierarchy so that ``issubclass``
answers ``Array[np.float32] <: Array[np.floating] <: Array[np.generic]``.
Each back-end has its own family (a subclass of :class:`DeviceArray`).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np

__all__ = ["DeviceArray", "is_subtype", "type_name"]

_intern_lock = threading.RLock()


def _scalar_type(t: Any) -> type[np.generic]:
    if isinstance(t, np.dtype):
        return t.type
    if isinstance(t, type) and issubclass(t, np.generic):
        return t
    raise TypeError(
        f"an array's element type is a numpy scalar type or dtype (np.float32, np.floating, ...), "
        f"got {t!r}"
    )


class _ArrayMeta(type):
    """Metaclass of array families: ``Family[T]`` returns the interned class for T."""

    def __getitem__(cls, eltype: Any) -> type[DeviceArray]:
        family = cls._family_root
        t = _scalar_type(eltype)
        cached = family._interned.get(t)
        if cached is not None:
            return cached
        with _intern_lock:
            cached = family._interned.get(t)
            if cached is not None:
                return cached
            parents = [b for b in t.__bases__ if isinstance(b, type) and issubclass(b, np.generic)]
            bases = tuple(family[b] for b in parents) or (family,)
            name = f"{family.__name__}[{type_name(t)}]"
            cls_ = _ArrayMeta(name, bases, {"eltype": t, "__module__": family.__module__})
            family._interned[t] = cls_
            return cls_

    def __repr__(cls) -> str:
        return cls.__name__


class DeviceArray(metaclass=_ArrayMeta):
    """Base of the array families. A back-end subclasses it once: ``class Array(DeviceArray)``.

    ``Array[np.float32]`` is then a class with ``eltype`` (``np.float32``) and
    ``dtype`` (``np.dtype('float32')``); it is never instantiated, it is a type to
    dispatch on and to hand to a kernel method's body.
    """

    eltype: ClassVar[type[np.generic] | None] = None
    _interned: ClassVar[dict[type, type]]
    _family_root: ClassVar[type]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "eltype" not in cls.__dict__:  # a new family, not one of its parametric classes
            cls._interned = {}
            cls._family_root = cls

    @classmethod
    def _dtype(cls) -> np.dtype | None:
        return None if cls.eltype is None else np.dtype(cls.eltype)

    def __new__(cls, *args: Any, **kwargs: Any) -> DeviceArray:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not an array to create")


def _dtype_property(cls: type) -> np.dtype | None:
    return cls._dtype()


# ``Array[np.float32].dtype`` on the class itself.
_ArrayMeta.dtype = property(_dtype_property)  # type: ignore[attr-defined]


def is_subtype(a: type, b: type) -> bool:
    """``a <: b`` for kernel argument types."""
    return issubclass(a, b)


def type_name(t: Any) -> str:
    """A short readable name for a type in messages: ``np.float32``, ``Array[np.float32]``."""
    if isinstance(t, type):
        if isinstance(t, _ArrayMeta):
            return t.__name__
        if t.__module__ == "numpy":
            return f"np.{t.__name__}"
        if t.__module__ == "builtins":
            return t.__name__
        return f"{t.__module__}.{t.__qualname__}"
    return repr(t)
