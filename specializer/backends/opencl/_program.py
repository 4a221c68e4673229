"""Programs: ``KernelSource``, build options, the per-context program cache, the
``OpenCLBackend`` (compile, link), ``LinkedKernel`` and its argument-set records, and the
messages of a failed build or launch (a work size's error among them).
"""

from __future__ import annotations

import os
import re
import struct
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ... import includes
from ...compiler import Backend, CompileError, CompilerJob
from ...locks import new_lock
from ...signatures import signature
from ...sources import KernelSource as _KernelSource
from ...sources import method_options
from ...types import (
    type_name,
    weak_overflow,
)
from .. import _pyopencl_private as _private
from ._args import _packer
from ._cdecl import _check_params
from ._decorators import _definitions
from ._queues import _ContextKey
from ._sizes import _sizes

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
    """The compiled artifact: the OpenCL C program of one kernel and its callees, and the
    build options their methods returned (the launch's are added to them when it is built)."""

    name: str
    source: str
    options: tuple[str, ...] = ()


def _nothing() -> None:
    """What a pool record holds at an index where nothing is known to be set: calling it, as
    the check of an array's weak reference does, gives no array."""


class LinkedKernel:
    """A kernel built in one context: the lookup's result, cached per (compiled code, context).

    It holds no kernel instance (only types went into it), so caching it keeps no captured
    value alive. ``pool`` holds the kernel objects launches take and give back (see the
    module's design notes); ``bound`` the launch path of each lookup signature (the core's).
    """

    __slots__ = (
        "__weakref__",
        "bound",
        "built",
        "ck",
        "context_ptr",
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
        ck: _ContextKey,
        built: _Built,
        kernel: Any,
        source: str,
    ) -> None:
        self.name = name
        self.tt = tt  # every kernel parameter's concrete type, captured ones first
        self.ck = ck  # the context's key: it holds the context weakly
        self.built = built  # shared by the kernels of one program; keeps it in _programs
        self.program = built.program
        context = ck.context()  # alive: its kernel is being linked in it
        assert context is not None
        self.context_ptr = context.int_ptr  # what a new array is checked against
        self.kernel = kernel
        self.source = source
        self.params = _param_names(source, name)
        self.bound: dict[tuple[type, ...], Any] = {}
        # Launches use kernel objects of their own: ``kernel`` is the user's to inspect.
        self.pool: list[list[Any]] = [self.new_record()]

    @property
    def context(self) -> cl.Context | None:
        """The context it was built in (``None`` once the user dropped that context)."""
        return self.ck.context()

    def new_record(self) -> list[Any]:
        """A pool record with a new kernel object: ``[set_arg, set_buf, kernel, <nothing set
        at each index>]`` (see ``templates/opencl_entry.py.j2``)."""
        knl = cl.Kernel(self.program, self.name)
        return [
            knl.set_arg,
            _private.set_arg_buf(knl),
            knl,
            *([_nothing] * len(self.tt)),
            (_nothing,),  # no global size is that object
        ]

    def __repr__(self) -> str:
        return f"<LinkedKernel {signature(self.name, self.tt)} in {self.context!r}>"


