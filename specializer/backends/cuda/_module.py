"""Modules loaded into contexts (once per NVRTC program and context), and the kernels got from
them as :class:`LinkedKernel`, what ``cufunction`` caches."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ...compiler import CompilerJob
from . import _driver
from ._driver import Context, ContextKey, CUDAError, check, driver, max_cooperative_blocks, pushed
from ._nvrtc import nvrtc_version
from ._program import CUDAArtifact
from ._ptx import ptx_globals

_Dim3 = tuple[int, int, int]


class LinkedKernel:
    """A kernel loaded into one context, with the launch path of each signature it was looked
    up for (``bound``): the result ``cufunction`` caches; it holds no kernel instance. Its
    module's ``__constant__`` and ``__device__`` variables are reached with
    :meth:`get_global`, :meth:`copy_to_global` and :meth:`copy_from_global`."""

    __slots__ = (
        "__weakref__",
        "arch",
        "cooperative",
        "function",
        "invokers",
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
        self.invokers: dict[Any, Any] = {}  # each signature's invoker (the core's)
        #: (threads per block, shared memory) -> max_cooperative_blocks; ends with the function
        self.cooperative: dict[tuple[int, int], tuple[int, int, int]] = {}

    @property
    def context(self) -> Context:
        """The context it was loaded into (a :class:`CUDAError` once that is gone)."""
        ctx = self.token.context()
        if ctx is None:
            raise _driver.context_gone(f"the context kernel {self.name} was loaded into is gone")
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
        self._copy(name, a, "the", to_device=True)

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
        self._copy(name, out, "a", to_device=False, where=(ptr, size))
        return out

    def _copy(
        self, name: str, a: np.ndarray, article: str, to_device: bool, where: Any = None
    ) -> None:
        """Copy host array ``a`` to (or from) variable ``name`` of its size, between two waits."""
        ptr, size = where or self.get_global(name)
        if a.nbytes != size:
            raise ValueError(
                f"global {name!r} of kernel {self.name} has {size} bytes; {article} {a.dtype}"
                f"{list(a.shape)} array has {a.nbytes}"
            )
        if not size:
            return
        host = a.__array_interface__["data"][0]
        with pushed(self.context):
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
            if to_device:
                what = f"copying {size} bytes into global {name!r} of kernel {self.name}"
                check(driver.cuMemcpyHtoD(ptr, host, size), "cuMemcpyHtoD", what)
            else:
                what = f"copying global {name!r} of kernel {self.name}"
                check(driver.cuMemcpyDtoH(host, ptr, size), "cuMemcpyDtoH", what)
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def __repr__(self) -> str:
        ctx = self.token.context()
        where = "a context that is gone" if ctx is None else repr(ctx)
        return f"<LinkedKernel {self.name} ({self.arch}) in {where}>"


def launch_cooperative(
    linked: LinkedKernel, grid: _Dim3, block: _Dim3, shared_mem: int, stream: Any, params: Any
) -> None:
    """Launch with ``cuLaunchCooperativeKernel`` (grid-wide sync); ``params`` is the ``void*``
    array's address. A grid larger than can be resident at once is a ``ValueError`` first."""
    context = linked.context
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    most, per_sm, sms = max_cooperative_blocks(
        linked.function, threads, shared_mem, context, linked.cooperative
    )
    if blocks > most:
        raise ValueError(
            f"cooperative launch of {linked.name}: grid={grid} is {blocks} blocks, but at most "
            f"{most} blocks of {threads} threads with {shared_mem} bytes of dynamic shared memory "
            f"can be resident at once ({per_sm} per multiprocessor x {sms} multiprocessors of "
            f"{context!r}), and a grid-wide sync needs every block resident: use a smaller grid"
        )
    (err,) = driver.cuLaunchCooperativeKernel(
        linked.function, *grid, *block, int(shared_mem), stream, params
    )
    if err:
        raise CUDAError(
            "cuLaunchCooperativeKernel",
            err,
            f"launching {linked.name} with grid={grid}, block={block}, shared_mem={shared_mem} "
            f"in {context!r}",
        )


def load(
    job: CompilerJob, artifact: CUDAArtifact, token: ContextKey, context: Context
) -> LinkedKernel:
    """Load ``artifact`` into ``context`` once per NVRTC program; the kernel's function."""
    image = artifact.cubin if artifact.cubin is not None else artifact.ptx.encode() + b"\0"
    detail = f"loading kernel {job.name} ({artifact.arch}) into {context!r}"
    # the kernels of one program share its module (and variables) in each context
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
    return LinkedKernel(job.name, function, module, token, job.mi.tt, artifact.arch, artifact.ptx)


#: the modules loaded into each context (held weakly by its key), by NVRTC program; dropped
#: when the context is gone (the driver layer calls the hook appended here)
_modules: weakref.WeakKeyDictionary[ContextKey, dict[str, Any]] = weakref.WeakKeyDictionary()


def _forget_modules(token: ContextKey) -> None:
    _modules.pop(token, None)


_driver.on_forget.append(_forget_modules)
