"""Backedges: how code compiled against a dispatch learns that a definition ended it (its
``max_world`` is lowered before the new world is published, and :data:`_on_invalidate` told)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .methods import GenericFunction, Method


class Backedge(Protocol):
    """What code compiled against a dispatch registers: an object hashed by identity whose
    ``max_world`` a definition lowers (with the world lock held) to end its validity."""

    max_world: int


#: Told, with the world lock held, of the edges a definition ends: before it ends them, and
#: again after the new world is published (the compiled-code cache then sweeps).
_on_invalidate: list[Callable[[list[Any], bool], None]] = []


def register_backedges(
    edge: Backedge, deps: Iterable[tuple[GenericFunction, tuple[type, ...], Method]]
) -> None:
    """Register ``edge`` on every ``(gf, tt, method)`` of ``deps``: a definition that makes
    ``gf`` dispatch ``tt`` to another method (or to an error) ends ``edge``'s validity. Call
    with the world lock held, before the code ``edge`` stands for is published (code without
    its edge would be wrong). Edges are held weakly, so a callee never keeps its callers' code
    alive; a dead one is dropped by the next definition that looks at it, or when its table has
    doubled (no callback: it would run wherever the edge dies, where an interrupt is lost)."""
    for gf, tt, method in deps:
        table = gf._edges.get(tt)
        if table is None:
            table = gf._edges.setdefault(tt, {})
        table[weakref.ref(edge)] = method
        n = len(table)
        if n >= 8 and not n & (n - 1):  # a power of two: amortized constant time
            for ref in table.copy():
                if ref() is None:
                    table.pop(ref, None)


def _check_edge(edge: object) -> None:
    """A ``TypeError`` unless ``edge`` has an int ``max_world`` and takes weak references."""
    if not isinstance(getattr(edge, "max_world", None), int):
        raise TypeError(f"edge has an int max_world (its validity's end), got {edge!r}")
    try:
        weakref.ref(edge)
    except TypeError:
        raise TypeError(
            f"edge is held weakly (its owner keeps it), so it must take weak references: "
            f"got a {type(edge).__name__}, which does not"
        ) from None


def _ending(
    gf: GenericFunction, changed: Method, live: tuple[Method, ...], latest: int
) -> tuple[list[Any], list[tuple[dict[Any, Method], Any]]]:
    """What a definition of ``gf`` in world ``latest + 1`` does to its edges: the edges it
    ends, and the entries to drop once it is whole (also those of edges gone or closed
    before). ``changed`` is the method it adds or deletes, ``live`` the new live methods.
    Call with the world lock held: nothing is changed here."""
    ended: list[Any] = []
    done: list[tuple[dict[Any, Method], Any]] = []
    for tt, table in gf._edges.items():  # (changed under the world lock only)
        if table and changed.applies_weak(tt):
            now = gf._select_or_none(tt, live)
            for ref, m in table.items():
                edge = ref()
                if edge is None or edge.max_world <= latest:  # gone, or closed before
                    done.append((table, ref))
                elif m is not now:
                    ended.append(edge)
                    done.append((table, ref))
    return ended, done
