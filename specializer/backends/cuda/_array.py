"""Device arrays: the ``Array[T]`` argument types and the back-end's own small array type.

A kernel takes any object with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba)
and :class:`CuArray`, the few lines of device memory this back-end needs so its
demo and tests need no other GPU library. Both are passed as a device pointer and
dispatch as ``Array[dtype]``.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ...types import DeviceArray
from ._driver import Context, check, current_context, driver, pushed

__all__ = ["ARGTYPES", "Array", "CuArray", "array_type", "cuarray_class", "device_pointer"]

#: numpy kinds an element type may have (bool, signed, unsigned, float, complex)
ELEMENT_KINDS = "biufc"


class Array(DeviceArray):
    """Kernel argument types of CUDA device arrays: ``Array[np.float32]`` and its supertypes
    ``Array[np.floating]``, ``Array[np.number]``, ``Array[np.generic]``."""


def array_type(dtype: Any) -> type[Array]:
    """``Array[dtype]``, for an element type a kernel can take through a pointer (numeric or
    bool, in native byte order: another byte order is a ``ValueError``)."""
    dt = np.dtype(dtype)
    if dt.kind not in ELEMENT_KINDS or dt.fields is not None:
        raise TypeError(f"a device array's element type is a numeric or bool dtype, got {dt}")
    if not dt.isnative:
        raise ValueError(
            f"a device array's elements are in native byte order, got {dt} "
            f"(use {dt.newbyteorder('=')})"
        )
    return Array[dt.type]


def _native(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy in native byte order (what the device reads)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


#: The argument type of each class of values that decides it: the scalar types (filled in by
#: ``_types``) and each element type's :class:`CuArray` class. ``typeof``'s fast path is one
#: lookup here by the value's class.
ARGTYPES: dict[type, type] = {}

_classes: dict[np.dtype, type] = {}
_classes_lock = threading.Lock()


def cuarray_class(dtype: Any) -> type[CuArray]:
    """The class of the CuArrays of ``dtype``: one subclass of :class:`CuArray` per element
    type, so that a value's class alone gives its argument type."""
    dt = np.dtype(dtype)
    cls = _classes.get(dt)
    if cls is None:
        argtype = array_type(dt)
        with _classes_lock:
            cls = _classes.get(dt)
            if cls is None:
                cls = type(
                    "CuArray",
                    (CuArray,),
                    {"__slots__": (), "__module__": __name__, "__qualname__": "CuArray"},
                )
                ARGTYPES[cls] = argtype
                _classes[dt] = cls
    return cls


def device_pointer(obj: Any) -> int:
    """The device address of an object with ``__cuda_array_interface__``."""
    return obj.__cuda_array_interface__["data"][0]


def _free(ptr: int, ctx: Context) -> None:
    if ctx.alive:  # a destroyed context freed it; the address may belong to someone else now
        try:
            with pushed(ctx):
                driver.cuMemFree(ptr)
        except Exception:  # a finalizer cannot report
            pass


def _shape(shape: Any) -> tuple[int, ...]:
    t = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    try:
        dims = tuple(int(d) for d in t)
    except (TypeError, ValueError):
        raise TypeError(f"a shape is an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"a shape has no negative dimensions, got {shape!r}")
    return dims


class CuArray:
    """A C-contiguous array in device memory: allocate, copy from and to numpy, freed when
    collected. ``CuArray.from_numpy(a)``, ``CuArray.zeros(shape, dtype)``, ``a.get()``.

    Each element type's arrays are instances of their own subclass (see
    :func:`cuarray_class`): test with ``isinstance(a, CuArray)``, not ``type(a) is``.
    """

    __slots__ = ("__weakref__", "argtype", "context", "dtype", "nbytes", "owner", "ptr", "shape")

    def __new__(cls, shape: Any = (), dtype: Any = np.float32, **kwargs: Any) -> CuArray:
        return object.__new__(cuarray_class(dtype) if cls is CuArray else cls)

    def __init__(
        self, shape: Any, dtype: Any = np.float32, *, context: Context | None = None
    ) -> None:
        """Allocate an uninitialized array in ``context`` (default: the current one)."""
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.argtype = array_type(self.dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.context = current_context() if context is None else context
        self.owner = None
        self.ptr = 0
        if self.nbytes:
            with pushed(self.context):
                self.ptr = int(
                    check(
                        driver.cuMemAlloc(self.nbytes),
                        "cuMemAlloc",
                        f"allocating {self.nbytes} bytes",
                    )
                )
            weakref.finalize(self, _free, self.ptr, self.context)

    @classmethod
    def from_numpy(cls, host: Any, *, context: Context | None = None) -> CuArray:
        """A device copy of ``host`` (anything ``np.asarray`` takes), in native byte order."""
        a = _native(np.ascontiguousarray(host))
        out = cls(a.shape, a.dtype, context=context)
        out.set(a)
        return out

    @classmethod
    def zeros(
        cls, shape: Any, dtype: Any = np.float32, *, context: Context | None = None
    ) -> CuArray:
        """An array of zeros."""
        out = cls(shape, dtype, context=context)
        if out.nbytes:
            with pushed(out.context):
                check(driver.cuMemsetD8(out.ptr, 0, out.nbytes), "cuMemsetD8")
        return out

    @classmethod
    def wrap(cls, ptr: int, shape: Any, dtype: Any, *, owner: Any = None) -> CuArray:
        """A view of device memory someone else owns (kept alive through ``owner``); never
        freed by this object. Needs no driver call."""
        self = object.__new__(cuarray_class(dtype) if cls is CuArray else cls)
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.argtype = array_type(self.dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.context = None
        self.owner = owner
        self.ptr = int(ptr)
        return self

    def set(self, host: Any) -> None:
        """Copy ``host`` (same shape and dtype, any byte order) into this array."""
        a = np.ascontiguousarray(_native(np.asarray(host)))
        if a.shape != self.shape or a.dtype != self.dtype:
            raise ValueError(
                f"cannot copy a {a.dtype}{list(a.shape)} array into a {self.dtype}"
                f"{list(self.shape)} device array"
            )
        if self.nbytes:
            with pushed(self._context()):
                check(driver.cuMemcpyHtoD(self.ptr, a.ctypes.data, self.nbytes), "cuMemcpyHtoD")

    def get(self) -> np.ndarray:
        """A numpy copy, after the work queued in the array's context has finished."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            with pushed(self._context()):
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
                check(driver.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    def _context(self) -> Context:
        return current_context() if self.context is None else self.context

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # stream 1: the legacy default stream, which this back-end launches on by default
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": 1,
        }

    def __repr__(self) -> str:
        return f"<CuArray {self.dtype}{list(self.shape)} at {self.ptr:#x}>"
