"""The package's locks, in one registry: a forked child gets every one of them fresh (a
thread of the parent may have held one, and that thread is not in the child)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["LockBox", "new_lock", "renew_all"]


class LockBox:
    """Holds one of the package's locks; ``with box():`` takes it. A forked child gets a fresh
    lock in every box (a thread of the parent may have held one, and is not in the child).
    The lock's own ``__enter__``/``__exit__`` (C code) take and release it, so nothing
    between the two is Python code an interrupt could stop."""

    __slots__ = ("__weakref__", "_lock", "_reentrant")

    def __init__(self, reentrant: bool) -> None:
        self._reentrant = reentrant
        self._lock: Any = threading.RLock() if reentrant else threading.Lock()

    def __call__(self) -> Any:
        return self._lock

    def renew(self) -> None:
        self._lock = threading.RLock() if self._reentrant else threading.Lock()


#: Every lock of the package (one registry: the fork handler renews each).
_locks: weakref.WeakSet[LockBox] = weakref.WeakSet()


def new_lock(reentrant: bool = True) -> LockBox:
    """A box for a new lock (``with box():``), registered so that a forked child gets it fresh."""
    lk = LockBox(reentrant)
    _locks.add(lk)
    return lk


def renew_all() -> None:
    """Give every registered box a fresh lock (in a forked child, before anything else)."""
    for box in list(_locks):
        box.renew()
