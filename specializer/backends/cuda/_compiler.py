"""NVRTC compilation and per-context loading: the CUDA :class:`~specializer.Backend`.

``compile`` joins the device sources of a job (callees first, then the kernel)
and compiles them with NVRTC for the config's architecture: PTX always, and a
cubin for a real architecture (``sm_XX``), which is what gets loaded, so the
driver never has to JIT PTX newer than it knows. It needs no GPU.

The kernel's entry is found by name through NVRTC's *name expressions*: the
source must define one ``__global__`` function with the method's name. Writing
it ``extern "C"`` (recommended) makes the PTX ``.entry`` that very name; a C++
kernel works too, under its mangled ("lowered") name.

``link`` loads the cubin (or PTX) into one context and gets the function: a
:class:`LinkedKernel`, what ``cufunction`` caches, together with the launcher
of the kernel's signature.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from ...compiler import Backend, CompileError, CompilerConfig, CompilerJob
from ._driver import Context, CUDAError, check, driver, pushed
from ._params import launcher

try:
    from cuda.bindings import nvrtc
except ImportError as e:  # pragma: no cover - the cuda extra is installed wherever this is used
    raise ImportError(
        f"the CUDA back-end needs cuda-python: pip install 'specializer[cuda]' ({e})"
    ) from e

__all__ = [
    "BACKEND",
    "COMPILER_KWARGS",
    "CUDAArtifact",
    "CUDABackend",
    "LinkedKernel",
    "compiler_config",
    "nvrtc_version",
    "supported_archs",
]

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)\Z")


@dataclass(frozen=True)
class CUDAArtifact:
    """What NVRTC made of a job: the PTX, the cubin (for an ``sm_XX`` target), the entry
    name, the architecture, NVRTC's log, and the device source it came from."""

    source: str
    ptx: str
    cubin: bytes | None
    entry: str
    arch: str
    log: str


class LinkedKernel:
    """A kernel loaded into one context with the launcher of its signature: the result
    ``cufunction`` caches. It references no kernel instance (captured values come from
    each launch)."""

    __slots__ = ("arch", "context", "function", "launch", "module", "name", "tt")

    def __init__(
        self,
        name: str,
        function: Any,
        module: Any,
        context: Context,
        tt: tuple[type, ...],
        arch: str,
    ) -> None:
        self.name = name
        self.function = function  # a CUfunction (kept as the object: ints cost more per call)
        self.module = module
        self.context = context
        self.tt = tt
        self.arch = arch
        self.launch = launcher(tt)

    def __repr__(self) -> str:
        return f"<LinkedKernel {self.name} ({self.arch}) in {self.context!r}>"


