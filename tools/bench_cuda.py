"""Benchmark of the CUDA back-end's launch path, each figure beside a baseline measured in the
same run.

1. The launch path up to the driver call, no GPU needed. Host-thread instructions per launch
   under ``valgrind --tool=callgrind --separate-threads=yes --dump-before=getppid``
   (``tools/callgrind.thread_dumps``: a marker call ``os.getppid()`` between the loops, only
   the main thread's dumps read; the difference of two loop lengths, so the markers cancel;
   the empty loop subtracted) for the kernel ``fill(float *x, float v, long long n)``, with a
   CuArray, an np.float32 and a Python int, ``grid=4, block=256``. The signature's invoker is
   made as a miss makes it (its factory bound to a stand-in for the linked kernel, which cannot
   be linked without a GPU) and kept as the kernel's cell entry for the current world and a
   where set as the thread's context key, and ``cuLaunchKernel`` (the ``_launch`` global of
   the factory's module) replaced by a no-op Python function returning ``(0,)`` that counts
   its calls: every measured launch must reach it.

   - ``launch(k, x, v, n, grid=4, block=256)``: the real generated ``cuda.launch`` (the where,
     the cell's newest entry: world, where and kwargs) and the invoker (the argument guard, the
     grid and block, the range check, a buffer from the pool, the device pointer, three stores)
     up to the driver call;
   - a HostKernel call ``hk(x, v, n, grid=4, block=256)``, the same invoker through the
     HostKernel's call;
   - ours, packing: what the launch spends on its parameters, this signature's launch minus
     the launch of a kernel without parameters;
   - cuda.bindings, our int address: what ``cuLaunchKernel`` then does with the buffer's
     address, an int (its private ``_HelperKernelParams``, which it runs on ``kernelParams``);
   - cuda.bindings (values, types): what ``cuLaunchKernel`` does instead on every call given
     ``((ptr, v, n), (c_void_p, c_float, c_longlong))``, tuples built per call;
   - for reference: the entries of the kernel without parameters, the three stores alone and
     the no-op stand-in for the driver called alone (counted in each entry).

   - the same launch and HostKernel call with ``x`` a foreign array (a class with only
     ``__cuda_array_interface__``, version 3, as an attribute; and, reported only, as a
     property building its dict on each read, as CuPy's does), whose class the slow path
     has typed once, so the invoker's guard takes it by its class's reader.

   The bars: ours, packing plus the binding taking our int costs fewer instructions than the
   binding packing the (values, types) form; the launch and the HostKernel call with the
   foreign array within 10 % of the same with a CuArray.

2. On a GPU (skipped without one): host time per launch of a trivial kernel, the median over
   interleaved rounds of launches (synchronized between rounds, outside the timing), for
   ``launch(...)``, a ``HostKernel`` call, raw ``cuLaunchKernel`` with a pre-packed buffer,
   ``launch(...)`` with a foreign array (a class with ``__cuda_array_interface__``),
   ``cuLaunchKernel`` with (values, types), cuda.core's ``launch`` and, when installed, CuPy's
   ``RawKernel``, Numba-CUDA and Triton; then instructions per call (the CPU's counter for
   the calling thread's user space, via perf_event_open; callgrind where that is not
   available) of a ``cufunction`` hit, of the same lookup with the cache bypassed
   (``uncached_lookup``), of ``launch(...)`` and of raw ``cuLaunchKernel``.

   The bars: ``launch(...)`` within 1.2x raw ``cuLaunchKernel`` with a pre-packed buffer, and
   faster than cuda.core, CuPy, Numba-CUDA and Triton.

Run: ``python tools/bench_cuda.py [--no-gpu] [--rounds R] [--per-round N]``.
``--under-callgrind no-gpu|gpu-lookups`` runs the measured loops between markers (what the
benchmark runs under valgrind).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np
from callgrind import thread_dumps  # tools/callgrind.py, beside this script

import specializer
from specializer import world
from specializer.backends import cuda
from specializer.backends.cuda import _params
from specializer.backends.cuda._driver import local

PTR = 0x7F00DEAD0000  # a device address as the driver hands them out
SHORT, LONG = 5_000, 25_000  # the two loop lengths of each variant under callgrind
WARM_UP = 1_000
N = 1024  # elements of the benchmark's array: a trivial kernel
GRID, BLOCK = 4, 256
SRC = r"""extern "C" __global__ void fill(float *x, float v, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = v; }"""
#: the lookup's argument types (a Python int stands for the weak int) and what they resolve to
TT = (cuda.Array[np.float32], np.float32, int)
RESOLVED = (cuda.Array[np.float32], np.float32, np.int64)


@cuda.kernel
def fill(x: cuda.Array[np.float32], v: np.float32, n: np.int64) -> str:
    """The benchmark's trivial kernel (SRC)."""
    return SRC


