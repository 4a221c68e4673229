"""Checks of a back-end's entry template, made when its launcher is made and on the first
launch that shows a mistake: the render compiles (named by template, block and line), the
``where`` block assigns ``where_name``, every declared guard kind renders a check, and a guard
of an array or struct type checks its dtype. See :mod:`specializer.launching` ("Template
blocks") and ``docs/backend.md`` ("Guards").
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from . import codegen
from .launch_options import _DEFAULTS
from .types import DeviceArray, Struct, type_name

if TYPE_CHECKING:
    from .launching import Launcher


def function_named(tree: ast.AST, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def guarded_names(tree: ast.AST) -> set[str]:
    """The names the guard of a rendered entry (``entry``) reads."""
    return {
        n.id
        for t in ast.walk(function_named(tree, "entry"))
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
        for n in ast.walk(t.operand)
        if isinstance(n, ast.Name)
    }


def checked_render(template: str, **params: Any) -> ast.Module:
    """``template`` rendered with ``params`` and parsed; refused naming the template, the block
    and the line where the render does not compile."""
    source = codegen.render(template, **params)
    try:
        return ast.parse(source, f"<template {template}>")
    except SyntaxError as e:
        raise codegen.template_error(template, source, e, params) from None


def check_backend(launcher: Launcher) -> None:
    """Refuse a back-end's mistake now, naming it and what to write, rather than let every
    launch take the slow path: a ``defaults`` value outside the four, and a template whose
    ``where`` block assigns nothing to ``where_name``."""
    what = f"back-end {launcher.name!r} ({type(launcher).__module__}.{type(launcher).__qualname__})"
    if len(launcher.defaults) != len(launcher.options):
        raise TypeError(
            f"{what}: {len(launcher.options)} launch options but "
            f"{len(launcher.defaults)} defaults: "
            "give one default per option, in the same order"
        )
    for option, default in zip(launcher.options, launcher.defaults):
        if default not in _DEFAULTS:
            raise TypeError(
                f"{what}: the default {default!r} of launch option {option!r} is not one of "
                f'{", ".join(map(repr, _DEFAULTS))}: write "required" for an option '
                'the caller must give, "none", "zero" or "false" for one that '
                "defaults to None, 0 or False"
            )
    # One render with a launch argument of each declared guard kind: its entry must
    # assign the where, and its guard must check each argument.
    kinds = list(launcher.guard_kinds)
    params = launcher._params(kinds, ["guard_check"] * len(kinds), 0, False)
    try:
        tree = checked_render(launcher.template, name="entry_check", **params)
    except SyntaxError:
        # Without arguments first (a block of its own is at fault: the error names it),
        # then each kind alone (one that renders nothing breaks the guard's expression).
        checked_render(launcher.template, name="entry_check", **launcher._params([], [], 0, False))
        for kind in kinds:
            check_guard_kind(launcher, kind, what)
        raise
    name = launcher.where_name
    entry = function_named(tree, "entry")
    stored = any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
        for n in ast.walk(entry)
    )
    if not stored:
        raise TypeError(
            f"{what}: the `where` block of template {launcher.template!r} assigns nothing to "
            f"{name!r} (Launcher.where_name), which a front entry compares with the where "
            f"it was published for; without it every launch would take the slow path. Set "
            f"it in the block, e.g. `{name} = <the where option, or its default when None>`"
        )
    checked = guarded_names(tree)
    for i, kind in enumerate(kinds):
        if f"a{i}" not in checked:
            check_guard_kind(launcher, kind, what)


def check_guard_kind(launcher: Launcher, kind: str, what: str) -> None:
    """Refuse a declared guard kind the template does not render (naming it)."""
    params = launcher._params([kind], ["guard_check"], 0, False)
    try:
        checked = guarded_names(
            ast.parse(codegen.render(launcher.template, name="entry_check", **params))
        )
    except SyntaxError:
        checked = set()
    if "a0" not in checked:
        raise TypeError(
            f"{what}: guard kind {kind!r} (Launcher.guard_kinds) renders no check in "
            f"template {launcher.template!r}: its `guard` block must render it (see "
            "templates/guards.j2)"
        )


def check_guard(launcher: Launcher, t: type, kind: str) -> None:
    """Refuse a guard kind the back-end does not declare, and, for a parametric argument
    type, one that does not check the parameters (an int64 array would pass a float32
    array's guard and run its code)."""
    what = f"back-end {launcher.name!r}: guard_of({type_name(t)})"
    checks = launcher.guard_kinds.get(kind)
    if checks is None:
        raise TypeError(
            f"{what} returned guard kind {kind!r}, which is not one of its guard_kinds "
            f"({', '.join(sorted(launcher.guard_kinds))}); see docs/backend.md, 'Guards'"
        )
    if not checks and issubclass(t, (DeviceArray, Struct)):
        raise TypeError(
            f"{what} returned guard kind {kind!r}, which checks the class only: an argument "
            f"of another {'dtype' if issubclass(t, DeviceArray) else 'layout'} would take "
            'this signature\'s code; use a kind that checks the dtype ("cls_dtype")'
        )
