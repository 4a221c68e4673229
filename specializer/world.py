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
]

R = TypeVar("R")

#: The upper end of an open validity range ("valid until something changes").
WORLD_MAX: int = 2**62


class _State:
    """The process-wide world state read on the hot path."""

    __slots__ = ("hooks", "latest", "pins", "precompile")

    def __init__(self) -> None:
        self.latest = 1  # the global counter
        self.pins = 0  # live pins (see _Pin)
        self.hooks = 0  # active compile hooks (specializer.compiler)
        self.precompile = False  # precompile-output mode (specializer.precompile)


STATE = _State()
#: The hot world: ``[latest]``, or ``[None]`` while the slow path is needed.
WORLD: list[int | None] = [STATE.latest]
_lock = threading.RLock()
_pin: ContextVar[_Pin | None] = ContextVar("specializer_world_pin", default=None)


def _refresh() -> None:
    """Recompute the hot value from the state. Call with ``_lock`` held."""
    s = STATE
    WORLD[0] = None if (s.pins or s.hooks or s.precompile) else s.latest


class _Pin:
    """A task's pinned world.

    Counted while alive rather than while ``invoke_in_world`` runs: a context
    copied inside the call (an asyncio task created there) keeps the pin, and
    the hot path must stay off until the last such context is gone.
    """

    __slots__ = ("world",)

    def __init__(self, world: int) -> None:
        self.world = world
        with _lock:
            STATE.pins += 1
            _refresh()

    def __del__(self) -> None:
        try:
            with _lock:
                STATE.pins -= 1
                _refresh()
        except Exception:  # interpreter shutdown: module globals may be gone
            pass


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
    token = _pin.set(_Pin(_check_world(world)))
    try:
        return fn(*args, **kwargs)
    finally:
        _pin.reset(token)


def invokelatest(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run ``fn(*args, **kwargs)`` unpinned, in the latest world, even from a pinned task."""
    if _pin.get() is None:
        return fn(*args, **kwargs)
    token = _pin.set(None)
    try:
        return fn(*args, **kwargs)
    finally:
        _pin.reset(token)


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
    s = STATE
    hot = None if (s.pins or s.hooks or s.precompile) else new
    return [partial(setattr, s, "latest", new), partial(WORLD.__setitem__, 0, hot)]


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
