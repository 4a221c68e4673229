"""The launch path: the compiler keyword arguments' configs, ``HostKernel``, the launcher, the
cached lookup (``clfunction``) and ``launch``."""

from __future__ import annotations

import shlex
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ... import launching
from ...compiler import CompilerConfig
from ...kernels import Kernel, KernelInstance, uncached_lookup
from ...types import Struct, WeakScalar, resolve_weak
from . import _queues
from ._args import GUARD_CLASS, ArgType, Array, LocalMemory, Sampler, c_type, packer
from ._decorators import definitions
from ._failures import FAILURES, bad_array, failed, size_error
from ._program import LinkedKernel, OpenCLBackend, nothing
from ._sizes import sizes

BACKEND = OpenCLBackend()
_configs: dict[tuple[str, ...], CompilerConfig] = {}


def _config(options: tuple[str, ...]) -> CompilerConfig:
    config = _configs.get(options)
    if config is None:
        config = _configs.setdefault(options, CompilerConfig(BACKEND, options))
    return config


#: launch options, in order, as launch and a HostKernel call take them
LAUNCH_OPTIONS = ("global_size", "local_size", "global_offset", "wait_for", "queue")
#: compiler keyword arguments, each with what it takes
COMPILER_KWARGS = {"options": "(build options, ...), e.g. options=('-cl-fast-relaxed-math',)"}


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


def _other_context(where: _queues.ContextKey, value: Any) -> str | None:
    """What is wrong with an array, raw buffer, image or sampler (captured too) of another
    context than the launch's, which pyopencl would let run (asked on a miss; a hit's where
    is the same)."""
    try:
        other = value.context
    except cl.Error:
        return None
    if other is None or other.int_ptr == where.ptr:
        return None
    kind = "an array" if isinstance(value, cla.Array) else f"a {type(value).__name__}"
    return (
        f"{kind} of {other!r}, but the queue is in {where}: a kernel can use only memory of "
        "its queue's context: make it on a queue of that context, or launch on a queue of its "
        "context"
    )


class _OpenCLLauncher(launching.Launcher):
    name = "opencl"
    template = "opencl_launch.py.j2"
    options = dict.fromkeys(LAUNCH_OPTIONS)
    options["global_size"] = launching.REQUIRED
    compiler_kwargs = COMPILER_KWARGS
    lookup_name = "clfunction"
    namespace = {
        "_default": _queues.default_where,
        "_first_default": _queues.first_default,
        "_where": _queues.context_key,
        "_enqueue": cl.enqueue_nd_range_kernel,
        "_sizes": sizes,
        "_size_error": size_error,
        "_bad_array": bad_array,
        "_failed": failed,
        "_FAILURES": FAILURES,
        "_nothing": nothing,
        "_ref": weakref.ref,
    }

    def uncached_lookup(
        self, F: Any, tt: tuple[type, ...], key: tuple[_queues.ContextKey, tuple[str, ...]]
    ) -> Any:
        return uncached_lookup(F, tt, _config(key[1]), key[0])

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        return (where, _build_options(kw)) if kw else where.key

    def kind(self, t: type, r: type, captured: bool) -> launching.Kind:
        if issubclass(t, Array):
            return launching.Kind("array", cla.Array, t.dtype, check=_other_context)
        if issubclass(t, LocalMemory):
            return launching.Kind("local", cl.LocalMemory)
        if issubclass(t, Sampler):
            return launching.Kind("sampler", cl.Sampler, check=_other_context)
        if issubclass(t, ArgType):  # a buffer or an image: checked by class on a miss
            return launching.Kind("object", GUARD_CLASS[t], check=_other_context)
        if issubclass(t, Struct):
            return launching.Kind("bytes", np.void, t.dtype)
        if issubclass(t, WeakScalar):
            pack = packer(resolve_weak(t, r))
            return launching.Kind(
                "packed_each" if captured else "packed", t.pytype, values={"pack": pack}
            )
        c_type(r)  # a type OpenCL has, so its numpy scalar's bytes are the argument
        return launching.Kind("bytes" if captured else "scalar", t)


_launcher = _OpenCLLauncher(definitions)


class HostKernel(launching.HostKernel):
    """``clfunction``'s result: the cached :class:`LinkedKernel` with the live kernel ``f``.

    Call it like :func:`launch`, with arguments of the types it was looked up for (a Python
    scalar also where it takes that scalar's default type, ``np.int64`` for an ``int``, on a
    slower path): ``hk(*args, global_size=..., local_size=None, global_offset=None, wait_for=None,
    queue=None)`` (default: the queue of the lookup; another queue must be of its context); a
    kernel instance's captured values are passed first, from ``f``, on each call. Attributes:

    - ``queue``: the queue it was looked up for; ``context``: its context;
    - ``kernel``: a ``pyopencl.Kernel`` to inspect (launches set the arguments of kernel
      objects of their own, from the linked kernel's pool); ``program``: its program;
    - ``f``, ``tt``, ``linked`` (the :class:`LinkedKernel`) and ``where`` (its context's key).
    """

    __call__ = _launcher.host_call

    linked: LinkedKernel
    queue: cl.CommandQueue
    context: cl.Context | None
    kernel: Any
    program: Any

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.queue = self.options["queue"]
        self.context = self.linked.context
        self.kernel = self.linked.kernel
        self.program = self.linked.program


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
    hk: HostKernel = _launcher.function(HostKernel, f, tt, {"queue": queue}, compiler_kwargs)
    return hk


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
