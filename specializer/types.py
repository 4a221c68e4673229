"""Kernel argument types: numpy scalar types and interned parametric array types.

Array types follow numpy's hierarchy (``Array[np.float32] <: Array[np.floating]``), one interned
class each; every argument type pickles by reference, to the same class in any process."""

from __future__ import annotations

import copyreg
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar, cast, get_origin

import numpy as np

from .locks import new_lock

__all__ = [
    "CONCRETE_SCALARS",
    "WEAK",
    "DeviceArray",
    "Struct",
    "UnmatchableArray",
    "Weak",
    "WeakScalar",
    "argument_type",
    "describe_parameter",
    "is_subtype",
    "public_module",
    "resolve_weak",
    "type_name",
    "weak_converter",
    "weak_overflow",
    "weak_range",
    "weak_type",
]

_intern_lock = new_lock()
_structs: dict[np.dtype, type[Struct]] = {}
#: numpy's concrete scalar types: no abstract one (np.floating has no dtype), no subclass
CONCRETE_SCALARS = frozenset(np.sctypeDict.values())
#: the types a weak value out of a narrower one's range may take instead, narrowest first
_WIDER = (np.int16, np.int32, np.int64, np.uint64, np.float32, np.float64)

#: The element type parameter of an array family, for type checkers: ``Array[np.float32]``
#: is then a subtype of ``Array[np.floating]`` for them as it is at run time.
EltypeT_co = TypeVar("EltypeT_co", bound=np.generic, covariant=True)

if TYPE_CHECKING:
    from typing import Generic as _Parametric
else:

    class _Parametric:
        """``typing.Generic`` for type checkers only: at run time ``_Parametric[T]`` is
        ``object``, so the array classes' MROs are plain (the metaclass makes ``Array[T]``)."""

        def __class_getitem__(cls, params: Any) -> type:
            return object


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
    return t if t.kind == "V" else None


def _numpy_parents(t: type) -> list[type]:
    # a function: no loop may stand inside a with of a lock (CPython 3.13, gh-130279)
    return [b for b in t.__bases__ if isinstance(b, type) and issubclass(b, np.generic)]


class _ArgTypeMeta(type):
    """What the metaclasses of argument types share: a class's repr is its name."""

    def __repr__(cls) -> str:
        return cls.__name__


class _ArrayMeta(_ArgTypeMeta):
    """Metaclass of array families: ``Family[T]`` is the interned class for a numpy scalar
    type or dtype ``T`` (a structured dtype kept whole, below ``Family[np.void]``)."""

    def __getitem__(cls, eltype: Any) -> type[DeviceArray[Any]]:
        if isinstance(eltype, TypeVar) and cls.__dict__.get("eltype") is None:
            # ``class Array(DeviceArray[T])``, generic for type checkers: the family root itself
            return cast("type[DeviceArray[Any]]", cls)
        family: type[DeviceArray[Any]] = cls._family_root  # type: ignore[attr-defined]
        if cls is not family:  # Array[np.float32][np.int32]: a typo, not Array[np.int32]
            c = cast("type[DeviceArray[Any]]", cls)
            has = c._whole if c._whole is not None else type_name(c.eltype)
            raise TypeError(
                f"{type_name(cls)} is already parametrized (its element type is {has}): "
                f"subscript the family once, as in {family.__name__}[{type_name(eltype)}]"
            )
        if isinstance(eltype, type) and not issubclass(eltype, np.generic):
            # No array's type, but no error here: its method's definition names the parameter.
            return cast("type[DeviceArray[Any]]", _unmatchable_array(family, eltype))
        whole = _whole_dtype(eltype)
        t: Any = whole if whole is not None else _scalar_type(eltype)
        cached = family._interned.get(t)
        if cached is not None:
            return cached
        # One class per dtype, whichever spelling came first (SPEC 8): np.int64's for np.longlong
        # on Linux; an abstract type (np.floating) is its own.
        concrete = whole is None and t in CONCRETE_SCALARS
        canonical = np.dtype(np.dtype(t).str).type if concrete else t
        if canonical is not t:
            cached = family[canonical]
            with _intern_lock():
                return family._interned.setdefault(t, cached)
        with _intern_lock():
            if t in family._interned:
                return family._interned[t]
            if whole is not None:
                bases: tuple[type, ...] = (family[np.void],)
                ns = {"eltype": whole.type, "_whole": whole, "__module__": family.__module__}
                name = f"{family.__name__}[{whole}]"
            else:
                bases = tuple(map(family.__getitem__, _numpy_parents(t))) or (family,)
                ns = {"eltype": t, "__module__": family.__module__}
                name = f"{family.__name__}[{type_name(t)}]"
            cls_ = cast("type[DeviceArray[Any]]", _ArrayMeta(name, bases, ns))
            family._interned[t] = cls_
            return cls_

    @property
    def dtype(cls) -> np.dtype | None:
        """``Array[np.float32].dtype``, on the class itself."""
        c = cast("type[DeviceArray[Any]]", cls)  # every class of it is a DeviceArray
        if c._whole is not None:
            return c._whole
        return None if c.eltype is None else np.dtype(c.eltype)


