"""A generic function's method table as one value (:class:`_Table`), replaced whole by each
definition, and what a world sees of it.

The table holds the live methods, each the head of its signature's chain of replaced methods
(``Method.prior``, with a jump pointer further back), the closed heads of deleted ones, and
the dispatch memo. A world from the newest definition on sees the live methods; an older one
finds each signature's method of its world along the chain (:func:`_version`), in steps
logarithmic in the chain's length. :meth:`_Table.dispatch_range` is the range of worlds over
which a dispatch computed in one world holds, which the memo stores (the newest
:data:`DISPATCH_DEPTH` ranges per signature). :func:`_undo` puts a table back when an
interrupt stopped a definition before its world was published.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from . import world as _world

if TYPE_CHECKING:
    from .methods import GenericFunction, Method, MethodInstance


#: How many world ranges the dispatch cache keeps per signature (the newest ones).
DISPATCH_DEPTH = 4


def _range_str(lo: int, hi: int) -> str:
    return f"worlds {lo}..{'' if hi >= _world.WORLD_MAX else hi}"


class _Dispatch:
    """A cached dispatch: ``tt`` takes ``mi`` in every world of ``[min_world, max_world]``."""

    __slots__ = ("max_world", "mi", "min_world")

    def __init__(self, min_world: int, max_world: int, mi: MethodInstance) -> None:
        self.min_world = min_world
        self.max_world = max_world
        self.mi = mi

    def __repr__(self) -> str:
        return f"<dispatch {_range_str(self.min_world, self.max_world)} -> {self.mi!r}>"


def _version(head: Method, world: int) -> tuple[Method | None, Method | None]:
    """Along the chain of one signature from its newest method ``head`` (``Method.prior``,
    ``min_world`` falling): the newest method defined by ``world`` (None: none was yet),
    and the one defined after it (None: it is ``head``). O(log n) steps for a chain of n:
    a jump pointer is taken whenever it still lands after ``world``."""
    if head.min_world <= world:
        return head, None
    n = head  # always defined after world
    while True:
        p = n.prior
        if p is None or p.min_world <= world:
            return p, n
        j = n.jump
        n = j if j.min_world > world else p


def _min_world(m: Method) -> int:
    return m.min_world


def _newest_first(e: _Dispatch) -> int:
    return -e.min_world


class _Table(NamedTuple):
    """A generic function's methods as one value, replaced whole by each definition: what
    it holds is the live methods and the dispatch memo, never the history, so publishing a
    definition costs what it changes, whatever was defined before."""

    #: the methods visible in every world from ``since`` on (the newest of each signature),
    #: each the head of its signature's chain of replaced methods (``Method.prior``), through
    #: which an older world dispatches
    live: tuple[Method, ...]
    since: int
    #: tt -> cached dispatches, newest first: a memo of this table, filled under the world
    #: lock with dispatches computed from it; a new table starts a new one
    dispatch: dict[tuple[type, ...], tuple[_Dispatch, ...]]
    #: the heads of the chains whose newest method was deleted (``delete_method``): each
    #: closed (its ``max_world`` before ``since``), kept for the older worlds that still see
    #: it; a later method of its signature continues its chain (and takes it off this list)
    deleted: tuple[Method, ...] = ()

    @property
    def heads(self) -> tuple[Method, ...]:
        """The head of every chain: the live methods, then the deleted ones."""
        return (*self.live, *self.deleted) if self.deleted else self.live

    @property
    def history(self) -> tuple[Method, ...]:
        """Every method in the table, replaced and deleted ones included, in order of
        definition (reflection and tests: it walks every chain)."""
        found = []
        for m in self.heads:
            chain: Method | None = m
            while chain is not None:
                found.append(chain)
                chain = chain.prior
        return tuple(sorted(found, key=_min_world))

    def visible(self, world: int) -> Sequence[Method]:
        """The methods visible in ``world``, in order of definition."""
        if world >= self.since:
            return self.live
        found = []
        for head in self.heads:
            m = _version(head, world)[0]
            if m is not None and world <= m.max_world:
                found.append(m)
        found.sort(key=_min_world)  # in order of definition, as the live ones are
        return found

    def dispatch_range(self, tt: tuple[type, ...], world: int) -> tuple[int, int]:
        """The worlds around ``world`` in which the methods that could take ``tt`` (and so
        its dispatch) are the same as in ``world``."""
        live, since = self.live, self.since
        if world >= since:
            # Every live method is visible from ``since`` on; a replaced method's range
            # ends where its (live, equally applicable) replacement's begins, and a deleted
            # one's dispatch ends after its range.
            lo = max((m.min_world for m in live if m.applies_weak(tt)), default=1)
            for d in self.deleted:
                if d.applies_weak(tt):
                    lo = max(lo, d.max_world + 1)
            return lo, _world.WORLD_MAX
        # An older world: each signature's method of that world, and the one after it
        # (a chain holds one signature, so ``applies_weak`` is asked of its head only).
        lo, hi = 1, _world.WORLD_MAX
        for head in self.heads:
            if not head.applies_weak(tt):
                continue
            m, after = _version(head, world)
            if after is not None:
                hi = min(hi, after.min_world - 1)
            if m is None:
                continue
            if m.max_world < world:
                lo = max(lo, m.max_world + 1)
            else:
                lo, hi = max(lo, m.min_world), min(hi, m.max_world)
        return lo, hi


def _undo(gf: GenericFunction, table: _Table, ranges: list[tuple[Any, int]]) -> None:
    """Undo a definition that an interrupt stopped before its world was published."""
    gf._table = table
    for m, max_world in ranges:
        m.max_world = max_world
