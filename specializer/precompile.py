"""Precompile-output mode: store nothing that would outlive this process's worlds.

Julia stores nothing in ``cached_lookup`` while generating output, because the
cache would be serialized with its callers, and world numbers and device handles
mean nothing in another session. Here, while the mode is on, cached lookups store
nothing (every call runs its lookup) and writing generated source to disk is
refused. Turn it on with ``SPECIALIZER_PRECOMPILE_OUTPUT=1``,
``precompile_output(True)`` (for good), or ``with precompile_output():`` (for a block).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import world as _world

__all__ = ["ENV_VAR", "PrecompileOutputError", "generating_output", "precompile_output"]

ENV_VAR = "SPECIALIZER_PRECOMPILE_OUTPUT"


class PrecompileOutputError(RuntimeError):
    """Something refused while precompile-output mode is on."""


def generating_output() -> bool:
    """Whether precompile-output mode is on."""
    return _world.precompiling()


class precompile_output(_world.Block):
    """Switch precompile-output mode on (``precompile_output()``, ``precompile_output(True)``)
    or off (``precompile_output(False)``), at once; as a context manager, for a block.

    A plain call switches the mode until the next switch. ``with precompile_output(on):``
    switches it too as it is called, and as the block begins that switch becomes the
    block's (it is undone, unless another switch came since): inside, the mode is that of
    the innermost block (the one entered last of those still active, in any thread), and
    once the last block ends it is the mode as last switched outright. So blocks nest and
    overlap across threads, and however a block ends, it ends.
    """

    kind = "precompile"

    def __init__(self, on: bool = True) -> None:
        if not isinstance(on, (bool, int)):
            raise TypeError(f"precompile_output(on): on is a bool, got {on!r}")
        super().__init__(bool(on))
        _world.switch_precompile(self, bool(on))  # takes effect now

    def __enter__(self) -> precompile_output:
        self._begin()
        return self


def refuse_write(path: str | os.PathLike[str]) -> None:
    """Raise :class:`PrecompileOutputError` if the mode is on (before anything is written)."""
    if generating_output():
        raise PrecompileOutputError(
            f"refusing to write generated source to {Path(path)}: precompile-output mode is on "
            f"({ENV_VAR}=1 or specializer.precompile_output(True)); generated code is tied to "
            f"this process's worlds. Turn it off with specializer.precompile_output(False) or "
            f"by unsetting {ENV_VAR}, then run again"
        )


def _from_environment() -> None:
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value not in ("", "0", "false", "no", "off"):
        _world.set_environment_precompile(True)


_from_environment()
