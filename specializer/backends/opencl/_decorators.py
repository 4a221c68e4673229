"""The definitions of the OpenCL back-end: ``@kernel``, ``@device`` and ``capture`` (the
core's, with what OpenCL's annotations take)."""

from __future__ import annotations

from ...kernels import Definitions
from ...types import Struct, WeakScalar
from ._args import Array, Buffer, Image, LocalMemory, Sampler, typeof

definitions = Definitions(
    typeof,
    "specializer.backends.opencl",
    (WeakScalar, Struct, Array, Buffer, LocalMemory, Image, Sampler),
    kernel_doc="""Annotate each parameter with an argument type: ``Array[dtype]`` (a pyopencl
    array; ``Array[np.float32]``, or abstract ``Array[np.floating]``, ``Array[np.number]``), a
    numpy scalar type (``np.float32``, or abstract ``np.integer``, ``np.number``),
    ``Struct[dtype]`` (a struct or vector by value, e.g. ``pyopencl.cltypes.float4``),
    ``Buffer``, ``LocalMemory``, ``Image`` or ``Sampler``. The body returns OpenCL C source
    defining a ``__kernel`` function named like the method, its parameters in the same order
    (:func:`ctype` spells a type).""",
    device_doc="The body returns OpenCL C source defining helper functions.",
)
kernel, device = definitions.kernel, definitions.device
#: ``capture(kernel, *values)``: a kernel instance passing ``values`` first on every launch.
capture = definitions.capture