@cuda.kernel
def nothing() -> str:
    """A kernel without parameters: the baseline of the parameter packing."""
    return 'extern "C" __global__ void nothing() {}'


def out(line: str = "") -> None:
    print(line, flush=True)


# -- 1. the launch entry up to the driver call (no GPU) -----------------------------------

LAUNCH = "launch(k, x, v, n, grid=4, block=256)"
HOST = "HostKernel call hk(x, v, n, grid=4, block=256)"
LAUNCH0 = "launch(k0, grid=4, block=256), a kernel without parameters"
HOST0 = "HostKernel call hk0(grid=4, block=256), a kernel without parameters"
LAUNCH_FOREIGN = "launch(k, f, v, n, grid=4, block=256), f a foreign array"
HOST_FOREIGN = "HostKernel call hk(f, v, n, grid=4, block=256), f a foreign array"
LAUNCH_FOREIGN_PROP = "launch(k, g, v, n, grid=4, block=256), g's interface a property"
STORES = "the three stores alone"
NOOP = "the no-op stand-in for cuLaunchKernel alone (11 arguments, its counter)"
INT = "cuda.bindings, our int address"
TUPLE = "cuda.bindings (values, types)"
#: the loops each iteration of which must reach the driver's stand-in (once)
REACH = (LAUNCH, HOST, LAUNCH0, HOST0, NOOP, LAUNCH_FOREIGN, HOST_FOREIGN, LAUNCH_FOREIGN_PROP)


class ForeignArray:
    """A foreign device array, as CuPy, PyTorch and Numba present one to a consumer: only
    ``__cuda_array_interface__`` (version 3, C-contiguous: strides None)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "data": (ptr, False),
            "strides": None,
            "version": 3,
            "stream": 1,
        }


class ForeignArrayProperty:
    """The same with the interface a property that builds its dict on each read (CuPy's
    ``ndarray`` and Numba's device arrays do)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.ptr, self.n = ptr, n

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": (self.n,),
            "typestr": "<f4",
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": 1,
        }


class _Linked:
    """A stand-in for a LinkedKernel: the fields the launch path reads of one."""

    name = "fill"
    context = None
    function = None  # a null CUfunction handle: the stand-in driver never reads it
    get_global = copy_to_global = copy_from_global = None  # (what a HostKernel carries)

    def __init__(self, tt: tuple[type, ...]) -> None:
        self.tt = tt
        self.invokers: dict = {}


