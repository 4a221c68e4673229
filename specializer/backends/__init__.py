"""The back-ends, one package per device API: :mod:`specializer.backends.opencl` (pyopencl, on
PoCL's CPU device by default) and :mod:`specializer.backends.cuda` (cuda-python), with the same
names, so a program switches back-ends by one import; the core never imports a back-end."""
