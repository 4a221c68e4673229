"""A pin held across a test's steps: a thread inside ``invoke_in_world`` that runs what it
is given there, until it is told to return (the pin lasts as long as the call's context)."""

from __future__ import annotations

import queue
import threading
from typing import Any

from specializer import invoke_in_world


class PinnedThread:
    """``p = PinnedThread(world)``: ``p.run(fn, *args)`` runs ``fn`` pinned to ``world``;
    ``p.end()`` returns from the pinned call (use it as a context manager)."""

    def __init__(self, world: int) -> None:
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=invoke_in_world, args=(world, self._serve))
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, args, out = job
            try:
                out.put((True, fn(*args)))
            except BaseException as e:  # handed to the caller
                out.put((False, e))

    def run(self, fn: Any, *args: Any) -> Any:
        out: queue.Queue[Any] = queue.Queue()
        self._jobs.put((fn, args, out))
        ok, value = out.get(timeout=60)
        if not ok:
            raise value
        return value

    def end(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=60)

    def __enter__(self) -> PinnedThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
