"""The OpenCL back-end: kernels written in OpenCL C, built by pyopencl, run on PoCL's CPU device.

The counterpart of KernelAbstractions' POCL back-end, over the core's interface:

- ``compile(job)`` joins the device source of the kernel and its callees into an
  :class:`OpenCLSource`; nothing in it depends on a context.
- ``link(job, source, context)`` builds that source in one context with the config's build
  options, creates the one ``pyopencl.Kernel`` that context uses, and binds it to the launcher
  generated for the kernel's signature (``templates/opencl_launch.py.j2``): a
  :class:`LinkedKernel`, which the core caches per (compiled code, context).
- ``clfunction(f, tt)`` wraps that lookup in ``cached_lookup`` with key (context, build options)
  and returns a :class:`HostKernel`; ``launch(f, *args, ...)`` is ``typeof`` of each argument,
  the same cached lookup, then the launcher. Both first check ``f``'s front entry (its newest
  lookup, see :func:`specializer.kernels.set_front`) in their own frame: a hit calls nothing.

Design notes on the launch path. pyopencl's ``Kernel.__call__`` sets each argument with
``Kernel.set_arg``, which tries five casts before it takes a numpy scalar as raw bytes, and each
failed cast is a C++ exception: about 6 µs per scalar argument. The generated launcher sets
buffers with ``set_arg`` (its first cast succeeds) and scalars with ``_set_arg_buf`` (raw
bytes: a numpy scalar's own, its type being exactly the parameter's, or for a Python int, float
or bool the bytes ``struct`` packs), then calls ``enqueue_nd_range_kernel`` directly; the
signature decides which is which, once, when the launcher is generated.

There is one ``pyopencl.Kernel`` per (compiled code, context), and its launcher sets the
arguments and enqueues under a lock: the two steps are not atomic, and threads launching the
same kernel (on their own queues or on one) must not interleave them. The lock costs about 0.1 µs
of a launch of a few µs (measured against a no-op lock); a kernel object per thread would cost
a thread-local lookup on every launch and leave a kernel behind with every thread that ever
launched, and would still race when threads share a queue.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl._cl as _cl
import pyopencl.array as cla

from .. import codegen
from ..compiler import Backend, CompileError, CompilerConfig, CompilerJob
from ..kernels import (
    NO_FRONT,
    SCALAR_TYPES,
    Definitions,
    Kernel,
    KernelInstance,
    LookupSite,
    uncached_lookup,
    unsupported_argument,
)
from ..types import DeviceArray, type_name
from ..world import WORLD as _WORLD

__all__ = [
    "BACKEND",
    "Array",
    "HostKernel",
    "LinkedKernel",
    "OpenCLBackend",
    "OpenCLSource",
    "capture",
    "clfunction",
    "ctype",
    "default_queue",
    "device",
    "kernel",
    "launch",
    "set_default_queue",
    "typeof",
]


# -- argument types -----------------------------------------------------------------------


class Array(DeviceArray):
    """Argument types of ``pyopencl.array.Array`` values: ``Array[np.float32]`` and its
    supertypes (``Array[np.floating]``, ``Array[np.number]``, ...) to dispatch on."""


_ACCEPTED = (
    "Python int, float and bool, numpy scalars (np.float32, np.int64, ...) and pyopencl.array.Array"
)
_scalar_type = SCALAR_TYPES.get
_array_types: dict[type, type[DeviceArray]] = {}


def typeof(value: Any) -> type:
    """The kernel argument type of ``value``: ``np.int64``/``np.float64``/``np.bool_`` for Python
    ``int``/``float``/``bool``, a numpy scalar's own type, ``Array[dtype]`` for a pyopencl array."""
    t = _scalar_type(type(value))
    if t is not None:
        return t
    if isinstance(value, cla.Array):
        t = _array_types.get(value.dtype.type)
        if t is None:
            t = _array_types.setdefault(value.dtype.type, Array[value.dtype])
        return t
    raise unsupported_argument(value, _ACCEPTED)


