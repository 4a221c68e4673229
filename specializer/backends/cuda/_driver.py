"""The CUDA driver: one lazy probe, errors that say what is missing, contexts and streams.

A launch reads the thread's context with one thread-local load, not ``cuCtxGetCurrent``.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ... import launching
from ... import world as _world
from ...locks import new_lock

try:
    from cuda.bindings import driver as driver  # re-exported: the back-end modules use it
except ImportError as e:  # pragma: no cover - the cuda extra is installed wherever this is used
    raise ImportError(
        "the CUDA back-end needs cuda-python: pip install -e '.[cuda]' "
        "--config-settings editable_mode=compat in a checkout (or the wheel's [cuda] extra) "
        f"(importing cuda.bindings failed: {e})"
    ) from e


class CUDAUnavailableError(RuntimeError):
    """No usable CUDA driver or GPU; the message names what is missing. Compiling to PTX
    needs neither: ``code_ptx(f, tt, arch="sm_90")`` still works."""


class CUDAError(RuntimeError):
    """A CUDA driver call failed; the message names the call, the error and what was asked."""

    def __init__(self, call: str, result: Any, detail: str = "") -> None:
        self.call = call
        self.result = result
        name = getattr(result, "name", str(result))
        try:
            err, text = driver.cuGetErrorString(result)
            text = text.decode() if isinstance(text, bytes) and not err else ""
        except Exception:  # an unknown code, or the driver went away
            text = ""
        msg = f"{call} failed: {name}" + (f" ({text})" if text else "")
        super().__init__(msg + (f"; {detail}" if detail else ""))


def check(result: tuple[Any, ...], call: str, detail: str = "") -> Any:
    """The value(s) of a driver call's ``(CUresult, *values)``, or a :class:`CUDAError`."""
    err = result[0]
    if err:  # CUDA_SUCCESS is 0
        raise CUDAError(call, err, detail)
    if len(result) == 2:
        return result[1]
    return result[1:] if len(result) > 2 else None


# -- the probe ---------------------------------------------------------------------------


@functools.cache
def unavailable_reason() -> str | None:
    """Why CUDA cannot run here (``None`` when a GPU and its driver are usable). Probes once."""
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # cuda.pathfinder's DynamicLibNotFoundError when libcuda is absent
        return (
            "the NVIDIA driver library (libcuda.so.1 / nvcuda.dll) could not be loaded "
            f"({type(e).__name__}: {e})"
        )
    if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
        return "the NVIDIA driver is installed but found no CUDA device (CUDA_ERROR_NO_DEVICE)"
    if err:
        return f"the NVIDIA driver failed to initialize: {CUDAError('cuInit', err)}"
    err, count = driver.cuDeviceGetCount()
    if err:
        return f"the NVIDIA driver cannot count devices: {CUDAError('cuDeviceGetCount', err)}"
    if count == 0:
        return "the NVIDIA driver is installed but reports no CUDA device"
    return None


def available() -> bool:
    """Whether a CUDA GPU and its driver are usable in this process (probed once)."""
    return unavailable_reason() is None


def require() -> None:
    """Raise :class:`CUDAUnavailableError` unless a GPU and its driver are usable."""
    reason = unavailable_reason()
    if reason is not None:
        raise CUDAUnavailableError(
            f"CUDA is not available: {reason}. Loading and launching kernels needs an NVIDIA "
            "GPU and its driver; compiling to PTX does not: "
            "code_ptx(f, tt, arch='sm_90') works without either."
        )


def device_count() -> int:
    """How many CUDA devices the driver sees (0 when CUDA is unavailable)."""
    if not available():
        return 0
    count: int = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    return count


# -- contexts ----------------------------------------------------------------------------


class _Local(threading.local):
    """Per-thread: the current context, its ``key`` and the contexts ``with`` blocks replaced."""

    def __init__(self) -> None:
        self.context: Context | None = None
        self.key: tuple[ContextKey, tuple[()]] | None = None
        self.stack: list[Context | None] = []


local = _Local()
_lock = new_lock()
_primaries: dict[int, Context] = {}


#: what the fork error names (world.check_fork), as the launcher does
FORK_WHAT = "specializer's cuda back-end"
#: the process that used the device first (SPEC 9): a fork of it may not use it, others may
_device_user: int | None = None


def check_use() -> None:
    """Before each use of the device: record this process as its user, or raise the fork error
    in a fork of the user (SPEC 9). The launcher keeps a record of its own for launches."""
    global _device_user
    pid = os.getpid()
    if _device_user is None:
        _device_user = pid  # (two threads at once store the same pid)
    elif _device_user != pid:
        _world.check_fork(FORK_WHAT)


#: Called without a lock with the key of a context that is gone (``_module``'s drop of modules).
on_forget: list[Callable[[ContextKey], None]] = []


def context_gone(detail: str) -> CUDAError:
    """The error of a use of a context that is destroyed or collected."""
    return CUDAError("using a context", driver.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED, detail)


