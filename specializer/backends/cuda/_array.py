"""Device arrays: ``Array[T]``, :class:`CuArray` (one class per element type, checked by class),
and foreign arrays' readers: ``reader(value, typestr)`` is the device pointer of a C-contiguous,
unmasked value of element type ``typestr``, else None (the slow path)."""

from __future__ import annotations

import weakref
from typing import Any, cast

import numpy as np

from ...locks import new_lock
from ...types import DeviceArray, EltypeT_co
from ._driver import Context, check, current_context, driver, pushed, release

#: numpy kinds an element type may have (bool, signed, unsigned, float, complex)
ELEMENT_KINDS = "biufc"


class Array(DeviceArray[EltypeT_co]):
    """Kernel argument types of CUDA device arrays: ``Array[np.float32]`` and its supertypes
    ``Array[np.floating]``, ``Array[np.number]``, ``Array[np.generic]``."""


def array_type(dtype: Any) -> type[Array[Any]]:
    """``Array[dtype]`` for a numeric or bool dtype (another byte order is a ``ValueError``)."""
    dt = np.dtype(dtype)
    if dt.kind not in ELEMENT_KINDS or dt.fields is not None:
        raise TypeError(f"a device array's element type is a numeric or bool dtype, got {dt}")
    if not dt.isnative:
        raise ValueError(
            f"a device array's elements are in native byte order, got {dt} "
            f"(use {dt.newbyteorder('=')})"
        )
    # cast: Array's subscript interns a subclass of Array itself (the family root)
    return cast("type[Array[Any]]", cast(Any, Array)[dt.type])


def _native(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy in native byte order (what the device reads)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


#: value class -> argument type (``_types``'s scalars, each CuArray class): typeof's fast path
argtypes: dict[type, type] = {}

_classes: dict[np.dtype, type] = {}
_classes_lock = new_lock(reentrant=False)


def cuarray_class(dtype: Any) -> type[CuArray]:
    """The :class:`CuArray` subclass of ``dtype``, so a value's class alone gives its type."""
    dt = np.dtype(dtype)
    cls = _classes.get(dt)
    if cls is None:
        argtype = array_type(dt)
        with _classes_lock():
            cls = _classes.get(dt)
            if cls is None:
                cls = type(
                    "CuArray",
                    (CuArray,),
                    {"__slots__": (), "__module__": __name__, "__qualname__": "CuArray"},
                )
                argtypes[cls] = argtype
                _classes[dt] = cls
    return cls


def device_pointer(obj: Any) -> int:
    """The device address of a foreign array: by its class's reader, else its CAI."""
    reader = None if obj.__class__ in cai_classes else foreign.get(obj.__class__)
    if reader is not None:
        ptr: int | None = reader(obj, None)
        if ptr is not None:
            return ptr
    return int(obj.__cuda_array_interface__["data"][0])


def view_pointer(v: Any, typestr: str | None) -> int | None:
    """A cuda.core StridedMemoryView (strides None: C-contiguous)."""
    if typestr is None or (v.strides is None and v.is_device_accessible and v.dtype.str == typestr):
        return int(v.ptr)
    return None


def buffer_pointer(b: Any, typestr: str | None) -> int | None:
    """A cuda.core Buffer: its bytes."""
    if typestr is None or (typestr == "|u1" and b.is_device_accessible):
        return int(b.handle)
    return None


def dlpack_pointer(a: Any, typestr: str | None) -> int | None:
    return view_pointer(strided_view(a), typestr)


#: the reader of each foreign array class the slow path typed (but those in cai_classes)
foreign: dict[type, Any] = {}
#: the classes with __cuda_array_interface__ the slow path typed (read by the guard itself)
cai_classes: set[type] = set()

#: DLPack's device types of CUDA memory a kernel can read: kDLCUDA, kDLCUDAHost, kDLCUDAManaged
DLPACK_CUDA = (2, 3, 13)


def strided_view(a: Any) -> Any:
    """cuda.core's ``StridedMemoryView`` of a DLPack array (needs cuda.core)."""
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        raise TypeError(
            f"a {type(a).__module__}.{type(a).__qualname__} is a DLPack array without "
            "__cuda_array_interface__: reading it needs cuda.core (pip install cuda-core)"
        ) from None
    # -1: the consumer does not synchronize. from_dlpack where cuda.core has it (newer releases
    # deprecate the constructor's reading of DLPack)
    make = getattr(StridedMemoryView, "from_dlpack", StridedMemoryView)
    return make(a, stream_ptr=-1)


def is_cuda_core(value: Any, name: str) -> bool:
    """Whether ``value`` is cuda.core's class ``name`` (without importing cuda.core)."""
    cls: type = value.__class__
    return cls.__name__ == name and cls.__module__.startswith("cuda.core")


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
        self._describe(shape, dtype)
        if context is None:
            context = current_context()
        self.context: Context | None = context
        self.owner: Any = None
        self.ptr = 0
        if self.nbytes:
            with pushed(context):
                alloc = driver.cuMemAlloc(self.nbytes)
                self.ptr = int(check(alloc, "cuMemAlloc", f"allocating {self.nbytes} bytes"))
            weakref.finalize(self, release, driver.cuMemFree, self.ptr, context)

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
            with pushed(out._context()):  # (an allocated array has its context)
                check(driver.cuMemsetD8(out.ptr, 0, out.nbytes), "cuMemsetD8")
        return out

    @classmethod
    def wrap(cls, ptr: int, shape: Any, dtype: Any, *, owner: Any = None) -> CuArray:
        """A view of device memory someone else owns (kept alive through ``owner``)."""
        self = cls.__new__(cls, shape, dtype)
        self._describe(shape, dtype)
        self.context = None
        self.owner = owner
        self.ptr = int(ptr)
        return self

    def _describe(self, shape: Any, dtype: Any) -> None:
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.argtype = array_type(self.dtype)
        self.nbytes = self.size * self.dtype.itemsize

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
                check(
                    driver.cuMemcpyHtoD(self.ptr, a.__array_interface__["data"][0], self.nbytes),
                    "cuMemcpyHtoD",
                )

    def get(self) -> np.ndarray:
        """A numpy copy, after the work queued in the array's context has finished."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            with pushed(self._context()):
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
                check(
                    driver.cuMemcpyDtoH(out.__array_interface__["data"][0], self.ptr, self.nbytes),
                    "cuMemcpyDtoH",
                )
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