class _Driver:
    """Stands where the launch path calls ``cuLaunchKernel``: a no-op returning ``(0,)``,
    counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        ok = (0,)

        def launch(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra):
            self.calls += 1
            return ok

        self.launch = launch


@contextlib.contextmanager
def _published() -> Iterator[tuple[dict[str, Callable[[int], None]], _Driver]]:
    """The no-GPU loops, with the cell entries of ``fill`` and ``nothing`` kept as a miss
    keeps them and the driver replaced by the stand-in; all undone on exit."""
    from cuda.bindings import driver

    launcher = cuda._launch._launcher
    stub = _Driver()
    where = (object(), ())  # what a context's key is: (context, no compiler kwargs)
    saved_key, local.key = local.key, where  # so that the entries' where matches
    patched: list[dict] = []
    made = []
    try:
        for k, lookup_tt, resolved in (
            (fill, launcher.tt_of(TT), RESOLVED),
            (nothing, (), ()),
        ):
            factory = launcher.invokers.factory(None, lookup_tt, resolved)[0]
            glb = factory.__globals__
            patched.append(glb)
            glb["_saved_launch"], glb["_launch"] = glb["_launch"], stub.launch
            linked = _Linked(resolved)
            invoke = launcher.invokers.of(linked, None, lookup_tt)[0]
            launcher._store(k, world.task_cell()[0], where, {}, invoke)  # as a miss keeps it
            made.append(cuda.HostKernel(k, lookup_tt, linked, where, invoke, {}))
        hk, hk0 = made

        helper = driver._HelperKernelParams  # what cuLaunchKernel runs on its kernelParams
        x = cuda.CuArray.wrap(PTR, (N,), np.float32)
        f, g = ForeignArray(PTR, N), ForeignArrayProperty(PTR, N)
        cuda.typeof(f), cuda.typeof(g)  # the slow path has typed one of each class
        v, n = np.float32(2.5), N
        launch = cuda.launch
        buffer = _params.ParamBuffer(RESOLVED)
        values, address = buffer.values, buffer.address
        types = (ctypes.c_void_p, ctypes.c_float, ctypes.c_longlong)
        noop, null = stub.launch, driver.CUstream(0)

        def loop_empty(k):
            for _ in range(k):
                pass

        def loop_launch(k):
            for _ in range(k):
                launch(fill, x, v, n, grid=4, block=256)

        def loop_host(k):
            for _ in range(k):
                hk(x, v, n, grid=4, block=256)

        def loop_launch_foreign(k):
            for _ in range(k):
                launch(fill, f, v, n, grid=4, block=256)

        def loop_host_foreign(k):
            for _ in range(k):
                hk(f, v, n, grid=4, block=256)

        def loop_launch_foreign_prop(k):
            for _ in range(k):
                launch(fill, g, v, n, grid=4, block=256)

        def loop_launch0(k):
            for _ in range(k):
                launch(nothing, grid=4, block=256)

        def loop_host0(k):
            for _ in range(k):
                hk0(grid=4, block=256)

        def loop_stores(k):
            p = x.ptr
            for _ in range(k):
                values.a0 = p
                values.a1 = v
                values.a2 = n

        def loop_noop(k):
            for _ in range(k):
                noop(None, 4, 1, 1, 256, 1, 1, 0, null, address, 0)

        def loop_int(k):
            for _ in range(k):
                helper(address)

        def loop_tuple(k):
            p = x.ptr
            for _ in range(k):
                helper(((p, v, n), types))

        yield (
            {
                "empty loop": loop_empty,
                LAUNCH: loop_launch,
                HOST: loop_host,
                LAUNCH_FOREIGN: loop_launch_foreign,
                HOST_FOREIGN: loop_host_foreign,
                LAUNCH_FOREIGN_PROP: loop_launch_foreign_prop,
                LAUNCH0: loop_launch0,
                HOST0: loop_host0,
                STORES: loop_stores,
                NOOP: loop_noop,
                INT: loop_int,
                TUPLE: loop_tuple,
            },
            stub,
        )
    finally:
        for glb in patched:
            glb["_launch"] = glb.pop("_saved_launch")
        for k in (fill, nothing):
            setattr(k, launcher.attr, None)  # (its entries' where is this stand-in's)
        local.key = saved_key


def _run_checked(loops: dict[str, Callable[[int], None]], stub: _Driver, name: str, k: int) -> None:
    """Run one loop; a launching one must have reached the driver's stand-in every time."""
    before = stub.calls
    loops[name](k)
    reached = stub.calls - before
    expected = k if name in REACH else 0
    if reached != expected:
        raise RuntimeError(f"{name}: {reached} of {k} calls reached the driver's stand-in")


