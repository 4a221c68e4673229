"""Programs: ``KernelSource``, build options, the per-context program cache, the
``OpenCLBackend`` (compile, link, a failed build's message), ``LinkedKernel`` and its
argument-set records."""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

import pyopencl as cl

from ... import includes
from ...compiler import Backend, CompileError, CompilerJob
from ...locks import new_lock
from ...signatures import signature
from ...sources import KernelSource as _KernelSource
from ...sources import method_options
from .. import _pyopencl_private as _private
from ._cdecl import check_params
from ._decorators import definitions
from ._queues import ContextKey

_private.cache_off_without_home()  # no home: pyopencl's caches would fail every Kernel (SPEC 9)


class KernelSource(_KernelSource):
    """A method's OpenCL C source with the build options its concrete types need:
    ``KernelSource(source, options=("-DT=float",))``, a sequence of str or one str split by
    shell rules as pyopencl splits it. They join the program's key, and the launch's own
    ``options=`` come after them; a device function's apply to the whole program, the
    callees' first (``docs/arguments.md``, "Options from a method")."""

    __slots__ = ()
    BACKEND = "OpenCL"
    OPTIONS = "OpenCL build options"
    OPTION = "a build option"


@dataclass(frozen=True)
class OpenCLSource:
    """The artifact: a kernel's and its callees' OpenCL C, with their methods' build options."""

    name: str
    source: str
    options: tuple[str, ...] = ()


def nothing() -> None:
    """A pool record's mark where nothing is known to be set: called as a dead weak reference."""


class LinkedKernel:
    """A kernel built in one context: the lookup's result, cached per (compiled code, context).
    It holds no kernel instance, so no captured value. ``pool`` holds the kernel objects
    launches take and give back; ``invokers`` the invoker of each lookup signature."""

    __slots__ = (
        "__weakref__",
        "built",
        "ck",
        "context_ptr",
        "invokers",
        "kernel",
        "name",
        "params",
        "pool",
        "program",
        "source",
        "tt",
    )

    def __init__(
        self,
        name: str,
        tt: tuple[type, ...],
        ck: ContextKey,
        built: _Built,
        kernel: Any,
        source: str,
    ) -> None:
        self.name = name
        self.tt = tt  # every kernel parameter's concrete type, captured ones first
        self.ck = ck  # the context's key: it holds the context weakly
        self.built = built  # shared by the kernels of one program; keeps it in _programs
        self.program = built.program
        self.context_ptr = ck.ptr  # what a new array is checked against
        self.kernel = kernel
        self.source = source
        self.params = _param_names(source, name)
        self.invokers: dict[Any, Any] = {}  # the core's: each signature's invoker
        # Launches use kernel objects of their own: ``kernel`` is the user's to inspect.
        self.pool: list[list[Any]] = [self.new_record()]

    @property
    def context(self) -> cl.Context | None:
        """The context it was built in (``None`` once the user dropped that context)."""
        return self.ck.context()

    def new_record(self) -> list[Any]:
        """A pool record with a new kernel object (its fields: ``opencl_launch.py.j2``)."""
        knl = cl.Kernel(self.program, self.name)
        return [
            knl.set_arg,
            _private.set_arg_buf(knl),
            knl,
            *([nothing] * len(self.tt)),
            (nothing,),  # no global size is that object
        ]

    def __repr__(self) -> str:
        return f"<LinkedKernel {signature(self.name, self.tt)} in {self.context!r}>"


