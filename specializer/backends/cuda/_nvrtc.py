"""NVRTC itself: its binding, call checker, error, version and architectures."""

from __future__ import annotations

import functools
from typing import Any

from ...compiler import CompileError

try:
    from cuda.bindings import nvrtc as nvrtc  # re-exported: the back-end modules use it
except ImportError as e:  # pragma: no cover - the cuda extra is installed wherever this is used
    raise ImportError(
        f"the CUDA back-end needs cuda-python: pip install -e '.[cuda]' --config-settings "
        f"editable_mode=compat in a checkout, or the wheel's [cuda] extra ({e})"
    ) from e


class NVRTCError(CompileError):
    """CUDA C++ that NVRTC does not compile: the message names the kernel and the options, and
    ``log`` holds NVRTC's log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def nvrtc_check(result: tuple[Any, ...], call: str, what: str = "") -> Any:
    """The value(s) an NVRTC call returned, or an :class:`NVRTCError` naming the call."""
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NVRTCError(
            f"{call} failed: {getattr(err, 'name', err)}" + (f" ({what})" if what else "")
        )
    return result[1] if len(result) == 2 else result[1:]


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    major, minor = nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return major, minor


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities NVRTC compiles for (``90`` for ``sm_90``)."""
    return tuple(nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def version_str() -> str:
    """NVRTC's version as messages give it (``12.8``)."""
    return ".".join(map(str, nvrtc_version()))
