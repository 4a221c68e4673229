"""The HostKernel: what a lookup (``clfunction``, ``cufunction``, ``Launcher.function``)
returns, the signature's generated call bound to an instance of a back-end's HostKernel
class; and each back-end's record of device use, which its calls read in a fork's child.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .launch_options import signature

__all__ = ["DeviceUse", "HostKernel", "HostKernelType"]


class HostKernelType(type):
    """The class of every HostKernel class: ``isinstance(hk, cls)`` holds for the bound
    methods whose ``__self__`` is an instance of ``cls``. Each class gets its own
    :class:`DeviceUse`."""

    device_use: DeviceUse

    def __init__(cls, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls.device_use = DeviceUse()

    def __instancecheck__(cls, obj: Any) -> bool:
        if obj.__class__ is types.MethodType:
            obj = obj.__self__
        return type.__instancecheck__(cls, obj)


class DeviceUse:
    """A back-end's record of device use: ``pid``, the process that used the device (or
    None), and ``fork``, the cell every HostKernel call reads: ``[None]``, or in a fork's
    child ``[the fork check]`` (one store; no class is patched)."""

    __slots__ = ("fork", "pid")

    def __init__(self) -> None:
        self.pid: int | None = None
        self.fork: list[Callable[[], None] | None] = [None]


class HostKernel(metaclass=HostKernelType):
    """A kernel looked up for argument types ``tt`` in one *where* (a queue, a context), ready
    to call like ``launch`` without the kernel: ``hk(*args, <launch options>)``.

    A lookup returns its generated call bound as a method to an instance of this class (one
    frame before the signature's entry; ``isinstance`` holds). Attributes: ``f``, the kernel
    or kernel instance, ``tt``, ``linked`` (the lookup's result) and ``where``; a back-end's
    subclass sets more in ``__init__``. It runs its lookup's code in any world (SPEC 7) and
    cannot be pickled.
    """

    f: Any
    tt: tuple[type, ...]
    linked: Any
    where: Any

    def __init__(self, f: Any, where: Any, tt: tuple[type, ...], linked: Any) -> None:
        self.f = f
        self.tt = tt
        self.linked = linked
        self.where = where

    @classmethod
    def new(
        cls, call: Callable[..., Any], f: Any, where: Any, tt: tuple[type, ...], linked: Any
    ) -> Any:
        """The HostKernel of ``call`` (a signature's generated call, made for it alone): the
        call bound to a new instance, whose attributes it carries."""
        made = cls(f, where, tt, linked)
        call.__dict__.update(made.__dict__)  # read through the bound method
        call.__name__ = call.__qualname__ = getattr(linked, "name", call.__name__)
        return types.MethodType(call, made)

    if TYPE_CHECKING:  # what a HostKernel is to a type checker: its call

        def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {signature(self.linked.name, self.tt)} of {self.f!r}>"

    def __reduce__(self) -> Any:
        raise TypeError(
            "a HostKernel holds device handles and cannot be pickled: pickle the kernel and "
            "look it up again in the other process"
        )
