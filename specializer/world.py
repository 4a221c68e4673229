"""World age: the definition counter (``latest()``) and each task's world (``current()``).

:data:`snapshot` is immutable, replaced whole under :func:`lock`; the tasks' cells derive from it
and are None between two stores (a slow path, :func:`refresh`). No library frame holds a pin or
its token in a local (a stored traceback must keep none); with-blocks are held weakly, so one
whose ``__exit__`` never ran ends with its with statement. See docs/design.md."""

from __future__ import annotations

import contextvars
import operator
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

from .locks import new_lock, renew_all

__all__ = [
    "WORLD_MAX",
    "Block",
    "bump",
    "check_fork",
    "current",
    "declare_fork",
    "forked",
    "invoke_in_world",
    "invokelatest",
    "latest",
    "pinned_worlds",
]

R = TypeVar("R")

#: The upper end of an open validity range ("valid until something changes").
WORLD_MAX: int = 2**62


class _State(NamedTuple):
    """The process-wide world state: replaced whole, never changed."""

    latest: int
    #: weak references to the with-blocks begun and not ended, in order of entry
    blocks: tuple[weakref.ref[Block], ...]
    precompile_env: bool  # precompile-output mode as the environment variable sets it
    switch: bool | None  # the mode as last switched outright (precompile_output(flag)), or None
    forked: bool  # a fork of a process that had imported specializer
    #: how to undo a definition in flight (cleared when its world is published), or None
    in_flight: Callable[[], object] | None


snapshot = _State(
    latest=1, blocks=(), precompile_env=False, switch=None, forked=False, in_flight=None
)
#: An unpinned task's cell: the latest world in both slots (a launch cell's entry reads slot
#: 0, a cached lookup slot 1), or None while cached lookups bypass their caches.
hot_cell: list[int | None] = [1, 1]
_lock = new_lock()


# A pinned task's cell (a pin) is an exact list, ``[None, None, world]``: ``[0]`` None (its
# launches take the slow path), ``[1]`` its lookups' world (None until a slow path sets it, and
# while lookups bypass), ``[2]`` its world. Exact: CPython specializes subscripts of exact lists
# only, so a pinned hit costs what an unpinned one does.


class _PinToken(list):  # type: ignore[type-arg]
    """``[pin]``: what keeps a pin in force. Set beside the pin in the same contexts (a list
    takes no weak reference; this does), held weakly by the registry, through which it reaches
    the pin to clear its lookup world. Made by list's own constructor: no frame an interrupt
    could keep in a traceback with it in."""

    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__  # type: ignore[assignment]  # by identity: a registry key


_task: contextvars.ContextVar[list[Any]] = contextvars.ContextVar(
    "specializer_task_world", default=hot_cell
)
#: The calling task's cell: ``hot_cell``, or a pin (tell them apart by ``is hot_cell``).
task_cell = _task.get
#: The pin's token, in the contexts ``_task`` holds the pin in (None elsewhere).
_token: contextvars.ContextVar[_PinToken | None] = contextvars.ContextVar(
    "specializer_pin_token", default=None
)
# Set here and by the slow path where unset: CPython caches a context variable's value only
# where it is set, which makes the hot paths' read about 90 instructions cheaper (3.11).
_task.set(hot_cell)

#: The pins: ``weak reference to its token -> its world`` (a dead one is skipped by every
#: reader). The callback, ``_dead_pins.append``, is C code (no frame an interrupt could stop,
#: no lock: safe from the collector in any thread); :func:`settle` drops the entry.
_pins: dict[weakref.ref[_PinToken], int] = {}
_dead_pins: list[weakref.ref[_PinToken]] = []
#: Set when a dead pin's entry is dropped, until :func:`settle` releases what it kept.
_unreleased: list[bool] = [False]
#: What releases code kept for pins that died (the compiled-code cache's sweep).
on_unpinned: list[Callable[[], object]] = []


def lock() -> Any:
    """The lock that serializes changes of world state: ``with lock():``. Re-entrant."""
    return _lock()


def _publish(state: _State) -> None:
    """Publish ``state`` without its dead blocks (lock held); the cells are None meanwhile."""
    global snapshot
    hot_cell[0] = hot_cell[1] = None
    state = state._replace(blocks=tuple(r for r in state.blocks if r() is not None))
    bypass = _bypassing(state)
    if bypass:
        _clear_pins()
    snapshot = state
    hot_cell[0] = hot_cell[1] = None if bypass else snapshot.latest


_first = operator.itemgetter(0)  # a token's pin


def _clear_pins() -> None:
    # Each live pin's lookup slot to None, in C calls only: no frame holds a token, so a
    # traceback of an interrupt here keeps none.
    deque(
        map(
            operator.setitem,
            map(_first, filter(None, map(weakref.ref.__call__, list(_pins)))),
            repeat(1),
            repeat(None),
        ),
        maxlen=0,
    )


