"""A method's device source with the options its types need (:class:`KernelSource`, which each
back-end subclasses), option splitting, and the check of the options a job's methods returned."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from .compiler import CompilerJob
from .signatures import signature

__all__ = ["KernelSource", "method_options", "split_options"]

_S = TypeVar("_S", bound="KernelSource")


def split_options(options: Any, what: str, kind: str) -> tuple[Any, ...]:
    """``options`` as a tuple: a str split by shell rules, as pyopencl splits build options, a
    sequence as it is; ``what`` (``"options="``) and ``kind`` name them in errors."""
    if isinstance(options, str):
        try:
            return tuple(shlex.split(options))
        except ValueError as e:
            raise ValueError(f"{what}{options!r} do not split as shell words: {e}") from None
    if not isinstance(options, Sequence) or isinstance(options, (bytes, bytearray)):
        raise TypeError(f"{what} are {kind}, a str or a sequence of str, got {options!r}")
    return tuple(options)


class KernelSource(str):
    """A method's source (a ``str``) with the options its concrete types need:
    ``KernelSource(source, options=("-DT=float",))``; a callee's come first, then the
    kernel's, then the compiler keyword arguments'. Each back-end subclasses it."""

    __slots__ = ("options",)
    options: tuple[Any, ...]
    #: for messages: the back-end, what its options are, what one is, an example
    BACKEND: ClassVar[str] = "device"
    OPTIONS: ClassVar[str] = "compiler options"
    OPTION: ClassVar[str] = "a compiler option"
    EXAMPLE: ClassVar[str] = "-DT=float"

    def __new__(cls: type[_S], source: str, *, options: str | Sequence[str] = ()) -> _S:
        if not isinstance(source, str):
            raise TypeError(f"KernelSource takes the source as a str, got {type(source).__name__}")
        self = super().__new__(cls, source)
        self.options = split_options(options, "KernelSource options=", cls.OPTIONS)
        return self

    def __repr__(self) -> str:
        return f"KernelSource({str.__repr__(self)}, options={self.options!r})"


def method_options(job: CompilerJob, sources: Sequence[str]) -> tuple[str, ...]:
    """The options the job's methods returned, the callees' first; a non-str is a TypeError."""
    out: list[str] = []
    for mi, part in zip((*job.callees, job.mi), sources):
        options = getattr(part, "options", ())
        for o in options:
            if not isinstance(o, str):
                cls = type(part) if isinstance(part, KernelSource) else KernelSource
                what = "kernel" if mi is job.mi else "device function"
                name = mi.method.gf.name
                raise TypeError(
                    f"{cls.BACKEND} {what} {name}: its method "
                    f"{signature(name, mi.method.signature)} returned KernelSource "
                    f"options={options!r} for {signature(name, mi.tt)}: {o!r} "
                    f"({type(o).__name__}) is not {cls.OPTION}; options are str, such as "
                    f"'{cls.EXAMPLE}'"
                )
        out.extend(options)
    return tuple(out)
