"""A launch's options and compiler kwargs as the core handles them: the markers of one not given,
compiler kwargs frozen for a front entry, and the errors a miss raises before anything is typed
(SPEC 8). Each builder returns its error: the caller raises it, so no frame of this module stands
above the user's line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from . import world as _world
from .kernels import Kernel
from .methods import MethodError
from .signatures import signature as signature  # (re-exported: launching names it here)
from .suggest import unknown_keywords

if TYPE_CHECKING:
    from .launching import Launcher

#: the defaults a launch option may have
_DEFAULTS = ("required", "none", "zero", "false")
#: a lifted compiler kwarg that was not given
NOTHING: Any = type("NothingGiven", (), {"__repr__": lambda self: "<not given>"})()
#: the default of a "required" launch option in the generated signatures, so that a launch that
#: misspells one (``global_sise=``) reaches the slow path, which names the misspelling,
#: rather than Python's "missing 1 required keyword-only argument"
REQUIRED: Any = type("RequiredOption", (), {"__repr__": lambda self: "<required>"})()


def keyword_error(launcher: Launcher, unknown: Iterable[str]) -> TypeError:
    """The error for a launch given keywords ``unknown`` that are neither launch nor compiler
    options (SPEC 8). A back-end's ``key`` may raise it too."""
    compiler = launcher.compiler_help or (
        f"compiler options are {', '.join(launcher.compiler_kwargs)}"
        if launcher.compiler_kwargs
        else "any other keyword is a compiler option"
    )
    names = unknown_keywords(unknown, (*launcher.options, *launcher.compiler_kwargs))
    return TypeError(
        f"unknown keyword argument(s) {names}: launch options are "
        f"{', '.join(launcher.options)}; {compiler}"
    )


def call_error(
    launcher: Launcher, F: Any, nargs: int, given: tuple[Any, ...], kw: dict[str, Any]
) -> TypeError | None:
    """The error of what a miss checks before anything is typed (SPEC 8): known keywords, the
    required launch options given, a method taking this many arguments; None if all is well."""
    if launcher.compiler_kwargs:
        unknown = [k for k in kw if k not in launcher.compiler_kwargs]
        if unknown:
            return keyword_error(launcher, unknown)
    for option, v in zip(launcher.options, given):
        if v is REQUIRED:
            return TypeError(
                f"{launcher.launch_name} of kernel {name_of(F)} is missing the required launch "
                f"option {option}=: launch options are {', '.join(launcher.options)}"
            )
    return count_error(launcher, F, nargs, launcher.launch_name)


def count_error(launcher: Launcher, F: Any, nargs: int, what: str) -> MethodError | None:
    """A MethodError when no method of the kernel in the task's world takes ``nargs`` arguments
    after ``F``'s captured values; else None."""
    kernel = F if isinstance(F, Kernel) else F.kernel
    ncaptured = len(captured_of(F))
    methods = kernel.methods()
    counts = sorted({len(m.signature) for m in methods})
    if not counts or ncaptured + nargs in counts:
        return None
    wanted = [c - ncaptured for c in counts if c >= ncaptured]
    takes = " or ".join(map(str, wanted)) if wanted else "none"
    listing = "; ".join(signature(kernel.name, m.signature) for m in methods)
    captured = (
        f" after its {ncaptured} captured value(s) (its methods count them)" if ncaptured else ""
    )
    return MethodError(
        f"kernel {kernel.name} takes {takes} argument(s){captured}, but the {what} gave "
        f"{nargs}: methods visible in world {_world.current()}: {listing}. Pass one "
        f"argument per parameter, or define a method of {kernel.name} with "
        f"{ncaptured + nargs} parameter(s)"
    )


#: values that cannot change: a front entry compares one by identity, then by value
_ATOMS = frozenset({str, bytes, int, float, complex, bool, type(None), frozenset})


def frozen(v: Any) -> Any:
    """A compiler kwarg's value as a front entry keeps it: the value itself when immutable, a
    private copy of a list, tuple or dict (so a list edited in place does not hit), or
    ``NOTHING`` for any other type (a launch given one looks up by the value it has then)."""
    cls = v.__class__
    if cls in _ATOMS or isinstance(v, (np.number, np.bool_)):
        return v
    if cls is dict:
        out = {k: frozen(x) for k, x in v.items()}
        return NOTHING if any(x is NOTHING for x in out.values()) else out
    if cls is list or cls is tuple:
        items = [frozen(x) for x in v]
        if any(x is NOTHING for x in items):
            return NOTHING
        if cls is tuple and all(x is y for x, y in zip(items, v)):
            return v  # immutable all through: kept as given, so a constant hits by identity
        return cls(items)
    return NOTHING


def name_of(F: Any) -> str:
    return F.name if isinstance(F, Kernel) else F.kernel.name


def captured_of(F: Any) -> tuple[type, ...]:
    return () if isinstance(F, Kernel) else F.captured
