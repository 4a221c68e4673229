"""specializer: per-launch kernel lookups that are nearly free and exactly right.

A Python port of GPUCompiler.jl's ``cached_lookup``, with the machinery that
makes "exactly right" mean something: a world-age model, generic kernels with
methods and callees, and a compiled-code cache with world validity ranges.
Back-ends live in ``specializer.backends`` (OpenCL on PoCL, CUDA); this package
never imports them.
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
