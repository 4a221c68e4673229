"""Precompile-output mode: store nothing that would outlive this process's worlds.

Julia stores nothing in ``cached_lookup`` while generating output, because the
cache would be serialized with its callers, and world numbers and device handles
mean nothing in another session. Here, while the mode is on, cached lookups store
nothing (every call runs its lookup) and writing generated source to disk is
refused. Turn it on with ``SPECIALIZER_PRECOMPILE_OUTPUT=1``,
``precompile_output(True)``, or ``with precompile_output():``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from . import world as _world

__all__ = ["ENV_VAR", "PrecompileOutputError", "generating_output", "precompile_output"]

ENV_VAR = "SPECIALIZER_PRECOMPILE_OUTPUT"


class PrecompileOutputError(RuntimeError):
    """Something refused while precompile-output mode is on."""


def generating_output() -> bool:
    """Whether precompile-output mode is on."""
    return _world.STATE.precompile


class precompile_output:
    """Turn precompile-output mode on (default) or off.

    ``precompile_output(True)`` switches it at once; ``with precompile_output():``
    switches it for the block and restores the previous mode after.
    """

    def __init__(self, on: bool = True) -> None:
        self._previous = generating_output()
        _world.set_precompile(on)

    def __enter__(self) -> precompile_output:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _world.set_precompile(self._previous)


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
        _world.set_precompile(True)


_from_environment()
