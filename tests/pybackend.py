"""Two small real back-ends for the core's tests, whose device source is written in Python.

The first (``kernel``, ``device``, ``pyfunction``, ``run``) implements only the compiler
interface, :class:`specializer.Backend`: ``compile`` joins the callee and kernel sources
(checking they parse), ``link`` execs them once per context and returns the kernel function.
Tests call what a lookup returns and check its output.

The second (``py``: ``py.kernel``, ``py.launch``, ``py.function``, ...) is a launching back-end
on the core's launch path, :class:`specializer.launching.Launcher`: a fuller example of that
interface than docs/backend.md's, whose one reference is ``docs/reference-backend.md`` (every
hook and template block). A kernel method
returns Python source defining ``def <name>(i, *params)``, device functions return Python
source that is prepended, and
``py.launch(k, *args, size=n, context=None)`` calls the kernel once per work item
``i in range(n)``. Arguments are numpy arrays (``py.Array[dtype]``), numpy scalars and weak
Python scalars. Its template is ``tests/templates/python_launch.py.j2``.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specializer import Backend, CompileError, CompilerConfig, cached_lookup, codegen
from specializer.kernels import SCALAR_TYPES, Definitions, Kernel, uncached_lookup
from specializer.launching import REQUIRED, HostKernel, Kind, Launcher, signature
from specializer.types import WEAK, DeviceArray, WeakScalar, type_name, weak_converter


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


# -- the launching back-end ---------------------------------------------------------------------

TEMPLATES = Path(__file__).resolve().parent / "templates"

codegen.add_template_dir(TEMPLATES)  # this back-end's template lives beside it


class Array(DeviceArray):
    """The argument type of a numpy array: ``Array[np.float32]``, below ``Array[np.floating]``."""


#: numpy scalar types to themselves, Python scalars to their weak types
_VALUE_TYPES: dict[type, type] = {
    **{t: t for t in set(SCALAR_TYPES.values())},
    **WEAK,
}
_CONCRETE_SCALARS = frozenset(np.sctypeDict.values())
_ACCEPTED = "numpy arrays, numpy scalars (np.float32(1), ...) and Python int, float and bool"


def items_typeof(value: Any) -> type:
    """The argument type of ``value``: ``Array[dtype]`` for a numpy array, a numpy scalar's
    type (a subclass's numpy base type), ``Weak[int]``/``Weak[float]``/``Weak[bool]`` for a
    Python scalar; anything else is a ``TypeError`` naming its type and what is accepted."""
    cls = value.__class__
    t = _VALUE_TYPES.get(cls)
    if t is not None:
        return t
    if isinstance(value, np.ndarray):
        return Array[value.dtype]  # a non-native byte order is a ValueError
    if isinstance(value, np.generic):
        for base in cls.__mro__:
            t = _VALUE_TYPES.get(base)
            if t is not None and base is not int and base is not float and base is not bool:
                return t
    raise TypeError(
        f"cannot pass a {cls.__module__}.{cls.__qualname__} to a kernel: accepted are {_ACCEPTED}"
    )


@dataclass(frozen=True)
class ItemsArtifact:
    """The compiled form of one kernel: its source (callees first) and code object."""

    name: str
    source: str
    code: Any


@dataclass(eq=False)
class ItemsLinked:
    """A kernel linked in one context: the lookup's result that launches run.

    ``name``, ``tt`` (the concrete types of its method instance, captured ones first) and
    ``invokers`` (filled by the core) are what the launch path reads; ``fn`` is the function
    that runs one work item, ``params`` its parameter names after ``i`` (for messages)."""

    name: str
    tt: tuple[type, ...]
    params: tuple[str, ...]
    fn: Any
    context: Any
    invokers: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<ItemsLinked {signature(self.name, self.tt)} in {self.context!r}>"


class ItemsBackend(Backend):
    """Compiles Python device source (callees first) and execs it once per context."""

    name = "python-items"

    def __init__(self) -> None:
        self.links = 0

    def compile(self, job):
        source = "\n".join(job.device_sources())
        filename = f"<pybackend device {codegen.identifier(job.name)}>"
        try:
            tree = ast.parse(source, filename)
            code = compile(tree, filename, "exec")
        except SyntaxError as e:
            raise CompileError(
                f"kernel {signature(job.name, job.mi.tt)} does not compile: {e}\n"
                f"--- its source:\n{source}"
            ) from None
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        if job.name not in defined:
            raise CompileError(
                f"the source of kernel {signature(job.name, job.mi.tt)} defines no function "
                f"named {job.name!r} (it defines: {', '.join(defined) or 'none'})"
            )
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return ItemsArtifact(job.name, source, code)

    def link(self, job, artifact, context):
        self.links += 1
        ns: dict[str, Any] = {"__name__": f"pybackend.device.{job.name}", "np": np}
        ns.update(job.config.options)  # the `defines` compiler option, as globals
        ns["context"] = context
        exec(artifact.code, ns)
        fn = ns[job.name]
        params = tuple(inspect.signature(job.mi.method.fn).parameters)
        return ItemsLinked(job.name, tuple(job.mi.tt), params, fn, context)


def _size(size: Any) -> int:
    """A launch's size that failed the fast path's check: an int-like >= 0, else an error."""
    if isinstance(size, (bool, np.bool_)) or not hasattr(size, "__index__"):
        raise TypeError(
            f"size must be an int (the number of work items), got {type(size).__name__} {size!r}"
        )
    n = size.__index__()
    if n < 0:
        raise ValueError(f"size must be >= 0 (the number of work items), got {n}")
    return n


class PyLauncher(Launcher):
    """The launch path of the Python-items back-end (the core's :class:`Launcher`)."""

    name = "py"
    template = "python_launch.py.j2"
    options = {"size": REQUIRED, "context": None}
    compiler_kwargs = {"defines": "{name: value}, the kernel source's extra globals"}
    lookup_name = "py.function"

    def __init__(self, definitions: Definitions, backend: ItemsBackend) -> None:
        self.backend = backend
        self.default = [DEFAULT_CONTEXT]  # the default context's cell
        self.namespace = {"_default": self.default, "_size": _size}
        self._configs: dict[tuple, CompilerConfig] = {}
        self._configs_lock = threading.Lock()
        super().__init__(definitions)

    def config(self, defines: tuple) -> CompilerConfig:
        config = self._configs.get(defines)
        if config is None:
            with self._configs_lock:
                config = self._configs.setdefault(defines, CompilerConfig(self.backend, defines))
        return config

    def uncached_lookup(self, F, tt, key):
        context, defines = key
        return uncached_lookup(F, tt, self.config(defines), context)

    def key(self, where, kw):
        _context(where)  # a context names one: hashable
        if not kw:
            return (where, ())
        unknown = sorted(set(kw) - {"defines"})
        if unknown:
            raise self.keyword_error(unknown)
        defines = kw["defines"]
        items = defines.items() if isinstance(defines, dict) else defines
        try:
            pairs = tuple(sorted((name, value) for name, value in items))
            hash(pairs)
        except (TypeError, ValueError):
            raise TypeError(
                "defines are the kernel source's extra globals: a dict (or pairs) of "
                f"identifiers to hashable values, got {defines!r}"
            ) from None
        for name, _ in pairs:
            if not (isinstance(name, str) and name.isidentifier()):
                raise TypeError(f"defines: {name!r} is not an identifier")
        return (where, pairs)

    def kind(self, t, r, captured):
        if isinstance(t, type) and issubclass(t, WeakScalar):
            # converted on every launch to the declared type, with the core's range check
            return Kind("weak", t.pytype, values={"convert": weak_converter(r)})
        if isinstance(t, type) and issubclass(t, Array):
            if t.eltype not in _CONCRETE_SCALARS:
                raise TypeError(f"{type_name(t)} is abstract: a lookup takes concrete types")
            return Kind("value", np.ndarray, t.dtype)
        if isinstance(t, type) and t in _VALUE_TYPES:
            return Kind("value", t)
        raise TypeError(f"{type_name(t)} is not an argument type of this back-end")


def _context(context: Any) -> Any:
    """A launch's where: its context, which names a context and must be hashable."""
    try:
        hash(context)
    except TypeError:
        raise TypeError(
            f"context names a context and must be hashable, got a {type(context).__name__}"
        ) from None
    return context


DEFAULT_CONTEXT = "default context"


class _Items:
    """The Python-items back-end, used like ``specializer.backends.opencl`` (``py.kernel``,
    ``py.launch``, ...)."""

    def __init__(self) -> None:
        self.backend = ItemsBackend()
        self.definitions = Definitions(items_typeof, module="pybackend.py")
        self.launcher = launcher = PyLauncher(self.definitions, self.backend)
        self.kernel = self.definitions.kernel
        self.device = self.definitions.device
        self.capture = self.definitions.capture
        self.typeof = items_typeof
        self.Array = Array

        class ItemsHostKernel(HostKernel):
            """A kernel looked up for argument types in one context: ``hk(*args, size=n)``."""

            __call__ = launcher.host_call

            @property
            def context(self) -> Any:
                """The context it was looked up in: its where."""
                return self.where

        self.HostKernel = ItemsHostKernel
        #: ``launch(f, *args, size, context=None, **compiler_kwargs)``: run ``f`` once per work
        #: item ``i in range(size)``; the compiler option is ``defines=`` (extra globals).
        self.launch = self.launcher.launch

    def function(self, f: Any, tt: Any, context: Hashable = None, **kw: Any) -> Any:
        """The lookup of ``f`` for argument types ``tt`` in ``context`` (default: the default
        context), as a HostKernel: ``hk(*args, size=n)``."""
        return self.launcher.function(self.HostKernel, f, tt, {"context": context}, kw)

    def default_context(self) -> Any:
        return self.launcher.default[0]

    def set_default_context(self, context: Hashable) -> None:
        if context is None:
            raise TypeError("the default context is a hashable object naming a context, not None")
        self.launcher.default[0] = _context(context)


py = _Items()


__all__ = [
    "BACKEND",
    "CONFIG",
    "Array",
    "device",
    "items_typeof",
    "kernel",
    "np",
    "py",
    "pyfunction",
    "run",
    "typeof",
]
