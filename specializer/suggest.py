"""Messages for a misspelled keyword: the name given, the nearest valid one, and every valid
one (SPEC 8), shared by the launch path, the back-ends' option checks and the decorators."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = ["DECORATOR_KEYWORDS", "decorator_keywords", "nearest", "unknown_keywords"]


def nearest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``name`` when one is close (``difflib.get_close_matches``)."""
    found = difflib.get_close_matches(name, list(choices), n=1)
    return found[0] if found else None


def unknown_keywords(given: Iterable[str], choices: Iterable[str]) -> str:
    """The unknown keywords ``given``, each with the nearest of ``choices`` when one is close:
    ``global_sise (did you mean global_size?)``."""
    valid: Sequence[str] = list(choices)
    out = []
    for name in sorted(given):
        near = nearest(name, valid)
        out.append(name if near is None else f"{name} (did you mean {near}?)")
    return ", ".join(out)


#: the keywords of the kernel and device decorators, and what each takes
DECORATOR_KEYWORDS = (
    ("callees", "callees=[the device functions its source calls]"),
    ("localns", "localns=locals() (the names string annotations may use)"),
)


def decorator_keywords(what: str, unknown: Iterable[str]) -> TypeError:
    """The error for a kernel or device decorator (``what``) given keywords ``unknown``."""
    names = unknown_keywords(unknown, (name for name, _ in DECORATOR_KEYWORDS))
    return TypeError(
        f"{what} got unknown keyword argument(s) {names}: it takes "
        f"{' and '.join(text for _, text in DECORATOR_KEYWORDS)}"
    )
