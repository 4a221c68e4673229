"""The CUDA toolkit's headers: where they are (found as CuPy finds them: ``cuda.pathfinder``,
else ``CUDA_PATH``/``CUDA_HOME``), and what to do when a header is not found.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...locks import import_before_fork
from ._nvrtc import nvrtc_version, version_str

import_before_fork("cuda.pathfinder")  # imported at the first compile (_locate): see locks


#: The toolkit's header directories NVRTC is given: what each holds, the file that shows it.
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


def _locate(kind: str) -> _HeaderDir:
    try:
        pathfinder: Any = importlib.import_module("cuda.pathfinder")
    except ImportError:  # not installed: the environment's toolkit below
        pathfinder = None
    try:
        locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
        if locate is not None:
            found = locate(kind)
            if found is not None and found.abs_path:
                return _HeaderDir(kind, found.abs_path, f"cuda.pathfinder ({found.found_via})")
        elif pathfinder is not None:
            path = pathfinder.find_nvidia_header_directory(kind)
            if path:
                return _HeaderDir(kind, path, "cuda.pathfinder")
    except Exception:  # an older cuda.pathfinder that does not know this kind
        pass
    root = os.environ.get("CUDA_PATH", "").strip() or os.environ.get("CUDA_HOME", "").strip()
    if root:
        include = os.path.join(root, "include")
        # CUDA 13 keeps CCCL in include/cccl; CUDA 12 in include itself
        for d in [os.path.join(include, "cccl"), include] if kind == "cccl" else [include]:
            if os.path.isfile(os.path.join(d, _HEADER_KINDS[kind][1])):
                return _HeaderDir(kind, d, "CUDA_PATH/CUDA_HOME")
    return _HeaderDir(kind, None, "")


@functools.cache
def _header_dirs() -> tuple[_HeaderDir, ...]:
    seen: set[str] = set()
    out = []
    for d in map(_locate, _HEADER_KINDS):  # cudart and cccl may be one directory (CUDA 12's)
        key = os.path.realpath(d.path) if d.path else d.kind
        out.append(d if key not in seen else _HeaderDir(d.kind, d.path, d.found_via + ", shared"))
        seen.add(key)
    return tuple(out)


def toolkit_include_dirs() -> tuple[str, ...]:
    """The runtime's and CCCL's header directories every compilation gets (found once)."""
    return tuple(dict.fromkeys(d.path for d in _header_dirs() if d.path))


@functools.cache
def headers_fingerprint() -> tuple[tuple[str, int, int], ...]:
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


def headers_cuda_version() -> tuple[int, int] | None:
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


def install_hint() -> str:
    """How to get the toolkit's headers of NVRTC's own version."""
    major = nvrtc_version()[0]
    return (
        f"install them with the [cuda] extra (pip install -e '.[cuda]' in a checkout, which brings "
        f"cuda-toolkit[cudart,cccl]), or pip install 'cuda-toolkit[cudart,cccl]=={major}.*' "
        f"to match NVRTC {major}.x, or set CUDA_HOME (or CUDA_PATH) to a CUDA {major} toolkit"
    )


# Host-only headers: the C and C++ standard library (NVRTC has none) and the CUDA samples' helpers.
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


def missing_header_hint(header: str) -> str:
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
                f"cuda.pathfinder, then CUDA_PATH and CUDA_HOME): {install_hint()}"
            )
        return (
            f"<{header}> is not in the {kind} header directory {d.path} (found through "
            f"{d.found_via}): check its name; if it is right, those headers may be from "
            f"another CUDA version than NVRTC {version_str()}: {install_hint()}"
        )
    dirs = ", ".join(toolkit_include_dirs()) or "none found"
    return (
        f"<{header}> is not a CUDA toolkit header this back-end knows of (the toolkit's "
        f"directories given to NVRTC: {dirs}); pass the directory that has it with "
        f"options=('-I/path/to/include',)"
    )
