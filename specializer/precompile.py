"""Precompile-output mode, as Julia's while generating output: cached lookups store nothing and
writing generated source is refused (world numbers mean nothing in another session)."""

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
    """Precompile-output mode, as a block or a switch.

    ``with precompile_output():`` turns the mode on for the block, from when it is entered.
    Blocks nest and overlap across threads; inside, the innermost active block rules.
    ``precompile_output(True)`` / ``(False)`` switch the mode at once, until the next switch;
    as a block, it restores the previous switch as it begins, so the mode after the block is
    the one before it. A block ends with its with statement, whether or not ``__exit__`` runs."""

    kind = "precompile"

    def __init__(self, on: bool | None = None) -> None:
        if on is not None and not isinstance(on, (bool, int)):
            raise TypeError(f"precompile_output(on): on is a bool, got {on!r}")
        self._switch = on is not None
        super().__init__(True if on is None else bool(on))
        self._previous = _world.switch_precompile(bool(on)) if self._switch else None

    def __enter__(self) -> precompile_output:
        # A switch's block restores the previous switch as it begins: nothing is left for exit.
        if self._switch:
            self._begin(switch=self._previous)
        else:
            self._begin()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._end()
        if self._switch and not self._begun:  # a switch ended without a block: undo it
            _world.switch_precompile(self._previous)


def refuse_write(path: str | os.PathLike[str]) -> None:
    """Raise :class:`PrecompileOutputError` if the mode is on (before anything is written)."""
    if generating_output():
        raise PrecompileOutputError(
            f"refusing to write generated source to {Path(path)}: precompile-output mode is on "
            f"({ENV_VAR}=1 or specializer.precompile_output(True)); generated code is tied to "
            f"this process's worlds. Turn it off with specializer.precompile_output(False) or "
            f"by unsetting {ENV_VAR}, then run again"
        )


if os.environ.get(ENV_VAR, "").strip().lower() not in ("", "0", "false", "no", "off"):
    _world.set_environment_precompile(True)