def _param_names(source: str, name: str) -> list[str]:
    """The parameter names of ``__kernel ... name(...)`` in ``source``, for messages (best
    effort: empty when the source does not spell them plainly)."""
    m = re.search(r"\b(?:__)?kernel\b[^;{]*?\b" + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if not m:
        return []
    names = []
    for p in m.group(1).split(","):
        w = re.findall(r"[A-Za-z_]\w*", p)
        names.append(w[-1] if w else "?")
    return names


def _describe(linked: LinkedKernel, i: int) -> str:
    name = linked.params[i] if i < len(linked.params) else None
    what = f"parameter {i}" + (f" ({name})" if name else "")
    return f"{what} of kernel {signature(linked.name, linked.tt)}"


def _bad_array(linked: LinkedKernel, i: int, a: cla.Array) -> None:
    if a.context is not None and a.context.int_ptr != linked.context_ptr:
        raise ValueError(
            f"the array for {_describe(linked, i)} is an array of {a.context!r}, but the "
            f"kernel runs in {linked.context!r}: a kernel can use only memory of its queue's "
            "context: make it on a queue of that context, or launch on a queue of its context"
        )
    if a.offset:
        what = f"starts at byte {a.offset} of its buffer (a view)"
    else:
        what = f"is not contiguous (shape {a.shape}, strides {a.strides})"
    raise ValueError(
        f"the array for {_describe(linked, i)} {what}: a kernel gets a buffer pointer, so pass "
        "a C- or F-contiguous array that starts at its buffer's start (for a view, view.copy())"
    )


def _size_error(linked: LinkedKernel, error: BaseException) -> Exception | None:
    """A work size's error (from :func:`_sizes`) naming the kernel, which the launch raises
    from its own frame; None for another error (raised as it is)."""
    named = f"kernel {signature(linked.name, linked.tt)}: {error}"
    if type(error) is TypeError:
        return TypeError(named)
    return ValueError(named) if type(error) is ValueError else None


def _work_group_problem(
    linked: LinkedKernel, g: tuple[int, ...], ls: tuple[int, ...]
) -> str | None:
    """Which rule a local size the device refused breaks, and what to do (None: not found)."""
    lss = ls[0] if len(ls) == 1 else ls
    for d, (n, m) in enumerate(zip(g, ls)):
        if n % m:
            at = "" if len(g) == 1 else f" in dimension {d} of local_size {ls}, global_size {g}"
            return (
                f"local_size {m} does not divide global_size {n} ({n} % {m} = {n % m}){at}: "
                f"pick a local size that divides it, or pad global_size to a multiple of {m} "
                f"({-(-n // m) * m}) and have the kernel skip the work-items past {n}"
            )
    items = int(np.prod(ls))
    for device in linked.program.get_info(cl.program_info.DEVICES):
        if items > device.max_work_group_size:
            return (
                f"local_size {lss} has {items} work-items, more than the device's limit of "
                f"{device.max_work_group_size} per work group ({device.name.strip()}): use a "
                "smaller local size"
            )
        for d, (m, most) in enumerate(zip(ls, device.max_work_item_sizes)):
            if m > most:
                return (
                    f"local_size {lss} has {m} work-items in dimension {d}, more than the "
                    f"device's limit of {most} there ({device.name.strip()}): use a smaller "
                    "local size"
                )
        info = cl.kernel_work_group_info
        most = linked.kernel.get_work_group_info(info.WORK_GROUP_SIZE, device)
        if items > most:
            return (
                f"local_size {lss} has {items} work-items, more than the {most} this kernel "
                f"takes on {device.name.strip()} (it uses too many registers or too much local "
                "memory for more): use a smaller local size"
            )
        reqd = tuple(linked.kernel.get_work_group_info(info.COMPILE_WORK_GROUP_SIZE, device))
        if any(reqd) and reqd != ls + (1,) * (3 - len(ls)):
            want = reqd[0] if len(ls) == 1 else reqd[: len(ls)]
            return (
                f"the kernel's source declares reqd_work_group_size{reqd}, and local_size is "
                f"{lss}: launch with local_size={want} or change the attribute"
            )
    return None


# RuntimeError: pyopencl's std::bad_cast for a work size past size_t (an int global_size is
# not range-checked before the enqueue: checking costs every launch, a failure only itself)
_FAILURES = (cl.Error, struct.error, OverflowError, TypeError, RuntimeError)


def _failed(
    linked: LinkedKernel,
    values: tuple[Any, ...],
    error: Exception,
    global_size: Any = None,
    local_size: Any = None,
) -> Exception | None:
    """The error that says which argument a failed launch could not set, or which work size
    the device refused, and why; None for another failure (re-raised as it is). Returned, not
    raised, so the launch raises it from its own frame (one library frame fewer)."""
    if isinstance(error, RuntimeError) and not isinstance(error, cl.Error):
        try:
            _sizes(global_size, local_size, None)  # a size past size_t: a ValueError naming it
        except ValueError as e:
            return _size_error(linked, e)
    if isinstance(error, cl.Error) and "INVALID_WORK_GROUP_SIZE" in str(error):
        g, ls, _ = _sizes(global_size, local_size, None)
        try:
            why = _work_group_problem(linked, g, ls) if ls is not None else None
        except cl.Error:  # a device that does not say: the rules, then
            why = None
        return ValueError(
            f"kernel {signature(linked.name, linked.tt)}: "
            + (
                why
                or f"the device refused local_size={local_size!r} with global_size="
                f"{global_size!r}: a local size must divide the global size in each "
                "dimension, fit the device's and the kernel's work-group limits, and match a "
                "reqd_work_group_size attribute"
            )
        )
    for i, (t, v) in enumerate(zip(linked.tt, values)):
        if isinstance(error, (struct.error, OverflowError)) and isinstance(v, (int, float)):
            try:
                _packer(t)(v)
            except (struct.error, OverflowError):
                return weak_overflow(v, t, _describe(linked, i))  # the core's error
    if isinstance(error, cl.Error) and "clSetKernelArg" in str(error):
        probe = cl.Kernel(linked.program, linked.name)
        for i, (t, v) in enumerate(zip(linked.tt, values)):
            try:
                _set_one(probe, i, t, v)
            except cl.Error as e:
                return TypeError(
                    f"OpenCL refused the value for {_describe(linked, i)}, typed "
                    f"{type_name(t)} by the method's signature: {e}. The kernel source "
                    "declares that parameter with another type or size: make the "
                    "annotation match the C declaration"
                )
    return None


def _set_one(knl: Any, i: int, t: type, v: Any) -> None:
    if isinstance(v, cla.Array):
        knl.set_arg(i, v.base_data)
    elif isinstance(v, (int, float)) and not isinstance(v, np.generic):
        _private.set_arg_buf(knl)(i, _packer(t)(v))
    elif isinstance(v, (np.generic, np.ndarray)):
        _private.set_arg_buf(knl)(i, v)
    else:
        knl.set_arg(i, v)


def _build_log(program: cl.Program, context: cl.Context, error: Exception) -> str:
    # A source build (PoCL's path) keeps the failed program, whose log is the compiler's
    # text alone; otherwise pyopencl's message carries the log.
    built = program
    if built is not None:
        logs = []
        for dev in context.devices:
            try:
                # pyopencl's Program.get_build_info is unannotated (it forwards *args)
                log = built.get_build_info(dev, cl.program_build_info.LOG).strip()  # type: ignore[no-untyped-call]
            except cl.Error:
                continue
            if log:
                logs.append(f"on {dev.name}:\n{log}")
        if logs:
            return "\n".join(logs)
    return str(error)


def _numbered(source: str) -> str:
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


_IMPLICIT = re.compile(r"implicit declaration of function '(\w+)'")


def _callee_hint(log: str) -> str:
    """A hint for a build log that says a device function of this back-end was implicitly
    declared: it is missing from the kernel's ``callees=``."""
    names = sorted({n for n in _IMPLICIT.findall(log) if n in _device_names()})
    if not names:
        return ""
    listed = ", ".join(names)
    return (
        f"\nhint: {listed} {'is a device function' if len(names) == 1 else 'are device functions'}"
        f" of this back-end that the kernel calls but does not list: add "
        f"{'it' if len(names) == 1 else 'them'} to @kernel(callees=[{listed}])"
    )


def _device_names() -> set[str]:
    return {gf.name for gf in _definitions.device_functions()}


# One program per (context, source, build options, the user headers it includes): kernels
# whose methods return the same source with the same options are built once. The options are
# the methods' own (a KernelSource's) followed by the launch's. Kept weakly: a program lives while
# a linked kernel uses it.
_programs: weakref.WeakKeyDictionary[
    cl.Context, weakref.WeakValueDictionary[tuple[str, tuple[str, ...], tuple[str, str]], _Built]
] = weakref.WeakKeyDictionary()
_programs_lock = new_lock(reentrant=False)


_ARG_INFO = "-cl-kernel-arg-info"


def _build_options_for(options: tuple[str, ...], context: cl.Context) -> tuple[str, ...]:
    """The options a program is built with: ``-I`` directories made absolute (pyopencl and
    the device compiler would resolve a relative one against whatever directory they run
    in), and ``-cl-kernel-arg-info`` where every device of the context takes it (OpenCL
    1.2 and later), for :func:`_check_params`."""
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
    if _ARG_INFO not in out and all(_opencl_version(d) >= (1, 2) for d in context.devices):
        out.append(_ARG_INFO)
    return tuple(out)


def _opencl_version(device: cl.Device) -> tuple[int, int]:
    m = re.match(r"OpenCL (\d+)\.(\d+)", device.version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _headers_digest(source: str, build: tuple[str, ...]) -> tuple[str, str]:
    """What the user headers ``source`` includes hold (SPEC 3): the contents of each file
    it includes from the ``-I`` directories and the current directory, recursively. PoCL
    searches the current directory first (it adds ``-I.``); other compilers may search it
    last or not at all: both orders are keyed, so a header found either way counts."""
    dirs = includes.include_dirs(build)
    cwd = os.getcwd()
    return (
        includes.digest(source, [cwd, *dirs]),
        includes.digest(source, [*dirs, cwd]),
    )


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

    def _build(self, job: CompilerJob, artifact: OpenCLSource, context: cl.Context) -> _Built:
        source = artifact.source
        # cast: this back-end's configs are all made by _config, from a tuple of build options;
        # the methods' own options come first, the launch's are added to them
        options = artifact.options + tuple(cast("tuple[str, ...]", job.config.options))
        build = _build_options_for(options, context)
        # The user's options: what building adds to them is the same for every program of
        # the context, but for -I directories made absolute, which the digest names.
        key = (source, options, _headers_digest(source, build))
        with _programs_lock():
            table = _programs.get(context)
            if table is None:
                table = _programs[context] = weakref.WeakValueDictionary()
            built = table.get(key)
        if built is not None:
            return built
        program = cl.Program(context, source)
        try:
            program.build(options=list(build))
        except cl.Error as e:
            log = _build_log(program, context, e)
            raise CompileError(
                f"OpenCL kernel {signature(job.name, job.mi.tt)} does not build "
                f"(build options: {' '.join(options) or 'none'}):\n{log}{_callee_hint(log)}\n"
                f"--- its source (the callees', then the kernel's) ---\n{_numbered(source)}"
            ) from None
        raw = _private.raw_program(program)
        built = _Built(raw, raw.get_info(cl.program_info.KERNEL_NAMES) or "")
        with _programs_lock():
            built = table.setdefault(key, built)
        return built

    def link(self, job: CompilerJob, artifact: Any, context: Hashable) -> LinkedKernel:
        if not isinstance(context, _ContextKey):
            raise TypeError(f"an OpenCL kernel is linked for a context key, got {context!r}")
        ctx = context.context()
        if ctx is None:
            raise RuntimeError("the context of this lookup was dropped")
        sig = signature(job.name, job.mi.tt)
        built = self._build(job, artifact, ctx)
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
        _check_params(job, knl, ctx, artifact.source)
        return LinkedKernel(job.name, job.mi.tt, context, built, knl, artifact.source)

    def relink(self, job: CompilerJob, artifact: Any, context: Hashable, linked: Any) -> Any:
        # The program is kept per included headers' contents: after an edit (and a new
        # world: a redefinition or bump()), the kernel is built again.
        ctx = context.context() if isinstance(context, _ContextKey) else None
        built = None if ctx is None else self._build(job, artifact, ctx)
        if built is None or built is linked.built:
            return linked
        return self.link(job, artifact, context)  # finds `built` (held here) in _programs


# The kernel's own parameter types (SPEC 8), from kernel argument info: OpenCL C's scalar
# types (vectors of them: 2, 3 (stored as 4), 4, 8 or 16), and what kind each is.
