"""Where tables: what the core keeps for one *where* (a queue, a context key), owned by it.

A where table keeps, by kernel token, what remakes each kernel's front entry for that where;
it keeps no kernel alive (``_keep``). :func:`forget` is what the core does when a context is
gone.
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
    """The where table ``name`` in ``tables`` (a dict its where owns), made on first use
    when ``make`` is true; None if there is none."""
    table = tables.get(name)
    if table is None and make:
        table = tables.setdefault(name, {})
    return table if isinstance(table, dict) else None


#: the attribute of a kernel (or kernel instance type) holding its key in where tables: a
#: number no other kernel of the process ever has
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
    """A weak reference to each kernel kept in a table, whose callback pops its entry; held
    by the table only, referred to weakly by the callbacks."""

    __slots__ = ("__weakref__", "refs", "table")

    def __init__(self, table: dict[Any, Any]) -> None:
        self.table = table
        self.refs: dict[int, weakref.ref[Any]] = {}


def _keep(table: dict[Any, Any], F: Any, entry: Any) -> None:
    """Keep ``entry`` in ``table`` under ``F``'s token until ``F`` is gone."""
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
    """A context (or the token ``part`` of lookup keys that stands for it) is gone for good:
    drop what was linked for it and the lookup results keyed by it, and clear the dropped
    linked kernels' launch paths so they are freed now. Returns them. Takes no lock (it
    runs from finalizers)."""
    forget_key(part)
    dropped = _compiler.forget_context(part)
    for linked in dropped:
        linked.bound.clear()
    return dropped
