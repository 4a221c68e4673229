"""World age: the global definition counter and the world each task runs in.

Julia keeps a world counter that every definition raises, and each task runs in a fixed
world. Here ``latest()`` is the counter and ``current()`` the calling task's world: the
latest, unless the task is pinned by ``invoke_in_world``.

The hot paths read the task's world by value with one context-variable read and one
subscript of the task's cell, ``task_cell()`` (the variable is set at import and by a slow
path where unset, so that CPython's cache of its value serves the read):

- an unpinned task's cell is :data:`hot_cell`, whose two slots hold the latest world, or
  None while cached lookups must bypass their caches (a compile hook is active or
  precompile-output mode is on: process-wide switches);
- a pinned task's cell is its pin, ``[None, world or None, world]``: slot 0 (what a launch's
  front entry compares) is always None, so its launches take the slow path; slot 1 (what a
  cached lookup compares) is its world, so its lookups hit like an unpinned task's, or None
  while lookups bypass their caches (and until the first slow path in it sets it, under
  :func:`lock`). Nothing a pin does touches what other tasks read, so a pin or a miss in
  one thread (every miss runs its lookup pinned) leaves every other task's path as it was.

State is published, not patched: the process-wide state is one immutable snapshot,
:data:`snapshot`, replaced whole under :func:`lock` (an ordinary re-entrant lock). The cells
are derived from it: ``hot_cell`` is cleared before each publication and set after, and the
pins' lookup slots are cleared before any publication that bypasses (only the slow path sets
one again, under the lock), so an interrupt between two stores leaves None, which only costs
a slow path (which sets it again: :func:`refresh`).

A pin lives in the context: it is in force in every context that holds it, for as long as
one can run code. ``invoke_in_world`` runs its call in a copy of the caller's context with a
new pin set; a task, a callback or a ``copy_context()`` made inside copies that context, and
so keeps the pin's world for its whole life, also after the call returned and the world rose
(as a Julia task keeps the world it was created in). A plain generator runs in the context of
whoever resumes it; a new thread starts unpinned. No frame of the library holds a pin in a
local, so a stored traceback or exception keeps none; when the last context holding a pin is
gone, the pin dies, its weak reference's callback drops it from :data:`_pins` (lock-free), and
the next slow path or definition releases the code kept for its world (:func:`settle`).

A with-block (a compile hook, a precompile block) is active while the object its with
statement holds is alive and has not ended: :data:`snapshot` holds weak references to the blocks,
and :func:`hooks` and :func:`bypassing` see the live ones only. A block whose ``__exit__`` never
ran (an interrupt at its first instruction, CPython 3.13 skipping it) ends when its with
statement is gone; the cells stay None until the next slow path republishes the state
without it (:func:`refresh`), which brings the hot path back by itself.
"""

from __future__ import annotations

import contextvars
import operator
import os
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


# -- the published state --------------------------------------------------------------------


class _State(NamedTuple):
    """The process-wide world state: replaced whole, never changed."""

    #: the global counter
    latest: int
    #: weak references to the with-blocks that have begun and not ended, in order of entry
    #: (a dead one counts for nothing: its with statement is gone)
    blocks: tuple[weakref.ref[Block], ...]
    #: precompile-output mode as the environment variable sets it
    precompile_env: bool
    #: the mode as last switched outright (``precompile_output(flag)``), or None
    switch: bool | None
    #: this process is a fork of one that had imported specializer
    forked: bool
    #: how to undo a definition in flight (recorded before its first change, cleared by the
    #: store that publishes its world), or None
    in_flight: Callable[[], object] | None


snapshot = _State(
    latest=1, blocks=(), precompile_env=False, switch=None, forked=False, in_flight=None
)
#: An unpinned task's cell: the latest world in both slots (a launch's front entry reads slot
#: 0, a cached lookup slot 1), or None while cached lookups bypass their caches.
hot_cell: list[int | None] = [1, 1]
_lock = new_lock()