def _device(ordinal: int) -> Any:
    require()
    check_use()  # every context is made on a device from here
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"a device is an int ordinal, got {ordinal!r}")
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if not 0 <= ordinal < count:
        raise ValueError(f"there is no CUDA device {ordinal}: the driver sees {count} device(s)")
    return check(driver.cuDeviceGet(ordinal), "cuDeviceGet")


def _attribute(name: str, device: Any) -> int:
    which = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    value: int = check(driver.cuDeviceGetAttribute(which, device), "cuDeviceGetAttribute")
    return value


class ContextKey:
    """A :class:`Context`'s cache key (its ``token``): compared by identity, holding the context
    weakly."""

    __slots__ = ("__weakref__", "name", "ref")

    def __init__(self, ctx: Context) -> None:
        self.ref = weakref.ref(ctx)
        self.name = ""

    def context(self) -> Context | None:
        return self.ref()

    def __repr__(self) -> str:
        return f"<context key of {self.name}>"

    def __str__(self) -> str:
        return self.name


def _forget(token: ContextKey) -> None:
    """Drop what was cached for a context that is gone. Takes no lock (see launching.forget)."""
    launching.forget(token)
    for hook in on_forget:
        hook(token)


def _collected(token: ContextKey, handle: Any, is_primary: bool, alive: list[bool]) -> None:
    """A finalizer (raises nothing): a collected non-primary context is destroyed with its object
    (its arrays, streams and HostKernels hold it), and what was cached for it dropped."""
    if alive[0] and not is_primary:
        alive[0] = False
        try:
            driver.cuCtxDestroy(handle)
        except Exception:
            pass
    _forget(token)


