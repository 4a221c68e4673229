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
cache entry holds) while any task is pinned, any compile hook is active,
precompile-output mode is on, or the process is a fork. Folding those checks into
the one read keeps a hit to a load and a couple of comparisons; the slow path then
reads the real task world. Whatever ends one of them (a pin dying, a block ending)
takes no lock, so ``WORLD[0]`` comes back on the next slow path (:func:`refresh`).

Interrupts. A ``KeyboardInterrupt`` (or any asynchronous exception) leaves every piece
of world state as if the interrupted operation happened whole or not at all. CPython
raises one only between bytecodes where its eval loop checks for pending work: a
Python function's entry, a backward jump, and just after a call returns; never inside
a C function. So each operation plans its changes (touching nothing), then makes them
in one C-level call (:func:`commit`) or in consecutive stores with no call between;
a pin is removed by a weak reference's C callback; ``with lock():`` lets the lock go even
where CPython 3.13 unwinds a frame past its ``with`` (see :class:`_Locked`); and a
with-block of world state (a compile hook, a precompile block: :class:`Scope`) ends with the
C-level release of its own lock (its ``__exit__`` is a C method), so a block that has begun
always ends.
"""

from __future__ import annotations

import _thread
import io
import itertools
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

__all__ = [
    "WORLD_MAX",
    "Scope",
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


class _State:
    """The process-wide world state read on the hot path."""

    __slots__ = ("forked", "latest", "precompile", "precompile_version")

    def __init__(self) -> None:
        self.latest = 1  # the global counter
        #: precompile-output mode as last switched outright (the environment variable,
        #: ``precompile_output(True/False)``); an active precompile block overrides it
        self.precompile = False
        self.precompile_version = 0  # raised by each outright switch
        self.forked = False  # this process is a fork (see check_fork)


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

#: The with-blocks of world state that have been entered, in order of entry, each by a weak
#: reference: active while their lock is held (see Scope); the ones that ended are pruned
#: under ``_lock``. A block whose with statement was unwound without ending it (CPython 3.13
#: can skip a with's exit: see _Locked) dies with it, and its reference's callback
#: (``_scopes.pop`` of its key: C) drops it, so it does not stay active for good.
_scopes: dict[int, weakref.ref[Scope]] = {}
_scope_serial = itertools.count()


def _hot(latest: int) -> int | None:
    """What ``WORLD[0]`` must hold now: ``latest``, or None while the slow path is needed."""
    if _pins or STATE.forked or STATE.precompile or _active("hook", "precompile"):
        return None
    return latest


def _refresh() -> None:
    """Recompute the hot value from the state. Call with ``_lock`` held."""
    WORLD[0] = _hot(STATE.latest)


def refresh() -> None:
    """Let the hot path back in if nothing needs the slow path any more. (A pin dies, and a
    block ends, without taking the lock or running Python code, so the slow path does this.)"""
    if WORLD[0] is None and not _pins and not STATE.forked:
        with _lock:
            _prune()
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


# -- with-blocks of world state: compile hooks and precompile blocks ---------------------


def _active(*kinds: str) -> list[Scope]:
    """The active scopes of these kinds, in order of entry."""
    if not _scopes:
        return []
    return [
        s
        for ref in _scopes.copy().values()
        if (s := ref()) is not None and s.kind in kinds and s._held.locked()
    ]


def _prune() -> None:
    """Forget the scopes that ended. Call with ``_lock`` held."""
    for key, ref in list(_scopes.items()):
        s = ref()
        if s is None or not s._held.locked():
            _scopes.pop(key, None)


def hooks() -> list[Any]:
    """The values (callbacks) of the active compile-hook blocks, in order of entry."""
    if not _scopes:
        return []
    return [s.value for s in _active("hook")]


def precompiling() -> bool:
    """Whether precompile-output mode is on: the value of the precompile block entered last
    of those still active, else the mode as last switched outright."""
    blocks = _active("precompile")
    return bool(blocks[-1].value) if blocks else STATE.precompile


def bypassing() -> bool:
    """Whether cached lookups must neither hit nor store: a compile hook is active,
    precompile-output mode is on, or this process is a fork (whose lookups must reach the
    back-end, which refuses them: see check_fork)."""
    if not _scopes:
        return STATE.forked or STATE.precompile
    return STATE.forked or bool(_active("hook")) or precompiling()


class Scope(io.IOBase):
    """A with-block of process-wide world state: active from its entry to its end, across
    threads and nested in any order (``with`` blocks of it in several threads each count).

    ``kind`` says what it is ("hook": a compile hook whose ``value`` is the callback;
    "precompile": a precompile block whose ``value`` is the mode inside it). One object is
    one block: enter it once.

    A block that has begun ends, whatever interrupts it. Its state is a lock of its own,
    held while the block is active. ``__enter__`` makes the block active in one C-level
    commit and, if interrupted just after, ends it again before raising. ``__exit__`` must
    run no Python code before the block has ended (an interrupt can land at the entry of
    any Python function): it is ``io.IOBase.__exit__``, a C method that calls
    ``self.close()``, and ``close`` is set per block, as it begins, to a C-level chain that
    releases the lock, then runs the block's Python ending (:meth:`_exit_ops`). That is
    why a scope is an ``io.IOBase``; nothing else of it is used (``closed`` stays true, so
    its finalizer never calls ``close``).
    """

    closed = True  # IOBase's finalizer calls close() unless closed: never here

    def __init__(self, kind: str, value: Any) -> None:
        self.kind = kind
        self.value = value
        self._held = _thread.allocate_lock()

    def active(self) -> bool:
        """Whether the block has begun and not ended."""
        return self._held.locked()

    def _enter_ops(self) -> list[partial[Any]]:
        """More changes to commit with the entry (planned with ``_lock`` held)."""
        return []

    def _exit_ops(self) -> list[Callable[[], Any]]:
        """What runs as the block ends, after it has ended (may raise)."""
        return []

    def _entered(self) -> Any:
        """What ``with ... as x`` binds."""
        return None

    def __enter__(self) -> Any:
        held = self._held
        result = self._entered()
        ending = map(_call, [partial(held.release), *map(partial, self._exit_ops())])
        done: list[bool] = []
        try:
            with _lock:
                if held.locked():
                    raise RuntimeError(f"{self!r} is active already: each with-block needs its own")
                _prune()
                serial = next(_scope_serial)
                ref = weakref.ref(self, partial(_scopes.pop, serial))  # pop(serial, ref)
                ops = [
                    partial(held.acquire),
                    partial(_scopes.__setitem__, serial, ref),
                    partial(WORLD.__setitem__, 0, None),
                    partial(setattr, self, "close", partial(_consume, ending)),
                    *self._enter_ops(),
                    partial(done.append, True),
                ]
                changes = map(_call, ops)
                _consume(changes)  # the block is active from here, all at once
        except BaseException:
            if done:  # an interrupt after the commit (ending the with _lock): end it again
                held.release()
            raise
        return result  # no call between the commit's end and the with statement's block

    # __exit__ is io.IOBase.__exit__: self.close(), the chain set as the block began.

    def __repr__(self) -> str:
        state = "active" if self.active() else "inactive"
        return f"<{type(self).__name__} {self.kind} {state}>"


def set_precompile(on: bool) -> tuple[bool, int]:
    """Switch precompile-output mode outright (the environment variable,
    ``precompile_output(True/False)``). Returns what :func:`restore_precompile_ops` needs."""
    with _lock:
        s = STATE
        previous, version = s.precompile, s.precompile_version + 1
        commit(
            [
                partial(setattr, s, "precompile", bool(on)),
                partial(setattr, s, "precompile_version", version),
                partial(WORLD.__setitem__, 0, None),
            ]
        )
        _refresh()
    return previous, version


def restore_precompile_ops(switched: tuple[bool, int]) -> list[partial[Any]]:
    """The changes that undo the outright switch ``switched`` (from :func:`set_precompile`)
    if nothing switched the mode since. Call with ``_lock`` held."""
    previous, version = switched
    if STATE.precompile_version != version:
        return []
    return [partial(setattr, STATE, "precompile", previous)]


# -- fork -------------------------------------------------------------------------------


def forked() -> bool:
    """Whether this process is a fork (``os.fork``, multiprocessing's 'fork' start method) of
    one that had imported specializer."""
    return STATE.forked


def check_fork(what: str) -> None:
    """Raise ``RuntimeError`` if this process is a fork; ``what`` names what cannot be used in
    it, e.g. ``"specializer's OpenCL back-end"``. A back-end calls this on a lookup miss
    (every cached lookup misses in a fork: ``WORLD[0]`` is None there), before it touches a
    context, a queue or a stream: device contexts do not survive fork, and a launch in the
    child would hang."""
    if STATE.forked:
        raise RuntimeError(
            f"this process was forked after {what} was loaded; device contexts and queues do "
            "not survive fork, so a launch here would hang: start worker processes with "
            "multiprocessing's 'spawn' start method (multiprocessing.get_context('spawn'), or "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')))"
        )


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock: in the child it would never end.
    _lock._at_fork_reinit()
    STATE.forked = True
    WORLD[0] = None  # every cached lookup takes the slow path, where the back-end checks


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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


class _Locked(io.IOBase):
    """One with-block of the world lock: what ``with lock():`` enters.

    The block ends (the lock is let go) however it is left, also where the frame holding
    it unwinds without calling ``__exit__``. That happens on CPython 3.13, which checks for
    pending signals at a backward jump *before* jumping, so the exception belongs to the
    ``JUMP_BACKWARD`` itself; the compiler leaves such a jump out of the exception table
    when it is the jump that a loop's ``if`` (or a comprehension's filter) falls through to,
    so a ``KeyboardInterrupt`` there skips the enclosing ``with`` and ``finally`` handlers
    of that frame (3.11 and 3.12 check after jumping, at the loop's head, which is covered).
    Then the with-statement's reference to this block (its bound ``__exit__``) is dropped
    as the frame unwinds, the block dies, and its weak reference's callback (C: the next
    step of a one-shot iterator whose only step releases the lock) lets the lock go. An
    ended block's iterator is exhausted, so its death does nothing.

    ``__exit__`` is ``io.IOBase.__exit__`` (C), which calls ``self.close``: set per block,
    as it begins, to that same step. So no Python code runs between the body's end and the
    release, and none between the acquisition and the with-statement's block being in place
    except ``__enter__``'s own, which lets the lock go again if it is interrupted.
    """

    closed = True  # IOBase's finalizer calls close() unless closed: never here

    def __enter__(self) -> None:
        # The ending: one step that lets the lock go, once, if it was taken (its release is
        # put in ``steps`` with the acquisition); then nothing.
        steps: list[partial[Any]] = []
        ending = map(_call, steps)
        step = partial(next, ending, None)
        armed = weakref.ref(self, partial(next, ending))  # its callback: next(ending, ref)
        try:
            # One C-level call: the lock taken (an interrupt while it waits: not taken), and
            # with it its release, the block's ending and its arming.
            _consume(
                map(
                    _call,
                    (
                        _ACQUIRE,
                        partial(steps.append, _RELEASE),
                        partial(self.__dict__.update, _armed=armed, close=step),
                    ),
                )
            )
        except BaseException:
            step()  # an interrupt just after the lock was taken: let it go again
            raise

    # __exit__ is io.IOBase.__exit__: self.close(), the step set as the block began.


_ACQUIRE = partial(_lock.acquire)
_RELEASE = partial(_lock.release)


def lock() -> _Locked:
    """A with-block of the lock that serializes definitions (method tables read the world
    under it): ``with lock():``. Each call makes one block; re-entrant in a thread."""
    return _Locked()