def _markers(
    loops: dict[str, Callable[[int], None]], stub: _Driver | None, short: int, long: int
) -> None:
    """Under callgrind: for each loop in order, marker, ``short`` iterations, marker, ``long``
    iterations, marker, then the check of what reached the driver's stand-in. Dump 0 is
    start-up, dumps ``3 i + 1`` and ``3 i + 2`` loop ``i``'s short and long runs."""
    for name in loops:  # warm up (the specializing interpreter, the buffer pool) and check
        if stub is None:
            loops[name](WARM_UP)
        else:
            _run_checked(loops, stub, name, WARM_UP)
    gc.collect()
    gc.disable()
    for name, loop in loops.items():
        before = None if stub is None else stub.calls
        os.getppid()
        loop(short)
        os.getppid()
        loop(long)
        os.getppid()
        if stub is not None:
            reached = stub.calls - before
            expected = short + long if name in REACH else 0
            if reached != expected:
                raise RuntimeError(
                    f"{name}: {reached} of {short + long} calls reached the driver's stand-in"
                )
    gc.enable()


def _per_iteration(names: list[str], mode: str, short: int, long: int) -> dict[str, float]:
    """Main-thread instructions per iteration of each loop of ``--under-callgrind mode``
    (loops ``names``, of ``short`` and ``long`` iterations), less the empty loop's."""
    dumps = thread_dumps(__file__, "--under-callgrind", mode, timeout=600)
    if len(dumps) != 3 * len(names) + 1:
        raise RuntimeError(f"{len(dumps)} callgrind dumps for {len(names)} loops")
    per = {
        name: (dumps[3 * i + 2] - dumps[3 * i + 1]) / (long - short) for i, name in enumerate(names)
    }
    base = per.pop("empty loop")
    return {"empty loop": base, **{k: v - base for k, v in per.items()}}


def entry(needs_valgrind: bool) -> bool:
    """Print the no-GPU table; returns whether its bar holds (without valgrind nothing is
    measured: a failure only where the table is all that was asked for)."""
    out("## The launch entry up to the driver call, host instructions per launch (no GPU)\n")
    with _published() as (loops, stub):  # first here, outside valgrind: fail fast and clearly
        for name in loops:
            _run_checked(loops, stub, name, 10)
        names = list(loops)
    if shutil.which("valgrind") is None:
        out("valgrind not found: skipped (apt-get install valgrind)")
        return not needs_valgrind
    net = _per_iteration(names, "no-gpu", SHORT, LONG)
    base = net.pop("empty loop")
    ours = net[LAUNCH] - net[LAUNCH0]
    theirs = net[TUPLE]
    out(
        "kernel fill(float *x, float v, long long n): a CuArray, an np.float32, a Python int; "
        "cuLaunchKernel replaced by a no-op Python function returning (0,)\n"
    )
    out("| variant | instructions/launch |")
    out("|---|---:|")
    out(f"| **{LAUNCH}**, the whole launch path up to the driver call | {net[LAUNCH]:.0f} |")
    out(f"| **{HOST}** | {net[HOST]:.0f} |")
    for k in (LAUNCH_FOREIGN, HOST_FOREIGN, LAUNCH_FOREIGN_PROP):
        out(f"| **{k}** | {net[k]:.0f} |")
    out(f"| **ours, packing** (the launch above minus the launch of k0) | {ours:.0f} |")
    out(f"| **{INT}** | {net[INT]:.0f} |")
    out(f"| **{TUPLE}** | {theirs:.0f} |")
    for k in (LAUNCH0, HOST0, STORES, NOOP):
        out(f"| {k} | {net[k]:.0f} |")
    ok = ours + net[INT] < theirs
    foreign = net[LAUNCH_FOREIGN] / net[LAUNCH], net[HOST_FOREIGN] / net[HOST]
    ok_foreign = max(foreign) <= 1.10
    out(
        f"\n(main thread only, callgrind --separate-threads=yes; loop overhead subtracted: "
        f"{base:.0f}; loops of {SHORT} and {LONG}; every launch reached the stand-in)"
    )
    out(
        f"bar: ours {ours:.0f} + {net[INT]:.0f} < cuda.bindings (values, types) {theirs:.0f}: "
        f"{_verdict(ok)} ({theirs / (ours + net[INT]):.1f}x fewer)"
    )
    out(
        f"bar: a foreign array (__cuda_array_interface__) on the fast path within 10 % of a "
        f"CuArray: launch {foreign[0]:.3f}x, HostKernel call {foreign[1]:.3f}x: "
        f"{_verdict(ok_foreign)} (the interface a property: "
        f"{net[LAUNCH_FOREIGN_PROP] / net[LAUNCH]:.3f}x, reported only)\n"
    )
    return ok and ok_foreign


