"""The launch path: the compiler keyword arguments' configs, ``HostKernel``, the launcher, the
cached lookup (``clfunction``) and ``launch``."""

from __future__ import annotations

import shlex
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, cast

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ... import launching
from ...compiler import CompilerConfig
from ...kernels import Kernel, KernelInstance, uncached_lookup
from ...types import Struct, WeakScalar, resolve_weak
from . import _queues
from ._args import _GUARD_CLASS, Array, LocalMemory, Sampler, _ArgType, _c_type, _packer
from ._decorators import _definitions
from ._failures import _FAILURES, _bad_array, _failed, _size_error
from ._program import LinkedKernel, OpenCLBackend, _nothing
from ._queues import _ContextKey, _default_queue, _key, default_queue, queue_tables
from ._sizes import _sizes

BACKEND = OpenCLBackend()
_configs: dict[tuple[str, ...], CompilerConfig] = {}


def _config(options: tuple[str, ...]) -> CompilerConfig:
    config = _configs.get(options)
    if config is None:
        config = _configs.setdefault(options, CompilerConfig(BACKEND, options))
    return config


#: launch options, in order, as launch and a HostKernel call take them
LAUNCH_OPTIONS = ("global_size", "local_size", "global_offset", "wait_for", "queue")
#: compiler keyword arguments
COMPILER_KWARGS = ("options",)


