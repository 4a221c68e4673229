"""The OpenCL back-end: kernels written in OpenCL C, built by pyopencl, run on PoCL's CPU device.

The counterpart of KernelAbstractions' POCL back-end, over the core's interface:

- ``compile(job)`` joins the device source of the kernel and its callees into an
  :class:`OpenCLSource`, with the build options their methods return (a method may return a
  :class:`KernelSource` with ``options=``); nothing in it depends on a context.
- ``link(job, source, context)`` builds that source in one context with the methods' build
  options followed by the config's (the launch's ``options=``): one program per context,
  source and options, whatever the number of kernels in it; it returns a
  :class:`LinkedKernel`, which the core caches per (compiled code, context).
- ``launch``, ``clfunction`` and the ``HostKernel`` call are the core's launch path
  (:mod:`specializer.launching`), generated per signature from ``templates/opencl_entry.py.j2``:
  a launch whose kernel's front entry holds its lookup checks the world, the queue and each
  argument's class (and dtype), sets the arguments and enqueues, calling no ``typeof``.

Kernel arguments (SPEC section 8): ``pyopencl.array.Array`` (``Array[dtype]``, its buffer),
``pyopencl.Buffer`` (``Buffer``), ``pyopencl.LocalMemory`` (``LocalMemory``), ``pyopencl.Image``
(``Image``), ``pyopencl.Sampler`` (``Sampler``), numpy scalars (their exact type, a subclass its
numpy base), numpy structured scalars and 0-d arrays of one (``Struct[dtype]``, by value), and
Python ``int``/``float``/``bool`` (weak: they take the type the method declares, range-checked).
The slow path checks what no launch after it does: that arrays, buffers, images and samplers
are of the queue's context, and, when a kernel is linked, each kernel parameter's type as the
device reports it (kernel argument info) against the method's argument type.

Design notes on the launch path. pyopencl's ``Kernel.set_arg`` on a numpy scalar tries several
casts before it takes raw bytes; the launch path sets scalars with ``_set_arg_buf`` (a private
pyopencl attribute, like each one used, in :mod:`specializer.backends._pyopencl_private`; raw
bytes: a numpy scalar's own, or for a Python scalar the bytes ``struct`` packs into the declared C
type) and buffers with ``set_arg``, then calls ``enqueue_nd_range_kernel`` directly. Setting
the arguments and enqueueing are two steps that another thread must not interleave: each
launch takes a kernel object from its linked kernel's pool (``list.pop``, atomic under the GIL
and per-object locks alike) and gives it back after the enqueue, so concurrent launches use
different kernel objects, without a lock; a pool grows only to the number of launches ever in
flight at once. Each kernel object's record says what is set at each index without holding a
user's buffer, array, image, sampler, local memory or captured value (a weak reference to the
array, a local memory's size, a sampler's handle, an immutable scalar launch argument of an
exact type; a raw buffer, an image or a captured value is set on every launch), and is
cleared before an argument is set and stored after, so an interrupted launch never leaves it
naming a value that is not set (``templates/opencl_entry.py.j2`` has the details).

The package's modules, lowest first (each imports only those before it): ``_args`` (argument
kinds, ``typeof``, ``ctype``), ``_cdecl`` (a kernel's parameters read from its C source),
``_queues`` (the default queue, context keys), ``_sizes`` (work sizes), ``_decorators``
(``@kernel``, ``@device``, ``capture``), ``_program`` (programs, the Backend,
``LinkedKernel``), ``_launch`` (``HostKernel``, the launcher, ``clfunction``, ``launch``).
"""

from __future__ import annotations

from ...types import Struct
from ._args import Array, Buffer, Image, LocalMemory, Sampler, ctype, typeof
from ._decorators import capture, device, kernel
from ._launch import (
    BACKEND,
    HostKernel,
    clfunction,
    launch,
)
from ._launch import COMPILER_KWARGS as COMPILER_KWARGS
from ._launch import LAUNCH_OPTIONS as LAUNCH_OPTIONS
from ._launch import _launcher as _launcher
from ._launch import _site as _site
from ._program import KernelSource, LinkedKernel, OpenCLBackend, OpenCLSource
from ._queues import default_queue, set_default_queue

__all__ = [
    "BACKEND",
    "Array",
    "Buffer",
    "HostKernel",
    "Image",
    "KernelSource",
    "LinkedKernel",
    "LocalMemory",
    "OpenCLBackend",
    "OpenCLSource",
    "Sampler",
    "Struct",
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
