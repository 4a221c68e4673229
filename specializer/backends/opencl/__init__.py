"""The OpenCL back-end: kernels written in OpenCL C, built by pyopencl, run on PoCL's CPU device.

KernelAbstractions' POCL back-end over the core's interface: ``compile(job)`` joins a kernel's
and its callees' source into an :class:`OpenCLSource`, ``link`` builds it once per context,
source and options into a :class:`LinkedKernel`, and the launch path is the core's, generated
from ``templates/opencl_launch.py.j2``. API: ``docs/reference-opencl.md``; design:
``docs/design.md`` ("OpenCL back-end")."""

from __future__ import annotations

from ...types import Struct
from ._args import Array, Buffer, Image, LocalMemory, Sampler, ctype, typeof
from ._decorators import capture, device, kernel
from ._launch import BACKEND, HostKernel, clfunction, launch
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
