"""CUDA's :class:`KernelSource` and the NVRTC :class:`Program` a compiler job makes (its device
sources, callees first, with every part's headers and options)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from ...compiler import CompileError, CompilerJob
from ...sources import KernelSource as _KernelSource
from ...sources import method_options

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class KernelSource(_KernelSource):
    """A kernel method's source with how to compile it: ``KernelSource(source,
    entry="reduce2<float>", name="reduce_kernel.cu", headers={"common.h": text},
    options=("-DREAL=float",))``, each part of every cache key. ``entry`` is an NVRTC name
    expression (a template instance, or one of several kernels; ``None``: the method's name),
    ``name`` the program's name, ``headers`` in-memory headers by include name, ``options``
    NVRTC options from the method's types (``docs/arguments.md``, "Options from a method")."""

    __slots__ = ("entry", "headers", "name")
    entry: str | None
    name: str | None
    headers: tuple[tuple[str, str], ...]
    BACKEND = "CUDA"
    OPTIONS = "NVRTC option strings"
    OPTION = "an NVRTC option"
    EXAMPLE = "-DREAL=float"

    def __new__(
        cls,
        source: str,
        entry: str | None = None,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        options: str | Sequence[str] = (),
    ) -> KernelSource:
        if entry is not None and (
            not isinstance(entry, str) or not entry.strip() or any(c in entry for c in "\0\n;{}")
        ):
            raise ValueError(
                f"entry= is the name expression of one __global__ function, such as "
                f"'reduce2<float>' or 'my_kernel', got {entry!r}"
            )
        if name is not None and (not isinstance(name, str) or not name.strip() or "\0" in name):
            raise ValueError(f"name= is the program's file name, such as 'kernel.cu', got {name!r}")
        if headers is None:
            items: tuple[tuple[str, str], ...] = ()
        elif isinstance(headers, Mapping) and all(
            isinstance(k, str) and k and "\0" not in k and isinstance(v, str)
            for k, v in headers.items()
        ):
            items = tuple(sorted(headers.items()))
        else:
            raise TypeError(
                f"headers= maps include names to header texts, such as "
                f"{{'common.h': '#define N 256'}}, got {headers!r}"
            )
        self = super().__new__(cls, source, options=options)
        self.entry = entry.strip() if entry is not None else None
        self.name = name
        self.headers = items
        return self

    def __repr__(self) -> str:
        extra = "" if self.name is None else f", name={self.name!r}"
        if self.headers:
            extra += f", headers={dict(self.headers)!r}"
        if self.options:
            extra += f", options={self.options!r}"
        return f"KernelSource({str.__repr__(self)}, entry={self.entry!r}{extra})"


@dataclass(frozen=True)
class Program:
    """What one NVRTC program is built from (every part's in-memory headers merged)."""

    source: str
    name: str | None
    headers: tuple[tuple[str, str], ...]
    arch: str
    options: tuple[str, ...]


def kernel_program(job: CompilerJob) -> tuple[Program, str]:
    """(the program of the job, the kernel's name expression)."""
    # cast: this back-end's configs are all made by compiler_config: (arch, NVRTC options)
    arch, options = cast("tuple[str, tuple[str, ...]]", job.config.options)
    sources = job.device_sources()
    last = sources[-1] if sources else None
    entry = getattr(last, "entry", None)
    if entry is None:
        if not _C_IDENTIFIER.match(job.name):
            raise CompileError(f"kernel {job.name!r}: a CUDA kernel's name must be a C identifier")
        entry = job.name
    headers: dict[str, str] = {}
    for part in sources:
        for h, text in getattr(part, "headers", ()):
            if headers.setdefault(h, text) != text:
                raise CompileError(
                    f"kernel {job.name}: two parts of its source (the kernel's and a callee's) "
                    f"give different in-memory headers named {h!r}; give each its own name"
                )
    name = getattr(last, "name", None)
    # the methods' own options first; the compiler keyword arguments' are added to them
    options = method_options(job, sources) + options
    return Program("\n".join(sources), name, tuple(sorted(headers.items())), arch, options), entry
