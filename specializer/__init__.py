"""specializer: per-launch kernel lookups that are nearly free and exactly right.

Start here (OpenCL on PoCL's CPU device; from a checkout, ``.venv/bin/pip install -e
'.[opencl]' --config-settings editable_mode=compat``)::

    import numpy as np
    import pyopencl.array as cla
    from specializer.backends import opencl as cl

    @cl.kernel  # one method for every element type; the body returns OpenCL C source
    def fill(x: cl.Array[np.number], v: np.number) -> str:
        return f'''__kernel void fill(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                       x[get_global_id(0)] = v; }}'''

    x = cla.zeros(cl.default_queue(), 1024, np.float32)
    cl.launch(fill, x, np.float32(3), global_size=x.size)
    assert (x.get() == 3).all()

Define ``fill`` again, or a more specific method, and the next launch runs the new code. CUDA
mirrors it: ``cuda.launch(f, *args, grid=..., block=...)``. Read on in ``docs/getting-started.md``
and ``docs/user-guide.md``; ``python -m specializer demo`` shows why a kernel cache needs the
world age, ``python -m specializer dump --device-source my_script.py`` what a program built.

A port of GPUCompiler.jl's ``cached_lookup``: world ages, generic kernels with methods and callees,
a compiled-code cache with world validity ranges. It never imports ``specializer.backends``.
"""

from .codegen import GeneratedSource, generated_sources
from .compiler import (
    Backend,
    CompileError,
    CompilerConfig,
    CompilerJob,
    compile_count,
    device_code,
    device_code_source,
)
from .lookup import cached_lookup, specialize
from .methods import AmbiguityError, GenericFunction, MethodError, MethodInstance
from .precompile import PrecompileOutputError, generating_output, precompile_output
from .world import bump, current, invoke_in_world, invokelatest, latest

__version__ = "0.2.0"

__all__ = [
    "AmbiguityError",
    "Backend",
    "CompileError",
    "CompilerConfig",
    "CompilerJob",
    "GeneratedSource",
    "GenericFunction",
    "MethodError",
    "MethodInstance",
    "PrecompileOutputError",
    "bump",
    "cached_lookup",
    "compile_count",
    "current",
    "device_code",
    "device_code_source",
    "generated_sources",
    "generating_output",
    "invoke_in_world",
    "invokelatest",
    "latest",
    "precompile_output",
    "specialize",
]