# (dtype kind, itemsize) -> (OpenCL C type, struct format of one value)
_C_TYPES: dict[tuple[str, int], tuple[str, str]] = {
    # OpenCL forbids bool kernel parameters; numpy stores a bool as one byte, 0 or 1.
    ("b", 1): ("uchar", "?"),
    ("i", 1): ("char", "b"),
    ("u", 1): ("uchar", "B"),
    ("i", 2): ("short", "h"),
    ("u", 2): ("ushort", "H"),
    ("i", 4): ("int", "i"),
    ("u", 4): ("uint", "I"),
    ("i", 8): ("long", "q"),
    ("u", 8): ("ulong", "Q"),
    ("f", 2): ("half", "e"),
    ("f", 4): ("float", "f"),
    ("f", 8): ("double", "d"),
    # pyopencl's complex types: #include <pyopencl-complex.h> in the kernel source (for
    # cdouble_t, #define PYOPENCL_DEFINE_CDOUBLE before it).
    ("c", 8): ("cfloat_t", "ff"),
    ("c", 16): ("cdouble_t", "dd"),
}


_CONCRETE = frozenset(np.sctypeDict.values())


def _c_type(t: Any) -> tuple[str, str]:
    """The OpenCL C type and struct format of a scalar type (a numpy type or dtype)."""
    if isinstance(t, type) and issubclass(t, DeviceArray):
        raise TypeError(
            f"ctype spells scalar types; {type_name(t)} is an array type: "
            "use ctype(x.dtype) for its element type"
        )
    if isinstance(t, type) and t in SCALAR_TYPES:
        dt = np.dtype(SCALAR_TYPES[t])
    elif isinstance(t, type) and issubclass(t, np.generic):
        if t not in _CONCRETE:  # np.floating, np.number, ...: numpy's abstract scalar types
            raise TypeError(
                f"{type_name(t)} is abstract: OpenCL needs a concrete type such as np.float32 "
                "(a method body gets the concrete types bound to its parameters)"
            )
        dt = np.dtype(t)
    elif isinstance(t, np.dtype):
        dt = t
    else:
        raise TypeError(f"ctype takes a numpy scalar type or dtype, got {t!r}")
    spelled = _C_TYPES.get((dt.kind, dt.itemsize))
    if spelled is None:
        raise TypeError(
            f"OpenCL has no type for {dt.name}; supported are bool, int8..int64, uint8..uint64, "
            "float16, float32, float64, complex64 and complex128"
        )
    return spelled


def ctype(t: type[np.generic] | np.dtype) -> str:
    """Spell a scalar type in OpenCL C: ``ctype(np.float32) == "float"``,
    ``ctype(np.dtype("int64")) == "long"``, ``ctype(np.bool_) == "uchar"``."""
    return _c_type(t)[0]


def _packer(t: type) -> Callable[[Any], bytes]:
    """Packs a value into the bytes of parameter type ``t`` (converting, never reinterpreting)."""
    fmt = _c_type(t)[1]
    if len(fmt) == 2:  # complex: (real, imag)
        pack2 = struct.Struct("=" + fmt).pack
        return lambda v: pack2(v.real, v.imag)
    return struct.Struct("=" + fmt).pack


# -- compile and link ---------------------------------------------------------------------


@dataclass(frozen=True)
class OpenCLSource:
    """The compiled artifact: the OpenCL C program of one kernel and its callees."""

    name: str
    source: str


