"""The CUDA back-end, on cuda-python: NVRTC compilation and the driver API.

The counterpart of CUDA.jl's ``cufunction`` and ``@cuda`` over specializer's core,
with the same interface as the OpenCL back-end, so switching is one import::

    import numpy as np
    from specializer.backends import cuda

    @cuda.kernel
    def fill(x: cuda.Array[np.number], v: np.number, n: np.int64) -> str:
        return f'''extern "C" __global__ void fill({cuda.ctype(x.dtype)} *x,
                                                   {cuda.ctype(v)} v, long long n) {{
                       long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                       if (i < n) x[i] = v; }}'''

    x = cuda.CuArray.zeros(1024, np.float32)
    cuda.launch(fill, x, np.float32(3), x.size, grid=4, block=256)
    x.get()                                  # array([3., 3., ...], dtype=float32)

Design notes: ``docs/design.md`` ("CUDA back-end": sources and entries, the caches of built
code, contexts as keys, foreign arrays, the launch's parameter buffers, the layers);
``docs/reference-cuda.md`` is the API.
"""

from ...types import Struct
from ._array import Array, CuArray
from ._compiler import BACKEND, COMPILER_KWARGS, CUDABackend
from ._decorators import capture, device, kernel
from ._driver import (
    Context,
    CUDAError,
    CUDAUnavailableError,
    Stream,
    available,
    current_context,
    device_count,
    synchronize,
    unavailable_reason,
)
from ._launch import LAUNCH_OPTIONS, HostKernel, code_ptx, cufunction, launch
from ._module import LinkedKernel
from ._nvrtc import NVRTCError, supported_archs
from ._program import CUDAArtifact
from ._source import KernelSource
from ._types import ctype, typeof

__all__ = [
    "BACKEND",
    "COMPILER_KWARGS",
    "LAUNCH_OPTIONS",
    "Array",
    "CUDAArtifact",
    "CUDABackend",
    "CUDAError",
    "CUDAUnavailableError",
    "Context",
    "CuArray",
    "HostKernel",
    "KernelSource",
    "LinkedKernel",
    "NVRTCError",
    "Stream",
    "Struct",
    "available",
    "capture",
    "code_ptx",
    "ctype",
    "cufunction",
    "current_context",
    "device",
    "device_count",
    "kernel",
    "launch",
    "supported_archs",
    "synchronize",
    "typeof",
    "unavailable_reason",
]
