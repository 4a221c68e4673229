"""World age: the global definition counter and the world each task runs in.

Julia keeps a world counter that every definition raises, and each task runs in
a fixed world. Here:

- ``latest()`` is the counter; every definition the library tracks raises it.
- ``current()`` is the calling task's world: ``latest()`` unless the task is
  pinned by ``invoke_in_world``. Pins live in a ``contextvars.ContextVar``, so an
  asyncio task inherits its creator's pin and a new thread starts unpinned.

The hot path (every cached lookup, so every launch) reads the world with one
load, ``WORLD[0]`` (a one-item list: in CPython a subscript of a list is cheaper
than an attribute load, and it is bound once as a default). It holds the latest
world while nothing in the process needs the slow path, and ``None`` (a value no
cache entry holds) while any task is pinned, any compile hook is active or
precompile-output mode is on. Folding those three checks into the one read keeps
a hit to a load and a couple of comparisons; the slow path then reads the real
task world.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

__all__ = [
    "WORLD_MAX",
    "bump",
    "current",
    "invoke_in_world",
    "invokelatest",
    "latest",
    "pinned_worlds",
]

R = TypeVar("R")

#: The upper end of an open validity range ("valid until something changes").
WORLD_MAX: int = 2**62


class _State:
    """The process-wide world state read on the hot path."""

    __slots__ = ("hooks", "latest", "precompile")

    def __init__(self) -> None:
        self.latest = 1  # the global counter
        self.hooks = 0  # active compile hooks (specializer.compiler)
        self.precompile = False  # precompile-output mode (specializer.precompile)


STATE = _State()
#: The hot world: ``[latest]``, or ``[None]`` while the slow path is needed.
WORLD: list[int | None] = [STATE.latest]
_lock = threading.RLock()
_pin: ContextVar[_Pin | None] = ContextVar("specializer_world_pin", default=None)

#: The live pins: ``id(pin) -> (its world, a weak reference to it)``. The reference's
#: callback (``_pins.pop`` of that key: C, so nothing can interrupt it) removes the entry when
#: the pin dies, however it dies: no count to get wrong, and a pin whose ``__init__`` did not
#: finish was either never entered here or is removed by the same callback.
_pins: dict[int, tuple[int, weakref.ref[_Pin]]] = {}


def _hot(latest: int) -> int | None:
    """What ``WORLD[0]`` must hold now: ``latest``, or None while the slow path is needed."""
    s = STATE
    return None if (_pins or s.hooks or s.precompile) else latest


def _refresh() -> None:
    """Recompute the hot value from the state. Call with ``_lock`` held."""
    WORLD[0] = _hot(STATE.latest)


def refresh() -> None:
    """Let the hot path back in if nothing needs the slow path any more (a pin, a hook or a
    precompile block ends without taking the lock, so this is done on the next slow path)."""
    if WORLD[0] is None and not _pins:
        with _lock:
            _refresh()


class _Pin:
    """A task's pinned world.

    Live while a context holds it rather than while ``invoke_in_world`` runs: a context
    copied inside the call (an asyncio task created there) keeps the pin, and the hot path
    must stay off until the last such context is gone.
    """

    __slots__ = ("__weakref__", "world")

    def __init__(self, world: int) -> None:
        self.world = world
        key = id(self)
        entry = (world, weakref.ref(self, partial(_pins.pop, key)))
        with _lock:
            # Two stores, no call between them: nothing can interrupt one without the other.
            _pins[key] = entry
            WORLD[0] = None


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


def bump() -> int:
    """Raise the world counter for a change the library cannot see; returns the new world."""
    with _lock:
        return advance()


def _check_world(world: object) -> int:
    if isinstance(world, bool) or not isinstance(world, int):
        raise TypeError(f"a world is an int, got {type(world).__name__}: {world!r}")
    if world < 1:
        raise ValueError(f"world {world} does not exist: worlds start at 1")
    if world > STATE.latest:
        raise ValueError(
            f"world {world} is in the future: the latest world is {STATE.latest} "
            "(see specializer.world.latest())"
        )
    return world


def invoke_in_world(world: int, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` pinned to ``world`` (an existing, possibly older, world)."""
    previous = _pin.get()
    pin = _Pin(_check_world(world))
    try:
        _pin.set(pin)  # inside the try: an interrupt just after it still restores below
        return fn(*args, **kwargs)
    finally:
        _pin.set(previous)  # the first call of the finally: no interrupt can come before it


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    previous = _pin.get()
    if previous is None:
        return fn(*args, **kwargs)
    try:
        _pin.set(None)
        return fn(*args, **kwargs)
    finally:
        _pin.set(previous)


def set_hooks(delta: int) -> None:
    """Count a compile hook in (+1) or out (-1); used by ``specializer.compiler``."""
    with _lock:
        STATE.hooks += delta
        _refresh()


def set_precompile(on: bool) -> None:
    """Turn precompile-output mode on or off; used by ``specializer.precompile``."""
    with _lock:
        STATE.precompile = bool(on)
        _refresh()


def advance() -> int:
    """Raise the counter for a definition; returns the new world. Call with ``lock()`` held."""
    new = STATE.latest + 1
    commit(advance_ops(new))
    return new


def advance_ops(new: int) -> list[partial[Any]]:
    """The changes that publish world ``new`` (for :func:`commit`). Call with ``lock()`` held."""
    return [partial(setattr, STATE, "latest", new), partial(WORLD.__setitem__, 0, _hot(new))]


_consume = deque(maxlen=0).extend
_call = partial.__call__


def commit(ops: Iterable[partial[Any]]) -> None:
    """Make every change in ``ops`` (each a ``functools.partial`` of a C function: ``setattr``
    on a plain attribute, a dict's or a list's own methods) in one C-level call.

    CPython runs a signal handler (so raises ``KeyboardInterrupt``), switches threads, and
    delivers any other asynchronous exception only between bytecodes, at a function's
    entry, a backward jump, or a call's return; never inside a C function. So a commit is
    made whole or not at all, and no other thread sees it half made. An operation plans its
    changes into a list first (touching nothing), then commits them: an interrupt anywhere
    in it leaves the state as if it had not begun, or as if it had finished. The partials
    must not reach Python code: no ``__setattr__``, ``__hash__`` or ``__eq__`` of a Python class.
    """
    _consume(map(_call, ops))


def lock() -> threading.RLock:
    """The lock that serializes definitions (method tables read the world under it)."""
    return _lock