def _build_options(compiler_kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The build options from compiler keyword arguments (only ``options`` is one)."""
    unknown = sorted(set(compiler_kwargs) - set(COMPILER_KWARGS))
    if unknown:
        raise _launcher.keyword_error(unknown)
    options = compiler_kwargs["options"]
    if isinstance(options, str):  # split by shell rules, as pyopencl's build splits a str
        try:
            return tuple(shlex.split(options))
        except ValueError as e:
            raise ValueError(f"options={options!r} do not split as shell words: {e}") from None
    if isinstance(options, Sequence) and all(isinstance(o, str) for o in options):
        return tuple(options)
    raise TypeError(
        f"options are OpenCL build options, a str or a sequence of str, got {options!r}"
    )


def _same_context(linked: LinkedKernel, queue: Any) -> cl.CommandQueue:
    """A queue given to a HostKernel call: it must be in the context the kernel was built in."""
    if not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
    if _key(queue)[0] is not linked.ck:
        raise ValueError(
            f"kernel {linked.name} was looked up in {linked.context!r}, but the queue is in "
            f"{queue.context!r}: look it up with clfunction(f, tt, queue=queue)"
        )
    return queue


class HostKernel(launching.HostKernel):
    """``clfunction``'s result: the cached :class:`LinkedKernel` with the live kernel ``f``.

    Call it like :func:`launch`, with arguments of the types it was looked up for (a Python
    scalar also where it takes that scalar's default type, ``np.int64`` for an ``int``, on a
    slower path): ``hk(*args, global_size=..., local_size=None, global_offset=None, wait_for=None,
    queue=None)`` (default: the queue of the lookup); a kernel instance's captured values are
    passed first, from ``f``, on each call. ``hk`` is the signature's generated call, bound to
    an instance of this class (``isinstance(hk, HostKernel)`` holds), with its attributes:

    - ``queue`` (and ``where``): the queue it was looked up for; ``context``: its context;
    - ``kernel``: a ``pyopencl.Kernel`` to inspect (launches set the arguments of kernel
      objects of their own, from the linked kernel's pool); ``program``: its program;
    - ``f``, ``tt`` and ``linked`` (the :class:`LinkedKernel`).
    """

    linked: LinkedKernel
    where: cl.CommandQueue
    queue: cl.CommandQueue
    context: cl.Context | None
    kernel: Any
    program: Any

    def __init__(self, f: Any, where: Any, tt: tuple[type, ...], linked: LinkedKernel) -> None:
        super().__init__(f, where, tt, linked)
        self.queue = where
        self.context = linked.context
        self.kernel = linked.kernel
        self.program = linked.program


class _OpenCLLauncher(launching.Launcher):
    name = "opencl"
    template = "opencl_entry.py.j2"
    options = LAUNCH_OPTIONS
    defaults = ("required", "none", "none", "none", "none")
    lifted = compiler_kwargs = COMPILER_KWARGS
    compiler_help = (
        "the compiler option is options=(build options, ...), "
        "e.g. options=('-cl-fast-relaxed-math',)"
    )
    where_name = "queue"
    front_attr = "_opencl_front"
    V = LinkedKernel
    host_class = HostKernel
    lookup_name = "clfunction"
    #: "cls_dtype_0d": a struct by value (np.void, or a 0-d array as pyopencl.cltypes makes)
    guard_kinds = {**launching.Launcher.guard_kinds, "cls_dtype_0d": True}

    def uncached_lookup(
        self, F: Any, tt: tuple[type, ...], key: tuple[_ContextKey, tuple[str, ...]]
    ) -> Any:
        return uncached_lookup(F, tt, _config(key[1]), key[0])

    def resolve(self, opts: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        queue = opts[4]
        if queue is None:
            queue = default_queue()
            opts = (*opts[:4], queue)
        elif not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
        return queue, opts

    def check_args(self, where: Any, f: Any, args: tuple[Any, ...]) -> None:
        """On the slow path (a front entry does not check): a ValueError naming an array, buffer,
        image or sampler (captured too) not of the queue's context, which pyopencl lets run."""
        ctx = where.context.int_ptr
        captured = f.values if isinstance(f, KernelInstance) else ()
        for what, values in (("captured value", captured), ("argument", args)):
            for i, v in enumerate(values):
                if not isinstance(v, (cla.Array, cl.MemoryObjectHolder, cl.Sampler)):
                    continue
                try:
                    other = v.context
                except cl.Error:
                    continue
                if other is not None and other.int_ptr != ctx:
                    kind = "an array" if isinstance(v, cla.Array) else f"a {type(v).__name__}"
                    name = f.name if isinstance(f, Kernel) else f.kernel.name
                    counted = " (counting launch arguments from 0)" if what == "argument" else ""
                    raise ValueError(
                        f"{what} {i} of kernel {name}{counted} is {kind} of {other!r}, but the "
                        f"queue is in {where.context!r}: a kernel can use only memory of its "
                        "queue's context: make it on a queue of that context, or launch on a "
                        "queue of its context"
                    )

    def resolve_where(self, where_opt: Any) -> Any:
        return self.resolve((None, None, None, None, where_opt))[0]

    def where_table(self, where: Any, make: bool = True) -> dict[Any, Any] | None:
        # nothing is written into a pyopencl queue: its tables are found by it, and go with it
        tables = queue_tables(where, make)
        return None if tables is None else launching.table_in(tables, self.front_attr, make)

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        key = _key(where)
        return (key[0], _build_options(kw)) if kw else key

    def guard_of(self, t: type) -> tuple[str, type, Any]:
        if isinstance(t, type) and issubclass(t, Array):
            return "cls_dtype", cla.Array, t.dtype
        if isinstance(t, type) and issubclass(t, Struct):
            return "cls_dtype_0d", np.void, t.dtype
        return "cls", _GUARD_CLASS.get(t, t), None

    def kinds(
        self, tt: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int
    ) -> tuple[list[str], list[str], dict[str, Any]]:
        namespace: dict[str, Any] = {
            "_default_queue": _default_queue,
            "_enqueue": cl.enqueue_nd_range_kernel,
            "_sizes": _sizes,
            "_size_error": _size_error,
            "_same_context": _same_context,
            "_bad_array": _bad_array,
            "_failed": _failed,
            "_FAILURES": _FAILURES,
            "_nothing": _nothing,
            "_ref": weakref.ref,
        }
        kinds = []
        # A record holds no captured value (the instance's): those are set on every launch.
        for i, (t, r) in enumerate(zip(tt, resolved)):
            if issubclass(t, Array):
                kinds.append("array")
            elif issubclass(t, LocalMemory):
                kinds.append("local")
            elif issubclass(t, Sampler):
                kinds.append("sampler")
            elif issubclass(t, _ArgType):
                kinds.append("object")
            elif issubclass(t, Struct):
                kinds.append("bytes")
            elif issubclass(t, WeakScalar):
                namespace[f"_pack{i}"] = _packer(resolve_weak(t, r))
                namespace[f"_S{i}"] = t.pytype
                kinds.append("packed" if i >= ncaptured else "packed_each")
            else:
                _c_type(r)  # a type OpenCL has, so its numpy scalar's bytes are the argument
                namespace[f"_S{i}"] = t
                kinds.append("scalar" if i >= ncaptured else "bytes")
        guards = [self.guard_of(t)[0] for t in tt[ncaptured:]]
        return guards, kinds, namespace


_launcher = _OpenCLLauncher(_definitions)
_queues._launcher = _launcher  # the hook the queues' module reads


def clfunction(
    f: Kernel | KernelInstance,
    tt: Iterable[type] = (),
    queue: cl.CommandQueue | None = None,
    **compiler_kwargs: Any,
) -> HostKernel:
    """The kernel ``f`` (a kernel or kernel instance) for argument types ``tt`` in the context of
    ``queue`` (default :func:`default_queue`), built with ``options=(...)`` if given.

    The lookup (dispatch in the task's world, the compiled-code cache, the kernel for the
    context) runs through ``cached_lookup`` with key (context, build options); a hit takes no
    lock and hashes nothing. ``tt`` excludes a kernel instance's captured values; Python
    ``int``/``float``/``bool`` in it stand for the weak types. Each call returns a new
    HostKernel of the cached result (nothing else is kept)."""
    # cast: _launcher.host_class is this module's HostKernel
    return cast(HostKernel, _launcher.function(f, tt, queue, compiler_kwargs))


#: a launch's sizes: an int, or a sequence of up to 3 ints
_Sizes = int | Sequence[int]


class _Launch(Protocol):
    """The type of :func:`launch` (generated by the core, so typed here for type checkers)."""

    def __call__(
        self,
        f: Kernel | KernelInstance,
        /,
        *args: Any,
        global_size: _Sizes,
        local_size: _Sizes | None = None,
        global_offset: _Sizes | None = None,
        wait_for: Sequence[cl.Event] | None = None,
        queue: cl.CommandQueue | None = None,
        options: str | Sequence[str] = ...,
    ) -> cl.Event: ...


launch: _Launch = _launcher.launch
launch.__doc__ = """``launch(f, *args, global_size, local_size=None, global_offset=None,
wait_for=None, queue=None, **compiler_kwargs)``: launch kernel ``f`` (a kernel or kernel
instance) on ``args`` and return the ``pyopencl.Event``.

``global_size``/``local_size``/``global_offset`` are an int or up to 3 ints (``local_size=None``
lets OpenCL choose); ``wait_for`` is a list of events to wait for; ``queue`` defaults to
:func:`default_queue`; ``options=(...)`` are build options (the one compiler keyword)."""
launch.__module__ = "specializer.backends.opencl"
_site = _launcher.site  # the one call site of the cached lookup (tests count its misses)
