"""A small real back-end for the core's tests: it compiles device source written in Python.

It implements the same :class:`specializer.Backend` interface as the OpenCL and CUDA
back-ends: ``compile`` joins the callee and kernel sources (checking they parse),
``link`` execs them once per context and returns the kernel function. Tests then
call what a lookup returns and check its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specializer import Backend, CompileError, CompilerConfig, cached_lookup
from specializer.kernels import SCALAR_TYPES, Definitions, Kernel, uncached_lookup


@dataclass(frozen=True)
class PyArtifact:
    source: str
    code: Any


class PyBackend(Backend):
    name = "python"

    def __init__(self) -> None:
        self.links = 0

    def compile(self, job):
        source = "\n".join(job.device_sources())
        try:
            code = compile(source, f"<device {job.name}>", "exec")
        except SyntaxError as e:
            raise CompileError(f"kernel {job.name} does not compile: {e}") from None
        return PyArtifact(source, code)

    def link(self, job, artifact, context):
        self.links += 1
        ns: dict[str, Any] = {"context": context}
        exec(artifact.code, ns)
        return ns[job.name]


def typeof(value: Any) -> type:
    t = SCALAR_TYPES.get(type(value))
    if t is None:
        raise TypeError(f"unsupported {type(value).__name__}")
    return t


BACKEND = PyBackend()
CONFIG = CompilerConfig(BACKEND)
defs = Definitions(typeof)
kernel = defs.kernel
device = defs.device


def pyfunction(f: Any, tt: tuple[type, ...], context: Any = "ctx0") -> Any:
    """The back-end's lookup, wrapped in cached_lookup like clfunction/cufunction."""
    F = f if isinstance(f, Kernel) else type(f)
    return cached_lookup(
        lambda: uncached_lookup(F, tt, CONFIG, context), object, F, tt, (context, ())
    )


def run(f: Any, *args: Any, context: Any = "ctx0") -> Any:
    """Launch: typeof each argument, the lookup, then the call (captured values first)."""
    tt = tuple(typeof(a) for a in args)
    fn = pyfunction(f, tt, context)
    captured = () if isinstance(f, Kernel) else f.values
    return fn(*captured, *args)


__all__ = ["BACKEND", "CONFIG", "device", "kernel", "np", "pyfunction", "run", "typeof"]