def _nvrtc_check(result: tuple[Any, ...], call: str) -> Any:
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{call} failed: {getattr(err, 'name', err)}")
    return result[1] if len(result) == 2 else result[1:]


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    return tuple(_nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion"))  # type: ignore[return-value]


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities NVRTC compiles for (``90`` for ``sm_90``)."""
    return tuple(_nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def _program_bytes(prog: Any, size_fn: Any, get_fn: Any, what: str) -> bytes:
    size = _nvrtc_check(size_fn(prog), what)
    buf = b" " * size
    _nvrtc_check(get_fn(prog, buf), what)
    return buf


def _nvrtc_compile(
    source: str, name: str, arch: str, options: tuple[str, ...]
) -> tuple[str, bytes | None, str, str]:
    """(ptx, cubin or None, entry, log); raises :class:`CompileError` with NVRTC's log."""
    if not _C_IDENTIFIER.match(name):
        raise CompileError(f"kernel {name!r}: a CUDA kernel's name must be a C identifier")
    prog = _nvrtc_check(
        nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        _nvrtc_check(nvrtc.nvrtcAddNameExpression(prog, name.encode()), "nvrtcAddNameExpression")
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = (
            _program_bytes(
                prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, "nvrtcGetProgramLog"
            )
            .rstrip(b"\0")
            .decode(errors="replace")
        )
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            hint = ""
            if "__nv_name_map" in log:
                hint = (
                    f"\n(the source must define one __global__ function named {name}; "
                    f'write it extern "C" __global__ void {name}(...))'
                )
            raise CompileError(
                f"kernel {name} failed to compile with NVRTC {'.'.join(map(str, nvrtc_version()))} "
                f"for {arch} ({getattr(err, 'name', err)}), options {list(options)}:\n"
                f"{log.rstrip()}{hint}"
            )
        entry = _nvrtc_check(
            nvrtc.nvrtcGetLoweredName(prog, name.encode()), "nvrtcGetLoweredName"
        ).decode()
        ptx = (
            _program_bytes(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "nvrtcGetPTX")
            .rstrip(b"\0")
            .decode()
        )
        cubin = None
        if arch.startswith("sm_"):
            cubin = _program_bytes(
                prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "nvrtcGetCUBIN"
            )
        return ptx, cubin, entry, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


class CUDABackend(Backend):
    """NVRTC compilation (no GPU needed) and module loading per context."""

    name = "cuda"

    def compile(self, job: CompilerJob) -> CUDAArtifact:
        arch, options = job.config.options
        source = "\n".join(job.device_sources())
        ptx, cubin, entry, log = _nvrtc_compile(source, job.name, arch, options)
        return CUDAArtifact(source, ptx, cubin, entry, arch, log)

    def link(self, job: CompilerJob, artifact: CUDAArtifact, context: Hashable) -> Any:
        """Load into ``context`` and get the kernel's function handle."""
        assert isinstance(context, Context)
        image = artifact.cubin if artifact.cubin is not None else artifact.ptx.encode() + b"\0"
        detail = f"loading kernel {job.name} ({artifact.arch}) into {context!r}"
        with pushed(context):
            try:
                module = check(driver.cuModuleLoadData(image), "cuModuleLoadData", detail)
            except CUDAError as e:
                if artifact.cubin is None:
                    e.args = (
                        f"{e.args[0]} (PTX from NVRTC {nvrtc_version()} may be newer than "
                        "the driver; compile for the device's sm_XX instead)",
                    )
                raise
            function = check(
                driver.cuModuleGetFunction(module, artifact.entry.encode()),
                "cuModuleGetFunction",
                detail,
            )
        return LinkedKernel(job.name, function, module, context, job.mi.tt, artifact.arch)


BACKEND = CUDABackend()

#: the compiler keyword arguments cufunction, launch and code_ptx accept
COMPILER_KWARGS = {
    "arch": "target architecture, 'sm_XX' (loads a cubin) or 'compute_XX' (PTX); "
    "default: the current device's",
    "fastmath": "bool: --use_fast_math",
    "maxregs": "int: --maxrregcount",
    "lineinfo": "bool: --generate-line-info",
    "options": "a tuple of further NVRTC options",
}


def _check_arch(arch: Any) -> str:
    if not isinstance(arch, str):
        raise TypeError(f"arch= is a str such as 'sm_90', got {arch!r}")
    m = _ARCH.match(arch)
    supported = supported_archs()
    if m is None or int(m.group(2)) not in supported:
        raise ValueError(
            f"arch={arch!r} is not an architecture NVRTC "
            f"{'.'.join(map(str, nvrtc_version()))} compiles for; supported: "
            f"{', '.join(f'sm_{a}' for a in supported)} (or compute_XX for PTX only)"
        )
    return arch


def device_arch(ctx: Context) -> str:
    """The architecture to compile for on ``ctx``'s device: its own ``sm_XX`` when NVRTC
    knows it, PTX for the newest NVRTC knows when the device is newer still."""
    cc = ctx.capability[0] * 10 + ctx.capability[1]
    supported = supported_archs()
    if cc in supported:
        return f"sm_{cc}"
    if cc > max(supported):
        return f"compute_{max(supported)}"
    raise CUDAError(
        "choosing an architecture",
        driver.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU,
        f"{ctx!r} has compute capability {ctx.capability[0]}.{ctx.capability[1]}, which NVRTC "
        f"{'.'.join(map(str, nvrtc_version()))} no longer compiles for (oldest: "
        f"sm_{min(supported)})",
    )


def compiler_config(kwargs: tuple[tuple[str, Any], ...], context: Context | None) -> CompilerConfig:
    """The config of compiler keyword arguments (sorted ``(name, value)`` pairs); the
    architecture comes from ``context``'s device unless ``arch`` is given."""
    kw = dict(kwargs)
    unknown = sorted(set(kw) - set(COMPILER_KWARGS))
    if unknown:
        raise TypeError(
            f"unknown compiler keyword argument(s) {', '.join(unknown)} (of cufunction, "
            f"launch or code_ptx); "
            f"accepted: {'; '.join(f'{k} ({v})' for k, v in COMPILER_KWARGS.items())}"
        )
    if kw.get("arch") is not None:
        arch = _check_arch(kw["arch"])
    elif context is not None:
        arch = device_arch(context)
    else:
        raise TypeError("compiling without a context needs arch= (for example arch='sm_90')")
    options: list[str] = []
    for flag, opt in (("fastmath", "--use_fast_math"), ("lineinfo", "--generate-line-info")):
        value = kw.get(flag, False)
        if not isinstance(value, bool):
            raise TypeError(f"{flag}= is a bool, got {value!r}")
        if value:
            options.append(opt)
    maxregs = kw.get("maxregs")
    if maxregs is not None:
        if isinstance(maxregs, bool) or not isinstance(maxregs, int) or maxregs < 1:
            raise TypeError(f"maxregs= is a positive int, got {maxregs!r}")
        options.append(f"--maxrregcount={maxregs}")
    extra = kw.get("options", ())
    if not isinstance(extra, (tuple, list)) or not all(isinstance(o, str) for o in extra):
        raise TypeError(f"options= is a tuple of NVRTC option strings, got {extra!r}")
    options.extend(extra)
    return CompilerConfig(BACKEND, (arch, tuple(options)))
