"""The CUDA :class:`~specializer.Backend`: NVRTC compilation (no GPU needed) and per-context
loading; its config, (architecture, NVRTC options), is :func:`compiler_config`'s.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from ... import includes
from ...compiler import Artifact, Backend, CompilerConfig, CompilerJob
from ...sources import split_options
from ._decorators import definitions
from ._driver import Context, ContextKey, CUDAError, driver
from ._module import load
from ._nvrtc import NVRTCError, supported_archs, version_str
from ._program import CUDAArtifact, compile_program, included_digest
from ._ptx import check_parameters
from ._source import Program, kernel_program

_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)\Z")
_UNDEFINED = re.compile(r'identifier "([A-Za-z_]\w*)" is undefined')


class CUDABackend(Backend):
    """NVRTC compilation (no GPU needed) and module loading per context."""

    name = "cuda"

    def compile(self, job: CompilerJob) -> CUDAArtifact:
        program, expression = kernel_program(job)
        return _compile(job, program, expression, _included(program, job))

    def recompile(self, job: CompilerJob, artifact: Artifact) -> Artifact:
        """The artifact compiled again from the same program where a user file it includes
        (``-I``, ``-include``, the program's directory) changed since (SPEC 3)."""
        if not isinstance(artifact, CUDAArtifact) or artifact.built is None:
            return artifact
        included = _included(artifact.built, job)
        if included == artifact.included and includes.keyed(included):
            return artifact
        return _compile(job, artifact.built, artifact.expression, included)

    def link(self, job: CompilerJob, artifact: Artifact, context: Hashable) -> Any:
        """Load into the context whose key is ``context`` and get the kernel's function."""
        if not isinstance(artifact, CUDAArtifact):
            raise TypeError(f"a CUDA kernel is linked from a CUDAArtifact, got {artifact!r}")
        if not isinstance(context, ContextKey):
            raise TypeError(f"a CUDA kernel is loaded for a context's key, got {context!r}")
        token, context = context, context.context()
        if context is None:
            raise RuntimeError(f"the context of this lookup is gone ({token!r})")
        return load(job, artifact, token, context)


def _included(program: Program, job: CompilerJob) -> str:
    return included_digest(program.source, program.options, program.name, program.headers, job.name)


def _compile(job: CompilerJob, program: Program, expression: str, included: str) -> CUDAArtifact:
    try:
        key, r = compile_program(program, expression, job.name, included)
    except NVRTCError as e:
        hints = _callee_hints(e.log, job)
        if not hints:
            raise
        raise NVRTCError(str(e) + "".join(f"\nhint: {h}" for h in hints), e.log) from None
    entry = r.lowered[expression]
    check_parameters(job.name, r.ptx, entry, job.mi.tt)
    return CUDAArtifact(
        program.source,
        r.ptx,
        r.cubin,
        entry,
        program.arch,
        r.log,
        expression,
        r.options,
        key,
        program,
        included,
    )


def _callee_hints(log: str, job: CompilerJob) -> list[str]:
    """A hint for each undefined name in the log that is a device function not in ``callees=``."""
    names = dict.fromkeys(_UNDEFINED.findall(log))
    if not names:
        return []
    defined: dict[str, dict[str, None]] = {}  # name -> the modules defining it
    for gf in definitions.device_functions():
        if gf.name in names:
            defined.setdefault(gf.name, {})[gf.__module__] = None
    listed = {mi.method.gf.name for mi in job.callees}
    hints = []
    for name in names:
        if name in defined and name not in listed:
            where = ", ".join(m or "?" for m in defined[name])
            hints.append(
                f"{name} is a device function of this back-end (@cuda.device in {where}) that "
                f"kernel {job.name} does not list as a callee: define the kernel with "
                f"@cuda.kernel(callees=[{name}, ...]) so its source is compiled in"
            )
    return hints


BACKEND = CUDABackend()

#: the compiler keyword arguments cufunction, launch and code_ptx accept
COMPILER_KWARGS = {
    "arch": "target architecture, 'sm_XX' (loads a cubin) or 'compute_XX' (PTX); "
    "default: the current device's",
    "fastmath": "bool: --use_fast_math",
    "maxregs": "int: --maxrregcount",
    "lineinfo": "bool: --generate-line-info",
    "options": "further NVRTC options: a tuple, or a str split by shell rules",
}


def _check_arch(arch: Any) -> str:
    if not isinstance(arch, str):
        raise TypeError(f"arch= is a str such as 'sm_90', got {arch!r}")
    m = _ARCH.match(arch)
    supported = supported_archs()
    if m is None or int(m.group(2)) not in supported:
        raise ValueError(
            f"arch={arch!r} is not an architecture NVRTC {version_str()} compiles for; supported: "
            f"{', '.join(f'sm_{a}' for a in supported)} (or compute_XX for PTX only)"
        )
    return arch


def device_arch(ctx: Context) -> str:
    """``ctx``'s device's ``sm_XX`` if NVRTC knows it, else PTX for the newest it knows."""
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
        f"{version_str()} no longer compiles for (oldest: sm_{min(supported)})",
    )


def compiler_config(kwargs: tuple[tuple[str, Any], ...], context: Context | None) -> CompilerConfig:
    """The config of sorted ``(name, value)`` compiler kwargs, each one of ``COMPILER_KWARGS``
    (``_launch._kwkey`` refused the others); ``arch`` defaults to the device's."""
    kw = dict(kwargs)
    if kw.get("arch") is not None:
        arch = _check_arch(kw["arch"])
    elif context is not None:
        arch = device_arch(context)
    else:
        raise TypeError("compiling without a context needs arch= (for example arch='sm_90')")
    return CompilerConfig(BACKEND, (arch, _nvrtc_options(kw)))


def _nvrtc_options(kw: dict[str, Any]) -> tuple[str, ...]:
    """The NVRTC options of the compiler keyword arguments but ``arch``."""
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
    given = kw.get("options", ())
    extra = split_options(given, "options=", "NVRTC option strings")  # a str: shell words
    if not isinstance(given, (str, tuple, list)) or not all(isinstance(o, str) for o in extra):
        raise TypeError(
            f"options= is a tuple of NVRTC option strings (or one str of them), got {given!r}"
        )
    options.extend(extra)
    return tuple(options)