class _Pin(list):  # type: ignore[type-arg]
    """A pinned task's cell, ``[None, world or None, world]``: ``[0]`` is None (a launch's
    front entry misses), ``[1]`` what its cached lookups compare (None until a slow path sets
    it, and while lookups bypass their caches), ``[2]`` its world. Made by list's own
    constructor (no Python frame that an interrupt could keep in a traceback with the pin in
    it); in force while a context holds it."""

    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__  # type: ignore[assignment]  # by identity: a registry key


_task: contextvars.ContextVar[list[Any]] = contextvars.ContextVar(
    "specializer_task_world", default=hot_cell
)
#: The hot paths' read of the calling task's cell: ``task_cell()[0]`` is its world for a
#: launch's front entry, ``task_cell()[1]`` for a cached lookup, or None where the slow path
#: must decide (a hook, precompile mode; for ``[0]``, a pin).
task_cell = _task.get
# Set here and by the slow path where unset, with the default's value: CPython caches a context
# variable's value only where it is set, which makes the hot paths' read about 90 instructions
# cheaper (3.11). As decimal's context, it is set lazily in the contexts that use it.
_task.set(hot_cell)

#: The pins: ``weak reference -> its world``. A pin's entry counts while the pin lives (a
#: dead one is skipped by every reader); the reference's callback, ``_dead_pins.append`` (C
#: code: no Python frame an interrupt could stop, no lock, safe from the collector in any
#: thread and on free-threaded builds), queues it, and :func:`settle` drops the entry.
_pins: dict[weakref.ref[_Pin], int] = {}
_dead_pins: list[weakref.ref[_Pin]] = []
#: Set when a dead pin's entry is dropped, until :func:`settle` releases what it kept.
_unreleased: list[bool] = [False]
#: What releases code kept for pins that died (the compiled-code cache registers its sweep,
#: which takes :func:`lock` when it has something to release); run by :func:`settle`.
on_unpinned: list[Callable[[], object]] = []


def lock() -> Any:
    """The lock that serializes changes of world state: ``with lock():``. Re-entrant."""
    return _lock()


def _publish(state: _State) -> None:
    """Publish a new snapshot (without the blocks that died). Call with :func:`lock` held.
    hot_cell is cleared before and set after, and a bypassing state clears every pin's lookup
    slot before it is published: None in between is always safe (a slow path)."""
    global snapshot
    hot_cell[0] = hot_cell[1] = None
    state = state._replace(blocks=_live(state.blocks))
    bypass = _bypassing(state)
    if bypass:
        _clear_pins()
    snapshot = state
    hot_cell[0] = hot_cell[1] = None if bypass else snapshot.latest


def _clear_pins() -> None:
    # Each live pin's lookup slot to None, in C calls only: no frame holds a pin, so a
    # traceback of an interrupt here keeps none. (A pin made meanwhile starts with None.)
    deque(
        map(
            operator.setitem,
            filter(None, map(weakref.ref.__call__, list(_pins))),
            repeat(1),
            repeat(None),
        ),
        maxlen=0,
    )


def refresh() -> None:
    """Set the calling task's cell again if a publication was interrupted between its
    stores, a block died without its ``__exit__``, or the task's pin has no lookup world yet
    (the slow path calls this: None where nothing needs it): the state is published again,
    without the dead blocks, and the pin's lookup slot set to its world."""
    if (hot_cell[0] is None or hot_cell[1] is None) and not _bypassing(snapshot):
        with _lock():
            if not _bypassing(snapshot):
                _publish(snapshot)
    # The pin is never bound to a name: a traceback of an interrupt here would keep it.
    if _task.get()[1] is None and _task.get().__class__ is _Pin and not _bypassing(snapshot):
        with _lock():  # a publication that bypasses clears it under this lock
            if not _bypassing(snapshot):
                _task.get()[1] = _task.get()[2]


def settle() -> None:
    """What the slow path does first: :func:`refresh`, and, if a pin died since, release the
    code kept for it (:data:`on_unpinned`)."""
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


# -- the counter and pins ------------------------------------------------------------------


def latest() -> int:
    """The global world counter: the newest world."""
    return snapshot.latest


