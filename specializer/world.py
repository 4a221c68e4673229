"""World age: the global definition counter and the world each task runs in.

Julia keeps a world counter that every definition raises, and each task runs in
a fixed world. Here:

- ``latest()`` is the counter; every definition the library tracks raises it.
- ``current()`` is the calling task's world: ``latest()`` unless the task is
  pinned by ``invoke_in_world``. Pins live in a ``contextvars.ContextVar``, so an
  asyncio task inherits its creator's pin and a new thread starts unpinned.

The hot path (every cached lookup, so every launch) reads the world with one load,
``WORLD[0]`` (a one-item list, bound once as a default: a subscript is cheaper than an
attribute load). It holds the latest world while nothing in the process needs the slow
path, and ``None`` (a value no cache entry holds) while any task is pinned, a compile hook
is active or precompile-output mode is on. Folding those checks into the one read keeps a
hit to a load and a couple of comparisons; the slow path reads the task's own world.

How the state changes (the design, in three rules):

1. **Published, not patched.** The process-wide state is one immutable snapshot,
   :data:`STATE` (the counter, the active with-blocks, the precompile switch, whether this
   process is a fork). A change computes a new snapshot aside and publishes it with one
   store, under :func:`lock` (an ordinary re-entrant lock) in straight-line code.
2. **A change to several objects is a plan.** A definition changes more than the snapshot
   (a method table, validity ranges, backedges): it plans every store first, touching
   nothing, then :func:`commit` publishes the plan with one store (``_pending``) and applies
   it; every step is an idempotent store. Whoever takes the lock next finishes a pending
   plan before anything else (:func:`settle`). So an interrupt anywhere leaves the change
   not begun (the plan was not published) or whole (it is, or will be, applied by the next
   holder of the lock). The counter is the plan's last step and readers that take no lock
   read the world first, so until it rises they see the world before the change: its other
   steps only add what that world cannot see (a method from the new world on) or close a
   range at that world.
3. **The hot cell is cleared before, and set after.** ``WORLD[0]`` is set to None before
   any change and recomputed from the snapshot after it; None is always safe (the slow path
   re-reads the state, and :func:`refresh` sets the cell again). An interrupt between the
   two only costs a slow path.

Pins. ``invoke_in_world`` runs its function in a copy of the caller's context in which the
pin is set, so the pin lives exactly as long as that context (and the contexts copied from
it: an asyncio task created inside keeps it); nothing else refers to it, so neither an
interrupt nor a traceback can keep it alive. A live pin keeps the hot path off; a pin that
dies is dropped by its weak reference's callback (``dict.pop``) and the next slow path lets
the hot path back in.

With-blocks (a compile hook, a precompile block: :class:`Block`) are ordinary context managers
whose ``__exit__`` receives the exception. The snapshot holds each block weakly, so a block
that no with statement holds any more has ended even if its ``__exit__`` never ran: CPython 3.13
can unwind a frame past a with statement without calling its exit when an interrupt lands at a
loop's backward jump (CPython gh-130279). ``precompile_output(on)`` switches the mode as it is
called (an outright switch, kept in the snapshot by the object it returns); entering that
object's block withdraws the switch and the block rules. A switch whose object is gone was never
withdrawn: it is for good. The library's own critical sections contain no loop, so none of its
locks can be left held that way.

Fork. ``os.register_at_fork`` gives the child fresh locks, finishes a plan that a thread of
the parent was applying, and raises the counter in the child, so that nothing cached in the
parent (a lookup's result, a front entry) is reused before a back-end has checked that its
devices may be used there (:func:`check_fork`).
"""

from __future__ import annotations

import contextvars
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple, TypeVar

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


class _State(NamedTuple):
    """The process-wide world state: replaced whole, never changed."""

    #: the global counter
    latest: int
    #: the with-blocks that have begun and not ended, in order of entry, each by a weak
    #: reference (None once no with statement holds it: see the module docstring)
    blocks: tuple[weakref.ref[Block], ...]
    #: precompile-output mode as the environment variable sets it
    precompile: bool
    #: the outright switches of the mode (``precompile_output(flag)``) still in effect, oldest
    #: first: (a weak reference to the object the call returned, its mode). Entering that
    #: object's with-block withdraws its switch; a switch whose object is gone was never
    #: withdrawn, so it is for good, and supersedes the older such ones (which are dropped)
    switches: tuple[tuple[weakref.ref[Block], bool], ...]
    #: this process is a fork of one that had imported specializer
    forked: bool


STATE = _State(latest=1, blocks=(), precompile=False, switches=(), forked=False)
#: The hot world: ``[latest]``, or ``[None]`` while the slow path is needed.
WORLD: list[int | None] = [STATE.latest]
_lock = threading.RLock()
_pin: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar(
    "specializer_world_pin", default=None
)
#: A published plan not yet wholly applied (see commit), or None.
_pending: tuple[Callable[[], object], ...] | None = None