class Context:
    """A CUDA context on one device; its identity is the cache key for code loaded into it.
    Make one with :meth:`primary` (shared with CuPy, PyTorch and cuda.core) or :meth:`create`
    (its own); ``with ctx:`` makes it the calling thread's current context for the block."""

    __slots__ = (
        "__weakref__",
        "_alive",
        "_finalizer",
        "capability",
        "device",
        "handle",
        "is_primary",
        "key",
        "name",
        "ordinal",
        "token",
    )

    def __init__(self, handle: Any, device: Any, ordinal: int, is_primary: bool) -> None:
        self.handle = handle
        self.device = device
        self.ordinal = ordinal
        self.is_primary = is_primary
        self._alive = [True]  # shared with the finalizer
        self.token = ContextKey(self)
        #: a launch's lookup key without compiler kwargs: one object, compared by identity
        self.key: tuple[ContextKey, tuple[()]] = (self.token, ())
        self._finalizer = weakref.finalize(
            self, _collected, self.token, handle, is_primary, self._alive
        )
        major = _attribute("COMPUTE_CAPABILITY_MAJOR", device)
        self.capability: tuple[int, int] = (major, _attribute("COMPUTE_CAPABILITY_MINOR", device))
        raw = check(driver.cuDeviceGetName(256, device), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode(errors="replace").strip() if raw else "?"
        self.token.name = repr(self)

    @property
    def alive(self) -> bool:
        """False once destroyed."""
        return self._alive[0]

    @classmethod
    def primary(cls, device: int = 0) -> Context:
        """The primary context of ``device`` (one object per device until it is destroyed)."""
        dev = _device(device)
        with _lock():
            ctx = _primaries.get(device)
            if ctx is None:
                handle = check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                ctx = _primaries[device] = cls(handle, dev, device, True)
        return ctx

    @classmethod
    def create(cls, device: int = 0) -> Context:
        """A new context of its own on ``device``; the calling thread's context is unchanged."""
        dev = _device(device)
        try:  # cuda-bindings 13 takes (params, flags, dev), 12 (flags, dev)
            handle = check(driver.cuCtxCreate(None, 0, dev), "cuCtxCreate")
        except TypeError:
            handle = check(driver.cuCtxCreate(0, dev), "cuCtxCreate")
        check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")  # the driver pushed it on this thread
        return cls(handle, dev, device, False)

    def destroy(self) -> None:
        """Destroy the context and everything in it. For a primary context this resets the
        device (every allocation in it, also other libraries', is freed) and the next
        :meth:`primary` is a new context. Code looked up in this one is looked up again."""
        with _lock():
            if not self.alive:
                return
            self._alive[0] = False
            self._finalizer.detach()
            if self.is_primary:
                if _primaries.get(self.ordinal) is self:
                    del _primaries[self.ordinal]
                check(driver.cuDevicePrimaryCtxRelease(self.device), "cuDevicePrimaryCtxRelease")
                check(driver.cuDevicePrimaryCtxReset(self.device), "cuDevicePrimaryCtxReset")
            else:
                check(driver.cuCtxDestroy(self.handle), "cuCtxDestroy")
        if local.context is self:
            local.context = local.key = None
        _forget(self.token)

    def synchronize(self) -> None:
        """Wait for all work queued in this context."""
        with pushed(self):
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    @property
    def arch(self) -> str:
        """The device's architecture as NVRTC names it: ``sm_90`` for compute capability 9.0."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def __enter__(self) -> Context:
        check_use()
        self._check_alive()
        local.stack.append(local.context)
        _make_current(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _make_current(local.stack.pop())

    def _check_alive(self) -> None:
        if not self.alive:
            raise context_gone(f"{self!r} was destroyed")

    def __repr__(self) -> str:
        kind = "primary context" if self.is_primary else "context"
        state = "" if self.alive else ", destroyed"
        return f"<CUDA {kind} on device {self.ordinal} ({self.name}, {self.arch}{state})>"


def _make_current(ctx: Context | None) -> None:
    local.context = ctx
    local.key = None if ctx is None else ctx.key
    if ctx is not None and ctx.alive:
        check(driver.cuCtxSetCurrent(ctx.handle), "cuCtxSetCurrent")


def current_context() -> Context:
    """The calling thread's current context: the primary context of device 0 unless the
    thread entered another with ``with ctx:``."""
    check_use()  # a fork keeps the forking thread's context: not its own
    ctx = local.context
    if ctx is None:
        ctx = Context.primary(0)
        _make_current(ctx)
    return ctx


def current_key() -> tuple[ContextKey, tuple[()]]:
    """``(current_context(), ())``, the same object until the thread's context changes."""
    if local.key is None:
        current_context()
    return local.key  # type: ignore[return-value]


@contextmanager
def pushed(ctx: Context) -> Iterator[None]:
    """Make ``ctx`` current for the block (loads, copies, frees); the thread's own is kept."""
    check_use()
    ctx._check_alive()
    check(driver.cuCtxPushCurrent(ctx.handle), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(driver.cuCtxPopCurrent(), "cuCtxPopCurrent")


def synchronize() -> None:
    """Wait for all work queued in the calling thread's current context."""
    current_context().synchronize()


def release(call: Callable[[Any], Any], handle: Any, ctx: Context) -> None:
    """A finalizer (of arrays and streams): ``call(handle)`` in ``ctx``, unless the context is
    gone (that freed it, and the handle may be someone else's now)."""
    if ctx.alive:
        try:
            with pushed(ctx):
                call(handle)
        except Exception:  # a finalizer cannot report
            pass


# -- streams -----------------------------------------------------------------------------


class Stream:
    """A non-blocking CUDA stream in a context (the current one by default); destroyed when
    collected. Launches take ``stream=`` (default: the context's legacy default stream)."""

    __slots__ = ("__weakref__", "context", "handle")

    def __init__(self, context: Context | None = None) -> None:
        self.context = current_context() if context is None else context
        with pushed(self.context):
            self.handle = check(
                driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING),
                "cuStreamCreate",
            )
        weakref.finalize(self, release, driver.cuStreamDestroy, self.handle, self.context)

    def synchronize(self) -> None:
        """Wait for the work queued on this stream."""
        check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def __repr__(self) -> str:
        return f"<CUDA stream {int(self.handle):#x} in {self.context!r}>"


#: The legacy default stream (what ``stream=None`` launches on), as the driver's object.
DEFAULT_STREAM = driver.CUstream(0)


def stream_handle(stream: Any) -> Any:
    """The ``CUstream`` of what a launch's ``stream=`` names."""
    if isinstance(stream, Stream):
        return stream.handle
    if isinstance(stream, driver.CUstream):
        return stream
    if isinstance(stream, int) and not isinstance(stream, bool):
        return driver.CUstream(stream)
    proto = getattr(stream, "__cuda_stream__", None)  # cuda.core's Stream
    if proto is not None:
        return driver.CUstream(int(proto()[1]))
    ptr = getattr(stream, "ptr", None)  # CuPy's Stream
    if isinstance(ptr, int):
        return driver.CUstream(ptr)
    raise TypeError(
        f"stream= takes a specializer.backends.cuda.Stream, a cuda.bindings CUstream, an int "
        f"handle, a CuPy stream or an object with __cuda_stream__ (cuda.core), "
        f"got {type(stream).__module__}.{type(stream).__qualname__}"
    )


def max_cooperative_blocks(
    function: Any,
    block_threads: int,
    shared_mem: int,
    context: Context,
    limits: dict[tuple[int, int], tuple[int, int, int]] | None = None,
) -> tuple[int, int, int]:
    """``(most blocks, blocks per SM, SMs)`` of ``function`` resident at once on ``context``'s
    device, cached in ``limits``; a :class:`CUDAError` if it cannot launch cooperatively."""
    key = (int(block_threads), int(shared_mem))
    found = None if limits is None else limits.get(key)
    if found is not None:
        return found
    with pushed(context):
        if not _attribute("COOPERATIVE_LAUNCH", context.device):
            raise CUDAError(
                "cooperative launch",
                driver.CUresult.CUDA_ERROR_NOT_SUPPORTED,
                f"{context!r} does not support cooperative launches",
            )
        sms = _attribute("MULTIPROCESSOR_COUNT", context.device)
        per_sm = check(
            driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                function, int(block_threads), int(shared_mem)
            ),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            f"for blocks of {block_threads} threads and {shared_mem} bytes of shared memory",
        )
    found = (int(per_sm) * int(sms), int(per_sm), int(sms))
    if limits is not None:
        limits.setdefault(key, found)  # one store: two threads compute the same value
    return found
