"""Generic functions: method tables whose methods have world validity ranges, and dispatch
(``methodinstance(tt, world)``: the most specific method visible in that world). A definition
closes the old method's range without erasing it, so an older world dispatches as it did: the
table (:class:`_Table`) is one value, replaced whole by each definition, and an older world
finds each signature's method of its time along that signature's chain (:func:`_version`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar, overload

from . import world as _world
from .backedges import Backedge, Backedges, check_edge, tell_listeners
from .backedges import register_backedges as register_backedges
from .signatures import (
    annotations_for,
    as_world,
    check_tt,
    declared_hint,
    has_weak,
    more_specific,
    namer,
    signature,
    signature_of,
    type_label,
    weak_defaults,
    weak_hint,
)
from .types import argument_type, is_subtype, resolve_weak

__all__ = [
    "AmbiguityError",
    "GenericFunction",
    "Method",
    "MethodError",
    "MethodInstance",
    "signature_of",
]

#: How many world ranges the dispatch cache keeps per signature (the newest ones).
DISPATCH_DEPTH = 4


class MethodError(TypeError):
    """No method of a generic function applies to the argument types in that world."""


class AmbiguityError(MethodError):
    """Two or more applicable methods are equally specific."""


def _range_str(lo: int, hi: int) -> str:
    return f"worlds {lo}..{'' if hi >= _world.WORLD_MAX else hi}"


class Method:
    """One method: a function, its signature, its callees and its world range."""

    __slots__ = (
        "__weakref__",
        "_instances",
        "callees",
        "depth",
        "fn",
        "gf",
        "jump",
        "max_world",
        "min_world",
        "prior",
        "signature",
    )

    def __init__(
        self,
        gf: GenericFunction,
        fn: Callable[..., Any],
        signature: tuple[type, ...],
        callees: tuple[GenericFunction, ...],
        min_world: int,
        prior: Method | None = None,
    ) -> None:
        self.gf = gf
        self.fn = fn
        self.signature = signature
        self.callees = callees
        self.min_world = min_world
        self.max_world = _world.WORLD_MAX
        self._instances: dict[tuple[type, ...], MethodInstance] = {}
        #: the method of this signature this one replaced, and a jump pointer further back
        #: (skew-binary: finding a world's version takes O(log n) steps of a chain of n)
        self.prior = prior
        if prior is None:
            self.depth, self.jump = 0, self
        else:
            self.depth = prior.depth + 1
            j = prior.jump
            self.jump = j.jump if prior.depth - j.depth == j.depth - j.jump.depth else prior

    def visible(self, world: int) -> bool:
        return self.min_world <= world <= self.max_world

    def applies(self, tt: tuple[type, ...]) -> bool:
        """Whether this method takes ``tt`` (concrete types: no weak ones)."""
        sig = self.signature
        return len(sig) == len(tt) and all(is_subtype(a, s) for a, s in zip(tt, sig))

    def applies_weak(self, tt: tuple[type, ...]) -> bool:
        """Whether this method takes ``tt`` when each weak type in it may also take the
        concrete member of its family that the method declares there."""
        sig = self.signature
        return len(sig) == len(tt) and all(
            is_subtype(resolve_weak(a, s), s) for a, s in zip(tt, sig)
        )

    def resolve(self, tt: tuple[type, ...]) -> tuple[type, ...]:
        """``tt`` with each weak type replaced by the concrete type it takes here."""
        return tuple(resolve_weak(a, s) for a, s in zip(tt, self.signature))

    def specialize(self, tt: tuple[type, ...]) -> MethodInstance:
        """The (interned) method instance of this method for the concrete ``tt``."""
        mi = self._instances.get(tt)
        if mi is None:
            mi = self._instances.setdefault(tt, MethodInstance(self, tt))
        return mi

    def __repr__(self) -> str:
        return (
            f"<method {signature(self.gf.name, self.signature, type_label)} "
            f"{_range_str(self.min_world, self.max_world)}>"
        )


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


class MethodInstance:
    """A method specialized to concrete argument types ``tt`` (interned per method and tt)."""

    __slots__ = ("__weakref__", "code", "method", "tt")

    def __init__(self, method: Method, tt: tuple[type, ...]) -> None:
        self.method = method
        self.tt = tt
        #: the compiled-code cache's part (config's small int -> code instances, newest
        #: first, each tuple replaced whole): owned here, so the code goes with its method;
        #: what a code instance is, is the cache's (``compiler.CodeInstance``)
        self.code: dict[int, tuple[Any, ...]] = {}

    @property
    def gf(self) -> GenericFunction:
        return self.method.gf

    def __repr__(self) -> str:
        sig = signature(self.method.gf.name, self.tt, type_label)
        return f"<MethodInstance {sig} of {self.method!r}>"


class _Dispatch(NamedTuple):
    """A cached dispatch: ``tt`` takes ``mi`` in every world of ``[min_world, max_world]``."""

    min_world: int
    max_world: int
    mi: MethodInstance

    def __repr__(self) -> str:
        return f"<dispatch {_range_str(self.min_world, self.max_world)} -> {self.mi!r}>"


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


_GF = TypeVar("_GF", bound="GenericFunction")


class GenericFunction:
    """A named method table. ``@gf.method`` adds (or replaces) a method from annotations.

    Dispatch caches world ranges per argument-type tuple, as Julia's method cache does: a hit
    costs a dict lookup and a range check, whatever the history. A definition ends the ranges
    (and backedges) of the signatures whose dispatch it changes, and only those.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a generic function's name is a non-empty str, got {name!r}")
        self.name = name
        #: the methods, their ranges and the dispatch memo: one value, published by one store
        self._table = _Table((), 0, {}, ())
        #: the backedges on its dispatches: tt -> {edge, weakly: the method it expects}
        self._edges: Backedges[Method] = Backedges()

    def __repr__(self) -> str:
        return f"<generic function {self.name} with {len(self.methods())} method(s)>"

    @overload
    def method(
        self: _GF,
        fn: Callable[..., Any],
        *,
        callees: Iterable[GenericFunction] = ...,
        localns: dict[str, Any] | None = ...,
    ) -> _GF: ...
    @overload
    def method(
        self: _GF,
        fn: None = None,
        *,
        callees: Iterable[GenericFunction] = ...,
        localns: dict[str, Any] | None = ...,
    ) -> Callable[[Callable[..., Any]], _GF]: ...
    def method(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        callees: Iterable[GenericFunction] = (),
        localns: dict[str, Any] | None = None,
    ) -> Any:
        """Decorator: add ``fn`` as a method (``@gf.method`` or ``@gf.method(callees=[...])``;
        ``localns=locals()`` where string annotations name the defining function's locals).

        ``fn`` may have any name (``def _``). Returns the generic function, so the decorated
        name refers to it. A kernel or device function checks it as its back-end's decorator does.
        """
        if fn is None:
            return lambda f: self.method(f, callees=callees, localns=localns)
        self.add_method(fn, callees=callees, localns=localns)
        return self

    def add_method(
        self,
        fn: Callable[..., Any],
        signature: tuple[type, ...] | None = None,
        callees: Iterable[GenericFunction] = (),
        localns: dict[str, Any] | None = None,
    ) -> Method:
        """Add ``fn`` with ``signature`` (default: from its annotations, string ones evaluated
        with ``localns`` first); raises the world.

        A method with the signature of a visible one replaces it; older worlds still see the old.
        """
        if not callable(fn):
            raise TypeError(f"fn (a method of {self.name}) must be callable, got {fn!r}")
        try:
            callees = tuple(callees)
        except TypeError:
            raise TypeError(
                f"callees (of {self.name}) is an iterable of device functions, got {callees!r}"
            ) from None
        for c in callees:
            if not isinstance(c, GenericFunction):
                raise TypeError(
                    f"callees of {self.name} must be device functions (generic functions), "
                    f"got {c!r}"
                )
        if signature is None:
            sig = signature_of(fn, localns)
        else:
            sig = check_tt(self.name, signature, "signature")
        # A lock's body holds no loop or inlined comprehension: CPython 3.13 can unwind a frame
        # past its with statement at a backward jump (gh-130279); generators run in their own.
        with _world.lock():
            _world.undo_in_flight()  # an interrupted definition (perhaps of this table) first
            old = self._table
            # the new method continues the chain of the live or deleted one of its signature
            prior = next((m for m in old.heads if m.signature == sig), None)
            replaced = tuple(m for m in old.live if m is prior)
            method = Method(self, fn, sig, callees, _world.latest() + 1, prior)
            live = (*(m for m in old.live if m.signature != sig), method)
            deleted = tuple(m for m in old.deleted if m is not prior)
            self._change(old, live, deleted, method, replaced)
        return method

    def _change(
        self,
        old: _Table,
        live: tuple[Method, ...],
        deleted: tuple[Method, ...],
        changed: Method,
        closed: tuple[Method, ...],
    ) -> None:
        """Publish ``live`` and ``deleted`` as the table of world ``latest() + 1``: ``changed``
        was added or deleted (only what it takes can dispatch differently), ``closed`` end at the
        current world. World lock held, after ``undo_in_flight()``; an interrupt before the
        publication is undone by the next definition (docs/design.md, "computed aside")."""
        latest = _world.latest()
        dispatch = {}
        for tt, entries in old.dispatch.items():
            e = entries[0]
            if (
                e.max_world >= _world.WORLD_MAX
                and changed.applies_weak(tt)
                and self._select_or_none(tt, live) is not e.mi.method
            ):
                entries = (_Dispatch(e.min_world, latest, e.mi), *entries[1:])
            dispatch[tt] = entries
        ended, done = self._edges.ending(
            changed.applies_weak, lambda tt: self._select_or_none(tt, live), latest
        )
        undo = partial(_undo, self, old, [(m, m.max_world) for m in (*closed, *ended)])
        new_world = _world.begin_definition(undo)
        tell_listeners(ended, False)
        for m in (*closed, *ended):
            m.max_world = latest  # closed at a world no reader is past yet: nothing changes
        self._table = _Table(live, new_world, dispatch, deleted)
        _world.publish_world(new_world)  # the change is whole from here
        self._edges.drop(done)  # an ended edge stays closed on other tables until dropped
        tell_listeners(ended, True)

    def delete_method(self, method: Method | tuple[Any, ...]) -> Method:
        """Remove a method, as Julia's ``Base.delete_method``; raises the world.

        ``method`` is one of :meth:`methods` or its signature (as ``m.signature`` shows it).
        From the new world on, dispatch is as if it had never been defined, and code compiled
        against it is invalidated; an older world still sees it. A signature with no live
        method is a ``ValueError`` listing the methods. Returns the deleted method.
        """
        if not isinstance(method, (Method, tuple)):
            raise TypeError(
                f"delete_method takes a method of {self.name} (from {self.name}.methods()) or "
                f"its signature (a tuple of argument types, as m.signature shows it), got "
                f"{method!r}"
            )
        if isinstance(method, tuple):
            method = tuple(map(argument_type, method))  # Annotated[Struct, dtype], ...
            check_tt(self.name, method, "signature")
        with _world.lock():
            _world.undo_in_flight()  # an interrupted definition (perhaps of this table) first
            old = self._table
            target = self._live_method(old, method)
            live = tuple(m for m in old.live if m is not target)
            self._change(old, live, (*old.deleted, target), target, (target,))
        return target

    def _live_method(self, table: _Table, method: Method | tuple[type, ...]) -> Method:
        """The live method ``method`` names (itself, or the one of that signature)."""
        if isinstance(method, Method):
            if method.gf is not self:
                raise ValueError(
                    f"cannot delete {method!r} from {self.name}: it is a method of "
                    f"{method.gf.name}; delete it with {method.gf.name}.delete_method"
                )
            if any(m is method for m in table.live):
                return method
            sig, why = method.signature, " (that method was replaced or deleted already)"
        else:
            sig, why = method, ""
            for m in table.live:
                if m.signature == sig:
                    return m
        names = namer([*sig, *(t for m in table.live for t in m.signature)])
        listing = "; ".join(signature(self.name, m.signature, names) for m in table.live)
        raise ValueError(
            f"{self.name} has no method {signature(self.name, sig, names)} to delete{why}; its "
            f"methods are: {listing or 'none'}. Pass one of {self.name}.methods() or its "
            "signature as m.signature shows it"
        )

    def methods(self, world: int | None = None) -> list[Method]:
        """The methods visible in ``world`` (default: the task's world)."""
        w = _world.current() if world is None else as_world(self.name, world)
        return list(self._table.visible(w))

    def _select_or_none(self, tt: tuple[type, ...], visible: Sequence[Method]) -> Method | None:
        try:
            return self._select(tt, visible, 0)
        except MethodError:
            return None

    def _select(self, tt: tuple[type, ...], visible: Sequence[Method], world: int) -> Method:
        """The most specific of the ``visible`` methods that take ``tt``. A weak type takes its
        default first (``Weak[int]`` as ``np.int64``), else the concrete type of its family that a
        method declares there."""
        if has_weak(tt):
            d = weak_defaults(tt)
            cands = [m for m in visible if m.applies(d)]
            if not cands:
                cands = [m for m in visible if m.applies_weak(tt)]
        else:
            cands = [m for m in visible if m.applies(tt)]
        best = [
            m
            for m in cands
            if all(o is m or more_specific(m.signature, o.signature) for o in cands)
        ]
        if len(best) == 1:
            return best[0]
        if not cands:
            names = namer([*tt, *(t for m in visible for t in m.signature)])
            listing = "; ".join(signature(self.name, m.signature, names) for m in visible)
            raise MethodError(
                f"no method of {self.name} matches {signature(self.name, tt, names)} in world "
                f"{world}; methods visible there: {listing or 'none'}{weak_hint(tt)}."
                f"{declared_hint(self.name, tt, [m.signature for m in visible], names)} Define "
                f"a method of {self.name} for these types (a def {self.name} with the same "
                f"decorator, its parameters annotated {annotations_for(tt)} or abstract types "
                "above them), or convert the arguments to types a visible method takes"
            )
        minimal = [
            m
            for m in cands
            if not any(o is not m and more_specific(o.signature, m.signature) for o in cands)
        ]
        names = namer([*tt, *(t for m in minimal for t in m.signature)])
        listing = "; ".join(signature(self.name, m.signature, names) for m in minimal)
        raise AmbiguityError(
            f"{signature(self.name, tt, names)} is ambiguous in world {world}: candidates "
            f"{listing}; define a method more specific than all of them"
            + ("" if has_weak(tt) else f" (one annotated {annotations_for(tt)} is)")
        )

    def methodinstance(self, tt: tuple[type, ...], world: int | None = None) -> MethodInstance:
        """The most specific method visible in ``world`` for ``tt``, specialized to ``tt``
        (with each weak type in it replaced by the concrete type it takes)."""
        if world is None:
            w = _world.task_cell()[0]
            if w is None:
                w = _world.current()
        elif world.__class__ is int:
            w = world
        else:
            w = as_world(self.name, world)
        try:
            for e in self._table.dispatch.get(tt, ()):
                if e.min_world <= w <= e.max_world:
                    return e.mi
        except TypeError:  # unhashable: not a tuple of types (said below)
            pass
        return self._methodinstance_miss(tt, w)

    def _methodinstance_miss(self, tt: tuple[type, ...], w: int) -> MethodInstance:
        check_tt(self.name, tt)
        # Locked: a definition between reading the table and storing the range computed from
        # it would fail to end that range. No loop in the lock's body (see add_method).
        with _world.lock():
            table = self._table
            entries = table.dispatch.get(tt, ())
            hit = next((e.mi for e in entries if e.min_world <= w <= e.max_world), None)
            if hit is not None:  # stored by another thread meanwhile
                return hit
            m = self._select(tt, table.visible(w), w)
            mi = m.specialize(m.resolve(tt) if has_weak(tt) else tt)
            if w <= _world.latest():
                lo, hi = table.dispatch_range(tt, w)
                kept = sorted((_Dispatch(lo, hi, mi), *entries), key=_min_world, reverse=True)
                table.dispatch[tt] = tuple(kept[:DISPATCH_DEPTH])  # one store
            return mi

    def add_backedge(self, tt: tuple[type, ...], method: Method, edge: Backedge) -> None:
        """End ``edge``'s validity (set ``edge.max_world = w - 1``) when a definition in
        world ``w`` changes the dispatch of ``tt`` away from ``method`` (a replacement, a
        more specific method, an ambiguity). The edge is held weakly (:meth:`Backedges.add`);
        :func:`register_backedges` adds one edge on several dispatches."""
        check_tt(self.name, tt)
        if not isinstance(method, Method):
            raise TypeError(f"method (of {self.name}) is a Method, got {method!r}")
        check_edge(edge)
        with _world.lock():
            self._edges.add(edge, tt, method)

    def backedges(self) -> list[tuple[tuple[type, ...], Method, Any]]:
        """The registered backedges that are still open: (tt, expected method, edge)."""
        return self._edges.open()

    def dispatches_to(self, tt: tuple[type, ...], world: int) -> Method | None:
        """The method ``tt`` dispatches to in ``world``, or None where that is an error."""
        try:
            return self.methodinstance(tt, as_world(self.name, world)).method
        except MethodError:
            return None
