"""The package's locks, in one registry: a forked child gets every one fresh (a thread of the
parent may have held one, and that thread is not in the child)."""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import weakref
from typing import Any

__all__ = ["LockBox", "import_before_fork", "new_lock", "renew_all"]


class LockBox:
    """Holds one of the package's locks; ``with box():`` takes it with the lock's own C
    ``__enter__``/``__exit__``, so no Python code an interrupt could stop runs between them."""

    __slots__ = ("__weakref__", "_lock", "_reentrant")

    def __init__(self, reentrant: bool) -> None:
        self._reentrant = reentrant
        self.renew()

    def __call__(self) -> Any:
        return self._lock

    def renew(self) -> None:
        self._lock: Any = threading.RLock() if self._reentrant else threading.Lock()


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


def import_before_fork(*modules: str) -> None:
    """Import ``modules`` (those installed) before every fork, in the thread that forks: a
    lazily imported module half imported by another thread at the fork would leave the child
    waiting for ever on its import lock."""

    def before() -> None:
        for name in modules:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before)
