"""Signatures, the argument-type tuples of methods and dispatch: read from annotations, checked
before dispatch, compared for specificity, and spelled for messages."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeGuard

from .types import WeakScalar, argument_type, is_subtype, public_module, type_name

_WEAK_META = type(WeakScalar)


def is_weak(t: object) -> TypeGuard[type[WeakScalar]]:
    """Whether ``t`` is a weak type (``Weak[int]``: what a Python scalar dispatches as)."""
    return type(t) is _WEAK_META and t is not WeakScalar


def has_weak(tt: tuple[type, ...]) -> bool:
    """Whether ``tt`` holds a weak type (dispatch then resolves it against each method)."""
    return any(type(t) is _WEAK_META for t in tt)


def weak_defaults(tt: tuple[type, ...]) -> tuple[type, ...]:
    """``tt`` with each weak type taken as its default (``np.int64``, ...)."""
    return tuple(t.default if is_weak(t) else t for t in tt)


def signature_of(fn: Callable[..., Any], localns: dict[str, Any] | None = None) -> tuple[type, ...]:
    """The signature of ``fn`` from its parameters' annotations (all must be types); string
    annotations are evaluated in ``fn``'s module, ``localns`` (a ``locals()``) first."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError) as e:
        raise TypeError(f"cannot read the signature of {name}: {e}") from None
    if localns is not None and not isinstance(localns, dict):
        raise TypeError(
            f"localns (the names string annotations of {name} may use) is a dict such as "
            f"locals(), got {localns!r}"
        )
    try:
        hints = inspect.get_annotations(fn, eval_str=True, locals=localns)
    except NameError as e:
        raise TypeError(
            f"cannot evaluate the annotations of {name}: {e}. Under 'from __future__ import "
            "annotations' an annotation is evaluated in the module, not in the function that "
            "defines the method: define the type at module level, or pass that function's "
            "names to the decorator (@kernel(localns=locals()), @gf.method(localns=locals()))"
        ) from None
    except Exception as e:
        raise TypeError(f"cannot evaluate the annotations of {name}: {e}") from None
    sig = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(
                f"parameter {p.name!r} of {name} is {p.kind.description}: a method takes plain "
                "positional parameters, each annotated with a type"
            )
        if p.name not in hints:
            raise TypeError(
                f"parameter {p.name!r} of {name} has no annotation: annotate it with the type "
                "it dispatches on (for example np.float32 or Array[np.floating])"
            )
        t = argument_type(hints[p.name])  # Annotated[Struct, dtype] is Struct[dtype], ...
        if not isinstance(t, type):
            raise TypeError(
                f"parameter {p.name!r} of {name} is annotated with {t!r}, which is not a type"
            )
        sig.append(t)
    return tuple(sig)


def check_tt(name: str, tt: object, param: str = "tt") -> tuple[type, ...]:
    """``tt`` if it is a tuple of types; else a ``TypeError`` naming ``name`` and ``param``."""
    if not isinstance(tt, tuple):
        raise TypeError(f"{param} (the argument types of {name}) is a tuple of types, got {tt!r}")
    for t in tt:
        if not isinstance(t, type):
            raise TypeError(
                f"cannot dispatch {name} on {t!r}: {param} (the argument types) must be types "
                f"(got a {type(t).__name__} in {tt!r})"
            )
    return tt


def as_world(name: str, world: Any) -> int:
    """``world`` as a world number (an integer, not a bool); a ``TypeError`` naming it if not."""
    if not isinstance(world, bool):
        try:
            return operator.index(world)
        except TypeError:
            pass
    raise TypeError(
        f"world (the world to dispatch {name} in) is an int from specializer.current() or "
        f"None for the task's world, got {world!r}"
    )


def more_specific(a: tuple[type, ...], b: tuple[type, ...]) -> bool:
    """``a`` is at least as specific as ``b`` and not the same signature."""
    return a != b and all(is_subtype(x, y) for x, y in zip(a, b))


def type_label(t: type) -> str:
    """A type's name in messages; a weak type is named as the Python type it stands for."""
    return t.pytype.__name__ if is_weak(t) else type_name(t)


def signature(name: str, tt: Iterable[type], names: Callable[[type], str] = type_name) -> str:
    """``name(T1, T2, ...)``: a signature as every message spells it, each type as ``names``
    spells it (:func:`type_label` and :func:`namer` in dispatch's messages)."""
    return f"{name}({', '.join(names(t) for t in tt)})"


def namer(types: Iterable[type]) -> Callable[[type], str]:
    """How one message names ``types``: by short name, qualified where two would read the same
    (``Weak[int]`` and ``builtins.int``, two back-ends' arrays), then numbered by id."""
    by_name: dict[str, list[type]] = {}
    for t in dict.fromkeys(types):
        by_name.setdefault(type_label(t), []).append(t)
    names: dict[type, str] = {}
    for short, ts in by_name.items():
        if len(ts) == 1:
            names[ts[0]] = short
            continue
        for t in ts:
            if is_weak(t):
                names[t] = t.__name__  # Weak[int], where builtins.int is the class int
            elif short.startswith(f"{t.__module__}."):  # named by module already
                names[t] = short
            else:
                names[t] = f"{public_module(t)}.{short}"
        qualified = [names[t] for t in ts]
        for t in ts:
            if qualified.count(names[t]) > 1:  # two classes of one module and name
                names[t] += f" (class at 0x{id(t):x})"
    return lambda t: names.get(t) or type_label(t)


def annotations_for(tt: tuple[type, ...]) -> str:
    """The annotations of a method that takes ``tt`` (a weak type's default), for messages."""
    return f"({', '.join(type_name(t) for t in weak_defaults(tt))})"


def weak_hint(tt: tuple[type, ...]) -> str:
    """For a message: what parameter each weak type of ``tt`` takes (empty without one)."""
    said = "; ".join(
        f"a Python {t.pytype.__name__} takes a parameter declared {type_name(t.default)}"
        + (
            " or a type above it"
            if t.family is t.default
            else f", a type above it, or a concrete {type_name(t.family)} type"
        )
        for t in dict.fromkeys(tt)
        if is_weak(t)
    )
    return f" ({said})" if said else ""


def declared_hint(
    name: str,
    tt: tuple[type, ...],
    signatures: Sequence[tuple[type, ...]],
    names: Callable[[type], str],
) -> str:
    """How to make the argument a parameter wants, where all ``signatures`` of that arity
    declare one type there with an ``__argtype_hint__`` and the argument is not of it."""
    same = [s for s in signatures if len(s) == len(tt)]
    out = []
    for i, t in enumerate(tt):
        declared = {s[i] for s in same}
        if len(declared) != 1:
            continue
        (d,) = declared
        hint = getattr(d, "__argtype_hint__", None)
        if hint and not is_subtype(t, d):
            out.append(
                f" Every method of {name} with {len(tt)} parameters takes a {names(d)} as argument "
                f"{i}, given {names(t)} here: {hint}."
            )
    return "".join(out)
