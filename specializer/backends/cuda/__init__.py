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

Design notes (the modules say more):

- Kernel sources: a method body returns CUDA C defining one ``__global__`` function
  with the method's name, found through NVRTC name expressions; write it
  ``extern "C"`` so the PTX ``.entry`` is that name (a C++ kernel is found under its
  mangled name). Device functions (callees) are prepended, dependencies first.
- Compilation is cached per (method instance, config) with its world range by the
  core; the config is (architecture, NVRTC options). The kernels of one source share
  one NVRTC program and one module per context; ``KernelSource(..., name=, headers=,
  options=)`` gives the program's name, in-memory headers and the NVRTC options that
  depend on the method's types (before the config's); every cache of built code is keyed by
  the contents of the user headers the source includes (:mod:`specializer.includes`).
  ``code_ptx(f, tt, arch="sm_90")`` needs no GPU. Loading is per context (``link``),
  and ``cufunction`` caches the result per (kernel type, argument types, context,
  compiler kwargs) and world.
- A :class:`Context` object is the key: destroying and creating a context is a new
  key, so its lookups miss. Each thread has a current context (``with ctx:``; the
  primary context of device 0 by default), read with one thread-local load.
- Foreign device arrays (``__cuda_array_interface__``, DLPack, cuda.core's views and
  buffers) take the front entry's fast path by their class once the slow path has typed
  one (see :mod:`._array`).
- Launch: the core's launch path (:mod:`specializer.launching`), generated per signature
  from ``templates/cuda_entry.py.j2``, stores each argument into a parameter buffer laid
  out once for that signature and passes ``cuLaunchKernel`` its address. Threads: each
  launch takes a buffer from the signature's pool (``list.pop``, atomic) and gives it
  back when the driver has copied the values, so concurrent launches never share one,
  without a lock.
- No GPU or no driver: :class:`CUDAUnavailableError` naming what is missing, from the
  first call that needs the driver (probed once); importing this module touches
  nothing.
"""

from ...types import Struct
from ._array import Array, CuArray
from ._compiler import BACKEND, COMPILER_KWARGS, CUDABackend
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
from ._launch import (
    LAUNCH_OPTIONS,
    HostKernel,
    capture,
    code_ptx,
    cufunction,
    device,
    kernel,
    launch,
    typeof,
)
from ._module import LinkedKernel
from ._nvrtc import NVRTCError, supported_archs
from ._program import CUDAArtifact
from ._source import KernelSource
from ._types import ctype

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