def refresh() -> None:
    """Set the task's cell again after an interrupted publication, a dead block or a new pin."""
    if (hot_cell[0] is None or hot_cell[1] is None) and not _bypassing(snapshot):
        with _lock():
            if not _bypassing(snapshot):
                _publish(snapshot)
    cell = _task.get()  # (a pin's cell keeps nothing in force: its token does)
    if cell[1] is None and cell is not hot_cell and not _bypassing(snapshot):
        with _lock():  # a publication that bypasses clears it under this lock
            if not _bypassing(snapshot):
                cell[1] = cell[2]


def settle() -> None:
    """The slow path's first step: :func:`refresh`, and release code kept for dead pins."""
    if _task.get(None) is None:  # unset in this context: set it (see above)
        _task.set(hot_cell)
    refresh()
    if _dead_pins or _unreleased[0]:
        _forget_dead_pins()
        _unreleased[0] = False  # before the release: a pin forgotten during it sets it again
        try:
            for release in on_unpinned:
                release()
        except BaseException:  # an interrupt: the release is still due
            _unreleased[0] = True
            raise


def _forget_dead_pins() -> None:
    while _dead_pins:
        try:
            ref = _dead_pins.pop()  # each pop is atomic: another thread may take the last
        except IndexError:
            return
        _pins.pop(ref, None)
        _unreleased[0] = True


def latest() -> int:
    """The global world counter: the newest world."""
    return snapshot.latest


def current() -> int:
    """The calling task's world: the latest one unless the task is pinned."""
    cell = _task.get()
    return snapshot.latest if cell is hot_cell else cell[2]


def begin_definition(undo: Callable[[], object]) -> int:
    """Record a definition about to change state, with its undo; returns its world. Lock held,
    after :func:`undo_in_flight`, before the first change; :func:`publish_world` ends it. One an
    interrupt stopped before that is undone by whoever raises the world next: all or nothing."""
    global snapshot
    undo_in_flight()
    snapshot = snapshot._replace(in_flight=undo)  # nothing a reader looks at
    return snapshot.latest + 1


def undo_in_flight() -> None:
    """Undo a definition an interrupt left in flight: first thing (lock held) in a raiser."""
    global snapshot
    undo = snapshot.in_flight
    if undo is not None:
        undo()  # idempotent stores: an interrupt here leaves the record for the next raiser
        snapshot = snapshot._replace(in_flight=None)


def publish_world(new: int) -> None:
    """Make ``new`` the latest world: the store that completes a definition (lock held)."""
    _publish(snapshot._replace(latest=new, in_flight=None))


def bump() -> int:
    """Raise the world counter for a change the library cannot see; returns the new world."""
    with _lock():
        undo_in_flight()
        new = snapshot.latest + 1
        publish_world(new)
    return new


def pinned_worlds() -> frozenset[int]:
    """The worlds of the pins in force (held by a live context)."""
    _forget_dead_pins()
    worlds = set()
    for r, w in _pins.copy().items():
        if r() is not None:
            worlds.add(w)
        else:  # queued but not yet dropped, or lost from the queue by an interrupt
            _pins.pop(r, None)
    return frozenset(worlds)


def pins() -> int:
    """How many pins are in force."""
    return sum(r() is not None for r in _pins.copy())


def _check_world(world: object) -> int:
    if isinstance(world, bool) or not isinstance(world, int):
        raise TypeError(f"world: a world is an int, got {type(world).__name__}: {world!r}")
    latest = snapshot.latest  # one read: a definition may publish meanwhile
    if world < 1:
        raise ValueError(f"world {world} does not exist: worlds start at 1")
    if world > latest:
        raise ValueError(
            f"world {world} is in the future: the latest world is {latest} "
            "(see specializer.world.latest())"
        )
    # latest is the object unpinned entries are stored under: they hit by identity
    return latest if world == latest else int(world)