# -- 2. on a GPU ----------------------------------------------------------------------------


class InstructionCounter:
    """User-space instructions retired by the calling thread (Linux perf_event_open)."""

    SYSCALL = {"x86_64": 298, "aarch64": 241}

    def __init__(self) -> None:
        nr = self.SYSCALL.get(platform.machine())
        if nr is None:
            raise OSError(f"perf_event_open: unknown syscall number on {platform.machine()}")
        self._libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(128)
        disabled, exclude_kernel, exclude_hv = 1 << 0, 1 << 5, 1 << 6
        # type PERF_TYPE_HARDWARE, size, config PERF_COUNT_HW_INSTRUCTIONS, ..., flags
        struct.pack_into(
            "IIQQQQQ", attr, 0, 0, 128, 1, 0, 0, 0, disabled | exclude_kernel | exclude_hv
        )
        self.fd = self._libc.syscall(nr, attr, 0, -1, -1, 0)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "perf_event_open: " + os.strerror(ctypes.get_errno()))

    def count(self, fn: Callable[[], None]) -> int:
        ioctl = self._libc.ioctl
        ioctl(self.fd, 0x2403, 0)  # PERF_EVENT_IOC_RESET
        ioctl(self.fd, 0x2400, 0)  # PERF_EVENT_IOC_ENABLE
        fn()
        ioctl(self.fd, 0x2401, 0)  # PERF_EVENT_IOC_DISABLE
        return struct.unpack("q", os.read(self.fd, 8))[0]


def _per_call(
    counter: InstructionCounter,
    loop: Callable[[int], None],
    short: int,
    long: int,
    sync: Callable[[], None] = lambda: None,
) -> float:
    best = []
    for _ in range(5):  # counters see interrupts and page faults: keep the smallest difference
        sync()
        a = counter.count(lambda: loop(short))
        sync()
        b = counter.count(lambda: loop(long))
        best.append((b - a) / (long - short))
    sync()
    return min(best)


def _median_ns(
    bodies: dict[str, Callable[[int], None]], sync: Callable[[], None], rounds: int, per_round: int
) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in bodies}
    for body in bodies.values():  # warm up: compile, load, first-launch costs
        body(10)
        sync()
    for _ in range(rounds):
        for name, body in bodies.items():  # interleaved, so drift hits every variant alike
            sync()
            t = time.perf_counter_ns()
            body(per_round)
            samples[name].append((time.perf_counter_ns() - t) / per_round)
    sync()
    return {k: statistics.median(v) for k, v in samples.items()}