#: The live pins: ``id(pin) -> (its world, a weak reference to it)``. The reference's
#: callback (``_pins.pop`` of that key) removes the entry when the pin dies, however it dies.
_pins: dict[int, tuple[int, weakref.ref[_Pin]]] = {}


def lock() -> threading.RLock:
    """The lock that serializes changes of world state: ``with lock():``. Re-entrant. A
    writer calls :func:`settle` first thing inside it."""
    return _lock


def settle() -> None:
    """Finish a plan whose application was interrupted (see :func:`commit`). Call with
    :func:`lock` held, before reading state to change it."""
    plan = _pending
    if plan is not None:
        _apply(plan)


def _apply(plan: tuple[Callable[[], object], ...]) -> None:
    global _pending
    for step in plan:
        step()
    _pending = None
    WORLD[0] = _hot(STATE)


def commit(steps: Iterable[Callable[[], object]]) -> None:
    """Make a planned change: ``steps`` are idempotent stores (``setattr``, a dict's
    ``__setitem__`` or ``pop(key, None)``, :func:`advance_ops`), the world counter's last.
    The plan is published with one store, then applied; an interrupt during the application
    leaves it to the next :func:`settle`. Call with :func:`lock` held, after ``settle()``."""
    global _pending
    plan = tuple(steps)
    WORLD[0] = None  # cleared before the change: readers take the slow path meanwhile
    _pending = plan  # the one store: from here the change happens whole
    try:
        _apply(plan)
    finally:
        settle()  # interrupted: finish it now (interrupted again: the next holder does)


def _publish(state: _State) -> None:
    """Publish a new snapshot. Call with :func:`lock` held, after ``settle()``."""
    global STATE
    WORLD[0] = None
    STATE = state
    WORLD[0] = _hot(state)


def _active(state: _State) -> list[Block]:
    return [b for ref in state.blocks if (b := ref()) is not None]


def _hot(state: _State) -> int | None:
    """What ``WORLD[0]`` must hold in ``state``: its counter, or None while the slow path is
    needed (a pin, an active compile hook, precompile-output mode)."""
    return None if _pins or _bypassing(state) else state.latest


def refresh() -> None:
    """Let the hot path back in if nothing needs the slow path any more (a pin dies and a
    hook's with statement may be dropped without taking the lock, so the slow path does
    this)."""
    if WORLD[0] is None and not _pins:
        with _lock:
            settle()
            WORLD[0] = _hot(STATE)


# -- the counter and pins ------------------------------------------------------------------


class _Pin:
    """A task's pinned world: live while a context holds it (see the module docstring)."""

    __slots__ = ("__weakref__", "world")

    def __init__(self, world: int) -> None:
        self.world = world
        entry = (world, weakref.ref(self, partial(_pins.pop, id(self))))
        with _lock:  # not between a refresh's reading of _pins and its store
            _pins[id(self)] = entry
            WORLD[0] = None  # before the pin is set in a context (an interrupt here: it dies)


def pinned_worlds() -> frozenset[int]:
    """The worlds that live pins hold (the tasks pinned by ``invoke_in_world``, and the
    contexts copied inside it)."""
    return frozenset(w for w, _ in _pins.copy().values())


def pins() -> int:
    """How many pins are alive."""
    return len(_pins)


def latest() -> int:
    """The global world counter: the newest world."""
    return STATE.latest


def current() -> int:
    """The calling task's world: the latest one unless the task is pinned."""
    w = WORLD[0]
    if w is not None:
        return w
    pin = _pin.get()
    return STATE.latest if pin is None else pin.world


def advance_ops(new: int) -> list[Callable[[], object]]:
    """The step that publishes world ``new`` (the last step of a plan: see :func:`commit`)."""
    return [partial(_set_latest, new)]


def _set_latest(new: int) -> None:
    global STATE
    STATE = STATE._replace(latest=new)


def bump() -> int:
    """Raise the world counter for a change the library cannot see; returns the new world."""
    with _lock:
        settle()
        new = STATE.latest + 1
        commit(advance_ops(new))
    return new


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
    return world


