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
    """Switch precompile-output mode on (``precompile_output()`` or ``precompile_output(True)``)
    or off (``precompile_output(False)``), at once.

    The switch lasts until it ends: ``with precompile_output(on):`` ends it as the block
    ends (however the block ends), and a plain call's switch never ends. The mode is that of
    the newest switch still active (made in any thread), else the environment variable's,
    so blocks nest and overlap across threads: when the last one ends, the mode is what it
    was before the first.
    """

    kind = "precompile"

    def __init__(self, on: bool = True) -> None:
        if not isinstance(on, (bool, int)):
            raise TypeError(f"precompile_output(on): on is a bool, got {on!r}")
        super().__init__(bool(on))
        self._begin(held=True)  # takes effect now; held until it ends

    def __enter__(self) -> precompile_output:
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
        _world.set_base_precompile(True)


_from_environment()
