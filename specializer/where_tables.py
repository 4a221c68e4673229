"""Where tables: what the core keeps for one *where* (a queue, a context key), owned by it.

A where table holds each kernel's newest front entry for that where, keyed by the kernel's
token (a number no other kernel of the process gets), so that it keeps no kernel alive: a weak
reference to each kernel drops its entry when the kernel goes (``_keep``). :func:`forget` is
what the core does when a context, a part of lookup keys, is gone. See
:mod:`specializer.launching` ("Cached state") and ``docs/design.md``'s cache map.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from typing import Any, cast

from . import compiler as _compiler
from .lookup import forget_key

__all__ = ["forget", "table_in"]


def table_in(tables: dict[Any, Any], name: str, make: bool) -> dict[Any, Any] | None:
    """The where table ``name`` in ``tables`` (a dict its where owns: its ``__dict__``, or what
    a back-end keeps for it), made on first use when ``make`` is true; None if there is none
    (or something else stands under that name)."""
    table = tables.get(name)
    if table is None and make:
        table = tables.setdefault(name, {})
    return table if isinstance(table, dict) else None


#: the attribute of a kernel (or kernel instance type) that holds its key in where tables: a
#: number no other kernel of the process ever has (so a table keeps no kernel, and no key is
#: ever another kernel's)
_TOKEN = "_specializer_token"
_tokens = itertools.count(1)
#: a where table's key of its _Drops
_DROPS = object()


def _token(F: Any) -> int:
    """``F``'s key in where tables, given on first use (a class's own, not a base class's)."""
    tok = F.__dict__.get(_TOKEN) if isinstance(F, type) else getattr(F, _TOKEN, None)
    if tok is None:
        tok = next(_tokens)
        setattr(F, _TOKEN, tok)
    return cast(int, tok)


class _Drops:
    """What drops a where table's entries for kernels that are gone: a weak reference to
    each kernel kept there, whose callback pops its entry. Held by the table only (so it goes
    with it), and referred to weakly by the callbacks."""

    __slots__ = ("__weakref__", "refs", "table")

    def __init__(self, table: dict[Any, Any]) -> None:
        self.table = table
        self.refs: dict[int, weakref.ref[Any]] = {}


def _keep(table: dict[Any, Any], F: Any, entry: Any) -> None:
    """Keep ``entry`` in where table ``table`` for ``F`` (alive: a launch of it publishes),
    under ``F``'s token, until ``F`` is gone: a where keeps no kernel alive (its entries refer
    to their kernels weakly). A lookup by ``F._specializer_token`` costs what one by ``F``
    would."""
    tok = _token(F)
    drops = table.get(_DROPS)
    if drops is None:
        drops = table.setdefault(_DROPS, _Drops(table))
    if tok not in drops.refs:
        drops.refs[tok] = weakref.ref(F, functools.partial(_gone, weakref.ref(drops), tok))
    table[tok] = entry


def _gone(drops_ref: weakref.ref[_Drops], tok: int, _: Any) -> None:
    """A kernel kept in a where table is gone: drop its entry (from the collector, in any
    thread: each step one atomic dict operation)."""
    drops = drops_ref()
    if drops is not None:
        drops.table.pop(tok, None)
        drops.refs.pop(tok, None)


def forget(part: Any) -> list[Any]:
    """A context (or the token a back-end keys one by, ``part`` of its lookup keys) is gone
    for good: drop what was linked for it from the compiled-code cache
    (:func:`specializer.compiler.forget_context`) and the results keyed by it from every
    lookup site (:func:`specializer.lookup.forget_key`), and clear each dropped linked
    kernel's launch paths (``bound``, which refer to it), so that it is freed now rather than
    by a later collection. Returns the dropped linked kernels. Safe from a finalizer: it
    takes no lock."""
    forget_key(part)
    dropped = _compiler.forget_context(part)
    for linked in dropped:
        linked.bound.clear()
    return dropped