def invoke_in_world(world: int, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` pinned to ``world`` (an existing, possibly older, world).

    ``fn`` runs in a copy of the calling context in which the pin is set (so context
    variables it sets stay in that copy); the pin ends with the call."""
    # The context is never bound to a name here: a traceback through this frame keeps its
    # locals, and they must not keep the pin alive.
    return contextvars.copy_context().run(_pinned, _check_world(world), fn, args, kwargs)


def _pinned(world: int, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    _pin.set(_Pin(world))  # held by this context only (the token is dropped with it)
    return fn(*args, **kwargs)


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    if _pin.get() is None:
        return fn(*args, **kwargs)
    return contextvars.copy_context().run(_unpinned, fn, args, kwargs)


def _unpinned(fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    _pin.set(None)
    return fn(*args, **kwargs)


# -- with-blocks of world state: compile hooks and precompile switches ---------------------


class Block:
    """A with-block of process-wide world state: a compile hook (``kind == "hook"``, whose
    ``value`` is the callback) or a precompile block (``"precompile"``, whose ``value`` is
    the mode inside it). Active from :meth:`_begin` (its ``__enter__``) to :meth:`_end` (its
    ``__exit__``); blocks in several threads each count, nested or overlapping in any order.
    One object is one block. The state holds it weakly: a block whose with statement is gone
    has ended, even if its ``__exit__`` never ran."""

    kind: str = "block"

    def __init__(self, value: Any) -> None:
        self.value = value
        self._begun = False

    def active(self) -> bool:
        """Whether the block has begun and not ended."""
        return any(b is self for b in _active(STATE))

    def _begin(self) -> None:
        """Make the block active (and withdraw the outright switch this object made, if any:
        see :func:`switch_precompile`)."""
        ref = weakref.ref(self)
        with _lock:
            settle()
            if self._begun:
                raise RuntimeError(f"{self!r} has begun already: each with-block needs its own")
            self._begun = True
            _publish(_with_block(STATE, ref))  # one store: the block, its switch withdrawn

    def _end(self) -> None:
        """End the block (nothing if it is not active)."""
        with _lock:
            settle()
            _publish(_without_block(STATE, self))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end()

    def __repr__(self) -> str:
        state = "active" if self.active() else "inactive"
        return f"<{type(self).__name__} {self.kind} {state}>"


def _with_block(state: _State, ref: weakref.ref[Block]) -> _State:
    live = tuple(r for r in state.blocks if r() is not None)  # the dead ones pruned
    switches = tuple(s for s in state.switches if s[0]() is not ref())
    return state._replace(blocks=(*live, ref), switches=switches)


def _without_block(state: _State, block: Block) -> _State:
    return state._replace(blocks=tuple(r for r in state.blocks if r() not in (block, None)))


def hooks() -> list[Any]:
    """The callbacks of the active compile hooks, in order of entry."""
    return [b.value for b in _active(STATE) if b.kind == "hook"]


def _precompiling(state: _State) -> bool:
    blocks = [b for b in _active(state) if b.kind == "precompile"]
    if blocks:
        return bool(blocks[-1].value)
    return state.switches[-1][1] if state.switches else state.precompile


def precompiling() -> bool:
    """Whether precompile-output mode is on: the mode of the newest active precompile
    switch, else that of the environment variable."""
    return _precompiling(STATE)


def bypassing() -> bool:
    """Whether cached lookups must neither hit nor store: a compile hook is active or
    precompile-output mode is on."""
    return _bypassing(STATE)


def _bypassing(state: _State) -> bool:
    return _precompiling(state) or any(b.kind == "hook" for b in _active(state))


def switch_precompile(block: Block, on: bool) -> None:
    """Switch precompile-output mode outright (where no precompile block is active), as
    ``block`` is made; entering ``block`` withdraws the switch (:meth:`Block._begin`)."""
    with _lock:
        settle()
        _publish(STATE._replace(switches=_with_switch(STATE.switches, block, bool(on))))


def _with_switch(
    switches: tuple[tuple[weakref.ref[Block], bool], ...], block: Block, on: bool
) -> tuple[tuple[weakref.ref[Block], bool], ...]:
    # Of the switches whose object is gone (never withdrawn: for good), only the newest
    # counts; the older ones are dropped, so plain calls do not pile up.
    kept = list(switches)
    gone = [i for i, (ref, _) in enumerate(kept) if ref() is None]
    for i in reversed(gone[:-1]):
        del kept[i]
    return (*kept, (weakref.ref(block), on))


def set_environment_precompile(on: bool) -> None:
    """The mode the environment variable sets (where no switch or block is in effect)."""
    with _lock:
        settle()
        _publish(STATE._replace(precompile=bool(on)))


# -- fork -------------------------------------------------------------------------------


def forked() -> bool:
    """Whether this process is a fork (``os.fork``, multiprocessing's 'fork' start method) of
    one that had imported specializer."""
    return STATE.forked


def check_fork(what: str) -> None:
    """Raise ``RuntimeError`` if this process is a fork; ``what`` names what cannot be used in
    it, e.g. ``"specializer's OpenCL back-end"``. A back-end that used a device before the
    fork calls this on a lookup miss (every cached lookup misses once in a fork: its world
    rose), before it touches a context, a queue or a stream: device contexts do not survive
    fork, and a launch in the child would hang."""
    if STATE.forked:
        raise RuntimeError(
            f"this process was forked after {what} was used; device contexts and queues do "
            "not survive fork, so a launch here would hang: start worker processes with "
            "multiprocessing's 'spawn' start method (multiprocessing.get_context('spawn'), or "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')))"
        )


def _after_fork_in_child() -> None:
    global _lock, STATE
    _lock = threading.RLock()  # a thread of the parent may have held it: it is not here
    settle()  # finish a plan that thread was applying
    WORLD[0] = None
    STATE = STATE._replace(latest=STATE.latest + 1, forked=True)
    WORLD[0] = _hot(STATE)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