def current() -> int:
    """The calling task's world: the latest one unless the task is pinned."""
    # The cell is never bound to a name: a traceback of an interrupt here would keep the pin.
    if _task.get().__class__ is _Pin:
        return _task.get()[2]  # type: ignore[no-any-return]
    return snapshot.latest


def begin_definition(undo: Callable[[], object]) -> int:
    """Record a definition about to change state, with what undoes its changes; returns its
    world. Call with :func:`lock` held, after :func:`undo_in_flight` (before reading the state
    the definition is computed from) and before the first change; :func:`publish_world` ends
    it. A definition an interrupt stopped before that is undone by whoever raises the world
    next, so it happened whole or not at all."""
    global snapshot
    undo_in_flight()
    snapshot = snapshot._replace(in_flight=undo)  # nothing a reader looks at
    return snapshot.latest + 1


def undo_in_flight() -> None:
    """Undo a definition an interrupt left in flight (see :func:`begin_definition`). Call with
    :func:`lock` held, first thing in whatever raises the world."""
    global snapshot
    undo = snapshot.in_flight
    if undo is not None:
        undo()  # idempotent stores: an interrupt here leaves the record for the next raiser
        snapshot = snapshot._replace(in_flight=None)


def publish_world(new: int) -> None:
    """Make ``new`` the latest world: the store that completes a definition (and clears its
    record). Call with :func:`lock` held, after every change the definition makes."""
    _publish(snapshot._replace(latest=new, in_flight=None))


def bump() -> int:
    """Raise the world counter for a change the library cannot see; returns the new world."""
    with _lock():
        undo_in_flight()
        new = snapshot.latest + 1
        publish_world(new)
    return new


def pinned_worlds() -> frozenset[int]:
    """The worlds of the pins in force (held by a live context: a call inside
    ``invoke_in_world``, a task or context made inside one)."""
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
    if world == latest:  # the very object unpinned entries are stored under: a pinned
        return latest  # call's entry for it is then hit by identity, not only by value
    return int(world)


