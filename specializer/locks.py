"""The package's locks, in one registry: a forked child gets every one of them fresh (a
thread of the parent may have held one, and that thread is not in the child). And the
modules the package imports lazily are imported before a fork (:func:`import_before_fork`):
the lock of a module that another thread was importing is held for ever in the child."""

from __future__ import annotations

import importlib
import os
import threading
import weakref
from typing import Any

__all__ = ["LockBox", "import_before_fork", "new_lock", "renew_all"]


class LockBox:
    """Holds one of the package's locks; ``with box():`` takes it. The lock's own
    ``__enter__``/``__exit__`` (C code) take and release it, so no Python code an interrupt
    could stop runs between the two."""

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


def import_before_fork(*modules: str) -> None:
    """Import ``modules`` (those installed) before every fork, in the thread that forks: a
    lazily imported module (Jinja, a CUDA helper) half imported by another thread at the fork
    would leave the child waiting for ever on its import lock. The cost is one import per
    process that forks, not one at start."""

    def before() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before)