def _param_names(source: str, name: str) -> list[str]:
    """The parameter names of ``__kernel ... name(...)`` in ``source``, for messages (or none)."""
    m = re.search(r"\b(?:__)?kernel\b[^;{]*?\b" + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if not m:
        return []
    words = (re.findall(r"[A-Za-z_]\w*", p) for p in m.group(1).split(","))
    return [w[-1] if w else "?" for w in words]


def _build_log(program: cl.Program, context: cl.Context, error: Exception) -> str:
    # A source build (PoCL's path) keeps the failed program, whose log is the compiler's
    # text alone; otherwise pyopencl's message carries the log.
    logs = []
    for dev in context.devices:
        try:
            # pyopencl's Program.get_build_info is unannotated (it forwards *args)
            log = program.get_build_info(dev, cl.program_build_info.LOG).strip()  # type: ignore[no-untyped-call]
        except cl.Error:
            continue
        if log:
            logs.append(f"on {dev.name}:\n{log}")
    return "\n".join(logs) if logs else str(error)


_IMPLICIT = re.compile(r"implicit declaration of function '(\w+)'")


def _callee_hint(log: str) -> str:
    """A hint naming the device functions the log found undeclared: not in the kernel's callees."""
    devices = {gf.name for gf in definitions.device_functions()}
    names = sorted({n for n in _IMPLICIT.findall(log) if n in devices})
    if not names:
        return ""
    listed = ", ".join(names)
    return (
        f"\nhint: {listed} {'is a device function' if len(names) == 1 else 'are device functions'}"
        f" of this back-end that the kernel calls but does not list: add "
        f"{'it' if len(names) == 1 else 'them'} to @kernel(callees=[{listed}])"
    )


# One program per (context, source, build options: the methods' then the launch's, the user
# headers it includes), held weakly: a program lives while a linked kernel uses it.
_programs: weakref.WeakKeyDictionary[
    cl.Context, weakref.WeakValueDictionary[tuple[str, tuple[str, ...], tuple[str, str]], _Built]
] = weakref.WeakKeyDictionary()
_programs_lock = new_lock(reentrant=False)
_ARG_INFO = "-cl-kernel-arg-info"


def _build_options_for(
    options: tuple[str, ...], ck: ContextKey, context: cl.Context
) -> tuple[str, ...]:
    """The options a program is built with: ``-I`` directories made absolute (else resolved
    against whatever directory the compiler runs in), and ``-cl-kernel-arg-info`` where every
    device takes it (OpenCL 1.2+, asked once per context), for :func:`check_params`."""
    out: list[str] = []
    it = iter(options)
    for o in it:
        if o == "-I":
            d = next(it, None)
            out += ["-I"] if d is None else ["-I", os.path.abspath(d)]
        elif o.startswith("-I"):
            out.append("-I" + os.path.abspath(o[2:]))
        else:
            out.append(o)
    if ck.arg_info is None:  # the devices' versions: a property of the context, asked once
        versions = (re.match(r"OpenCL (\d+)\.(\d+)", d.version) for d in context.devices)
        ck.arg_info = all(v and (int(v[1]), int(v[2])) >= (1, 2) for v in versions)
    if _ARG_INFO not in out and ck.arg_info:
        out.append(_ARG_INFO)
    return tuple(out)


def _headers_digest(source: str, build: tuple[str, ...]) -> tuple[str, str]:
    """What the user headers ``source`` includes hold (SPEC 3), from the ``-I`` directories
    and the current directory, which PoCL searches first (``-I.``) and others last or not at
    all: both orders are keyed."""
    dirs = includes.include_dirs(build)
    cwd = os.getcwd()
    first = includes.digest(source, [cwd, *dirs])
    if not first:  # it includes nothing: the order of the directories is moot
        return "", ""
    return first, includes.digest(source, [*dirs, cwd])


class _Built:
    """A built program (the raw handle) and the kernels it defines: what linked kernels share."""

    __slots__ = ("__weakref__", "names", "program")

    def __init__(self, program: Any, names: str) -> None:
        self.program = program
        self.names = names


class OpenCLBackend(Backend):
    """Compiles kernels to OpenCL C source and builds them per context with pyopencl."""

    name = "opencl"

    def compile(self, job: CompilerJob) -> OpenCLSource:
        sources = job.device_sources()
        for mi, text in zip((*job.callees, job.mi), sources):
            if "\0" in text:  # the OpenCL compiler would build the text before it alone
                line = text.count("\n", 0, text.index("\0")) + 1
                what = "kernel" if mi is job.mi else "device function"
                raise CompileError(
                    f"the source of OpenCL {what} {signature(mi.method.gf.name, mi.tt)}"
                    f" has a NUL character on its line {line}: OpenCL C source is text, and "
                    "a compiler would read it only up to there"
                )
        return OpenCLSource(job.name, "\n\n".join(sources), method_options(job, sources))

    def _build(
        self, job: CompilerJob, artifact: OpenCLSource, ck: ContextKey, context: cl.Context
    ) -> _Built:
        source = artifact.source
        # cast: this back-end's configs are all made by _config, from a tuple of build options
        options = artifact.options + tuple(cast("tuple[str, ...]", job.config.options))
        build = _build_options_for(options, ck, context)
        # The user's options: building adds the same to every program of the context, but for
        # -I directories made absolute, which the digest names.
        key = (source, options, _headers_digest(source, build))
        with _programs_lock():
            table = _programs.setdefault(context, weakref.WeakValueDictionary())
            built = table.get(key)
        if built is not None:
            return built
        program = cl.Program(context, source)
        try:
            program.build(options=list(build))
        except cl.Error as e:
            log = _build_log(program, context, e)
            lines = enumerate(source.splitlines(), 1)
            numbered = "\n".join(f"{i:4d} | {line}" for i, line in lines)
            raise CompileError(
                f"OpenCL kernel {signature(job.name, job.mi.tt)} does not build "
                f"(build options: {' '.join(options) or 'none'}):\n{log}{_callee_hint(log)}\n"
                f"--- its source (the callees', then the kernel's) ---\n{numbered}"
            ) from None
        raw = _private.raw_program(program)
        built = _Built(raw, raw.get_info(cl.program_info.KERNEL_NAMES) or "")
        with _programs_lock():
            return table.setdefault(key, built)

    def link(self, job: CompilerJob, artifact: Any, context: Hashable) -> LinkedKernel:
        if not isinstance(context, ContextKey):
            raise TypeError(f"an OpenCL kernel is linked for a context key, got {context!r}")
        ctx = context.context()
        if ctx is None:
            raise RuntimeError("the context of this lookup was dropped")
        sig = signature(job.name, job.mi.tt)
        built = self._build(job, artifact, context, ctx)
        try:
            knl = cl.Kernel(built.program, job.name)
        except cl.Error:
            raise CompileError(
                f"the source of OpenCL kernel {sig} defines no __kernel named "
                f"{job.name!r} (it defines: {built.names or 'none'}); a method body returns "
                "source that defines a __kernel function named like the method"
            ) from None
        nargs = knl.get_info(cl.kernel_info.NUM_ARGS)
        if nargs != len(job.mi.tt):
            raise CompileError(
                f"OpenCL kernel {job.name} takes {nargs} parameter(s), but its method's "
                f"signature {sig} has {len(job.mi.tt)} (captured values count): "
                "annotate one parameter per kernel parameter"
            )
        check_params(job, knl, ctx, artifact.source)
        return LinkedKernel(job.name, job.mi.tt, context, built, knl, artifact.source)

    def relink(self, job: CompilerJob, artifact: Any, context: Hashable, linked: Any) -> Any:
        # The program is kept per included headers' contents: after an edit (and a new
        # world: a redefinition or bump()), the kernel is built again.
        if not isinstance(context, ContextKey):
            return linked
        ctx = context.context()
        built = None if ctx is None else self._build(job, artifact, context, ctx)
        if built is None or built is linked.built:
            return linked
        return self.link(job, artifact, context)  # finds `built` (held here) in _programs
