"""The definitions of the OpenCL back-end: ``@kernel``, ``@device`` and ``capture``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

from ...kernels import (
    Definitions,
    DeviceFunction,
    Kernel,
)
from ...suggest import decorator_keywords
from ...types import (
    Struct,
    WeakScalar,
)
from ._args import Array, Buffer, Image, LocalMemory, Sampler, typeof

_definitions = Definitions(
    typeof,
    "specializer.backends.opencl",
    (WeakScalar, Struct, Array, Buffer, LocalMemory, Image, Sampler),
)


@overload
def kernel(
    fn: Callable[..., str],
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Kernel: ...
@overload
def kernel(
    fn: None = None,
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Callable[[Callable[..., str]], Kernel]: ...
def kernel(
    fn: Callable[..., Any] | None = None,
    *,
    callees: Iterable[Any] = (),
    localns: dict[str, Any] | None = None,
    **unknown: Any,
) -> Any:
    """``@kernel`` or ``@kernel(callees=[device_fn, ...])``: define a kernel method.

    A first ``def`` of a name in a module defines a generic kernel; another ``def`` of that
    name adds a method (a more specific signature), or replaces the one with the same
    signature (the world rises: the next launch runs the new code). ``@fill.method`` on a
    ``def`` of any name (``def _``) adds a method to ``fill`` the same way, the spelling type
    checkers accept (a second ``def fill`` is a redefinition to them);
    ``fill.delete_method(signature)`` takes one back.

    Annotate each parameter with an argument type: ``Array[dtype]`` (a pyopencl array;
    ``Array[np.float32]``, or abstract ``Array[np.floating]``, ``Array[np.number]``), a numpy
    scalar type (``np.float32``, or abstract ``np.integer``, ``np.number``), ``Struct[dtype]``
    (a struct or vector by value, e.g. ``pyopencl.cltypes.float4``), ``Buffer``,
    ``LocalMemory``, ``Image`` or ``Sampler``. A Python ``int``, ``float`` or ``bool`` passed
    to a kernel takes the type the method declares. An annotation no value can match
    (``int``, ``np.ndarray``, another back-end's ``Array``) is a ``TypeError`` here.

    The body is called once per method instance, with the concrete types bound to its
    parameters (``x.dtype``, ``v`` is ``np.float32``), and returns OpenCL C source that defines
    a ``__kernel`` function named like the method, its parameters in the same order
    (:func:`ctype` spells a type). ``callees`` names the device functions it calls;
    ``localns=locals()`` lets string annotations name the defining function's locals.
    """
    if unknown:  # (a misspelling: named, with the keywords it takes)
        raise decorator_keywords("@opencl.kernel", unknown)
    return _definitions.kernel(fn, callees=callees, localns=localns)


@overload
def device(
    fn: Callable[[], str],
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> DeviceFunction: ...
@overload
def device(
    fn: None = None,
    *,
    callees: Iterable[DeviceFunction] = ...,
    localns: dict[str, Any] | None = ...,
) -> Callable[[Callable[[], str]], DeviceFunction]: ...
def device(
    fn: Callable[..., Any] | None = None,
    *,
    callees: Iterable[Any] = (),
    localns: dict[str, Any] | None = None,
    **unknown: Any,
) -> Any:
    """``@device`` or ``@device(callees=[...])``: define a device function (a callee).

    It takes no parameters; its body returns OpenCL C source defining helper functions that
    kernels listing it in ``callees=`` call. Running its ``def`` again raises the world and
    recompiles exactly the kernels that call it.
    """
    if unknown:  # (a misspelling: named, with the keywords it takes)
        raise decorator_keywords("@opencl.device", unknown)
    return _definitions.device(fn, callees=callees, localns=localns)


#: ``capture(kernel, *values)``: a kernel instance passing ``values`` first on every launch.
capture = _definitions.capture