class DeviceArray(_Parametric[EltypeT_co], metaclass=_ArrayMeta):
    """Base of the array families. A back-end subclasses it once:
    ``class Array(DeviceArray[EltypeT_co])`` (generic in ``T`` for type checkers only).
    ``Array[np.float32]`` is then a class with ``eltype`` (``np.float32``) and ``dtype``
    (``np.dtype('float32')``), never instantiated: a type to dispatch on and hand to a body.
    """

    if TYPE_CHECKING:
        # what ``x: Array[np.floating]`` has for a type checker (the roots' is None)
        dtype: np.dtype[EltypeT_co]

    eltype: ClassVar[type[np.generic] | None] = None
    _interned: ClassVar[dict[Any, type[DeviceArray[Any]]]]
    _family_root: ClassVar[type[DeviceArray[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "eltype" not in cls.__dict__:  # a new family, not one of its parametric classes
            cls._interned = {}
            cls._family_root = cls

    _whole: ClassVar[np.dtype | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> DeviceArray[Any]:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not an array to create")


class UnmatchableArray:
    """``Array[int]``: an array annotation with an element type no array has (a Python or
    other non-numpy type). Not an argument type: a method annotated with it is refused where
    it is defined, naming the parameter (SPEC 8), which the subscript could not."""

    #: the array family and the element type it was subscripted with
    family: ClassVar[type[DeviceArray[Any]]]
    element: ClassVar[type]

    def __new__(cls, *args: Any, **kwargs: Any) -> UnmatchableArray:
        raise TypeError(f"{cls.__name__} matches no argument: it is no type to create")

    @classmethod
    def instead(cls) -> str:
        """The annotation to write: ``Array[np.int64]`` for ``Array[int]``."""
        family = cls.family.__name__
        # the numpy type of a Python scalar's values, as every numpy version spells it
        pythons = (int, float, bool, complex)
        numpy = ("np.int64", "np.float64", "np.bool_", "np.complex128")
        if cls.element in pythons:
            return f"{family}[{numpy[pythons.index(cls.element)]}]"
        return f"{family}[dtype] with a numpy scalar type or dtype ({family}[np.float32], ...)"


def _unmatchable_array(family: type[DeviceArray[Any]], element: type) -> type[UnmatchableArray]:
    """The one :class:`UnmatchableArray` class of ``family[element]`` (interned with the
    family's array types: no numpy type is a key there)."""
    with _intern_lock():
        cached: Any = family._interned.get(element)
        if cached is None:
            ns = {"family": family, "element": element, "__module__": family.__module__}
            name = f"{family.__name__}[{type_name(element)}]"
            cached = _ArgTypeMeta(name, (UnmatchableArray,), ns)
            family._interned[element] = cached
        return cast("type[UnmatchableArray]", cached)


class _StructMeta(_ArgTypeMeta):
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
                cached = cast("type[Struct]", _StructMeta(f"Struct[{dt}]", (Struct,), ns))
                _structs[dt] = cached
            return cached


class Struct(metaclass=_StructMeta):
    """The argument type of a struct or vector passed by value: a numpy structured scalar (or
    a 0-d array of one, as ``pyopencl.cltypes``' ``make_float4`` returns). ``Struct[dtype]``
    is one type per layout, below ``Struct``, its ``dtype`` the whole structured dtype."""

    if TYPE_CHECKING:
        # ``Struct[dtype]``, what a method body gets, has its dtype; the root alone has None.
        dtype: ClassVar[np.dtype[np.void]]
    else:
        dtype = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Struct:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


class _WeakMeta(_ArgTypeMeta):
    """Metaclass of the weak scalar types: ``Weak[int]`` is the one for Python ``int``."""

    def __getitem__(cls, pytype: type) -> type[WeakScalar]:
        try:
            return WEAK[pytype]
        except (KeyError, TypeError):
            raise TypeError(f"Weak[...] takes int, float or bool, got {pytype!r}") from None


class WeakScalar(metaclass=_WeakMeta):
    """The argument type of a Python ``int``, ``float`` or ``bool``: a scalar with no width of
    its own (as in numpy's NEP 50). It dispatches as :attr:`default` where a method takes that
    (or a type above it), else as the concrete :attr:`family` type the most specific applicable
    method declares; each launch converts the value to that type, with a range check."""

    #: the Python type whose values have this argument type
    pytype: ClassVar[type]
    #: what it dispatches as where a method takes it (or an abstract type above it)
    default: ClassVar[type[np.generic]]
    #: the numpy types whose concrete members it may take when declared
    family: ClassVar[type[np.generic]]

    def __new__(cls, *args: Any, **kwargs: Any) -> WeakScalar:
        raise TypeError(f"{cls.__name__} is a kernel argument type, not a value to create")


def _weak(pytype: type, default: type[np.generic], family: type[Any]) -> type[WeakScalar]:
    ns = {"pytype": pytype, "default": default, "family": family, "__module__": __name__}
    return cast("type[WeakScalar]", _WeakMeta(f"Weak[{pytype.__name__}]", (WeakScalar,), ns))


#: Python scalar type -> its weak argument type.
WEAK: dict[type, type[WeakScalar]] = {
    int: _weak(int, np.int64, np.integer),
    float: _weak(float, np.float64, np.floating),
    bool: _weak(bool, np.bool_, np.bool_),
}
Weak = WeakScalar  # ``Weak[int]``, ``Weak[float]``, ``Weak[bool]``


def weak_type(value: Any) -> type[WeakScalar] | None:
    """The weak type of an instance of a subclass of a Python scalar (an ``IntEnum``), as of
    the scalar itself (``bool`` before ``int``); None for anything else."""
    return next((WEAK[py] for py in (bool, int, float) if isinstance(value, py)), None)


def _reduce_argtype(cls: Any) -> str | tuple[Any, ...]:
    """Pickle an argument type by reference: a root by its name in its module, a parametric
    one as its root subscripted, so that it unpickles to the interned class."""
    meta = type(cls)  # (tested, not cls: cls keeps its attributes for the type checker)
    if issubclass(meta, _ArrayMeta) and "eltype" in cls.__dict__:
        key = cls._whole if cls._whole is not None else cls.eltype
        return operator.getitem, (cls._family_root, key)
    if issubclass(meta, _StructMeta) and cls is not Struct:
        return operator.getitem, (Struct, cls.dtype)
    if issubclass(meta, _WeakMeta) and cls is not WeakScalar:
        return operator.getitem, (WeakScalar, cls.pytype)
    return str(cls.__qualname__)  # a root: the class its module defines


# A metaclass's own __reduce__ is not asked (pickle saves any class as a global): the
# reduction goes in copyreg's table, which pickle consults first.
for _meta in (_ArrayMeta, _StructMeta, _WeakMeta):
    copyreg.pickle(_meta, _reduce_argtype)


def argument_type(annotation: Any) -> Any:
    """The argument type a parameter annotation stands for (the hook ``signature_of`` calls).
    No type checker takes a dtype as a type parameter, so ``Annotated[Struct, dtype]`` is
    ``Struct[dtype]``, ``Annotated[Array[np.void], dtype]`` (or ``Annotated[Array, dtype]``)
    ``Array[dtype]``; ``Annotated[T, ...]`` without a dtype is ``T``, anything else itself."""
    if get_origin(annotation) is not Annotated:
        return annotation
    base: Any = annotation.__origin__
    dtypes = [m for m in annotation.__metadata__ if isinstance(m, np.dtype)]
    if not dtypes:
        return base
    if len(dtypes) > 1:
        raise TypeError(f"{annotation!r} gives more than one dtype: give the one it stands for")
    dt = dtypes[0]
    if base is Struct:
        return Struct[dt]
    if isinstance(base, _ArrayMeta) and base is not DeviceArray:
        t = cast("type[DeviceArray[Any]]", base)._family_root[dt]
        if not issubclass(t, base):
            raise TypeError(f"{annotation!r}: {type_name(t)} is not below {type_name(base)}")
        return t
    raise TypeError(
        f"{annotation!r}: a dtype in Annotated[...] stands for a struct layout, and goes with "
        "Struct (Annotated[Struct, dtype]) or an array family (Annotated[Array[np.void], dtype])"
    )


def resolve_weak(t: type, declared: type) -> type:
    """The concrete argument type that a value of argument type ``t`` takes for a parameter
    declared ``declared``: ``t`` itself unless ``t`` is weak; for a weak type, ``declared`` if
    that is a concrete member of its family, else its default (``np.int64``, ...)."""
    if not (isinstance(t, type) and issubclass(t, WeakScalar)):
        return t
    if (
        isinstance(declared, type)
        and issubclass(declared, t.family)
        and declared in CONCRETE_SCALARS
        and not issubclass(t.default, declared)  # (nor t.default itself)
    ):
        return declared
    return t.default


def weak_range(t: type) -> tuple[int, int] | tuple[float, float] | None:
    """The range a Python ``int`` or ``float`` must be in to become a value of numpy type
    ``t`` without wrapping or turning into an infinity: ``iinfo(t)``, or every float that
    rounds to a finite value of ``t`` (so ``3.4028235e38`` fits ``np.float32``, as for
    ``struct``'s packing); None where every value fits. An infinity or NaN always fits (SPEC 8)."""
    if isinstance(t, type) and issubclass(t, np.integer):
        ii = np.iinfo(t)
        return int(ii.min), int(ii.max)
    if not (isinstance(t, type) and issubclass(t, np.floating)):
        return None
    # Rounding to nearest, ties to even, the floats below max + half an ulp are finite. max's
    # last mantissa bit is odd (all set), so that tie rounds to an infinity: the bound is the
    # float just below it, exact in a Python float for every type narrower than one.
    big = np.finfo(cast(Any, t)).max  # inf for a type wider than float64 (np.longdouble)
    if float(big) >= sys.float_info.max:
        return None
    tie = float(big) + float(big - np.nextafter(big, t(0))) / 2  # exact: a few bits wide
    hi = float(np.nextafter(tie, 0.0))
    return -hi, hi


def describe_parameter(linked: Any, i: int) -> str:
    """``parameter 1 (v) of kernel put(Array[np.float32], np.float32)``: parameter ``i``
    (captured values first, from 0) of a linked kernel (its ``name``, ``tt``, ``params``)."""
    params = getattr(linked, "params", None) or ()
    name = f" ({params[i]})" if i < len(params) and params[i] else ""
    signature = f"{linked.name}({', '.join(type_name(t) for t in linked.tt)})"
    return f"parameter {i}{name} of kernel {signature}"


def weak_overflow(value: Any, t: type, where: str) -> OverflowError:
    """The error of a weak value out of numpy type ``t``'s range, for the parameter ``where``
    names: ``1e+39 does not fit np.float32 (-3.4e+38 to 3.4e+38), the type of parameter ...``."""
    kind = issubclass(t, np.integer)
    info: Any = None
    if weak_range(t) is not None:
        info = np.iinfo(t) if kind else np.finfo(cast(Any, t))
    span = "" if info is None else f" ({info.min!s} to {info.max!s})"
    fix = "no wider type of its kind holds it: pass a value in range"
    for w in _WIDER:  # the narrowest wider type of its kind that holds the value
        if issubclass(w, np.integer) != kind or np.dtype(w).itemsize < np.dtype(t).itemsize:
            continue
        bounds = weak_range(w)
        if w is not t and (bounds is None or bounds[0] <= value <= bounds[1]):
            fix = (
                f"declare the parameter {type_name(w)} in the method (and the kernel source), "
                f"which holds it, and pass {type_name(w)}({value!r}); or pass a value in range"
            )
            break
    return OverflowError(f"{value!r} does not fit {type_name(t)}{span}, the type of {where}: {fix}")


def weak_converter(t: type) -> Callable[[Any, Any, int], Any]:
    """``convert(value, linked, i)``: a weak value as numpy type ``t`` (parameter ``i`` of
    ``linked``), or an ``OverflowError`` naming them where it is out of ``weak_range(t)``."""
    bounds = weak_range(t)
    if bounds is None:
        return lambda value, linked, i: t(value)
    lo, hi = bounds

    def convert_ranged(value: Any, linked: Any, i: int) -> Any:
        # value - value: 0 for a finite value, NaN for an infinity or a NaN (which fit)
        if lo <= value <= hi or value - value != 0:
            return t(value)
        raise weak_overflow(value, t, describe_parameter(linked, i))

    return convert_ranged


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
        if isinstance(t, _ArgTypeMeta) or t.__module__ == "builtins":
            return t.__name__
        if t.__module__ == "numpy":
            return f"np.{t.__name__}"
        return f"{t.__module__}.{t.__qualname__}"
    return repr(t)
