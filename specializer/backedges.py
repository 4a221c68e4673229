"""Backedges: how code compiled against a dispatch learns that a definition ended it (its
``max_world`` is lowered before the new world is published, and the listeners told).

Nothing here knows a generic function: each holds a :class:`Backedges` table, and a definition
passes in what it changes (``methods.GenericFunction``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from .world import WORLD_MAX

MethodT = TypeVar("MethodT")  # a method: only its identity is used here


class Backedge(Protocol):
    """What code compiled against a dispatch registers: an object hashed by identity whose
    ``max_world`` a definition lowers (with the world lock held) to end its validity."""

    max_world: int


class EdgeOwner(Protocol):
    """What an edge is registered on: a generic function (``GenericFunction.add_backedge``)."""

    def add_backedge(self, tt: tuple[type, ...], method: Any, edge: Backedge) -> None: ...


#: Told, with the world lock held, of the edges a definition ends: before it ends them, and
#: again after the new world is published (the compiled-code cache then sweeps).
_on_invalidate: list[Callable[[list[Any], bool], None]] = []


def on_invalidate(listener: Callable[[list[Any], bool], None]) -> None:
    """Call ``listener(ended, after)`` at every definition, with the world lock held: with
    ``after`` False before the edges ``ended`` are ended, True once the new world is published
    (also where none ended). Registered at import, by a layer above (the compiled-code cache)."""
    _on_invalidate.append(listener)


def tell_listeners(ended: list[Any], after: bool) -> None:
    """Tell every :func:`on_invalidate` listener of ``ended`` (a definition, world lock held)."""
    for listener in _on_invalidate:
        listener(ended, after)


def register_backedges(
    edge: Backedge, deps: Iterable[tuple[EdgeOwner, tuple[type, ...], Any]]
) -> None:
    """Register ``edge`` on every ``(gf, tt, method)`` of ``deps``: a definition that makes
    ``gf`` dispatch ``tt`` to another method (or to an error) ends ``edge``'s validity. Call
    with the world lock held, before the code ``edge`` stands for is published (code without
    its edge would be wrong). Each is checked and added as ``gf.add_backedge`` does it
    (:meth:`Backedges.add`)."""
    for gf, tt, method in deps:
        gf.add_backedge(tt, method, edge)


def check_edge(edge: object) -> None:
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


#: An entry a definition drops once it is whole: (the table of a tt, the edge's reference).
Done = tuple[dict[Any, Any], Any]


class Backedges(Generic[MethodT]):
    """One generic function's backedges: ``tt -> {weak reference to an edge: the method it
    expects tt to dispatch to}``, changed under the world lock only."""

    __slots__ = ("_by_tt",)

    def __init__(self) -> None:
        self._by_tt: dict[tuple[type, ...], dict[Any, MethodT]] = {}

    def add(self, edge: Backedge, tt: tuple[type, ...], method: MethodT) -> None:
        """Register ``edge`` as expecting ``tt`` to dispatch to ``method`` (world lock held).
        Edges are held weakly, so a callee never keeps its callers' code alive; a dead one is
        dropped by the next definition that looks at it, or when its table has doubled (no
        callback: it would run wherever the edge dies, where an interrupt is lost)."""
        table = self._by_tt.get(tt)
        if table is None:
            table = self._by_tt.setdefault(tt, {})
        table[weakref.ref(edge)] = method
        n = len(table)
        if n >= 8 and not n & (n - 1):  # a power of two: amortized constant time
            for ref in table.copy():
                if ref() is None:
                    table.pop(ref, None)

    def open(self) -> list[tuple[tuple[type, ...], MethodT, Any]]:
        """The edges still open: (tt, expected method, edge)."""
        found = []
        for tt, table in self._by_tt.copy().items():
            for ref, m in table.copy().items():
                edge = ref()
                if edge is not None and edge.max_world >= WORLD_MAX:
                    found.append((tt, m, edge))
        return found

    def ending(
        self,
        takes: Callable[[tuple[type, ...]], bool],
        now: Callable[[tuple[type, ...]], MethodT | None],
        latest: int,
    ) -> tuple[list[Any], list[Done]]:
        """What a definition in world ``latest + 1`` does to these edges: the edges it ends,
        and the entries to :meth:`drop` once it is whole (also those of edges gone or closed
        before). ``takes(tt)``: whether the method it adds or deletes takes ``tt``; ``now(tt)``:
        the method ``tt`` dispatches to after it. World lock held: nothing is changed here."""
        ended: list[Any] = []
        done: list[Done] = []
        for tt, table in self._by_tt.items():  # (changed under the world lock only)
            if table and takes(tt):
                m_now = now(tt)
                for ref, m in table.items():
                    edge = ref()
                    if edge is None or edge.max_world <= latest:  # gone, or closed before
                        done.append((table, ref))
                    elif m is not m_now:
                        ended.append(edge)
                        done.append((table, ref))
        return ended, done

    @staticmethod
    def drop(done: list[Done]) -> None:
        """Drop the entries :meth:`ending` found (an ended edge stays closed on other tables
        until dropped)."""
        for table, ref in done:
            table.pop(ref, None)
