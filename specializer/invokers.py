"""Invokers: one per full concrete signature (captured and argument types, weak types
resolved), generated from a back-end's template (``templates/launch.py.j2``, part
``"invoker"``) and bound to a linked kernel, which keeps it: a straight line that checks and
sets each parameter by its :class:`Kind` and enqueues, as pyopencl's ``enqueue_knl_*``."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import codegen
from .locks import new_lock
from .types import DeviceArray, Struct, type_name

__all__ = ["Invokers", "Kind", "Missed", "check_values"]

#: The longest name of a generated function (its def line fits in 100 columns).
NAME_LIMIT = 80


class Missed(Exception):
    """What an invoker raises, having touched nothing, for arguments its guards refuse (the
    launch tries the kernel's other entries, then the slow path, which types them)."""


@dataclass(frozen=True)
class Kind:
    """What a back-end's ``kind`` says of one kernel parameter: how its template checks and
    sets the value (``name``), and what the core renders and binds for it."""

    #: the template's name for it ("array", "scalar", ...)
    name: str
    #: a launch argument's guard: its value's exact class (None: the template's own guard)
    cls: type | None = None
    #: and its dtype (an array's, a struct's), compared by identity, then by value
    dtype: Any = None
    #: what converts a value of a subclass of ``cls`` before it is set (slow path only)
    exact: Callable[[Any], Any] | None = None
    #: what a miss asks of (where, value) first: what is wrong with the value there, or None
    check: Callable[[Any, Any], str | None] | None = None
    #: the template's globals for it, bound as ``_<key><i>``
    values: Mapping[str, Any] = field(default_factory=dict)


#: an invoker and the kinds of its parameters
Made = tuple[Callable[..., Any], list[Kind]]


class Invokers:
    """A launcher's invokers: each signature's factory, generated once (code, not state),
    and the invoker of a linked kernel, made once and kept in its ``invokers`` dict by
    (``owner``, captured types or None for a kernel, argument types)."""

    def __init__(
        self,
        owner: Hashable,
        name: str,
        template: str,
        options: Mapping[str, Any],
        namespace: Mapping[str, Any],
        kind: Callable[[type, type, bool], Kind],
    ) -> None:
        self.owner = owner
        self.name = name
        self.template = template
        self.options = options
        self.namespace = namespace
        self.kind = kind
        #: (captured types or None, argument types, concrete types) -> (factory, kinds)
        self._factories: dict[tuple[Any, ...], tuple[Callable[[Any], Any], list[Kind]]] = {}
        self._lock = new_lock(reentrant=False)

    def of(self, linked: Any, instance: tuple[type, ...] | None, tt: tuple[type, ...]) -> Made:
        """The invoker of (``instance``'s captured types, ``tt``) bound to ``linked``."""
        ident = (self.owner, instance, tt)
        try:
            made = linked.invokers.get(ident)
        except AttributeError:
            raise TypeError(
                f"back-end {self.name!r}: uncached_lookup returned {type(linked).__name__}, "
                "which has no `invokers` dict (the core keeps each signature's invoker there)"
            ) from None
        if made is None:
            factory, kinds = self.factory(instance, tt, tuple(linked.tt))
            made = linked.invokers.setdefault(ident, (factory(linked), kinds))
        return made  # type: ignore[no-any-return]

    def params(
        self, instance: tuple[type, ...] | None, tt: tuple[type, ...], resolved: tuple[type, ...]
    ) -> tuple[tuple[str, ...], dict[str, Any], list[Kind]]:
        """The name parts, template parameters and kinds of the invoker of (a kernel
        instance's captured types, or None for a kernel; the argument types ``tt``; the
        concrete types ``resolved``): what ``tools/regen_generated.py`` renders for review."""
        captured = instance or ()
        full = captured + tt
        kinds = [self.kind(t, r, i < len(captured)) for i, (t, r) in enumerate(zip(full, resolved))]
        parts = (f"{self.name}_invoker", *(type_name(t) for t in full))
        if instance is not None:
            parts += (f"captured_{len(captured)}",)
        params = {
            "part": "invoker",
            "options": list(self.options),
            "kinds": [k.name for k in kinds],
            "dtypes": [k.dtype is not None for k in kinds],
            "exact": [k.exact is not None for k in kinds],
            "captured": len(captured),
            "instance": instance is not None,
        }
        return (codegen.identifier(*parts, limit=NAME_LIMIT),), params, kinds

    def factory(
        self, instance: tuple[type, ...] | None, tt: tuple[type, ...], resolved: tuple[type, ...]
    ) -> tuple[Callable[[Any], Any], list[Kind]]:
        """The signature's factory, ``make(linked) -> invoke``, generated once, and its kinds."""
        ident = (instance, tt, resolved)
        made = self._factories.get(ident)
        if made is not None:
            return made
        parts, params, kinds = self.params(instance, tt, resolved)
        namespace = {
            "_OPTIONS": tuple(self.options.values()),
            "_Missed": Missed,
            "_ndarray": np.ndarray,
            **self.namespace,
        }
        for i, (t, k) in enumerate(zip((instance or ()) + tt, kinds)):
            if k.cls is not None and k.dtype is None and issubclass(t, (DeviceArray, Struct)):
                raise TypeError(
                    f"back-end {self.name!r}: kind({type_name(t)}) guards the class only: an "
                    f"argument of another {'dtype' if issubclass(t, DeviceArray) else 'layout'} "
                    "would run this signature's code; give the Kind its dtype"
                )
            namespace[f"_C{i}"], namespace[f"_D{i}"], namespace[f"_X{i}"] = k.cls, k.dtype, k.exact
            namespace.update({f"_{key}{i}": v for key, v in k.values.items()})
        what = ", ".join(map(type_name, (instance or ()) + tt))
        with self._lock():
            made = self._factories.get(ident)
            if made is None:
                factory = codegen.generate(
                    self.template, parts, namespace, f"{self.name} invoker of ({what})", **params
                )
                made = self._factories[ident] = (factory, kinds)
        return made


def check_values(
    kinds: list[Kind], where: Any, kernel: str, captured: tuple[Any, ...], args: tuple[Any, ...]
) -> None:
    """What the kinds check of the values (captured ones first) against the where: a
    ValueError naming the value that is not right there and ``kernel``."""
    for i, (k, v) in enumerate(zip(kinds, (*captured, *args))):
        wrong = None if k.check is None else k.check(where, v)
        if wrong is None:
            continue
        if i < len(captured):
            raise ValueError(f"captured value {i} of kernel {kernel} is {wrong}")
        raise ValueError(
            f"argument {i - len(captured)} of kernel {kernel} (counting launch arguments from "
            f"0) is {wrong}"
        )
