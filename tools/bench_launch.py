"""Benchmark of an OpenCL launch through specializer against pyopencl's own, on PoCL.

Prints one table measured in one run. Times are microseconds per launch (median and minimum
of rounds in which the variants are interleaved, in rotating order; every launch enqueues a
one-work-item kernel with two arguments, with a ``queue.finish()`` every 100), and the ratio
to pyopencl's call of a kernel retrieved once:

- ``launch(acc, x, a, global_size=(1,))``;
- the same through ``clfunction(acc, tt)`` with a known signature, then the call;
- ``launch`` with the cache bypassed (inside ``specializer.device_code``);
- pyopencl's ``knl(queue, (1,), None, x.data, a)`` with ``knl`` retrieved once (the baseline);
- pyopencl's ``prg.acc(queue, ...)``, which retrieves (creates) the kernel on every launch.

Then the lookup alone, the seed's "before and after", in nanoseconds and in instructions per
call under ``valgrind --tool=callgrind`` (the difference of two loop lengths, so start-up
cancels): a ``clfunction`` hit; the floor under it, a call of a no-op function with
``clfunction``'s signature; and the same lookup with the cache bypassed, two ways: what a
back-end without ``cached_lookup`` does (``uncached_lookup`` with a fresh config, then the
``HostKernel``), and ``clfunction`` itself inside ``specializer.device_code``, where the core
bypasses its cache.

Run: ``python tools/bench_launch.py`` (valgrind for the instruction column; about two minutes
on two cores, most of it starting pyopencl and PoCL under callgrind).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pyopencl
import pyopencl.array as cla
from callgrind import QUIET_ENV  # tools/callgrind.py, beside this script

import specializer
from specializer import CompilerConfig
from specializer.backends import opencl as cl
from specializer.kernels import uncached_lookup

SHORT, LONG = 2_000, 22_000  # callgrind loop lengths of the lookup variants
FINISH_EVERY = 100
SOURCE = "__kernel void acc(__global float *x, float a) { x[get_global_id(0)] += a; }"


@cl.kernel
def acc(x: cl.Array[np.float32], a: np.float32) -> str:
    return SOURCE


def _setup(warm_up: bool = True):
    """Every variant on the same queue, array and scalar: the launch loops (each with the share
    of the round's launches it makes) and the lookup loops."""
    queue = cl.default_queue()
    x = cla.zeros(queue, 1, np.float32)
    a = np.float32(1)
    tt = (cl.Array[np.float32], np.float32)
    program = pyopencl.Program(queue.context, SOURCE).build()
    knl = pyopencl.Kernel(program, "acc")
    warnings.simplefilter("ignore", pyopencl.RepeatedKernelRetrieval)
    finish = queue.finish
    launch, clfunction = cl.launch, cl.clfunction

    def launch_loop(n):
        for i in range(n):
            launch(acc, x, a, global_size=(1,))
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    def clfunction_loop(n):
        for i in range(n):
            clfunction(acc, tt)(x, a, global_size=(1,))
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    def bypassed_loop(n):
        with specializer.device_code(lambda job, artifact: None):
            launch_loop(n)

    def pyopencl_loop(n):
        for i in range(n):
            knl(queue, (1,), None, x.data, a)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    def retrieved_loop(n):
        for i in range(n):
            program.acc(queue, (1,), None, x.data, a)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    def hit(n):
        for _ in range(n):
            clfunction(acc, tt)

    def uncached(n):  # clfunction with cached_lookup taken out: what a back-end did before
        for _ in range(n):
            context = queue.context
            config = CompilerConfig(cl.BACKEND, ())
            cl.HostKernel(acc, tt, uncached_lookup(acc, tt, config, context), queue)

    def hooked(n):  # clfunction itself, the core bypassing its cache while a hook is active
        with specializer.device_code(lambda job, artifact: None):
            hit(n)

    def noop(f, tt=(), queue=None, **compiler_kwargs):
        return None

    def floor(n):
        for _ in range(n):
            noop(acc, tt)

    def empty(n):
        for _ in range(n):
            pass

    launches = {
        "launch(acc, x, a, global_size=(1,))": (launch_loop, 1),
        "clfunction(acc, tt)(x, a, global_size=(1,))": (clfunction_loop, 1),
        "launch, cache bypassed (inside device_code)": (bypassed_loop, 1),
        "pyopencl knl(queue, (1,), None, x.data, a), knl retrieved once": (pyopencl_loop, 1),
        "pyopencl prg.acc(queue, ...), kernel retrieved per launch": (retrieved_loop, 0.05),
    }
    lookups = {
        "clfunction(acc, tt) hit": hit,
        "floor: a no-op function with clfunction's signature": floor,
        "same lookup, cache bypassed: uncached_lookup, then HostKernel": uncached,
        "same lookup, cache bypassed: clfunction inside device_code": hooked,
        "empty loop": empty,
    }
    if warm_up:
        for body, _ in launches.values():  # build, warm up, check: x[0] counts every launch
            body(200)
        finish()
        assert x.get()[0] == 200 * len(launches), "a launch variant did not run"
    for body in lookups.values():
        body(10)
    return queue, x, launches, lookups


def _count_under_callgrind(lookups: dict) -> None:
    """Run each lookup loop for SHORT, then LONG calls, calling ``os.getppid()`` (libc's
    ``getppid``, where callgrind dumps its counters) before and after each."""
    os.getppid()  # everything before: start-up
    for body in lookups.values():
        body(SHORT)
        os.getppid()
        body(LONG)
        os.getppid()


def _instructions(names: list[str]) -> dict[str, float]:
    """Instructions per call of each lookup loop: one callgrind run of this script, dumping its
    counters at each marker; (LONG dump - SHORT dump) / (LONG - SHORT) cancels what is fixed."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getppid",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--under-callgrind",
            ],
            check=True,
            capture_output=True,
            env=QUIET_ENV,
        )
        counts = {}
        for name in os.listdir(d):
            m = re.fullmatch(r"cg\.out\.(\d+)", name)
            if m:
                with open(os.path.join(d, name)) as f:
                    total = re.search(r"^(?:summary|totals):\s*(\d+)", f.read(), re.M)
                counts[int(m.group(1))] = int(total.group(1))
    # dump 1 is start-up; then each variant's SHORT and LONG loops, in order
    return {
        name: (counts[3 + 2 * i] - counts[2 + 2 * i]) / (LONG - SHORT)
        for i, name in enumerate(names)
    }


def _rounds(bodies: dict, n: int, rounds: int, after=None) -> dict[str, list[float]]:
    """Per-call times in µs: every round runs each body once, in an order rotating per round."""
    samples: dict[str, list[float]] = {k: [] for k in bodies}
    names = list(bodies)
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                body, share = bodies[name]
                m = max(1, int(n * share))
                t = time.perf_counter_ns()
                body(m)
                if after:
                    after()
                samples[name].append((time.perf_counter_ns() - t) / m / 1000)
            print(".", end="", file=sys.stderr, flush=True)
    finally:
        gc.enable()
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--launches", type=int, default=2000, help="launches per variant and round")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    queue, x, launches, lookups = _setup(warm_up=not args.under_callgrind)
    if args.under_callgrind:
        _count_under_callgrind(lookups)
        return 0

    have_vg = shutil.which("valgrind") is not None
    print(
        f"Python {sys.version.split()[0]}, pyopencl {pyopencl.VERSION_TEXT}, "
        f"specializer {specializer.__version__}, {queue.device.name} "
        f"({queue.device.platform.name}), {os.cpu_count()} CPUs"
    )
    print(
        f"launches: medians of {args.rounds} interleaved rounds of {args.launches} launches "
        f"(kernel retrieved per launch: {int(args.launches * 0.05)}), finish every "
        f"{FINISH_EVERY}; lookups: callgrind loops {SHORT} and {LONG}"
        + ("" if have_vg else " (valgrind not found)"),
        flush=True,
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    x.fill(0)
    t_launch = _rounds(launches, args.launches, args.rounds, queue.finish)
    t_lookup = _rounds({k: (b, 10) for k, b in lookups.items()}, args.launches, args.rounds)
    insns = _instructions(list(lookups)) if have_vg else {}
    print(" done", file=sys.stderr)
    total = sum(int(args.launches * share) * args.rounds for _, share in launches.values())
    assert x.get()[0] == total, f"x[0] = {x.get()[0]}, not {total}: a launch was lost"

    med = {k: statistics.median(v) for k, v in {**t_launch, **t_lookup}.items()}
    low = {k: min(v) for k, v in {**t_launch, **t_lookup}.items()}
    names = list(launches)
    ref = med[names[3]]
    print("\n| variant | µs/call (median) | min | x pyopencl | instructions/call |")
    print("|---|---:|---:|---:|---:|")
    for k in names:
        print(f"| {k} | {med[k]:.2f} | {low[k]:.2f} | {med[k] / ref:.2f} | |")
    empty_t, empty_i = med["empty loop"], insns.get("empty loop", 0.0)
    for k in lookups:
        if k == "empty loop":
            continue
        i = insns.get(k, float("nan")) - empty_i
        print(f"| {k} | {med[k] - empty_t:.3f} | {low[k] - empty_t:.3f} | | {i:.0f} |")

    ratio = med[names[0]] / ref
    print(
        f"\nlaunch(...) / pyopencl's call of a kernel retrieved once: {ratio:.2f} "
        "(bar: at most 1.05)"
    )
    if insns:
        hit_i = insns["clfunction(acc, tt) hit"] - empty_i
        for k in list(lookups)[2:4]:
            print(
                f"instructions, {k.split(': ')[1]} / clfunction hit: "
                f"{(insns[k] - empty_i) / hit_i:.1f}x (bar: at least 20)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
