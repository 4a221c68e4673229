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


def import_before_fork(*modules: str) -> None:
    """Import ``modules`` (those installed) before every fork, in the thread that forks.

    A module the package imports only when first needed (Jinja at the first render that is
    not on disk, a CUDA helper at its first use) may be half imported by another thread when
    the process forks; the child then waits for ever on that module's import lock, whose
    holder does not exist there. Imported before the fork (waiting for that thread's import
    to finish, as any import does), the module is whole in the child, which never imports
    it. The cost is one import per process that forks, not one at start."""

    def before() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before)
