"""Benchmark: the cost of a lookup miss does not grow with the method table or with history.

A long-running process (a notebook, a server that reloads kernels) defines and redefines
kernels for hours. This measures, in instructions per call under ``valgrind --tool=callgrind``
(the difference of two loop lengths, so start-up and set-up cancel, and the same loop without
the lookup subtracted), the lookup that follows an unrelated definition: a miss of the cached
lookup that finds valid code. Two parts of it:

- ``uncached``: ``specializer.kernels.uncached_lookup(F, tt, config, context)``, what the
  back-ends' cached lookup runs on a miss;
- ``core``: the core part of that, ``kernel.methodinstance(tt, w)`` and ``compile_and_link``
  of the job finding valid code and the context's handle;

each with 1 or 200 methods in the kernel's table, and after 0 or 3,000 earlier redefinitions
(alternately of the kernel's method and of its callee, each followed by a lookup that compiles).
The garbage collector is off in the measured loops (its cost depends on the heap the set-up
leaves, not on the lookup).
Then, for scale, ``redefine``: a redefinition of the kernel's method plus the lookup after it
(which compiles and links), with and without the 3,000 earlier redefinitions.

The back-end is a trivial one defined here (compile returns the source, link a Python
function), so the figures are the library's own. Run: ``python tools/bench_history.py``
(needs valgrind; a few minutes). ``--variant NAME --loops N`` runs one loop under the caller's
valgrind.

``--definitions`` measures instead what a definition costs as history grows: a kernel's
``def`` run again under a back-end's ``@kernel`` decorator (``Definitions.kernel``, the path a
user's redefinition takes), first and after ``--history`` (20,000) earlier redefinitions of
that kernel (one in a hundred followed by a compiling lookup), as the median wall time of
``--samples`` definitions and, with valgrind, instructions per definition (loops of 200 and
1,200 definitions). It prints the ratio of the two; the bar is 1.3 (flat).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if str(_CHECKOUT) not in sys.path:  # the checkout's specializer before an installed one
    sys.path.insert(0, str(_CHECKOUT))

import numpy as np  # noqa: E402
from callgrind import per_iteration  # noqa: E402  # tools/callgrind.py, beside this script

from specializer import Backend, CompilerConfig, GenericFunction, latest  # noqa: E402
from specializer.compiler import CompilerJob, compile_and_link  # noqa: E402
from specializer.kernels import (  # noqa: E402
    Definitions,
    DeviceFunction,
    Kernel,
    uncached_lookup,
)
from specializer.types import DeviceArray, Struct, WeakScalar  # noqa: E402

SHORT, LONG = 200, 1_200
TABLES = (1, 200)
HISTORIES = (0, 3_000)


class Array(DeviceArray):
    pass


@dataclass(frozen=True)
class Source:
    source: str


class TrivialBackend(Backend):
    name = "trivial"

    def compile(self, job):
        return Source("\n".join(job.device_sources()))

    def link(self, job, artifact, context):
        return lambda *args: (artifact, context, args)


CONFIG = CompilerConfig(TrivialBackend())
TT = (Array[np.float32], np.float32)
SCALARS = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
SCALARS += (np.float16, np.float64, np.complex64, np.complex128, np.bool_, np.longdouble)


def _setup(methods: int, history: int):
    """A kernel with ``methods`` methods (one of them takes ``TT``) and a callee, after
    ``history`` redefinitions each followed by a compiling lookup."""
    callee = DeviceFunction("bench_callee")
    callee.add_method(lambda: "callee 0", signature=())
    kernel = Kernel("bench_kernel", typeof=type)
    kernel.add_method(
        lambda *ts: "kernel 0", signature=(Array[np.floating], np.float32), callees=[callee]
    )
    others = itertools.chain(
        itertools.product([Array[t] for t in SCALARS], SCALARS), ((Array[t],) for t in SCALARS)
    )
    for sig in itertools.islice(others, methods - 1):
        kernel.add_method(lambda *ts: "other", signature=sig)
    for i in range(history):
        if i % 2:
            callee.add_method(lambda i=i: f"callee {i}", signature=())
        else:
            kernel.add_method(
                lambda *ts, i=i: f"kernel {i}",
                signature=(Array[np.floating], np.float32),
                callees=[callee],
            )
        uncached_lookup(kernel, TT, CONFIG, "ctx")
    uncached_lookup(kernel, TT, CONFIG, "ctx")
    assert len(kernel.methods()) == methods
    return kernel, GenericFunction("bench_unrelated")


def _loops(methods: int, history: int):
    kernel, unrelated = _setup(methods, history)

    def unrelated_definition(n):
        for _ in range(n):
            unrelated.add_method(_unrelated_body, signature=(np.int8,))

    def uncached(n):
        for _ in range(n):
            unrelated.add_method(_unrelated_body, signature=(np.int8,))
            uncached_lookup(kernel, TT, CONFIG, "ctx")

    def core(n):
        for _ in range(n):
            unrelated.add_method(_unrelated_body, signature=(np.int8,))
            w = latest()
            compile_and_link(CompilerJob(kernel.methodinstance(TT, w), CONFIG, w), "ctx")

    def redefine(n):
        for i in range(n):
            kernel.add_method(
                lambda *ts, i=i: f"kernel again {i}",
                signature=(Array[np.floating], np.float32),
                callees=kernel.methodinstance(TT).method.callees,
            )
            uncached_lookup(kernel, TT, CONFIG, "ctx")

    return {
        "baseline": unrelated_definition,
        "uncached": uncached,
        "core": core,
        "redefine": redefine,
    }


def _define_variant(history: int):
    _history(history)
    return _define_loop


def _unrelated_body(x):
    return ""


# -- --definitions: what a definition costs as history grows ---------------------------------

DEFINITIONS = Definitions(type, "bench_history", argtypes=(WeakScalar, Struct, Array))
HISTORY = 20_000
_defined = [0]


def _redefine_kernel():
    """Run the kernel's ``def`` under ``@kernel`` again: one redefinition (no closure, so
    the same kernel each time)."""

    @DEFINITIONS.kernel
    def bench_redefined(x: Array[np.float32], v: np.float32) -> str:
        return f"kernel {_defined[0]}"

    _defined[0] += 1
    return bench_redefined


def _history(n: int):
    """The kernel after ``n`` redefinitions, one in a hundred followed by a lookup."""
    kernel = _redefine_kernel()
    uncached_lookup(kernel, TT, CONFIG, "ctx")
    for i in range(n):
        _redefine_kernel()
        if i % 100 == 0:
            uncached_lookup(kernel, TT, CONFIG, "ctx")
    uncached_lookup(kernel, TT, CONFIG, "ctx")
    return kernel


def _define_loop(n: int) -> None:
    for _ in range(n):
        _redefine_kernel()


def _median_us(samples: int) -> float:
    times = []
    for _ in range(samples):
        t = time.perf_counter_ns()
        _redefine_kernel()
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e3


def definitions(history: int, samples: int) -> int:
    """``--definitions``: the cost of a definition first and after ``history`` redefinitions."""
    print(
        f"Python {sys.version.split()[0]}; one kernel redefined with @kernel (Definitions.kernel)"
        f"; median of {samples} definitions"
        + (", and instructions per definition under callgrind" if shutil.which("valgrind") else "")
        + "\n"
    )
    _history(0)
    gc.collect()
    first = _median_us(samples)
    _history(history)  # the same kernel: its history now holds `history` more methods
    gc.collect()
    after = _median_us(samples)
    rows = [(0, first), (history, after)]
    insns = {}
    if shutil.which("valgrind"):
        for h in (0, history):
            insns[h] = per_iteration(
                __file__, "--variant", f"define:0:{h}", SHORT, LONG, timeout=3600
            )
    print("| earlier redefinitions | us per definition (median) | instructions per definition |")
    print("|---:|---:|---:|")
    for h, us in rows:
        print(f"| {h} | {us:.1f} | {insns[h]:.0f} |" if insns else f"| {h} | {us:.1f} | |")
    ratio = after / first
    print(f"\nafter {history} / first: {ratio:.2f} (wall)", end="")
    if insns:
        ratio = insns[history] / insns[0]  # the bar on instructions where measured
        print(f", {ratio:.3f} (instructions)", end="")
    print(" (bar: 1.3)")
    return 0 if ratio <= 1.3 else 1


def _insns(what: str, methods: int, history: int) -> float:
    name = f"{what}:{methods}:{history}"
    return per_iteration(__file__, "--variant", name, SHORT, LONG, timeout=1800)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant")
    p.add_argument("--loops", type=int)
    p.add_argument("--definitions", action="store_true", help="a definition's cost vs history")
    p.add_argument("--history", type=int, default=HISTORY)
    p.add_argument("--samples", type=int, default=1_000)
    args = p.parse_args()
    if args.definitions:
        return definitions(args.history, args.samples)
    if args.variant:
        what, methods, history = args.variant.split(":")
        if what == "define":
            loop = _define_variant(int(history))
        else:
            loop = _loops(int(methods), int(history))[what]
        gc.collect()
        gc.disable()  # a collection's cost depends on the heap the set-up left: keep it out
        loop(args.loops)
        return 0
    if shutil.which("valgrind") is None:
        print("bench_history needs valgrind (callgrind)", file=sys.stderr)
        return 2
    print(
        f"Python {sys.version.split()[0]}; instructions per lookup under callgrind "
        f"(loops of {SHORT} and {LONG}; the unrelated definition's own cost subtracted)\n"
    )
    print("| methods | earlier redefinitions | uncached_lookup | core | redefine + lookup |")
    print("|---:|---:|---:|---:|---:|")
    rows = {}
    for methods in TABLES:
        for history in HISTORIES:
            base = _insns("baseline", methods, history)
            uncached = _insns("uncached", methods, history) - base
            core = _insns("core", methods, history) - base
            redefine = _insns("redefine", methods, history) if methods == 1 else float("nan")
            rows[methods, history] = uncached, core
            print(f"| {methods} | {history} | {uncached:.0f} | {core:.0f} | {redefine:.0f} |")
    worst = max(
        max(rows[m, h][k] for m in TABLES for h in HISTORIES)
        / min(rows[m, h][k] for m in TABLES for h in HISTORIES)
        for k in (0, 1)
    )
    print(f"\nlargest ratio between any two rows: {worst:.3f} (bar: 1.2)")
    return 0 if worst <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
