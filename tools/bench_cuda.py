"""Benchmark of the CUDA back-end's launch path, each figure beside a baseline measured in the
same run.

1. Parameter packing, no GPU needed. Instructions per launch under
   ``valgrind --tool=callgrind`` (the difference of two loop lengths, so start-up cancels;
   the empty loop is subtracted) for the kernel signature (float *x, float v, long long n),
   with a CuArray, an np.float32 and a Python int:

   - ours, packing: what the generated launcher spends on its parameters (taking a buffer
     from the pool, the device pointer, the int64 range check, three stores, giving the
     buffer back): the launcher of this signature minus the launcher of a kernel without
     parameters, both calling a no-op function where they call ``cuLaunchKernel``;
   - cuda.bindings, our int address: what ``cuLaunchKernel`` then does with the buffer's
     address, an int;
   - cuda.bindings (values, types): what ``cuLaunchKernel`` does instead on every call given
     ``((ptr, v, n), (c_void_p, c_float, c_longlong))``, tuples built per call (its private
     ``_HelperKernelParams``, which both forms run);
   - for reference: the whole launcher with the no-op call, and the three stores alone.

   The bar: ours, packing plus the binding taking our int costs fewer instructions than the
   binding packing the (values, types) form.

2. On a GPU (skipped without one): host time per launch of a trivial kernel, the median over
   interleaved rounds of launches (synchronized between rounds, outside the timing), for
   ``launch(...)``, a ``HostKernel`` call, raw ``cuLaunchKernel`` with a pre-packed buffer,
   ``cuLaunchKernel`` with (values, types), cuda.core's ``launch`` and, when installed, CuPy's
   ``RawKernel``, Numba-CUDA and Triton; then instructions per call (the CPU's counter for
   the calling thread's user space, via perf_event_open; callgrind where that is not
   available) of a ``cufunction`` hit, of the same lookup with the cache bypassed
   (``uncached_lookup``), of ``launch(...)`` and of raw ``cuLaunchKernel``.

   The bars: ``launch(...)`` within 1.2x raw ``cuLaunchKernel`` with a pre-packed buffer, and
   faster than cuda.core, CuPy, Numba-CUDA and Triton.

Run: ``python tools/bench_cuda.py [--no-gpu] [--rounds R] [--per-round N]``.
``--variant NAME --loops N`` runs one packing loop (under the caller's valgrind).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from callgrind import instructions  # tools/callgrind.py, beside this script

import specializer
from specializer.backends import cuda
from specializer.backends.cuda import _params

PTR = 0x7F00DEAD0000  # a device address as the driver hands them out
SHORT, LONG = 20_000, 120_000
N = 1024  # elements of the benchmark's array: a trivial kernel
BLOCK = 256
SRC = r"""extern "C" __global__ void fill(float *x, float v, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] = v; }"""
TT = (cuda.Array[np.float32], np.float32, np.int64)


@cuda.kernel
def fill(x: cuda.Array[np.float32], v: np.float32, n: np.int64) -> str:
    """The benchmark's trivial kernel (SRC)."""
    return SRC


def out(line: str = "") -> None:
    print(line, flush=True)


# -- 1. parameter packing (no GPU) ------------------------------------------------------


class _Fun:
    """What a launcher reads of a LinkedKernel."""

    name = "fill"
    context = None
    function = None


def _packing_loops() -> dict[str, Callable[[int], None]]:
    from cuda.bindings import driver

    helper = driver._HelperKernelParams  # what cuLaunchKernel runs on its kernelParams
    x = cuda.CuArray.wrap(PTR, (N,), np.float32)
    v, n = np.float32(2.5), N
    ok = (driver.CUresult.CUDA_SUCCESS,)

    def noop(*args):
        return ok

    def with_noop(tt):  # the same code, calling noop where it calls cuLaunchKernel
        fn = _params.launcher(tt)
        return type(fn)(fn.__code__, {**fn.__globals__, "_launch": noop}, fn.__name__)

    launcher, launcher0 = with_noop(TT), with_noop(())
    buffer = _params.ParamBuffer(TT)
    values, address = buffer.values, buffer.address
    types = (ctypes.c_void_p, ctypes.c_float, ctypes.c_longlong)
    fun = _Fun

    def loop_empty(k):
        for _ in range(k):
            pass

    def loop_launcher(k):
        for _ in range(k):
            launcher(fun, 4, BLOCK, 0, None, (x, v, n))

    def loop_launcher0(k):
        for _ in range(k):
            launcher0(fun, 4, BLOCK, 0, None, ())

    def loop_stores(k):
        p = x.ptr
        for _ in range(k):
            values.a0 = p
            values.a1 = v
            values.a2 = n

    def loop_tuple(k):
        p = x.ptr
        for _ in range(k):
            helper(((p, v, n), types))

    def loop_int(k):
        for _ in range(k):
            helper(address)

    return {
        "empty loop": loop_empty,
        LAUNCHER: loop_launcher,
        LAUNCHER0: loop_launcher0,
        STORES: loop_stores,
        INT: loop_int,
        TUPLE: loop_tuple,
    }


