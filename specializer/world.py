"""World age: the global definition counter and the world each task runs in.

Julia keeps a world counter that every definition raises, and each task runs in a fixed
world. Here ``latest()`` is the counter and ``current()`` the calling task's world: the
latest, unless the task is pinned by ``invoke_in_world``.

The hot path (every cached lookup, every launch) reads the task's world by value with one
context-variable read and one subscript, ``task_cell()[0]``:

- an unpinned task's cell is :data:`WORLD`, which holds the latest world, or None while
  cached lookups must bypass their caches (a compile hook is active or precompile-output mode
  is on: process-wide switches);
- a pinned task's cell is its pin, which always holds None, so its lookups take the slow
  path, which reads the pin's world (:func:`current`). Nothing a pin does touches what
  unpinned tasks read, so a miss in one thread (every miss runs its lookup pinned) leaves
  every other thread's hot path on.

State is published, not patched: the process-wide state is one immutable snapshot,
:data:`STATE`, replaced whole under :func:`lock` (an ordinary re-entrant lock). ``WORLD`` is
derived from it: cleared before each publication and set after, so an interrupt between the
two leaves None, which only costs a slow path (which sets it again: :func:`refresh`).

A pin is in force from its ``invoke_in_world`` call until that call returns, whatever keeps
its context afterwards (a task or callback started inside, a stored traceback): those run in
the latest world once the call has returned.
"""

from __future__ import annotations

import contextvars
import os
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, TypeVar

from .locks import new_lock, renew_all

