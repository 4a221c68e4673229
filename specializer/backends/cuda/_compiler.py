"""NVRTC compilation and per-context loading: the CUDA :class:`~specializer.Backend`.

``compile`` joins the device sources of a job (callees first, then the kernel)
and compiles them with NVRTC for the config's architecture: PTX always, and a
cubin for a real architecture (``sm_XX``), which is what gets loaded, so the
driver never has to JIT PTX newer than it knows. It needs no GPU.

**The kernel's entry.** NVRTC finds the kernel through a *name expression*, by default
the method's name: the source defines one ``__global__`` function of that name. Writing
it ``extern "C"`` (recommended) makes the PTX ``.entry`` that very name; a C++ kernel
works too, under its mangled ("lowered") name, which ``nvrtcGetLoweredName`` gives. A
method names another entry by returning a :class:`KernelSource`, the source with the
name expression to compile, built from the method's concrete types::

    @cuda.kernel
    def reduce2(x: cuda.Array[np.floating], out: cuda.Array[np.floating], n: np.int64):
        return cuda.KernelSource(REDUCE_TEMPLATES, entry=f"reduce2<{cuda.ctype(x.dtype)}>")

That is how a C++ template kernel (``reduce2<float>``, ``my_sqrt<int>``, ``ns::k<T, 256>``)
is instantiated, and how a method picks one of several kernels in one file (``entry=
"matrixMul_bs32_64bit"``). A :class:`KernelSource` is a ``str``, so the core treats it as
any source. Its ``options=`` are NVRTC options that depend on the method's types
(``options=(f"-DREAL={cuda.ctype(x.dtype)}",)``; not ``-DT=``, which would replace the
template parameters ``T`` of NVRTC's own headers): they come before the compiler keyword
arguments' (``fastmath=``, ``options=`` of a launch) and are part of every key, as those are.

**Toolkit headers.** Every compilation gets the CUDA toolkit's header directories as
include paths, after the user's own ``-I`` options: the runtime headers (``cuda_fp16.h``,
``cooperative_groups.h``, ``cuComplex.h``, ...) and CCCL's (``<cuda/std/...>``, CUB,
Thrust), found as CuPy finds them: through ``cuda.pathfinder``, which looks in NVIDIA's
header wheels (``cuda-toolkit[cudart,cccl]``, part of the ``cuda`` extra), conda, then
``CUDA_PATH``/``CUDA_HOME`` and the system's toolkit; without ``cuda.pathfinder``,
``CUDA_PATH``/``CUDA_HOME`` only. See :func:`toolkit_include_dirs`. A header that is not
found is an error naming the directory that is missing and how to get it.

**On disk.** NVRTC's output is kept across processes by :mod:`._diskcache`
(``SPECIALIZER_CACHE_DIR``; off with an empty value or ``0``), keyed by the full source,
the name expressions, the options, the architecture, NVRTC's version and the headers
found, and the contents of every user file the source includes (:mod:`specializer.includes`:
``-I`` directories made absolute, the program name's directory, in-memory headers; none
is kept where a computed include's search path is past the scan's cap).
:func:`nvrtc_compiles` counts the compilations NVRTC actually ran in this process.

**One program per source.** The kernels whose methods return one source (with one program
name, in-memory headers, options and architecture) share one NVRTC program: the first
compiles it with the name expressions of every kernel found in it (:func:`kernel_names`),
the others reuse it (in this process, and from the disk cache in the next).

**Errors.** Every NVRTC failure is a :class:`~specializer.CompileError` naming the kernel,
its entry, the architecture, the options and NVRTC's log, with a hint where the log
shows a known mistake: a host header (``<cstdio>``, ``<iostream>``, a sample's
``helper_cuda.h``: the file includes host code), a toolkit header not found, a function
template without its instance, a device function of this back-end used without being
in ``callees=``.

``link`` loads the cubin (or PTX) into one context and gets the function: a
:class:`LinkedKernel`, what ``cufunction`` caches, with the launch path of each
signature it was looked up for. Its :meth:`~LinkedKernel.get_global` and
:meth:`~LinkedKernel.copy_to_global` reach the module's ``__constant__`` and
``__device__`` variables.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shlex
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from ... import includes
from ...compiler import Artifact, Backend, CompileError, CompilerConfig, CompilerJob
from ...locks import import_before_fork, new_lock
from ...types import Struct, type_name
from . import _diskcache, _driver
from ._array import Array
from ._driver import Context, ContextKey, CUDAError, check, driver, pushed
from ._params import struct_dtype

try:
    from cuda.bindings import nvrtc
except ImportError as e:  # pragma: no cover - the cuda extra is installed wherever this is used
    raise ImportError(
        f"the CUDA back-end needs cuda-python: pip install 'specializer[cuda]' ({e})"
    ) from e

import_before_fork("cuda.pathfinder")  # imported at the first compile (_locate): see locks

__all__ = [
    "BACKEND",
    "COMPILER_KWARGS",
    "CUDAArtifact",
    "CUDABackend",
    "KernelSource",
    "LinkedKernel",
    "NVRTCResult",
    "compiler_config",
    "nvrtc_compile",
    "nvrtc_compiles",
    "nvrtc_version",
    "supported_archs",
    "toolkit_include_dirs",
]

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)\Z")


class KernelSource(str):
    """A kernel method's source with how to compile it: ``KernelSource(source,
    entry="reduce2<float>", name="reduce_kernel.cu", headers={"common.h": text},
    options=("-DREAL=float",))``.

    ``entry`` is an NVRTC name expression: a function template's instance
    (``my_sqrt<int>``, ``ns::scan<float, 256>``) or the name of one of several kernels in
    the source; ``None`` (and a plain ``str`` source) is the method's name. ``name`` is the
    program's name NVRTC is given (its directory is where quoted includes are looked for
    first, as for a file of that path); ``headers`` are in-memory headers, each found by
    its include name (``#include "common.h"``). Both are part of every cache key, the
    headers by their contents. ``options`` are NVRTC options built from the method's types:
    a sequence of str, or one str split by shell rules as pyopencl splits build options;
    they come before the compiler keyword arguments' options and join every key. A device
    function may return a ``KernelSource`` too: its headers and options apply to the whole
    program (the callees' options first, then the kernel's); its entry and name are not
    used. An option that is not a str is a ``TypeError`` naming the method when its kernel
    is compiled."""

    __slots__ = ("entry", "headers", "name", "options")
    entry: str | None
    name: str | None
    headers: tuple[tuple[str, str], ...]
    options: tuple[Any, ...]

    def __new__(
        cls,
        source: str,
        entry: str | None = None,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        options: str | Sequence[str] = (),
    ) -> KernelSource:
        if not isinstance(source, str):
            raise TypeError(f"KernelSource takes the source as a str, got {type(source).__name__}")
        if entry is not None and (
            not isinstance(entry, str) or not entry.strip() or any(c in entry for c in "\0\n;{}")
        ):
            raise ValueError(
                f"entry= is the name expression of one __global__ function, such as "
                f"'reduce2<float>' or 'my_kernel', got {entry!r}"
            )
        if name is not None and (not isinstance(name, str) or not name.strip() or "\0" in name):
            raise ValueError(f"name= is the program's file name, such as 'kernel.cu', got {name!r}")
        if headers is None:
            items: tuple[tuple[str, str], ...] = ()
        elif isinstance(headers, Mapping) and all(
            isinstance(k, str) and k and "\0" not in k and isinstance(v, str)
            for k, v in headers.items()
        ):
            items = tuple(sorted(headers.items()))
        else:
            raise TypeError(
                f"headers= maps include names to header texts, such as "
                f"{{'common.h': '#define N 256'}}, got {headers!r}"
            )
        split = _split_options(options, "KernelSource options=")
        self = super().__new__(cls, source)
        self.entry = entry.strip() if entry is not None else None
        self.name = name
        self.headers = items
        self.options = split
        return self

    def __repr__(self) -> str:
        extra = "" if self.name is None else f", name={self.name!r}"
        if self.headers:
            extra += f", headers={dict(self.headers)!r}"
        if self.options:
            extra += f", options={self.options!r}"
        return f"KernelSource({str.__repr__(self)}, entry={self.entry!r}{extra})"


def _split_options(options: Any, what: str) -> tuple[Any, ...]:
    """``options`` as a tuple: a str split by shell rules, as pyopencl splits build options;
    a sequence as it is (a method's are checked where the method is known)."""
    if isinstance(options, str):
        try:
            return tuple(shlex.split(options))
        except ValueError as e:
            raise ValueError(f"{what}{options!r} do not split as shell words: {e}") from None
    if not isinstance(options, Sequence) or isinstance(options, (bytes, bytearray)):
        raise TypeError(
            f"{what} are NVRTC option strings, a str or a sequence of str, got {options!r}"
        )
    return tuple(options)


def _signature(name: str, tt: Sequence[type]) -> str:
    return f"{name}({', '.join(type_name(t) for t in tt)})"


def _method_options(job: CompilerJob, sources: Sequence[str]) -> tuple[str, ...]:
    """The NVRTC options the job's method bodies returned with their sources (each a
    :class:`KernelSource`), the callees' first: what the config's options are added to."""
    out: list[str] = []
    for mi, part in zip((*job.callees, job.mi), sources):
        options = getattr(part, "options", ())
        for o in options:
            if not isinstance(o, str):
                what = "kernel" if mi is job.mi else "device function"
                name = mi.method.gf.name
                raise TypeError(
                    f"CUDA {what} {name}: its method {_signature(name, mi.method.signature)} "
                    f"returned KernelSource options={options!r} for {_signature(name, mi.tt)}: "
                    f"{o!r} ({type(o).__name__}) is not an NVRTC option; options are str, "
                    "such as '-DREAL=float'"
                )
        out.extend(options)
    return tuple(out)


@dataclass(frozen=True)
class CUDAArtifact:
    """What NVRTC made of a job: the PTX, the cubin (for an ``sm_XX`` target), the entry's
    lowered name, the architecture, NVRTC's log, the device source it came from, the name
    expression of the entry, the options NVRTC was given (architecture first), and the key
    of the NVRTC program it came from (``program``: the kernels of one source share it)."""

    source: str
    ptx: str
    cubin: bytes | None
    entry: str
    arch: str
    log: str
    expression: str = ""
    options: tuple[str, ...] = ()
    program: str = ""


@dataclass(frozen=True)
class NVRTCResult:
    """One NVRTC compilation: the PTX, the cubin (``sm_XX`` targets), the lowered name of
    each name expression, NVRTC's log, the options it was given, and whether it came from
    the disk cache."""

    ptx: str
    cubin: bytes | None
    lowered: dict[str, str]
    log: str
    options: tuple[str, ...]
    cached: bool = field(default=False, compare=False)


# -- toolkit headers -------------------------------------------------------------------------

#: The toolkit's header directories NVRTC is given: what each holds, the file that shows it
#: is there, and the pip extra that installs it.
_HEADER_KINDS = {
    "cudart": (
        "the CUDA runtime headers (cuda_fp16.h, cooperative_groups.h, ...)",
        "cuda_runtime.h",
    ),
    "cccl": (
        "CCCL's headers (<cuda/std/...>, CUB, Thrust)",
        os.path.join("cuda", "std", "version"),
    ),
}


@dataclass(frozen=True)
class _HeaderDir:
    kind: str
    path: str | None
    found_via: str


def _env_toolkit_root() -> str | None:
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return None


def _from_toolkit_root(kind: str, root: str) -> str | None:
    canary = _HEADER_KINDS[kind][1]
    candidates = [os.path.join(root, "include")]
    if kind == "cccl":  # CUDA 13 keeps CCCL in include/cccl; CUDA 12 in include itself
        candidates.insert(0, os.path.join(root, "include", "cccl"))
    for d in candidates:
        if os.path.isfile(os.path.join(d, canary)):
            return d
    return None


def _locate(kind: str) -> _HeaderDir:
    try:
        pathfinder = importlib.import_module("cuda.pathfinder")
    except ImportError:
        pathfinder = None
    if pathfinder is not None:
        locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
        try:
            if locate is not None:
                found = locate(kind)
                if found is not None and found.abs_path:
                    return _HeaderDir(kind, found.abs_path, f"cuda.pathfinder ({found.found_via})")
            else:
                path = pathfinder.find_nvidia_header_directory(kind)
                if path:
                    return _HeaderDir(kind, path, "cuda.pathfinder")
        except Exception:  # an older cuda.pathfinder that does not know this kind
            pass
    root = _env_toolkit_root()
    if root is not None:
        path = _from_toolkit_root(kind, root)
        if path is not None:
            return _HeaderDir(kind, path, "CUDA_PATH/CUDA_HOME")
    return _HeaderDir(kind, None, "")


@functools.cache
def _header_dirs() -> tuple[_HeaderDir, ...]:
    dirs = [_locate(kind) for kind in _HEADER_KINDS]
    seen: set[str] = set()
    out = []
    for d in dirs:  # cudart and cccl may be one directory (CUDA 12's include)
        key = os.path.realpath(d.path) if d.path else d.kind
        out.append(d if key not in seen else _HeaderDir(d.kind, d.path, d.found_via + ", shared"))
        seen.add(key)
    return tuple(out)


def toolkit_include_dirs() -> tuple[str, ...]:
    """The toolkit's header directories every compilation gets as include paths (found once
    per process): the runtime headers' and CCCL's, each where it was found."""
    out: list[str] = []
    for d in _header_dirs():
        if d.path and d.path not in out:
            out.append(d.path)
    return tuple(out)


@functools.cache
def _headers_fingerprint() -> tuple[tuple[str, int, int], ...]:
    """(file, size, mtime) of each directory's canary: a changed toolkit is a new disk key."""
    out = []
    for d in _header_dirs():
        if d.path:
            canary = os.path.join(d.path, _HEADER_KINDS[d.kind][1])
            try:
                st = os.stat(canary)
                out.append((canary, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((canary, -1, -1))
    return tuple(out)


def _headers_cuda_version() -> tuple[int, int] | None:
    """The CUDA version of the runtime headers found (CUDART_VERSION), if any."""
    for d in _header_dirs():
        if d.kind == "cudart" and d.path:
            try:
                text = Path(d.path, "cuda_runtime_api.h").read_text(errors="replace")
            except OSError:
                return None
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)
            if m:
                v = int(m.group(1))
                return v // 1000, (v % 1000) // 10
    return None


def _install_hint() -> str:
    major = nvrtc_version()[0]
    return (
        f"install them with pip install 'specializer[cuda]' (which brings "
        f"cuda-toolkit[cudart,cccl]), or pip install 'cuda-toolkit[cudart,cccl]=={major}.*' "
        f"to match NVRTC {major}.x, or set CUDA_HOME (or CUDA_PATH) to a CUDA {major} toolkit"
    )


# -- NVRTC -------------------------------------------------------------------------------------


class NVRTCError(CompileError):
    """CUDA C++ that NVRTC does not compile: the message names the kernel and the options, and
    ``log`` holds NVRTC's log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def _nvrtc_check(result: tuple[Any, ...], call: str, what: str = "") -> Any:
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NVRTCError(
            f"{call} failed: {getattr(err, 'name', err)}" + (f" ({what})" if what else "")
        )
    return result[1] if len(result) == 2 else result[1:]


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    major, minor = _nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return major, minor


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities NVRTC compiles for (``90`` for ``sm_90``)."""
    return tuple(_nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


_compiles = 0
_compiles_lock = new_lock(reentrant=False)


def nvrtc_compiles() -> int:
    """How many times this process has run NVRTC's compiler (``nvrtcCompileProgram``); an
    entry found in the disk cache runs it zero times."""
    return _compiles


def _program_bytes(prog: Any, size_fn: Any, get_fn: Any, what: str, detail: str) -> bytes:
    size: int = _nvrtc_check(size_fn(prog), what, detail)
    buf = b" " * size
    _nvrtc_check(get_fn(prog, buf), what, detail)
    return buf


def _version_str() -> str:
    return ".".join(map(str, nvrtc_version()))


# Host-only headers: the C and C++ standard library (NVRTC compiles device code only, and
# ships none of them) and the host helpers of NVIDIA's CUDA samples.
_HOST_HEADERS = frozenset(
    """
    assert.h cassert cstdio stdio.h cstdlib stdlib.h iostream ostream istream fstream sstream
    iomanip ios string cstring string.h strings.h vector map set unordered_map unordered_set
    list deque queue stack algorithm memory functional thread mutex condition_variable future
    chrono ctime time.h cmath math.h cstdint stdint.h cinttypes inttypes.h cstddef stddef.h
    climits limits.h cfloat float.h type_traits utility limits array tuple numeric iterator
    exception stdexcept random complex atomic new cstdarg stdarg.h cerrno errno.h csignal
    signal.h locale cctype ctype.h cwchar wchar.h optional variant bitset initializer_list
    unistd.h windows.h pthread.h omp.h
    """.split()  # noqa: SIM905
)
_SAMPLE_HELPERS = frozenset(
    """
    helper_cuda.h helper_cuda_drvapi.h helper_functions.h helper_string.h helper_timer.h
    helper_image.h helper_multiprocess.h nvrtc_helper.h
    """.split()  # noqa: SIM905
)
_CUDART_HEADER = re.compile(
    r"(cuda\.h|cuda_\w+\.hp*|cuComplex\.h|cooperative_groups(\.h|/.*)|vector_(types|functions)\.h"
    r"|device_\w+\.h|sm_\d+\w*\.h|math_(constants|functions)\.h|mma\.h|crt/.*"
    r"|(texture|surface)_\w+\.h|driver_types\.h|builtin_types\.h|host_defines\.h)\Z"
)
_CCCL_HEADER = re.compile(r"(cuda|cub|thrust|nv)/.*")
_MISSING = re.compile(r'(?:cannot|could not) open source file "([^"]+)"')
_UNDEFINED = re.compile(r'identifier "([A-Za-z_]\w*)" is undefined')
_GLOBALS_IN_SOURCE = re.compile(r"__global__\s+(?:[\w:<>,\s*&]*?\s)?(\w+)\s*\(")


def _missing_header_hint(header: str) -> str:
    """What to do about ``#include <header>`` that NVRTC could not open."""
    base = header.replace("\\", "/")
    name = base.rsplit("/", 1)[-1]
    if base in _HOST_HEADERS or name in _SAMPLE_HELPERS:
        return (
            f"<{header}> is a host header: the file includes host code, which NVRTC does not "
            f"compile (it compiles device code only and has no C or C++ standard library). "
            f"Return only the kernel's device code: remove the #include and any host "
            f"functions; printf and assert need no include in device code, and CCCL's "
            f"<cuda/std/...> headers (<cuda/std/cstdint>, <cuda/std/type_traits>, "
            f"<cuda/std/limits>, ...) are the device versions of the standard ones"
        )
    kind = "cccl" if _CCCL_HEADER.match(base) else "cudart" if _CUDART_HEADER.match(base) else None
    if kind is not None:
        d = next(d for d in _header_dirs() if d.kind == kind)
        what = _HEADER_KINDS[kind][0]
        if d.path is None:
            return (
                f"<{header}> is one of {what}, and no directory of them was found "
                f"(looked for the {kind} headers in NVIDIA's header wheels through "
                f"cuda.pathfinder, then CUDA_PATH and CUDA_HOME): {_install_hint()}"
            )
        return (
            f"<{header}> is not in the {kind} header directory {d.path} (found through "
            f"{d.found_via}): check its name; if it is right, those headers may be from "
            f"another CUDA version than NVRTC {_version_str()}: {_install_hint()}"
        )
    dirs = ", ".join(toolkit_include_dirs()) or "none found"
    return (
        f"<{header}> is not a CUDA toolkit header this back-end knows of (the toolkit's "
        f"directories given to NVRTC: {dirs}); pass the directory that has it with "
        f"options=('-I/path/to/include',)"
    )


def _failure_hints(log: str, source: str, expression: str, kernel: str) -> list[str]:
    hints = []
    for header in dict.fromkeys(_MISSING.findall(log)):
        hints.append(_missing_header_hint(header))
    if "cannot determine which instance of function template" in log:
        hints.append(
            f"{expression} is a function template: name the instance to compile, returning "
            f"KernelSource(source, entry='{expression}<...>') from the method with the "
            f"template arguments built from its concrete types (for example "
            f"entry=f'{expression}<{{cuda.ctype(x.dtype)}}>')"
        )
    elif "__nv_name_map" in log:
        defined = [n for n in dict.fromkeys(_GLOBALS_IN_SOURCE.findall(source)) if n]
        there = (
            f"; the source defines __global__ function(s) {', '.join(defined)}: name the "
            f"method after one, or return KernelSource(source, entry='{defined[0]}')"
            if defined
            else ""
        )
        hints.append(
            f"the source must define a __global__ function named {expression} (for a kernel "
            f'named after the method, write it extern "C" __global__ void {kernel}(...)){there}'
        )
    return hints


def _compile_options(arch: str, options: tuple[str, ...]) -> tuple[str, ...]:
    return (
        f"--gpu-architecture={arch}",
        *options,
        *(f"--include-path={d}" for d in toolkit_include_dirs()),
    )


def _disk_key(
    source: str,
    expressions: tuple[str, ...],
    opts: tuple[str, ...],
    name: str = "",
    headers: tuple[tuple[str, str], ...] = (),
    included: str = "",
) -> str:
    parts: dict[str, Any] = {
        "format": 1,
        "source": source,
        "name_expressions": sorted(expressions),  # in any order: one program
        "options": list(opts),
        "nvrtc": list(nvrtc_version()),
        "headers": [list(h) for h in _headers_fingerprint()],
    }
    if name or headers or included:  # (without them, the keys of before)
        parts["program"] = {
            "name": name,
            "headers": [list(h) for h in headers],
            "included": included,
        }
    return _diskcache.key_of(parts)


def _program_name(name: str | None, kernel: str) -> str:
    return name or f"{kernel or 'program'}.cu"


def included_digest(
    source: str,
    options: tuple[str, ...],
    name: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    kernel: str = "",
) -> str:
    """The digest of the user files ``source`` includes (:mod:`specializer.includes`): from
    the ``-I`` directories of ``options`` made absolute, the program name's directory
    (NVRTC looks there for quoted includes; a relative name is in the current directory)
    and the in-memory ``headers``. Toolkit headers are not scanned: they count by NVRTC's
    version and the headers' fingerprint."""
    program = _program_name(name, kernel)
    return includes.digest(
        source,
        includes.include_dirs(options),
        dict(headers),
        os.path.dirname(os.path.abspath(program)),
    )


def nvrtc_compile(
    source: str,
    expressions: tuple[str, ...],
    arch: str,
    options: tuple[str, ...] = (),
    *,
    kernel: str = "",
    name: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    included: str | None = None,
) -> NVRTCResult:
    """Compile ``source`` with NVRTC for ``arch`` (``sm_XX``: PTX and a cubin; ``compute_XX``:
    PTX), with the toolkit's header directories after ``options``, and find the lowered name
    of each name expression in ``expressions`` (``"fill"``, ``"reduce2<float>"``). ``name``
    is the program's name (default ``<kernel>.cu``), ``headers`` its in-memory headers as
    ``(include name, text)`` pairs. The disk cache is asked first and filled after; its key
    holds the contents of every user file the source includes (:func:`included_digest`;
    ``included``, when the caller has computed it already). ``kernel`` names the kernel in
    messages. Raises :class:`~specializer.CompileError` naming the kernel, the options and
    NVRTC's log."""
    global _compiles
    label = f"kernel {kernel}" if kernel else "a CUDA program"
    for what, text in (("source", source), *((f"header {h!r}", t) for h, t in headers)):
        if "\0" in text:
            raise CompileError(
                f"the {what} of {label} holds a NUL character (at offset {text.index(chr(0))}): "
                f"NVRTC would compile it cut short there; remove it"
            )
    opts = _compile_options(arch, tuple(options))
    program = _program_name(name, kernel)
    if included is None:
        included = included_digest(source, tuple(options), name, headers, kernel)
    key = _disk_key(source, expressions, opts, name or "", headers, included)
    on_disk = includes.keyed(included)  # else the files it includes are past the scan's cap
    hit = _diskcache.load(key) if on_disk else None
    if hit is not None and all(e in hit["lowered"] for e in expressions):
        return NVRTCResult(hit["ptx"], hit["cubin"], hit["lowered"], hit["log"], opts, True)
    entries = ", ".join(expressions)
    if kernel and entries != kernel:
        label += f" (entry {entries})"
    detail = f"compiling {label} for {arch}, options {list(options)}"
    prog = _nvrtc_check(
        nvrtc.nvrtcCreateProgram(
            source.encode(),
            program.encode(),
            len(headers),
            [t.encode() for _, t in headers],
            [h.encode() for h, _ in headers],
        ),
        "nvrtcCreateProgram",
        detail,
    )
    try:
        for e in expressions:
            _nvrtc_check(
                nvrtc.nvrtcAddNameExpression(prog, e.encode()), "nvrtcAddNameExpression", detail
            )
        encoded = [o.encode() for o in opts]
        with _compiles_lock():
            _compiles += 1
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = (
            _program_bytes(
                prog,
                nvrtc.nvrtcGetProgramLogSize,
                nvrtc.nvrtcGetProgramLog,
                "nvrtcGetProgramLog",
                detail,
            )
            .rstrip(b"\0")
            .decode(errors="replace")
        )
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            hints = _failure_hints(log, source, expressions[0] if expressions else "", kernel)
            found = _headers_cuda_version()
            if found is not None and found[0] != nvrtc_version()[0]:
                hints.append(
                    f"note: the runtime headers found are CUDA {found[0]}.{found[1]}'s, "
                    f"NVRTC is {_version_str()}: {_install_hint()}"
                )
            raise NVRTCError(
                f"{label} failed to compile with NVRTC {_version_str()} for {arch} "
                f"({getattr(err, 'name', err)}), options {list(options)}, toolkit headers "
                f"from {list(toolkit_include_dirs())}:\n{log.rstrip()}"
                + "".join(f"\nhint: {h}" for h in hints),
                log,
            )
        lowered = {
            e: _nvrtc_check(
                nvrtc.nvrtcGetLoweredName(prog, e.encode()), "nvrtcGetLoweredName", detail
            ).decode()
            for e in expressions
        }
        ptx = (
            _program_bytes(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "nvrtcGetPTX", detail)
            .rstrip(b"\0")
            .decode()
        )
        cubin = None
        if arch.startswith("sm_"):
            cubin = _program_bytes(
                prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "nvrtcGetCUBIN", detail
            )
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if on_disk:
        _diskcache.store(key, ptx, cubin, lowered, log)
    return NVRTCResult(ptx, cubin, lowered, log, opts)


def _callee_hints(log: str, job: CompilerJob) -> list[str]:
    """For each name the log says is undefined that is a device function of this back-end
    the job does not list in ``callees=``: a hint to add it."""
    names = dict.fromkeys(_UNDEFINED.findall(log))
    if not names:
        return []
    defined: dict[str, dict[str, None]] = {}  # name -> the modules defining it, in order
    for gf in device_functions():
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


@dataclass(frozen=True)
class _Program:
    """What one NVRTC program is built from: the joined device source, the program's name,
    its in-memory headers (merged from every part of the source) and the architecture and
    options."""

    source: str
    name: str | None
    headers: tuple[tuple[str, str], ...]
    arch: str
    options: tuple[str, ...]


def _kernel_source(job: CompilerJob) -> tuple[_Program, str]:
    """(the program of the job, the kernel's name expression)."""
    # cast: this back-end's configs are all made by compiler_config: (arch, NVRTC options)
    arch, options = cast("tuple[str, tuple[str, ...]]", job.config.options)
    sources = job.device_sources()
    last = sources[-1] if sources else None
    entry = getattr(last, "entry", None)
    if entry is None:
        if not _C_IDENTIFIER.match(job.name):
            raise CompileError(f"kernel {job.name!r}: a CUDA kernel's name must be a C identifier")
        entry = job.name
    headers: dict[str, str] = {}
    for part in sources:
        for h, text in getattr(part, "headers", ()):
            if headers.setdefault(h, text) != text:
                raise CompileError(
                    f"kernel {job.name}: two parts of its source (the kernel's and a callee's) "
                    f"give different in-memory headers named {h!r}; give each its own name"
                )
    name = getattr(last, "name", None)
    # the methods' own options first; the compiler keyword arguments' are added to them
    options = _method_options(job, sources) + options
    return _Program("\n".join(sources), name, tuple(sorted(headers.items())), arch, options), entry


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ATTRIBUTES = re.compile(r"__(?:launch_bounds|cluster_dims|maxnreg)__\s*\([^)]*\)")
_GLOBAL_DECL = re.compile(r"([^;{}]*?)\b__global__\b([^;{}(]*?)\b([A-Za-z_]\w*)\s*\(")


def kernel_names(source: str) -> list[str]:
    """The names of the ``__global__`` functions ``source`` defines at file scope that are
    not templates, each declared under one name only: the name expressions that can be
    compiled along with any other (a template needs its instance named; an overloaded or
    namespaced one is left to its own entry)."""
    text = _ATTRIBUTES.sub(" ", _COMMENTS.sub(" ", source))
    text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)  # preprocessor lines
    # the start of each block that is not extern "C" { ... }: a kernel inside is not at file
    # scope (a namespace's) or not a kernel definition at all
    inner: list[tuple[int, int]] = []
    stack: list[tuple[int, bool]] = []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            head = text[: m.start()].rstrip()
            stack.append((m.start(), head.endswith('extern "C"')))
        elif stack:
            start, extern = stack.pop()
            if not extern:
                inner.append((start, m.start()))
    names: dict[str, int] = {}
    for m in _GLOBAL_DECL.finditer(text):
        name = m.group(3)
        nested = any(a < m.start() < b for a, b in inner)
        names[name] = 2 if nested or "template" in m.group(1) else names.get(name, 0) + 1
    return [n for n, count in names.items() if count == 1]


#: NVRTC programs built in this process, by what they are built from: the kernels of one
#: source share one (and the artifact says which, ``program``). Bounded: the newest are kept.
_programs: OrderedDict[str, tuple[NVRTCResult, ...]] = OrderedDict()
_PROGRAMS_KEPT = 64
_programs_lock = new_lock(reentrant=False)


def _host_address(a: np.ndarray) -> int:
    """The address of a contiguous numpy array's data (its array interface)."""
    address: int = a.__array_interface__["data"][0]
    return address


def _program_key(p: _Program, included: str) -> str:
    return _diskcache.key_of(
        {
            "source": p.source,
            "name": p.name or "",
            "headers": [list(h) for h in p.headers],
            "arch": p.arch,
            "options": list(p.options),
            "included": included,
            "nvrtc": list(nvrtc_version()),
            "toolkit": [list(h) for h in _headers_fingerprint()],
            "include_dirs": list(toolkit_include_dirs()),
        }
    )


def compile_program(p: _Program, expression: str, kernel: str = "") -> tuple[str, NVRTCResult]:
    """The NVRTC program of ``p`` with ``expression`` among its name expressions: ``(key,
    result)``. A program is compiled with the name expressions of every kernel found in
    the source (:func:`kernel_names`) and the one asked for, so the next kernels of the
    source reuse it; another template instance is another program (of that instance and
    the same kernels), so what a kernel's PTX holds never depends on what ran before."""
    included = included_digest(p.source, p.options, p.name, p.headers, kernel)
    key = _program_key(p, included)
    with _programs_lock():  # straight-line: the loops are in the called function
        return _compile_program_locked(p, expression, kernel, key, included)


def _compile_program_locked(
    p: _Program, expression: str, kernel: str, key: str, included: str
) -> tuple[str, NVRTCResult]:
    built = _programs.get(key, ())
    for r in built:
        if expression in r.lowered:
            _programs.move_to_end(key)
            return key, r
    names = kernel_names(p.source)
    extra = tuple(n for n in names if n != expression)
    compile_ = functools.partial(
        nvrtc_compile,
        p.source,
        arch=p.arch,
        options=p.options,
        kernel=kernel,
        name=p.name,
        headers=p.headers,
        included=included,  # the headers as the program's key read them
    )
    try:
        r = compile_((expression, *extra))
    except NVRTCError as e:
        # a name found in the text that is no kernel NVRTC can name (under an #if, a macro)
        if not extra or "__nv_name_map" not in e.log:
            raise
        r = compile_((expression,))
    _programs[key] = (*built, r)
    _programs.move_to_end(key)
    while len(_programs) > _PROGRAMS_KEPT:
        _programs.popitem(last=False)
    return key, r


# -- the kernel's own parameters -------------------------------------------------------------

_PTX_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.([a-z])(\d+)((?:\s+\.\w+)*)(?:\s+\.align\s+\d+)?"
    r"\s+[\w$]+\s*(?:\[(\d+)\])?"
)
_KIND_NAMES = {"f": "floating-point", "i": "integer", "ptr": "pointer", "bytes": "bytes"}


def ptx_parameters(ptx: str, lowered: str) -> list[tuple[str, int, str]] | None:
    """(kind, size in bytes, PTX spelling) of each parameter of the ``.entry`` named
    ``lowered``: kind ``"f"`` (``.f32``), ``"i"`` (``.u32``, ``.s8``, ...), ``"ptr"`` (a
    ``.u64 .ptr``) or ``"bytes"`` (``.b8 name[N]``, ``.b32``: a struct, a ``__half``); None
    when the entry is not found."""
    m = re.search(rf"\.entry\s+{re.escape(lowered)}\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    out = []
    for p in _PTX_PARAM.finditer(m.group(1)):
        letter, bits, quals, count = p.group(1), int(p.group(2)), p.group(3), p.group(4)
        size = bits // 8 * (int(count) if count else 1)
        if letter == "b":
            kind = "bytes"
        elif letter == "f":
            kind = "f"
        else:
            kind = "ptr" if ".ptr" in quals else "i"
        out.append((kind, size, f".{letter}{bits}" + (f"[{count}]" if count else "")))
    return out


def _argument_kind(t: type) -> tuple[str, int] | None:
    if isinstance(t, type) and issubclass(t, Array):
        return "ptr", 8
    if isinstance(t, type) and issubclass(t, Struct):
        return "bytes", struct_dtype(t).itemsize
    if isinstance(t, type) and issubclass(t, np.generic):
        dt = np.dtype(t)
        return ("f" if dt.kind == "f" else "bytes" if dt.kind == "c" else "i"), dt.itemsize
    return None


def check_parameters(kernel: str, ptx: str, lowered: str, tt: tuple[type, ...]) -> None:
    """A ``TypeError`` when an argument type cannot be what the kernel's parameter is, as
    the PTX declares it (SPEC 8): another size, or a float for an integer (or the other
    way); and, for an entry with C++ linkage, an array whose elements differ in kind or size
    from what the pointer parameter points at, as the mangled name declares it (extern "C"
    names say nothing of that). Runs where the kernel is compiled (no GPU needed), never on
    a launch."""
    params = ptx_parameters(ptx, lowered)
    if params is None:
        return
    if len(params) != len(tt):
        raise TypeError(
            f"kernel {kernel} takes {len(params)} parameter(s) (its PTX .entry {lowered}), "
            f"its method was looked up for {len(tt)} argument(s) "
            f"({', '.join(type_name(t) for t in tt)}): launch it with one argument per "
            f"parameter (captured values first)"
        )
    for i, ((kind, size, ptx_type), t) in enumerate(zip(params, tt)):
        arg = _argument_kind(t)
        if arg is None:
            continue
        akind, asize = arg
        same_kind = kind == akind or "bytes" in (kind, akind) or {kind, akind} == {"i", "ptr"}
        if size != asize or not same_kind:
            raise TypeError(
                f"argument {i} of kernel {kernel} (counting from 0, captured values first) is "
                f"a {type_name(t)} ({asize}-byte {_KIND_NAMES[akind]}), but the kernel's "
                f"parameter {i} is a {size}-byte {_KIND_NAMES[kind]} (PTX {ptx_type}): pass a "
                f"value of the parameter's C type, or declare the method's parameter as it"
            )
    for i, (spelled, t) in enumerate(zip(mangled_parameters(lowered) or (), tt)):
        if not (isinstance(t, type) and issubclass(t, Array)):
            continue
        try:
            dtype = t.dtype
        except TypeError:  # Array[np.floating]: no elements to compare
            continue
        theirs = None if dtype is None else _array_element(dtype)
        pointee = _pointee(spelled)
        if theirs and pointee and theirs != pointee:
            raise TypeError(
                f"argument {i} of kernel {kernel} (counting from 0, captured values first) is "
                f"a {type_name(t)} (elements: {theirs[1]}-byte {theirs[0]}), but the kernel's "
                f"parameter {i} is a {spelled} (elements: {pointee[1]}-byte {pointee[0]}; its "
                f"entry {lowered}): pass an array of the parameter's element type, or declare "
                "the method's parameter as it"
            )


# -- what a C++ entry's pointers point at, from its mangled name -----------------------------

_MANGLED_BUILTINS = {
    **{"v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char"},
    **{"s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long"},
    **{"m": "unsigned long", "x": "long long", "y": "unsigned long long", "f": "float"},
    **{"d": "double", "e": "long double"},
}
#: the (kind, size) of each value of the types a pointer parameter may point at
_ELEMENTS: dict[str, tuple[str, int]] = {
    **{n: ("int", 1) for n in ("bool", "char", "signed char", "unsigned char", "uchar")},
    **{n: ("int", 2) for n in ("short", "unsigned short", "ushort")},
    **{n: ("int", 4) for n in ("int", "unsigned int", "uint")},
    **{n: ("int", 8) for n in ("long", "unsigned long", "ulong", "long long", "longlong")},
    **{n: ("int", 8) for n in ("unsigned long long", "ulonglong")},
    **{n: ("float", 2) for n in ("__half", "_Float16", "__half2")},
    **{n: ("bfloat16", 2) for n in ("__nv_bfloat16", "__nv_bfloat162")},
    "float": ("float", 4),
    "double": ("float", 8),
}
_CUDA_VECTOR = re.compile(r"(\w+?)[1-4]")  # vector_types.h: float4, uchar2, longlong2, ...
_DIGITS = re.compile(r"\d+")
_SUBSTITUTION = re.compile(r"S([0-9A-Z]*)_")
_TEMPLATE_PARAM = re.compile(r"T(\d*)_")


class _Mangled:
    """The parameter types of a function's Itanium-mangled name (what NVRTC lowers a C++
    ``__global__`` function to), as C++ spells them: ``_Z1kPKfPi`` gives ``["float const*",
    "int*"]``. A subset: what it does not read (``std::`` names, local names, operators,
    packs, expressions) is a ValueError, and the entry goes unchecked."""

    def __init__(self, mangled: str) -> None:
        self.s, self.i = mangled, 0
        self.subs: list[str] = []  # substitution candidates, in order: S_, S0_, S1_, ...
        self.targs: list[str] = []  # the function's template arguments: T_, T0_, ...

    def params(self) -> list[str]:
        self.expect("_Z")
        self.name(function=True)
        if self.targs:
            self.type()  # a function template's return type
        out = []
        while self.i < len(self.s):
            out.append(self.type())
        return [] if out == ["void"] else out

    def expect(self, text: str) -> None:
        if not self.s.startswith(text, self.i):
            raise ValueError(self.s)
        self.i += len(text)

    def match(self, pattern: re.Pattern[str]) -> re.Match[str]:
        m = pattern.match(self.s, self.i)
        if m is None:
            raise ValueError(self.s)
        self.i = m.end()
        return m

    def source_name(self) -> str:
        n = int(self.match(_DIGITS)[0])
        self.i += n
        return self.s[self.i - n : self.i]

    def name(self, function: bool = False) -> str:
        """A name; each prefix of it is a substitution candidate, but a function's own."""
        nested = self.s.startswith("N", self.i)
        if nested:
            self.i += 1
            while self.s[self.i] in "rVK":
                self.i += 1
        prefix = ""
        while True:
            if self.s[self.i] == "S":
                prefix = self.substitution()
            else:
                part = self.source_name()
                prefix = f"{prefix}::{part}" if prefix else part
                args = []
                if self.s.startswith("I", self.i):
                    self.subs.append(prefix)
                    args = self.template_args()
                    prefix += f"<{', '.join(args)}>"
                last = not nested or self.s.startswith("E", self.i)
                if function and last:
                    self.targs = args
                else:
                    self.subs.append(prefix)
            if not nested or self.s.startswith("E", self.i):
                break
        self.i += nested
        return prefix

    def template_args(self) -> list[str]:
        self.expect("I")
        args = []
        while not self.s.startswith("E", self.i):
            if self.s[self.i] == "L":  # a literal: L <builtin type> <value> E
                end = self.s.index("E", self.i)
                args.append(self.s[self.i + 2 : end].replace("n", "-"))
                self.i = end + 1
            else:
                args.append(self.type())
        self.i += 1
        return args

    def substitution(self) -> str:
        seq = self.match(_SUBSTITUTION)[1]  # St, Sa, Ss, ...: std:: names, not read
        if self.s.startswith("I", self.i):
            raise ValueError(self.s)
        return self.subs[int(seq, 36) + 1 if seq else 0]

    def type(self) -> str:
        c = self.s[self.i]
        if c in _MANGLED_BUILTINS:
            self.i += 1
            return _MANGLED_BUILTINS[c]
        if self.s.startswith("DF16_", self.i):
            self.i += 5
            return "_Float16"
        if c == "S":
            return self.substitution()
        if c.isdigit() or c == "N":
            return self.name()
        if c == "P":
            self.i += 1
            t = self.type() + "*"
        elif c in "rVK":
            quals = ""
            while self.s[self.i] in "rVK":
                quals += {"r": "", "V": " volatile", "K": " const"}[self.s[self.i]]
                self.i += 1
            t = self.type() + quals
        elif c == "T":
            n = self.match(_TEMPLATE_PARAM)[1]
            t = self.targs[int(n) + 1 if n else 0]
        else:
            raise ValueError(self.s)
        self.subs.append(t)
        return t


def mangled_parameters(mangled: str) -> list[str] | None:
    """The C++ parameter types of the entry ``mangled`` (``_Z...``), or None where its name
    is not mangled or not read (the entry's pointers then go unchecked)."""
    try:
        return _Mangled(mangled).params() if mangled.startswith("_Z") else None
    except (ValueError, IndexError):
        return None


def _pointee(spelled: str) -> tuple[str, int] | None:
    """The (kind, size) of each value a pointer parameter of C++ type ``spelled`` points at;
    None for another parameter, ``void *``, a struct or a type not known here."""
    if not spelled.endswith("*"):
        return None
    name = " ".join(w for w in spelled[:-1].split() if w not in ("const", "volatile"))
    m = _CUDA_VECTOR.fullmatch(name)
    return _ELEMENTS.get(name) or (_ELEMENTS.get(m[1]) if m else None)


def _array_element(dtype: np.dtype) -> tuple[str, int] | None:
    """The (kind, size) of each value of an array of ``dtype``: its scalar's, a complex's
    float, a struct's when its fields are all of one; None for a struct of mixed fields."""
    if dtype.subdtype is not None:
        return _array_element(dtype.subdtype[0])
    if dtype.names is not None and dtype.fields is not None:
        parts = {_array_element(dtype.fields[n][0]) for n in dtype.names}
        return parts.pop() if len(parts) == 1 else None
    if dtype.kind in "fc":
        return "float", dtype.itemsize // (2 if dtype.kind == "c" else 1)
    return ("int", dtype.itemsize) if dtype.kind in "biu" else None


# -- loaded modules ----------------------------------------------------------------------------

_PTX_GLOBAL = re.compile(
    r"^(?:\.visible\s+|\.weak\s+)?\.(?:const|global)\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)",
    re.M,
)
#: the mangled prefixes of the toolkit headers' own variables (CCCL, cooperative groups)
_TOOLKIT_GLOBALS = ("_ZN4cuda", "_ZN3cub", "_ZN6thrust", "_ZN18cooperative_groups", "_ZN2nv")


def ptx_globals(ptx: str) -> list[str]:
    """The names of the ``__constant__`` and ``__device__`` variables a PTX module declares,
    in order, without the toolkit headers' own and those internal to the file."""
    names = dict.fromkeys(_PTX_GLOBAL.findall(ptx))
    return [n for n in names if not n.startswith(_TOOLKIT_GLOBALS) and "_INTERNAL_" not in n]


class LinkedKernel:
    """A kernel loaded into one context, with the launch path of each signature it was looked
    up for (``bound``, the core's, see :mod:`specializer.launching`): the result
    ``cufunction`` caches. It references no kernel instance (captured values come from
    each launch). Its module's ``__constant__`` and ``__device__`` variables are reached
    with :meth:`get_global`, :meth:`copy_to_global` and :meth:`copy_from_global`."""

    __slots__ = (
        "__weakref__",
        "arch",
        "bound",
        "cooperative",
        "function",
        "module",
        "name",
        "ptx",
        "token",
        "tt",
    )

    def __init__(
        self,
        name: str,
        function: Any,
        module: Any,
        token: ContextKey,
        tt: tuple[type, ...],
        arch: str,
        ptx: str = "",
    ) -> None:
        self.name = name
        self.function = function  # a CUfunction (kept as the object: ints cost more per call)
        self.module = module
        self.token = token  # the context's key: it holds the context weakly
        self.tt = tt
        self.arch = arch
        self.ptx = ptx  # for naming the module's variables in errors
        self.bound: dict[Any, Any] = {}  # the launch path per lookup signature (the core's)
        #: (threads per block, dynamic shared memory) -> the function's cooperative limits
        #: (_driver.max_cooperative_blocks): they end with the function handle
        self.cooperative: dict[tuple[int, int], tuple[int, int, int]] = {}

    @property
    def context(self) -> Context:
        """The context it was loaded into (a :class:`CUDAError` once that is gone)."""
        ctx = self.token.context()
        if ctx is None:
            raise CUDAError(
                "using a context",
                driver.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,
                f"the context kernel {self.name} was loaded into is gone",
            )
        return ctx

    def get_global(self, name: str) -> tuple[int, int]:
        """(device pointer, size in bytes) of the module's ``__constant__`` or ``__device__``
        variable ``name`` (``cuModuleGetGlobal``). Declare it ``extern "C"`` (or at global
        namespace scope) so that ``name`` is its symbol; an unknown name is a
        :class:`CUDAError` listing the variables the module has."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a global's name is a non-empty str, got {name!r}")
        with pushed(self.context):
            err, ptr, size = driver.cuModuleGetGlobal(self.module, name.encode())
        if err == driver.CUresult.CUDA_ERROR_NOT_FOUND:
            names = ptx_globals(self.ptx)
            raise CUDAError(
                "cuModuleGetGlobal",
                err,
                f"kernel {self.name}'s module has no __constant__ or __device__ variable named "
                f"{name!r}; it has: {', '.join(names) if names else 'none'} (a variable in a "
                f'namespace has a mangled name: declare it extern "C" at global scope)',
            )
        if err:
            raise CUDAError("cuModuleGetGlobal", err, f"global {name!r} of kernel {self.name}")
        return int(ptr), int(size)

    def copy_to_global(self, name: str, array: Any) -> None:
        """Copy ``array`` (anything ``np.asarray`` takes, native byte order) into the module's
        variable ``name``, whose size in bytes it must have exactly. Waits for the work
        queued in the context first, and for the copy after, so launches on any stream see
        the whole new value."""
        a = np.ascontiguousarray(array)
        if not a.dtype.isnative:
            raise ValueError(
                f"cannot copy a {a.dtype} array (non-native byte order) into {name!r}: "
                f"convert it with .astype(a.dtype.newbyteorder('='))"
            )
        ptr, size = self.get_global(name)
        if a.nbytes != size:
            raise ValueError(
                f"global {name!r} of kernel {self.name} has {size} bytes; the {a.dtype}"
                f"{list(a.shape)} array has {a.nbytes}"
            )
        if size:
            with pushed(self.context):
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
                check(
                    driver.cuMemcpyHtoD(ptr, _host_address(a), size),
                    "cuMemcpyHtoD",
                    f"copying {size} bytes into global {name!r} of kernel {self.name}",
                )
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def copy_from_global(self, name: str, dtype: Any, shape: Any = None) -> np.ndarray:
        """A numpy copy of the module's variable ``name`` as ``dtype`` (its whole size, or
        ``shape``), after the work queued in the context has finished."""
        dt = np.dtype(dtype)
        ptr, size = self.get_global(name)
        if shape is None:
            if size % dt.itemsize:
                raise ValueError(
                    f"global {name!r} of kernel {self.name} has {size} bytes, not a whole "
                    f"number of {dt}"
                )
            shape = (size // dt.itemsize,)
        out = np.empty(shape, dt)
        if out.nbytes != size:
            raise ValueError(
                f"global {name!r} of kernel {self.name} has {size} bytes; a {dt}{list(out.shape)} "
                f"array has {out.nbytes}"
            )
        if size:
            with pushed(self.context):
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
                check(
                    driver.cuMemcpyDtoH(_host_address(out), ptr, size),
                    "cuMemcpyDtoH",
                    f"copying global {name!r} of kernel {self.name}",
                )
        return out

    def __repr__(self) -> str:
        ctx = self.token.context()
        where = "a context that is gone" if ctx is None else repr(ctx)
        return f"<LinkedKernel {self.name} ({self.arch}) in {where}>"


class CUDABackend(Backend):
    """NVRTC compilation (no GPU needed) and module loading per context."""

    name = "cuda"

    def compile(self, job: CompilerJob) -> CUDAArtifact:
        program, expression = _kernel_source(job)
        try:
            key, r = compile_program(program, expression, kernel=job.name)
        except NVRTCError as e:
            hints = _callee_hints(e.log, job)
            if not hints:
                raise
            raise NVRTCError(str(e) + "".join(f"\nhint: {h}" for h in hints), e.log) from None
        check_parameters(job.name, r.ptx, r.lowered[expression], job.mi.tt)
        return CUDAArtifact(
            program.source,
            r.ptx,
            r.cubin,
            r.lowered[expression],
            program.arch,
            r.log,
            expression,
            r.options,
            key,
        )

    def link(self, job: CompilerJob, artifact: Artifact, context: Hashable) -> Any:
        """Load into the context whose key is ``context`` and get the kernel's function."""
        if not isinstance(artifact, CUDAArtifact):
            raise TypeError(f"a CUDA kernel is linked from a CUDAArtifact, got {artifact!r}")
        if not isinstance(context, ContextKey):
            raise TypeError(f"a CUDA kernel is loaded for a context's key, got {context!r}")
        token, context = context, context.context()
        if context is None:
            raise RuntimeError(f"the context of this lookup is gone ({token!r})")
        image = artifact.cubin if artifact.cubin is not None else artifact.ptx.encode() + b"\0"
        detail = f"loading kernel {job.name} ({artifact.arch}) into {context!r}"
        # one module per program and context: the kernels of one source share it (and its
        # __constant__ and __device__ variables), as they share the NVRTC program
        loaded = _modules.setdefault(token, {})
        with pushed(context):
            module = loaded.get(artifact.program) if artifact.program else None
            if module is None:
                try:
                    module = check(driver.cuModuleLoadData(image), "cuModuleLoadData", detail)
                except CUDAError as e:
                    if artifact.cubin is None:
                        e.args = (
                            f"{e.args[0]} (PTX from NVRTC {nvrtc_version()} may be newer than "
                            "the driver; compile for the device's sm_XX instead)",
                        )
                    raise
                if artifact.program:
                    loaded[artifact.program] = module
            function = check(
                driver.cuModuleGetFunction(module, artifact.entry.encode()),
                "cuModuleGetFunction",
                detail,
            )
        return LinkedKernel(
            job.name, function, module, token, job.mi.tt, artifact.arch, artifact.ptx
        )


#: the modules loaded into each context (held weakly by its key), by NVRTC program; dropped
#: when the context is gone (the driver layer calls the hook appended here)
_modules: weakref.WeakKeyDictionary[ContextKey, dict[str, Any]] = weakref.WeakKeyDictionary()


def _forget_modules(token: ContextKey) -> None:
    _modules.pop(token, None)


_driver.on_forget.append(_forget_modules)

#: The back-end's device functions, for a build error's hint (:func:`_callee_hints`):
#: ``_launch`` sets it to its definitions' ``device_functions`` at import.
device_functions: Callable[[], Iterable[Any]] = tuple

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
    if isinstance(extra, str):  # split by shell rules, as pyopencl splits a str of options
        try:
            extra = shlex.split(extra)
        except ValueError as e:
            raise ValueError(f"options={extra!r} do not split as shell words: {e}") from None
    if not isinstance(extra, (tuple, list)) or not all(isinstance(o, str) for o in extra):
        raise TypeError(
            f"options= is a tuple of NVRTC option strings (or one str of them), got {extra!r}"
        )
    options.extend(extra)
    return CompilerConfig(BACKEND, (arch, tuple(options)))