class LinkedKernel:
    """A kernel built in one context and bound to its signature's launcher: the lookup's result.

    It holds no kernel instance (only types went into it), so caching it keeps no captured
    value alive. ``launch(queue, global_size, local_size, params)`` sets the arguments and
    enqueues; ``params`` are the captured values followed by the launch arguments.
    """

    __slots__ = ("context", "kernel", "launch", "lock", "name", "program", "tt")

    def __init__(
        self,
        name: str,
        tt: tuple[type, ...],
        context: cl.Context,
        program: cl.Program,
        kernel: cl.Kernel,
    ) -> None:
        self.name = name
        self.tt = tt  # every kernel parameter's type, captured ones first
        self.context = context
        self.program = program
        self.kernel = kernel
        self.lock = threading.Lock()
        self.launch: Callable[..., cl.Event] = _launcher(tt)(
            kernel,
            self.lock,
            kernel.set_arg,
            getattr(kernel, _SET_BUF),
            functools.partial(_bad_array, name),
        )

    def __repr__(self) -> str:
        return f"<LinkedKernel {_signature(self.name, self.tt)} in {self.context!r}>"


# Scalars go in as raw bytes; pyopencl's private _set_arg_buf skips set_arg's failing casts.
# Should a future pyopencl drop it, set_arg takes the same bytes (correct, only slower).
_SET_BUF = "_set_arg_buf" if hasattr(cl.Kernel, "_set_arg_buf") else "set_arg"


def _signature(name: str, tt: Iterable[type]) -> str:
    return f"{name}({', '.join(type_name(t) for t in tt)})"


def _bad_array(name: str, index: int, a: cla.Array) -> None:
    if a.offset:
        what = f"starts at byte {a.offset} of its buffer (a view)"
    else:
        what = f"is not contiguous (shape {a.shape}, strides {a.strides})"
    raise ValueError(
        f"argument {index} of kernel {name} {what}: a kernel gets a buffer pointer, so pass a "
        "contiguous array that starts at its buffer's start (for a view, pass view.copy())"
    )


# The parameter types that Python scalars map to: their values may be Python objects, which have
# no bytes of their own, so the launcher packs them. Other scalars pass their numpy bytes as is.
_FROM_PYTHON = frozenset(SCALAR_TYPES[t] for t in (int, float, bool))
_launchers: dict[tuple[type, ...], Callable[..., Any]] = {}
_launchers_lock = threading.Lock()


def _launcher(tt: tuple[type, ...]) -> Callable[..., Any]:
    """The launcher factory generated for kernel parameter types ``tt`` (once per ``tt``)."""
    factory = _launchers.get(tt)
    if factory is not None:
        return factory
    with _launchers_lock:
        factory = _launchers.get(tt)
        if factory is None:
            namespace: dict[str, Any] = {"_enqueue": _cl.enqueue_nd_range_kernel}
            kinds = []
            for i, t in enumerate(tt):
                if isinstance(t, type) and issubclass(t, Array):
                    kinds.append("array")
                elif t in _FROM_PYTHON or not issubclass(t, np.generic):
                    namespace[f"_pack{i}"] = _packer(t)
                    kinds.append("packed")
                else:
                    _c_type(t)  # a type OpenCL has, so its numpy scalar's bytes are the argument
                    kinds.append("scalar")
            factory = codegen.generate(
                "opencl_launch.py.j2",
                ("opencl_launch", *(type_name(t) for t in tt)),
                namespace,
                f"OpenCL launcher for ({', '.join(type_name(t) for t in tt)})",
                kinds=kinds,
            )
            _launchers[tt] = factory
    return factory


def _build_log(program: cl.Program, context: cl.Context, error: Exception) -> str:
    # A source build (PoCL's path) keeps the failed program, whose log is the compiler's
    # text alone; otherwise pyopencl's message carries the log.
    built = getattr(program, "_prg", None)
    if built is not None:
        logs = []
        for dev in context.devices:
            try:
                log = built.get_build_info(dev, cl.program_build_info.LOG).strip()
            except cl.Error:
                continue
            if log:
                logs.append(f"on {dev.name}:\n{log}")
        if logs:
            return "\n".join(logs)
    return str(error)


def _numbered(source: str) -> str:
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


