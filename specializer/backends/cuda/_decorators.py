"""The CUDA back-end's ``@kernel``, ``@device`` and ``capture`` (the core's), over ``typeof``."""

from __future__ import annotations

from ...kernels import Definitions
from ...types import Struct, WeakScalar
from ._array import Array
from ._types import typeof

definitions = Definitions(
    typeof,
    "specializer.backends.cuda",
    (WeakScalar, Struct, Array),
    kernel_doc="""Annotate each parameter with an argument type: ``Array[dtype]`` (a ``CuArray``
    or any array with ``__cuda_array_interface__`` or DLPack; ``Array[np.float32]``, or
    abstract ``Array[np.floating]``), a numpy scalar type (``np.float32``, ``np.float16`` for
    ``__half``, or abstract ``np.integer``, ``np.number``) or ``Struct[dtype]`` (a struct by
    value). The body returns CUDA C++ source that defines a ``__global__`` function named like
    the method (``extern "C"`` recommended), or a :class:`KernelSource` naming its entry (a
    template instance, in-memory headers).""",
    device_doc="The body returns CUDA C++ source defining ``__device__`` functions.",
)
kernel, device = definitions.kernel, definitions.device
#: ``capture(kernel, *values)``: a kernel instance passing ``values`` first on every launch.
capture = definitions.capture
