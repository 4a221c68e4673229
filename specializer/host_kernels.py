"""The HostKernel: what a back-end's lookup (``clfunction``, ``cufunction``) returns, a kernel
looked up for argument types in one where, whose call runs its lookup's invoker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .signatures import signature

__all__ = ["HostKernel"]


class HostKernel:
    """A kernel looked up for argument types ``tt`` in one *where*, ready to call like
    ``launch`` without the kernel: ``hk(*args, <launch options>)``. Its call runs the
    invoker of its lookup whatever the world (a redefinition does not change it: look up
    again, or use ``launch``). Attributes: ``f`` (the kernel or kernel instance), ``tt``,
    ``linked`` (the lookup's result), ``where``, ``invoke`` (its invoker) and ``options`` (its
    lookup's launch options). A back-end's subclass sets ``__call__ = <its launcher>.host_call``
    in its class body (the call generated for its launch options) and may add more."""

    f: Any
    tt: tuple[type, ...]
    linked: Any
    where: Any
    invoke: Callable[..., Any]
    options: dict[str, Any]

    def __init__(
        self,
        f: Any,
        tt: tuple[type, ...],
        linked: Any,
        where: Any,
        invoke: Callable[..., Any],
        options: dict[str, Any],
    ) -> None:
        self.f = f
        self.tt = tt
        self.linked = linked
        self.where = where
        self.invoke = invoke
        self.options = options

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {signature(self.linked.name, self.tt)} of {self.f!r}>"

    def __reduce__(self) -> Any:
        raise TypeError(
            "a HostKernel holds device handles and cannot be pickled: pickle the kernel and "
            "look it up again in the other process"
        )