class OpenCLBackend(Backend):
    """Compiles kernels to OpenCL C source and builds them per context with pyopencl."""

    name = "opencl"

    def compile(self, job: CompilerJob) -> OpenCLSource:
        return OpenCLSource(job.name, "\n\n".join(job.device_sources()))

    def link(self, job: CompilerJob, artifact: Any, context: Hashable) -> LinkedKernel:
        assert isinstance(context, cl.Context)
        signature = _signature(job.name, job.mi.tt)
        options = job.config.options
        program = cl.Program(context, artifact.source)
        try:
            program.build(options=list(options))
        except cl.Error as e:
            raise CompileError(
                f"OpenCL kernel {signature} does not build (build options: "
                f"{' '.join(options) or 'none'}):\n{_build_log(program, context, e)}\n"
                f"--- its source (the callees', then the kernel's) ---\n"
                f"{_numbered(artifact.source)}"
            ) from None
        try:
            knl = cl.Kernel(program, job.name)
        except cl.Error:
            defined = program.get_info(cl.program_info.KERNEL_NAMES) or "none"
            raise CompileError(
                f"the source of OpenCL kernel {signature} defines no __kernel named "
                f"{job.name!r} (it defines: {defined}); a method body returns source that "
                "defines a __kernel function named like the method"
            ) from None
        return LinkedKernel(job.name, job.mi.tt, context, program, knl)


BACKEND = OpenCLBackend()
_configs: dict[tuple[str, ...], CompilerConfig] = {}


def _config(options: tuple[str, ...]) -> CompilerConfig:
    config = _configs.get(options)
    if config is None:
        config = _configs.setdefault(options, CompilerConfig(BACKEND, options))
    return config


def _build_options(compiler_kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The build options from compiler keyword arguments (only ``options`` is one)."""
    unknown = sorted(set(compiler_kwargs) - {"options"})
    if unknown:
        raise TypeError(
            f"unknown OpenCL compiler keyword argument(s): {', '.join(unknown)}; the one "
            "accepted is options=(build options, ...), e.g. options=('-cl-fast-relaxed-math',)"
        )
    options = compiler_kwargs["options"]
    if isinstance(options, str):
        return (options,)
    if isinstance(options, Sequence) and all(isinstance(o, str) for o in options):
        return tuple(options)
    raise TypeError(
        f"options are OpenCL build options, a str or a sequence of str, got {options!r}"
    )


# -- queues and contexts ------------------------------------------------------------------

_default_queue: cl.CommandQueue | None = None
_default_lock = threading.Lock()


def _pocl_cpu_device() -> cl.Device:
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    for p in platforms:
        if "portable computing language" in p.name.lower() or "pocl" in p.vendor.lower():
            try:
                devices = p.get_devices(device_type=cl.device_type.CPU)
            except cl.Error:
                continue
            if devices:
                return devices[0]
    found = ", ".join(p.name for p in platforms) or "none"
    raise RuntimeError(
        f"no PoCL CPU device found (OpenCL platforms: {found}): install it with "
        "`pip install pocl-binary-distribution` (or `pip install specializer[opencl]`), "
        "or pick a queue with specializer.backends.opencl.set_default_queue(queue)"
    )


def default_queue() -> cl.CommandQueue:
    """The queue launches use when given none: the one set with :func:`set_default_queue`,
    else a queue on PoCL's CPU device (created on first use, then kept)."""
    global _default_queue
    queue = _default_queue
    if queue is None:
        with _default_lock:
            if _default_queue is None:
                _default_queue = cl.CommandQueue(cl.Context([_pocl_cpu_device()]))
            queue = _default_queue
    return queue


def set_default_queue(queue: cl.CommandQueue | None) -> None:
    """Make launches given no queue use ``queue`` (``None``: a queue on PoCL's CPU device)."""
    global _default_queue
    if queue is not None and not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"expected a pyopencl.CommandQueue or None, got {queue!r}")
    with _default_lock:
        _default_queue = queue


