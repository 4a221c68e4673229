"""Precompile-output mode: store nothing that would outlive this process's worlds.

Julia stores nothing in ``cached_lookup`` while generating output, because the
cache would be serialized with its callers, and world numbers and device handles
mean nothing in another session. Here, while the mode is on, cached lookups store
nothing (every call runs its lookup) and writing generated source to disk is
refused. Turn it on with ``SPECIALIZER_PRECOMPILE_OUTPUT=1``,
``precompile_output(True)``, or ``with precompile_output():``.
"""

from __future__ import annotations

import dis
import os
import sys
from pathlib import Path
from types import FrameType

from . import world as _world

__all__ = ["ENV_VAR", "PrecompileOutputError", "generating_output", "precompile_output"]

ENV_VAR = "SPECIALIZER_PRECOMPILE_OUTPUT"


class PrecompileOutputError(RuntimeError):
    """Something refused while precompile-output mode is on."""


def generating_output() -> bool:
    """Whether precompile-output mode is on."""
    return _world.precompiling()


class precompile_output(_world.Scope):
    """Turn precompile-output mode on or off.

    ``precompile_output(True)`` / ``precompile_output(False)`` switch it at once, until the
    next such call. ``with precompile_output():`` (or ``with precompile_output(on):``) sets it
    for the block: inside, the mode is that of the innermost block (the one entered last of
    those still active, in any thread), and after the last block ends it is the mode as last
    switched outright. Blocks in several threads each count, however they overlap; a block
    ends whatever interrupts it. The form without an argument changes nothing until its
    block begins.
    """

    def __init__(self, on: bool | None = None) -> None:
        super().__init__("precompile", True if on is None else bool(on))
        self._switched: tuple[bool, int] | None = None
        # ``with precompile_output(on):`` switches nothing outright: its block counts from
        # __enter__, so an interrupt between the construction and the block's start leaves
        # the mode as it was. The plain call (anything but a with statement's own
        # construction) switches it for good.
        if on is not None and not _with_statement(sys._getframe(1)):
            self._switched = _world.set_precompile(bool(on))

    def _enter_ops(self) -> list:
        # A block made with an argument switched the mode outright when it was made; as it
        # begins, that switch is undone (unless another came since) and the block rules.
        return [] if self._switched is None else _world.restore_precompile_ops(self._switched)


_CACHE = dis.opmap.get("CACHE", -1)
_WITH_STARTS = {dis.opmap[name] for name in ("BEFORE_WITH", "SETUP_WITH") if name in dis.opmap}


def _with_statement(frame: FrameType) -> bool:
    """Whether the call ``frame`` is making is a with statement's construction of its
    context manager: the next instruction (past the call's inline caches) starts the with."""
    code, i = frame.f_code.co_code, frame.f_lasti + 2
    while i < len(code) and code[i] == _CACHE:
        i += 2
    return i < len(code) and code[i] in _WITH_STARTS


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
