"""The back-ends: one module per device API, each a short implementation of the core's interface.

- :mod:`specializer.backends.opencl`: OpenCL through pyopencl, on PoCL's CPU device by default.
- :mod:`specializer.backends.cuda`: CUDA through cuda-python (NVRTC and the driver API).

Each offers the same names (``kernel``, ``device``, ``typeof``, ``ctype``, ``Array``,
``HostKernel``, the lookup ``clfunction``/``cufunction`` and ``launch``), so a program switches
back-ends by changing one import. The core (``specializer``) never imports a back-end.
"""
