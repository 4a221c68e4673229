"""The messages of a failed launch: which argument could not be set, which work size the
device refused, and why, each naming the kernel and its signature (SPEC 8)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ...signatures import signature
from ...types import describe_parameter as _describe
from ...types import type_name, weak_overflow
from .. import _pyopencl_private as _private
from ._args import packer
from ._sizes import sizes

#: a ``_program.LinkedKernel`` (a module above this one)
LinkedKernel = Any


def bad_array(linked: LinkedKernel, i: int, a: cla.Array) -> None:
    if a.context is not None and a.context.int_ptr != linked.context_ptr:
        raise ValueError(
            f"the array for {_describe(linked, i)} is an array of {a.context!r}, but the "
            f"kernel runs in {linked.context!r}: a kernel can use only memory of its queue's "
            "context: make it on a queue of that context, or launch on a queue of its context"
        )
    if a.offset:
        what = f"starts at byte {a.offset} of its buffer (a view)"
    else:
        what = f"is not contiguous (shape {a.shape}, strides {a.strides})"
    raise ValueError(
        f"the array for {_describe(linked, i)} {what}: a kernel gets a buffer pointer, so pass "
        "a C- or F-contiguous array that starts at its buffer's start (for a view, view.copy())"
    )


def size_error(linked: LinkedKernel, error: BaseException) -> Exception | None:
    """A work size's error (from :func:`sizes`) naming the kernel, for the launch to raise;
    None for another error (raised as it is)."""
    named = f"kernel {signature(linked.name, linked.tt)}: {error}"
    if type(error) is TypeError:
        return TypeError(named)
    return ValueError(named) if type(error) is ValueError else None


def _work_group_problem(
    linked: LinkedKernel, g: tuple[int, ...], ls: tuple[int, ...]
) -> str | None:
    """Which rule a local size the device refused breaks, and what to do (None: not found)."""
    lss = ls[0] if len(ls) == 1 else ls
    for d, (n, m) in enumerate(zip(g, ls)):
        if n % m:
            at = "" if len(g) == 1 else f" in dimension {d} of local_size {ls}, global_size {g}"
            return (
                f"local_size {m} does not divide global_size {n} ({n} % {m} = {n % m}){at}: "
                f"pick a local size that divides it, or pad global_size to a multiple of {m} "
                f"({-(-n // m) * m}) and have the kernel skip the work-items past {n}"
            )
    items = int(np.prod(ls))
    for device in linked.program.get_info(cl.program_info.DEVICES):
        if items > device.max_work_group_size:
            return (
                f"local_size {lss} has {items} work-items, more than the device's limit of "
                f"{device.max_work_group_size} per work group ({device.name.strip()}): use a "
                "smaller local size"
            )
        for d, (m, most) in enumerate(zip(ls, device.max_work_item_sizes)):
            if m > most:
                return (
                    f"local_size {lss} has {m} work-items in dimension {d}, more than the "
                    f"device's limit of {most} there ({device.name.strip()}): use a smaller "
                    "local size"
                )
        info = cl.kernel_work_group_info
        most = linked.kernel.get_work_group_info(info.WORK_GROUP_SIZE, device)
        if items > most:
            return (
                f"local_size {lss} has {items} work-items, more than the {most} this kernel "
                f"takes on {device.name.strip()} (it uses too many registers or too much local "
                "memory for more): use a smaller local size"
            )
        reqd = tuple(linked.kernel.get_work_group_info(info.COMPILE_WORK_GROUP_SIZE, device))
        if any(reqd) and reqd != ls + (1,) * (3 - len(ls)):
            want = reqd[0] if len(ls) == 1 else reqd[: len(ls)]
            return (
                f"the kernel's source declares reqd_work_group_size{reqd}, and local_size is "
                f"{lss}: launch with local_size={want} or change the attribute"
            )
    return None


# RuntimeError: pyopencl's std::bad_cast for a work size past size_t (an int global_size is
# not range-checked before the enqueue: checking costs every launch, a failure only itself)
FAILURES = (cl.Error, struct.error, OverflowError, TypeError, RuntimeError)


def failed(
    linked: LinkedKernel,
    values: tuple[Any, ...],
    error: Exception,
    global_size: Any = None,
    local_size: Any = None,
    wait_for: Any = None,
) -> Exception | None:
    """The error saying which argument a failed launch could not set, which work size the
    device refused, or that ``wait_for`` is not a list of events, and why, for the launch to
    raise; None for another failure."""
    if wait_for is not None and not (
        isinstance(wait_for, (list, tuple)) and all(isinstance(e, cl.Event) for e in wait_for)
    ):
        one = " (for one event, pass [event])" if isinstance(wait_for, cl.Event) else ""
        return TypeError(
            f"wait_for= of kernel {signature(linked.name, linked.tt)} is a list of pyopencl "
            f"events, got {wait_for!r}{one}"
        )
    if isinstance(error, RuntimeError) and not isinstance(error, cl.Error):
        try:
            sizes(global_size, local_size, None)  # a size past size_t: a ValueError naming it
        except ValueError as e:
            return size_error(linked, e)
    if isinstance(error, cl.Error) and "INVALID_WORK_GROUP_SIZE" in str(error):
        g, ls, _ = sizes(global_size, local_size, None)
        try:
            why = _work_group_problem(linked, g, ls) if ls is not None else None
        except cl.Error:  # a device that does not say: the rules, then
            why = None
        return ValueError(
            f"kernel {signature(linked.name, linked.tt)}: "
            + (
                why
                or f"the device refused local_size={local_size!r} with global_size="
                f"{global_size!r}: a local size must divide the global size in each "
                "dimension, fit the device's and the kernel's work-group limits, and match a "
                "reqd_work_group_size attribute"
            )
        )
    for i, (t, v) in enumerate(zip(linked.tt, values)):
        if isinstance(error, (struct.error, OverflowError)) and isinstance(v, (int, float)):
            try:
                packer(t)(v)
            except (struct.error, OverflowError):
                return weak_overflow(v, t, _describe(linked, i))  # the core's error
    if isinstance(error, cl.Error) and "clSetKernelArg" in str(error):
        probe = cl.Kernel(linked.program, linked.name)
        for i, (t, v) in enumerate(zip(linked.tt, values)):
            try:
                _set_one(probe, i, t, v)
            except cl.Error as e:
                return TypeError(
                    f"OpenCL refused the value for {_describe(linked, i)}, typed "
                    f"{type_name(t)} by the method's signature: {e}. The kernel source "
                    "declares that parameter with another type or size: make the "
                    "annotation match the C declaration"
                )
    return None


def _set_one(knl: Any, i: int, t: type, v: Any) -> None:
    if isinstance(v, cla.Array):
        knl.set_arg(i, v.base_data)
    elif isinstance(v, (int, float)) and not isinstance(v, np.generic):
        _private.set_arg_buf(knl)(i, packer(t)(v))
    elif isinstance(v, (np.generic, np.ndarray)):
        _private.set_arg_buf(knl)(i, v)
    else:
        knl.set_arg(i, v)