LAUNCHER = "launcher, 3 parameters, no-op driver"
LAUNCHER0 = "launcher, no parameters, no-op driver"
STORES = "the three stores alone"
INT = "cuda.bindings, our int address"
TUPLE = "cuda.bindings (values, types)"


def _callgrind(variant: str, loops: int, flag: str = "--variant", timeout: float = 300) -> int:
    return instructions(__file__, flag, variant, "--loops", str(loops), timeout=timeout)


def packing() -> bool:
    """Print the packing table; returns whether the no-GPU bar holds."""
    out("## Parameter packing, instructions per launch (callgrind, no GPU needed)\n")
    if shutil.which("valgrind") is None:
        out("valgrind not found: skipped (apt-get install valgrind)")
        return False
    loops = _packing_loops()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:  # one process each
        runs = {(k, n): pool.submit(_callgrind, k, n) for k in loops for n in (SHORT, LONG)}
        per = {
            k: (runs[k, LONG].result() - runs[k, SHORT].result()) / (LONG - SHORT) for k in loops
        }
    base = per.pop("empty loop")
    net = {k: v - base for k, v in per.items()}
    ours = net[LAUNCHER] - net[LAUNCHER0]
    theirs = net[TUPLE]
    out("| variant | instructions/launch |")
    out("|---|---:|")
    out(f"| **ours, packing** ({LAUNCHER} minus {LAUNCHER0}) | {ours:.0f} |")
    out(f"| **{INT}** | {net[INT]:.0f} |")
    out(f"| **{TUPLE}** | {theirs:.0f} |")
    for k in (LAUNCHER, LAUNCHER0, STORES):
        out(f"| {k} | {net[k]:.0f} |")
    ok = ours + net[INT] < theirs
    out(f"\n(loop overhead subtracted: {base:.0f}; loops {SHORT} and {LONG})")
    out(
        f"bar: ours {ours:.0f} + {net[INT]:.0f} < cuda.bindings (values, types) {theirs:.0f}: "
        f"{_verdict(ok)} ({theirs / (ours + net[INT]):.1f}x fewer)\n"
    )
    return ok


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
    cufunction(fill, TT)  # compiled and loaded before counting

    def empty(k):
        for _ in range(k):
            pass

    def hit(k):
        for _ in range(k):
            cufunction(fill, TT)

    def bypassed(k):
        for _ in range(k):
            uncached_lookup(fill, TT, config, ctx)

    return {
        "empty loop": empty,
        "cufunction hit": hit,
        "same lookup, cache bypassed (uncached_lookup)": bypassed,
    }


def _lookups_under_callgrind(loops: dict[str, Callable[[int], None]]) -> dict[str, float | str]:
    if shutil.which("valgrind") is None:
        return {k: "n/a (no valgrind)" for k in loops if k != "empty loop"}
    short, long = 2_000, 12_000
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            runs = {
                (k, n): pool.submit(_callgrind, k, n, "--gpu-variant", 240)
                for k in loops
                for n in (short, long)
            }
            per = {
                k: (runs[k, long].result() - runs[k, short].result()) / (long - short)
                for k in loops
            }
    except (subprocess.SubprocessError, OSError) as e:
        return {k: f"n/a ({type(e).__name__})" for k in loops if k != "empty loop"}
    base = per.pop("empty loop")
    return {k: v - base for k, v in per.items()}


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
    p.add_argument("--no-gpu", action="store_true", help="only the packing part")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--per-round", type=int, default=500)
    p.add_argument("--variant")
    p.add_argument("--gpu-variant")
    p.add_argument("--loops", type=int)
    args = p.parse_args()
    if args.variant:
        _packing_loops()[args.variant](args.loops)
        return 0
    if args.gpu_variant:
        _lookup_loops()[args.gpu_variant](args.loops)
        return 0
    out(
        f"Python {sys.version.split()[0]}, specializer {specializer.__version__}, "
        f"numpy {np.__version__}\n"
    )
    ok = packing()
    if args.no_gpu:
        return 0 if ok else 1
    if not cuda.available():
        out(f"## On a GPU: skipped ({cuda.unavailable_reason()})")
        return 0 if ok else 1
    ok &= gpu(args.rounds, args.per_round)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