def invoke_in_world(world: int, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` pinned to ``world`` (an existing, possibly older, world).

    ``fn`` runs in a copy of the calling context in which the pin is set (so context
    variables it sets stay in that copy); what copies that context inside the call (a task,
    a callback, ``contextvars.copy_context()``) keeps the pin for its whole life."""
    # Neither the context nor the pin is ever bound to a name here: a traceback keeps this
    # frame's locals, and a stored exception must keep no pin.
    return contextvars.copy_context().run(_pinned, _check_world(world), fn, args, kwargs)


def _pinned(world: int, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    # Set, then registered before fn runs (code of its world is kept from there on): an
    # interrupt between the two ends the call before anything could copy this context, and
    # the pin dies with it. The pin dies with the last context that holds it.
    _task.set(_Pin((None, None, world)))
    if _dead_pins:
        _forget_dead_pins()  # the registry holds the live pins and few dead ones
    _pins[weakref.ref(_task.get(), _dead_pins.append)] = world  # type: ignore[arg-type]
    return fn(*args, **kwargs)


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    if _task.get() is hot_cell:
        return fn(*args, **kwargs)
    return contextvars.copy_context().run(_unpinned, fn, args, kwargs)


def _unpinned(fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    _task.set(hot_cell)
    return fn(*args, **kwargs)


# -- with-blocks of world state: compile hooks and precompile blocks ------------------------


class Block:
    """A with-block of process-wide world state: a compile hook (``kind == "hook"``, whose
    ``value`` is the callback) or a precompile block (``"precompile"``, whose ``value`` is
    the mode inside it). Active from its ``__enter__`` until its ``__exit__`` or until the
    object dies, whichever comes first: the state holds it weakly, so a block whose with
    statement is gone without ``__exit__`` (an interrupt at its first instruction) is over.
    Blocks in several threads each count, nested or overlapping in any order. One object is
    one block; whatever enters it without a with statement must keep it alive."""

    kind: str = "block"

    def __init__(self, value: Any) -> None:
        self.value = value
        self._begun = False

    def active(self) -> bool:
        """Whether the block has begun and not ended."""
        return any(r() is self for r in snapshot.blocks)

    def _begin(self, **changes: Any) -> None:
        """Make the block active (with ``changes`` to the state in the same publication):
        what its ``__enter__`` does. An exception raised after the block was published (an
        interrupt as the lock is released) ends it again, since its with statement will not
        call ``__exit__``."""
        began = False  # this call began it: only then does a failure end it
        try:
            with _lock():
                if self._begun:
                    raise RuntimeError(f"{self!r} has begun already: each with-block needs its own")
                self._begun = began = True
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


def _live(refs: tuple[weakref.ref[Block], ...]) -> tuple[weakref.ref[Block], ...]:
    """``refs`` without the blocks that died."""
    if all(r() is not None for r in refs):
        return refs
    return tuple(r for r in refs if r() is not None)


def _blocks(state: _State) -> list[Block]:
    """The live blocks of ``state``, in order of entry."""
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
    """Whether cached lookups must neither hit nor store: a compile hook is active or
    precompile-output mode is on."""
    return _bypassing(snapshot)


def _bypassing(state: _State) -> bool:
    return _precompiling(state) or any(b.kind == "hook" for b in _blocks(state))


def switch_precompile(on: bool | None) -> bool | None:
    """Switch precompile-output mode outright (None: as the environment says); returns the
    previous switch, for a block to restore."""
    with _lock():
        previous = snapshot.switch
        _publish(snapshot._replace(switch=on))
    return previous


def set_environment_precompile(on: bool) -> None:
    """The mode the environment variable sets (where no switch or block is in effect)."""
    with _lock():
        _publish(snapshot._replace(precompile_env=bool(on)))


# -- fork -------------------------------------------------------------------------------


def forked() -> bool:
    """Whether this process is a fork (``os.fork``, multiprocessing's 'fork' start method) of
    one that had imported specializer."""
    return snapshot.forked


#: what a fork means for the child, where the back-end did not say (Launcher.fork_consequence)
FORK_CONSEQUENCE = "device contexts and queues do not survive fork, so a launch here would hang"
#: what a fork means for each back-end that declared it (:func:`declare_fork`), by the name
#: :func:`check_fork` is given; None: fork-safe. Written when a launcher is made
_fork_rules: dict[str, str | None] = {}


def declare_fork(what: str, consequence: str | None) -> None:
    """Declare what a fork means for ``what`` (the name :func:`check_fork` is given, e.g.
    ``"specializer's opencl back-end"``): ``consequence`` is said in its fork error, in place
    of :data:`FORK_CONSEQUENCE`; None declares it fork-safe, and :func:`check_fork` lets a
    fork use it. A back-end declares it with its ``Launcher``'s ``fork_consequence``."""
    _fork_rules[what] = consequence


def check_fork(what: str) -> None:
    """Raise ``RuntimeError`` if this process is a fork; ``what`` names what cannot be used in
    it, e.g. ``"specializer's opencl back-end"``. A back-end that used a device before the
    fork calls this before it touches a context, a queue or a stream. The error says what
    the fork means for ``what`` (as :func:`declare_fork` declared it; by default
    :data:`FORK_CONSEQUENCE`); nothing is raised for one declared fork-safe."""
    if snapshot.forked:
        consequence = _fork_rules.get(what, FORK_CONSEQUENCE)
        if consequence is None:
            return
        raise RuntimeError(
            f"this process was forked after {what} was used; {consequence}: start worker "
            "processes with multiprocessing's 'spawn' start method "
            "(multiprocessing.get_context('spawn'), or "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')))"
        )


def _after_fork_in_child() -> None:
    # Every lock fresh (a thread of the parent may have held one), then a world of the
    # child's own: nothing cached in the parent (a lookup's result, a front entry) is reused
    # before a back-end has checked that its devices may be used here.
    renew_all()
    # The pins stay registered (the forking thread may run in one; the others' die with
    # their contexts), each without a lookup world until a slow path here sets it.
    _clear_pins()
    undo_in_flight()  # a definition another thread of the parent was making
    _publish(snapshot._replace(latest=snapshot.latest + 1, forked=True))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