def invoke_in_world(world: int, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` pinned to ``world`` (an existing, possibly older, world).

    ``fn`` runs in a copy of the calling context with the pin set (context variables it sets
    stay there); a task, callback or ``copy_context()`` made inside keeps the pin for good."""
    # Neither the context nor the pin is bound to a name: a stored exception must keep no pin.
    return contextvars.copy_context().run(_pinned, _check_world(world), fn, args, kwargs)


def _pinned(world: int, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    # Set, then registered before fn runs: an interrupt between the two ends the call before
    # anything could copy this context, and the pin dies with it.
    _task.set([None, None, world])
    _token.set(_PinToken((_task.get(),)))
    if _dead_pins:
        _forget_dead_pins()  # the registry holds the live pins and few dead ones
    _pins[weakref.ref(_token.get(), _dead_pins.append)] = world  # type: ignore[arg-type]
    return fn(*args, **kwargs)


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    if _task.get() is hot_cell:
        return fn(*args, **kwargs)
    return contextvars.copy_context().run(_unpinned, fn, args, kwargs)


def _unpinned(fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    _task.set(hot_cell)
    _token.set(None)  # a context made in here holds no pin
    return fn(*args, **kwargs)


class Block:
    """A with-block of process-wide world state: a compile hook (``kind == "hook"``, ``value``
    the callback) or a precompile block (``"precompile"``, ``value`` the mode inside it).
    Active from its ``__enter__`` until its ``__exit__`` or until the object dies (the state
    holds it weakly). One object is one block; whatever enters it without a with statement
    must keep it alive."""

    kind: str = "block"

    def __init__(self, value: Any) -> None:
        self.value = value
        self._begun = False
        self._thread: int | None = None  # the thread that entered it (a fork keeps its own)

    def active(self) -> bool:
        """Whether the block has begun and not ended."""
        return any(r() is self for r in snapshot.blocks)

    def _begin(self, **changes: Any) -> None:
        """Make the block active, with ``changes`` in the same publication; an exception after
        that (an interrupt as the lock is released) ends it, as no ``__exit__`` will."""
        began = False  # this call began it: only then does a failure end it
        try:
            with _lock():
                if self._begun:
                    raise RuntimeError(f"{self!r} has begun already: each with-block needs its own")
                self._begun = began = True
                self._thread = threading.get_ident()
                _publish(snapshot._replace(blocks=(*snapshot.blocks, weakref.ref(self)), **changes))
        except BaseException:
            if began:
                self._end()
            raise

    def _end(self) -> None:
        """End the block (nothing if it is not active)."""
        with _lock():
            _publish(snapshot._replace(blocks=tuple(r for r in snapshot.blocks if r() is not self)))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end()

    def __repr__(self) -> str:
        state = "active" if self.active() else "inactive"
        return f"<{type(self).__name__} {self.kind} {state}>"


def _blocks(state: _State) -> list[Block]:
    return [b for b in (r() for r in state.blocks) if b is not None]


def hooks() -> list[Any]:
    """The callbacks of the active compile hooks, in order of entry."""
    return [b.value for b in _blocks(snapshot) if b.kind == "hook"]


def _precompiling(state: _State) -> bool:
    for b in reversed(_blocks(state)):
        if b.kind == "precompile":
            return bool(b.value)
    return state.precompile_env if state.switch is None else state.switch


def precompiling() -> bool:
    """Whether precompile-output mode is on: the mode of the innermost active precompile
    block, else as last switched outright, else as the environment variable sets it."""
    return _precompiling(snapshot)


def bypassing() -> bool:
    """Whether cached lookups must neither hit nor store (a hook active, or precompile mode)."""
    return _bypassing(snapshot)


def _bypassing(state: _State) -> bool:
    return _precompiling(state) or any(b.kind == "hook" for b in _blocks(state))


def switch_precompile(on: bool | None) -> bool | None:
    """Switch precompile mode outright (None: as the environment says); returns the old switch."""
    with _lock():
        previous = snapshot.switch
        _publish(snapshot._replace(switch=on))
    return previous


def set_environment_precompile(on: bool) -> None:
    """The mode the environment variable sets (where no switch or block is in effect)."""
    with _lock():
        _publish(snapshot._replace(precompile_env=bool(on)))


def forked() -> bool:
    """Whether this process is a fork (``os.fork``, multiprocessing's 'fork' start method) of
    one that had imported specializer."""
    return snapshot.forked


#: what a fork means for the child, where the back-end did not say (Launcher.fork_consequence)
FORK_CONSEQUENCE = "device contexts and queues do not survive fork, so a launch here would hang"
#: what a fork means for each back-end that declared it (None: fork-safe)
_fork_rules: dict[str, str | None] = {}


def declare_fork(what: str, consequence: str | None) -> None:
    """Declare what a fork means for ``what`` (the name :func:`check_fork` is given):
    ``consequence`` is said in its fork error in place of :data:`FORK_CONSEQUENCE`; None declares
    it fork-safe. A back-end declares it with its ``Launcher``'s ``fork_consequence``."""
    _fork_rules[what] = consequence


def check_fork(what: str) -> None:
    """Raise ``RuntimeError`` if this process is a fork; ``what`` names what cannot be used in
    it, e.g. ``"specializer's opencl back-end"``. A back-end that used a device before the fork
    calls this before it touches a context, a queue or a stream. The error says what the fork
    means for ``what`` (:func:`declare_fork`); nothing is raised for one declared fork-safe."""
    consequence = _fork_rules.get(what, FORK_CONSEQUENCE)
    if snapshot.forked and consequence is not None:
        raise RuntimeError(
            f"this process was forked after {what} was used; {consequence}: start worker "
            "processes with multiprocessing's 'spawn' start method "
            "(multiprocessing.get_context('spawn'), or "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')))"
        )


def _after_fork_in_child() -> None:
    # Every lock fresh (a parent's thread may have held one), then a world of the child's own:
    # nothing cached is reused before a back-end has checked its devices may be used here. The
    # pins stay (the forking thread may run in one), without a lookup world until a slow path.
    # Only the forking thread's blocks stay: no other thread is here to end its own, or to be
    # called back by its hook (the forking thread keeps its ident in the child).
    renew_all()
    _clear_pins()
    undo_in_flight()  # a definition another thread of the parent was making
    me = threading.get_ident()
    mine = tuple(r for r in snapshot.blocks if getattr(r(), "_thread", None) == me)
    _publish(snapshot._replace(latest=snapshot.latest + 1, blocks=mine, forked=True))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
