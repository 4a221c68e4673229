"""Signatures, the argument-type tuples of methods and dispatch: read from annotations, spelled
for messages, checked before dispatch."""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

from .types import WeakScalar, argument_type, type_name

_WEAK_META = type(WeakScalar)


def _is_weak(t: object) -> TypeGuard[type[WeakScalar]]:
    return type(t) is _WEAK_META and t is not WeakScalar


def _has_weak(tt: tuple[type, ...]) -> bool:
    return any(type(t) is _WEAK_META for t in tt)


def _defaults(tt: tuple[type, ...]) -> tuple[type, ...]:
    """``tt`` with each weak type taken as its default (``np.int64``, ...)."""
    return tuple(t.default if _is_weak(t) else t for t in tt)


def signature(name: str, tt: Iterable[type]) -> str:
    """``name(T1, T2, ...)``: a signature as every message spells it."""
    return f"{name}({', '.join(type_name(t) for t in tt)})"


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


def _check_tt(name: str, tt: object, param: str = "tt") -> tuple[type, ...]:
    if not isinstance(tt, tuple):
        raise TypeError(f"{param} (the argument types of {name}) is a tuple of types, got {tt!r}")
    for t in tt:
        if not isinstance(t, type):
            raise TypeError(
                f"cannot dispatch {name} on {t!r}: {param} (the argument types) must be types "
                f"(got a {type(t).__name__} in {tt!r})"
            )
    return tt


def _as_world(name: str, world: Any) -> int:
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