__all__ = [
    "WORLD_MAX",
    "Block",
    "bump",
    "check_fork",
    "current",
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
    #: the with-blocks that have begun and not ended, in order of entry
    blocks: tuple[Block, ...]
    #: precompile-output mode as the environment variable sets it
    precompile_env: bool
    #: the mode as last switched outright (``precompile_output(flag)``), or None
    switch: bool | None
    #: this process is a fork of one that had imported specializer
    forked: bool
    #: how to undo a definition in flight (recorded before its first change, cleared by the
    #: store that publishes its world), or None
    in_flight: Callable[[], object] | None


STATE = _State(latest=1, blocks=(), precompile_env=False, switch=None, forked=False, in_flight=None)
#: The latest world, or None while cached lookups bypass their caches: an unpinned task's cell.
WORLD: list[int | None] = [1]
_lock = new_lock()


class _Pin(list):  # type: ignore[type-arg]
    """A pinned task's cell: holds None (the hot path misses); its world is ``world`` while
    ``live`` (until its ``invoke_in_world`` call returns)."""

    __slots__ = ("__weakref__", "live", "world")

    def __init__(self, world: int) -> None:
        super().__init__((None,))
        self.world = world
        self.live = True


_task: contextvars.ContextVar[list[Any]] = contextvars.ContextVar(
    "specializer_task_world", default=WORLD
)
#: The hot path's read of the calling task's cell: ``task_cell()[0]`` is its world, or None
#: where the slow path must decide (a pin, a hook, precompile mode).
task_cell = _task.get

#: The live pins: ``id(pin) -> (its world, a weak reference to it)``; an entry goes when its
#: call returns, or when the pin dies (the reference's callback), whichever comes first.
_pins: dict[int, tuple[int, weakref.ref[_Pin]]] = {}


def lock() -> Any:
    """The lock that serializes changes of world state: ``with lock():``. Re-entrant."""
    return _lock()


def _publish(state: _State) -> None:
    """Publish a new snapshot. Call with :func:`lock` held. WORLD is cleared before and set
    after: None in between is always safe (a slow path)."""
    global STATE
    WORLD[0] = None
    STATE = state
    WORLD[0] = None if _bypassing(state) else state.latest


def refresh() -> None:
    """Set WORLD again if a publication was interrupted between its stores (the slow path
    calls this when it finds None and nothing needs it)."""
    if WORLD[0] is None and not _bypassing(STATE):
        with _lock():
            if not _bypassing(STATE):
                WORLD[0] = STATE.latest


# -- the counter and pins ------------------------------------------------------------------


def latest() -> int:
    """The global world counter: the newest world."""
    return STATE.latest


def current() -> int:
    """The calling task's world: the latest one unless the task is pinned."""
    cell = _task.get()
    if isinstance(cell, _Pin) and cell.live:
        return cell.world
    return STATE.latest


def begin_definition(undo: Callable[[], object]) -> int:
    """Record a definition about to change state, with what undoes its changes; returns its
    world. Call with :func:`lock` held, after :func:`undo_in_flight` (before reading the state
    the definition is computed from) and before the first change; :func:`publish_world` ends
    it. A definition an interrupt stopped before that is undone by whoever raises the world
    next, so it happened whole or not at all."""
    global STATE
    undo_in_flight()
    STATE = STATE._replace(in_flight=undo)  # nothing a reader looks at
    return STATE.latest + 1


def undo_in_flight() -> None:
    """Undo a definition an interrupt left in flight (see :func:`begin_definition`). Call with
    :func:`lock` held, first thing in whatever raises the world."""
    global STATE
    undo = STATE.in_flight
    if undo is not None:
        undo()  # idempotent stores: an interrupt here leaves the record for the next raiser
        STATE = STATE._replace(in_flight=None)


def publish_world(new: int) -> None:
    """Make ``new`` the latest world: the store that completes a definition (and clears its
    record). Call with :func:`lock` held, after every change the definition makes."""
    _publish(STATE._replace(latest=new, in_flight=None))


def bump() -> int:
    """Raise the world counter for a change the library cannot see; returns the new world."""
    with _lock():
        undo_in_flight()
        new = STATE.latest + 1
        publish_world(new)
    return new


def pinned_worlds() -> frozenset[int]:
    """The worlds of the pins in force (tasks inside ``invoke_in_world``)."""
    return frozenset(w for w, _ in _pins.copy().values())


def pins() -> int:
    """How many pins are in force."""
    return len(_pins)


def _check_world(world: object) -> int:
    if isinstance(world, bool) or not isinstance(world, int):
        raise TypeError(f"world: a world is an int, got {type(world).__name__}: {world!r}")
    if world < 1:
        raise ValueError(f"world {world} does not exist: worlds start at 1")
    if world > STATE.latest:
        raise ValueError(
            f"world {world} is in the future: the latest world is {STATE.latest} "
            "(see specializer.world.latest())"
        )
    return int(world)


def invoke_in_world(world: int, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` pinned to ``world`` (an existing, possibly older, world).

    ``fn`` runs in a copy of the calling context in which the pin is set (so context
    variables it sets stay in that copy); the pin ends when the call returns."""
    # The context is never bound to a name here: a traceback keeps this frame's locals.
    return contextvars.copy_context().run(_pinned, _check_world(world), fn, args, kwargs)


def _pinned(world: int, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    pin = _Pin(world)
    try:
        # Registered before it is in force (code of its world is kept from here on) and
        # ended before it is unregistered: an interrupt anywhere leaves no pin in force.
        _pins[id(pin)] = (world, weakref.ref(pin, partial(_drop_pin, id(pin))))
        _task.set(pin)
        return fn(*args, **kwargs)
    finally:
        pin.live = False
        _pins.pop(id(pin), None)


def _drop_pin(key: int, _ref: object = None) -> None:
    _pins.pop(key, None)


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    if _task.get() is WORLD:
        return fn(*args, **kwargs)
    return contextvars.copy_context().run(_unpinned, fn, args, kwargs)


def _unpinned(fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    _task.set(WORLD)
    return fn(*args, **kwargs)


def unpin_ended() -> None:
    """A task whose pin has ended (it outlived its ``invoke_in_world`` call) runs in the
    latest world: give it the hot path again (the slow path calls this)."""
    cell = _task.get()
    if isinstance(cell, _Pin) and not cell.live:
        _task.set(WORLD)


# -- with-blocks of world state: compile hooks and precompile blocks ------------------------


class Block:
    """A with-block of process-wide world state: a compile hook (``kind == "hook"``, whose
    ``value`` is the callback) or a precompile block (``"precompile"``, whose ``value`` is
    the mode inside it). Active from its ``__enter__`` to its ``__exit__``, whoever holds the
    object; blocks in several threads each count, nested or overlapping in any order. One
    object is one block."""

    kind: str = "block"

    def __init__(self, value: Any) -> None:
        self.value = value
        self._begun = False

    def active(self) -> bool:
        """Whether the block has begun and not ended."""
        return any(b is self for b in STATE.blocks)

    def _begin(self) -> None:
        """Make the block active: what its ``__enter__`` does. An exception raised after the
        block was published (an interrupt as the lock is released) ends it again, since its
        with statement will not call ``__exit__``."""
        try:
            with _lock():
                if self._begun:
                    raise RuntimeError(f"{self!r} has begun already: each with-block needs its own")
                self._begun = True
                _publish(STATE._replace(blocks=(*STATE.blocks, self)))
        except BaseException:
            self._end()
            raise

    def _end(self) -> None:
        """End the block (nothing if it is not active)."""
        with _lock():
            _publish(STATE._replace(blocks=tuple(b for b in STATE.blocks if b is not self)))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end()

    def __repr__(self) -> str:
        state = "active" if self.active() else "inactive"
        return f"<{type(self).__name__} {self.kind} {state}>"


def hooks() -> list[Any]:
    """The callbacks of the active compile hooks, in order of entry."""
    return [b.value for b in STATE.blocks if b.kind == "hook"]


def _precompiling(state: _State) -> bool:
    for b in reversed(state.blocks):
        if b.kind == "precompile":
            return bool(b.value)
    return state.precompile_env if state.switch is None else state.switch


def precompiling() -> bool:
    """Whether precompile-output mode is on: the mode of the innermost active precompile
    block, else as last switched outright, else as the environment variable sets it."""
    return _precompiling(STATE)


def bypassing() -> bool:
    """Whether cached lookups must neither hit nor store: a compile hook is active or
    precompile-output mode is on."""
    return _bypassing(STATE)


def _bypassing(state: _State) -> bool:
    return _precompiling(state) or any(b.kind == "hook" for b in state.blocks)


def switch_precompile(on: bool | None) -> bool | None:
    """Switch precompile-output mode outright (None: as the environment says); returns the
    previous switch, for a block to restore."""
    with _lock():
        previous = STATE.switch
        _publish(STATE._replace(switch=on))
    return previous


def set_environment_precompile(on: bool) -> None:
    """The mode the environment variable sets (where no switch or block is in effect)."""
    with _lock():
        _publish(STATE._replace(precompile_env=bool(on)))


# -- fork -------------------------------------------------------------------------------


def forked() -> bool:
    """Whether this process is a fork (``os.fork``, multiprocessing's 'fork' start method) of
    one that had imported specializer."""
    return STATE.forked


def check_fork(what: str) -> None:
    """Raise ``RuntimeError`` if this process is a fork; ``what`` names what cannot be used in
    it, e.g. ``"specializer's OpenCL back-end"``. A back-end that used a device before the
    fork calls this before it touches a context, a queue or a stream: device contexts do not
    survive fork, and a launch in the child would hang."""
    if STATE.forked:
        raise RuntimeError(
            f"this process was forked after {what} was used; device contexts and queues do "
            "not survive fork, so a launch here would hang: start worker processes with "
            "multiprocessing's 'spawn' start method (multiprocessing.get_context('spawn'), or "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')))"
        )


def _after_fork_in_child() -> None:
    # Every lock fresh (a thread of the parent may have held one), then a world of the
    # child's own: nothing cached in the parent (a lookup's result, a front entry) is reused
    # before a back-end has checked that its devices may be used here.
    renew_all()
    _pins.clear()  # the parent's pinned calls are not running here
    undo_in_flight()  # a definition another thread of the parent was making
    _publish(STATE._replace(latest=STATE.latest + 1, forked=True))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