# Lookup keys are (context, build options): one key tuple per context for the default (no)
# options, found per queue without creating a context wrapper.
_context_keys: dict[cl.Context, tuple[cl.Context, tuple[str, ...]]] = {}
_queue_keys: dict[cl.CommandQueue, tuple[cl.Context, tuple[str, ...]]] = {}
_MAX_QUEUES = 64  # forget queues beyond this many, so dropped queues are not kept forever


def _key(queue: cl.CommandQueue) -> tuple[cl.Context, tuple[str, ...]]:
    """(the queue's context, no build options)."""
    key = _queue_keys.get(queue)
    if key is None:
        if not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
        ctx = queue.context
        key = _context_keys.get(ctx) or _context_keys.setdefault(ctx, (ctx, ()))
        if len(_queue_keys) >= _MAX_QUEUES:
            _queue_keys.clear()
        _queue_keys[queue] = key
    return key


def _work_size(size: Any, what: str) -> tuple[int, ...]:
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    if isinstance(size, Sequence) and 1 <= len(size) <= 3:
        return tuple(size)
    raise TypeError(f"{what} is an int or a sequence of 1 to 3 ints, got {size!r}")


# -- the lookup and the launch ------------------------------------------------------------

_definitions = Definitions(typeof, __name__)
kernel = _definitions.kernel
device = _definitions.device
capture = _definitions.capture


def _link(F: Any, tt: tuple[type, ...], key: tuple[cl.Context, tuple[str, ...]]) -> Any:
    """The lookup that ``cached_lookup`` wraps, with key (context, build options)."""
    _definitions.own(F)
    return uncached_lookup(F, tt, _config(key[1]), key[0])


_site = LookupSite(_definitions, LinkedKernel, _link)


def _front_miss(
    f: Any, tt: Any, queue: cl.CommandQueue | None, compiler_kwargs: dict[str, Any], host: bool
) -> tuple[LinkedKernel, HostKernel | None]:
    """What ``launch`` and ``clfunction`` do when ``f``'s front entry does not hold their
    lookup: the cached lookup, then (without build options) a new front entry. Returns the
    linked kernel, and with ``host`` the HostKernel for ``f``."""
    if queue is None:
        queue = default_queue()
    key = _key(queue)
    if compiler_kwargs:
        key = (key[0], _build_options(compiler_kwargs))
    return _site.miss(
        f,
        tt,
        None if compiler_kwargs else queue,
        key,
        (lambda f, tt, linked: HostKernel(f, tt, linked, queue)) if host else None,
    )


class HostKernel:
    """``clfunction``'s result: the cached :class:`LinkedKernel` with the live kernel ``f``.

    Call it like :func:`launch`, with arguments of the types it was looked up for:
    ``hk(*args, global_size=..., local_size=None, queue=None)`` (default: the queue of the
    lookup). A kernel instance's captured values are passed first, from ``f``, on each call.
    """

    __slots__ = ("f", "linked", "queue", "tt")

    def __init__(
        self, f: Any, tt: tuple[type, ...], linked: LinkedKernel, queue: cl.CommandQueue
    ) -> None:
        self.f = f
        self.tt = tt
        self.linked = linked
        self.queue = queue

    @property
    def kernel(self) -> cl.Kernel:
        """The ``pyopencl.Kernel`` (shared by every launch of this code in this context)."""
        return self.linked.kernel

    @property
    def program(self) -> cl.Program:
        return self.linked.program

    @property
    def context(self) -> cl.Context:
        return self.linked.context

    def __call__(
        self,
        *args: Any,
        global_size: Any,
        local_size: Any = None,
        queue: cl.CommandQueue | None = None,
    ) -> cl.Event:
        linked = self.linked
        if queue is None:
            queue = self.queue
        elif queue is not self.queue and _key(queue)[0] != linked.context:
            raise ValueError(
                f"kernel {linked.name} was looked up in {linked.context!r}, but the queue is in "
                f"{queue.context!r}: look it up with clfunction(f, tt, queue=queue)"
            )
        tt = tuple(map(typeof, args))
        if tt != self.tt:
            raise TypeError(
                f"{_signature(linked.name, self.tt)} was called with arguments of types "
                f"({', '.join(type_name(t) for t in tt)}): look it up for those with "
                "clfunction, or use launch(f, *args, ...), which looks up what it is given"
            )
        f = self.f
        params = args if type(f) is Kernel else f.values + args
        if type(global_size) is not tuple:
            global_size = _work_size(global_size, "global_size")
        if local_size is not None and type(local_size) is not tuple:
            local_size = _work_size(local_size, "local_size")
        return linked.launch(queue, global_size, local_size, params)

    def __repr__(self) -> str:
        return f"<HostKernel {_signature(self.linked.name, self.tt)} of {self.f!r}>"