def gpu(rounds: int, per_round: int) -> bool:
    """Print the GPU tables; returns whether every bar measured holds."""
    from cuda.bindings import driver

    ctx = cuda.current_context()
    out(f"## On {ctx.name} ({ctx.arch}), host time per launch\n")

    grid = (N + BLOCK - 1) // BLOCK
    v = np.float32(1.5)
    x = cuda.CuArray.zeros(N, np.float32)
    hk = cuda.cufunction(fill, TT)
    func, stream = hk.function, driver.CUstream(0)
    launch, L = cuda.launch, driver.cuLaunchKernel

    class Packed(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint64), ("v", ctypes.c_float), ("n", ctypes.c_int64)]

    packed = Packed()
    offsets = (Packed.x.offset, Packed.v.offset, Packed.n.offset)
    pointers = (ctypes.c_void_p * 3)(*(ctypes.addressof(packed) + o for o in offsets))
    address = ctypes.addressof(pointers)
    types = (ctypes.c_void_p, ctypes.c_float, ctypes.c_longlong)
    p = x.ptr

    def ours_launch(k):
        for _ in range(k):
            launch(fill, x, v, N, grid=grid, block=BLOCK)

    def ours_hostkernel(k):
        for _ in range(k):
            hk(x, v, N, grid=grid, block=BLOCK)

    f = ForeignArray(x.ptr, N)
    cuda.typeof(f)  # its class typed once, as a first launch does

    def ours_foreign(k):
        for _ in range(k):
            launch(fill, f, v, N, grid=grid, block=BLOCK)

    def raw_packed(k):
        for _ in range(k):
            packed.x = p
            packed.v = v
            packed.n = N
            L(func, grid, 1, 1, BLOCK, 1, 1, 0, stream, address, 0)

    def raw_tuple(k):
        for _ in range(k):
            L(func, grid, 1, 1, BLOCK, 1, 1, 0, stream, ((p, v, N), types), 0)

    bodies: dict[str, Callable[[int], None]] = {
        "specializer launch(...)": ours_launch,
        "specializer HostKernel call": ours_hostkernel,
        "specializer launch(...), a foreign array (__cuda_array_interface__)": ours_foreign,
        "raw cuLaunchKernel, pre-packed buffer": raw_packed,
        "cuLaunchKernel, (values, types)": raw_tuple,
    }
    checks: dict[str, Callable[[], bool]] = {
        "specializer launch(...)": lambda: bool((x.get() == v).all()),
    }
    notes: list[str] = []
    for make in (_cuda_core, _cupy, _numba, _triton):
        try:
            made = make(v, grid)
        except ImportError as e:
            notes.append(f"{make.__name__.strip('_')}: not installed ({e})")
            continue
        except Exception as e:  # report and go on: one broken library must not stop the rest
            notes.append(f"{make.__name__.strip('_')}: failed: {type(e).__name__}: {e}")
            continue
        name, body, check = made
        bodies[name] = body
        checks[name] = check

    def sync():
        cuda.synchronize()

    ns = _median_ns(bodies, sync, rounds, per_round)
    raw = ns["raw cuLaunchKernel, pre-packed buffer"]
    out(
        f"median of {rounds} interleaved rounds of {per_round} launches; grid {grid}, "
        f"block {BLOCK}\n"
    )
    out("| variant | ns/launch | x raw |")
    out("|---|---:|---:|")
    for k, t in ns.items():
        out(f"| {k} | {t:.0f} | {t / raw:.2f} |")
    for k, check in checks.items():
        try:
            good = check()
        except Exception as e:
            good = f"{type(e).__name__}: {e}"
        if good is not True:
            out(f"warning: {k} did not produce the expected result ({good})")
    for note in notes:
        out(f"- {note}")
    ours = ns["specializer launch(...)"]
    ok = ours <= 1.2 * raw
    out(f"\nbar: launch(...) / raw pre-packed = {ours / raw:.2f} (<= 1.2): {_verdict(ok)}")
    for k in ("cuda.core launch", "CuPy RawKernel", "Numba-CUDA", "Triton"):
        if k in ns:
            faster = ours < ns[k]
            ok &= faster
            out(f"bar: launch(...) {ours:.0f} ns < {k} {ns[k]:.0f} ns: {_verdict(faster)}")
        else:
            out(f"bar: launch(...) < {k}: not measured (not installed or failed)")

    out("\n## Instructions per call (calling thread, user space)\n")
    loops = _lookup_loops()
    try:
        counter = InstructionCounter()
    except OSError as e:
        out(f"no hardware instruction counter ({e}): the lookups under callgrind instead")
        rows = _lookups_under_callgrind(loops)
    else:
        base = _per_call(counter, loops["empty loop"], 2_000, 22_000)
        rows = {k: _per_call(counter, f, 2_000, 22_000) - base for k, f in loops.items()}
        del rows["empty loop"]
        sync()
        rows["launch(...)"] = _per_call(counter, ours_launch, 200, 1_200, sync) - base
        rows["raw cuLaunchKernel, pre-packed buffer"] = (
            _per_call(counter, raw_packed, 200, 1_200, sync) - base
        )
    out("| call | instructions |")
    out("|---|---:|")
    for k, i in rows.items():
        out(f"| {k} | {i if isinstance(i, str) else f'{i:.0f}'} |")
    return ok


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _lookup_loops() -> dict[str, Callable[[int], None]]:
    """A cufunction hit and the same lookup with the cache bypassed, in the current context."""
    from specializer.backends.cuda._compiler import compiler_config
    from specializer.kernels import uncached_lookup

    ctx = cuda.current_context()
    config = compiler_config((), ctx)
    cufunction = cuda.cufunction
    tt = cuda._launch._launcher.tt_of(TT)  # the weak int, as cufunction takes it
    cufunction(fill, TT)  # compiled and loaded before counting

    def empty(k):
        for _ in range(k):
            pass

    def hit(k):
        for _ in range(k):
            cufunction(fill, TT)

    def bypassed(k):
        for _ in range(k):
            uncached_lookup(fill, tt, config, ctx)

    return {
        "empty loop": empty,
        "cufunction hit": hit,
        "same lookup, cache bypassed (uncached_lookup)": bypassed,
    }


