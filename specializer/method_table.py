"""A generic function's method table as one value (:class:`_Table`), replaced whole by each
definition, and what a world sees of it: the live methods from the newest definition on, and
in an older world each signature's method of that world along its chain (:func:`_version`)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from . import world as _world

if TYPE_CHECKING:
    from .methods import GenericFunction, Method, MethodInstance


#: How many world ranges the dispatch cache keeps per signature (the newest ones).
DISPATCH_DEPTH = 4


def _range_str(lo: int, hi: int) -> str:
    return f"worlds {lo}..{'' if hi >= _world.WORLD_MAX else hi}"


class _Dispatch(NamedTuple):
    """A cached dispatch: ``tt`` takes ``mi`` in every world of ``[min_world, max_world]``."""

    min_world: int
    max_world: int
    mi: MethodInstance

    def __repr__(self) -> str:
        return f"<dispatch {_range_str(self.min_world, self.max_world)} -> {self.mi!r}>"


def _version(head: Method, world: int) -> tuple[Method | None, Method | None]:
    """From ``head`` back along its chain: the newest method defined by ``world`` (None: none
    yet) and the one defined after it (None: it is ``head``), in O(log n) jump-pointer steps."""
    if head.min_world <= world:
        return head, None
    n = head  # always defined after world
    while True:
        p = n.prior
        if p is None or p.min_world <= world:
            return p, n
        j = n.jump
        n = j if j.min_world > world else p


_min_world = attrgetter("min_world")  # sort key of methods and dispatches


class _Table(NamedTuple):
    """A generic function's methods as one value, replaced whole by each definition. It holds
    the live methods and the dispatch memo, never the history, so publishing a definition
    costs what it changes."""

    #: the methods visible from ``since`` on, each the head of its signature's chain
    live: tuple[Method, ...]
    since: int
    #: tt -> cached dispatches, newest first, filled under the world lock
    dispatch: dict[tuple[type, ...], tuple[_Dispatch, ...]]
    #: the closed heads of deleted chains, kept for older worlds (a new method continues one)
    deleted: tuple[Method, ...] = ()

    @property
    def heads(self) -> tuple[Method, ...]:
        """The head of every chain: the live methods, then the deleted ones."""
        return (*self.live, *self.deleted) if self.deleted else self.live

    @property
    def history(self) -> tuple[Method, ...]:
        """Every method, replaced and deleted ones included, in order of definition."""
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
        """The worlds around ``world`` in which the methods that could take ``tt`` are the same."""
        live, since = self.live, self.since
        if world >= since:
            # A replaced method's range ends where its live replacement's begins, and a
            # deleted one's dispatch ends after its range.
            lo = max((m.min_world for m in live if m.applies_weak(tt)), default=1)
            for d in self.deleted:
                if d.applies_weak(tt):
                    lo = max(lo, d.max_world + 1)
            return lo, _world.WORLD_MAX
        # An older world: each signature's method of that world, and the one after it (a
        # chain holds one signature, so its head answers ``applies_weak`` for all).
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