def clfunction(
    f: Any, tt: Iterable[type] = (), queue: cl.CommandQueue | None = None, **compiler_kwargs: Any
) -> HostKernel:
    """The kernel ``f`` (a kernel or kernel instance) for argument types ``tt`` in the context of
    ``queue`` (default :func:`default_queue`), built with ``options=(...)`` if given.

    The lookup (dispatch in the task's world, the compiled-code cache, the kernel object for
    the context) runs through ``cached_lookup`` with key (context, build options); a hit takes
    no lock and hashes nothing. ``tt`` excludes a kernel instance's captured values. Looking up
    a plain kernel again returns the same HostKernel while the lookup's result is the same.
    """
    if queue is None:
        queue = _default_queue
    # The front entry: the newest lookup of f (see kernels.set_front), checked here inline.
    try:
        w, q, t, linked, hk = f.front
    except (AttributeError, TypeError, ValueError):  # not a kernel: _front_miss says so
        w, q, t, linked, hk = NO_FRONT
    if w is _WORLD[0] and q is queue and (t is tt or t == tt) and not compiler_kwargs:
        if hk is not None:
            return hk
        if isinstance(f, KernelInstance):  # the live f with the cached result
            return HostKernel(f, t, linked, q)
    return _front_miss(f, tt, queue, compiler_kwargs, True)[1]


def launch(
    f: Any,
    /,
    *args: Any,
    global_size: Any,
    local_size: Any = None,
    queue: cl.CommandQueue | None = None,
    **compiler_kwargs: Any,
) -> cl.Event:
    """Launch kernel ``f`` (a kernel or kernel instance) on ``args``: ``typeof`` of each
    argument, the cached lookup, then the signature's launcher. Returns the ``pyopencl.Event``.

    ``global_size``/``local_size`` are an int or up to 3 ints (``local_size=None`` lets OpenCL
    choose); ``queue`` defaults to :func:`default_queue`; ``options=(...)`` are build options.
    """
    if queue is None:
        queue = _default_queue
    tt = tuple(map(typeof, args))
    try:
        w, q, t, linked, _ = f.front  # f's newest lookup (see kernels.set_front), checked inline
    except (AttributeError, TypeError, ValueError):  # not a kernel: _front_miss says so
        w, q, t, linked, _ = NO_FRONT
    if not (w is _WORLD[0] and q is queue and t == tt) or compiler_kwargs:
        if queue is None:
            queue = default_queue()
        linked = _front_miss(f, tt, queue, compiler_kwargs, False)[0]
    if type(f) is Kernel:
        params = args
    elif isinstance(f, KernelInstance):
        params = f.values + args
    else:  # a kernel instance's type has its front entry too, but is not a kernel
        raise _definitions.not_a_kernel(f)
    if type(global_size) is not tuple:
        global_size = _work_size(global_size, "global_size")
    if local_size is not None and type(local_size) is not tuple:
        local_size = _work_size(local_size, "local_size")
    return linked.launch(queue, global_size, local_size, params)