LOOKUP_LOOPS = (2_000, 12_000)


def _lookups_under_callgrind(loops: dict[str, Callable[[int], None]]) -> dict[str, float | str]:
    if shutil.which("valgrind") is None:
        return {k: "n/a (no valgrind)" for k in loops if k != "empty loop"}
    try:
        per = _per_iteration(list(loops), "gpu-lookups", *LOOKUP_LOOPS)
    except (subprocess.SubprocessError, OSError, RuntimeError) as e:
        return {k: f"n/a ({type(e).__name__})" for k in loops if k != "empty loop"}
    del per["empty loop"]
    return per


def _cuda_core(v, grid):
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

    dev = Device(0)
    dev.set_current()
    stream = dev.default_stream
    kernel = (
        Program(SRC, "c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
        .compile("cubin")
        .get_kernel("fill")
    )
    x = cuda.CuArray.zeros(N, np.float32)
    config = LaunchConfig(grid=grid, block=BLOCK)
    p, n = x.ptr, np.int64(N)

    def body(k):
        for _ in range(k):
            launch(stream, config, kernel, p, v, n)

    return "cuda.core launch", body, lambda: bool((x.get() == v).all())


def _cupy(v, grid):
    import cupy as cp

    kernel = cp.RawKernel(SRC, "fill")
    x = cp.zeros(N, dtype=cp.float32)
    n = np.int64(N)

    def body(k):
        for _ in range(k):
            kernel((grid,), (BLOCK,), (x, v, n))

    return "CuPy RawKernel", body, lambda: bool((cp.asnumpy(x) == v).all())


def _numba(v, grid):
    from numba import cuda as nb

    @nb.jit
    def fill(x, v, n):
        i = nb.grid(1)
        if i < n:
            x[i] = v

    x = nb.device_array(N, np.float32)
    n = np.int64(N)
    fill[grid, BLOCK](x, v, n)

    def body(k):
        for _ in range(k):
            fill[grid, BLOCK](x, v, n)

    return "Numba-CUDA", body, lambda: bool((x.copy_to_host() == v).all())


def _triton(v, grid):
    import torch  # Triton launches on torch tensors and streams
    import triton
    import triton.language as tl

    @triton.jit
    def fill(x_ptr, v, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, v, mask=offs < n)

    x = torch.zeros(N, device="cuda", dtype=torch.float32)
    fv = float(v)
    fill[(grid,)](x, fv, N, BLOCK=BLOCK)

    def body(k):
        for _ in range(k):
            fill[(grid,)](x, fv, N, BLOCK=BLOCK)

    return "Triton", body, lambda: bool((x.cpu().numpy() == v).all())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-gpu", action="store_true", help="only the no-GPU part")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--per-round", type=int, default=500)
    p.add_argument("--under-callgrind", choices=("no-gpu", "gpu-lookups"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.under_callgrind == "no-gpu":
        with _published() as (loops, stub):
            _markers(loops, stub, SHORT, LONG)
        return 0
    if args.under_callgrind == "gpu-lookups":
        _markers(_lookup_loops(), None, *LOOKUP_LOOPS)
        return 0
    out(
        f"Python {sys.version.split()[0]}, specializer {specializer.__version__}, "
        f"numpy {np.__version__}\n"
    )
    ok = entry(needs_valgrind=args.no_gpu)  # on a GPU the timings below decide without it
    if args.no_gpu:
        return 0 if ok else 1
    if not cuda.available():
        out(f"## On a GPU: skipped, no GPU ({cuda.unavailable_reason()})")
        return 0 if ok else 1
    ok &= gpu(args.rounds, args.per_round)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
