"""Benchmark of a whole iterative program, written five ways, on PoCL's CPU device.

The program: weighted Jacobi relaxation of ``-u'' = f`` on a 1-D grid of N = 1,024 float32
points (the two end points fixed), 2,000 iterations. Each iteration runs three small kernels,
with a relaxation weight ``w`` that changes every iteration (a cycle of four, each an
``np.float32``):

- ``jacobi(v, u, f, w, h2, size)``: ``v[i] = u[i] + w * (0.5f * (u[i-1] + u[i+1] + h2 * f[i]) -
  u[i])`` inside, ``v[i] = u[i]`` at the ends;
- ``change(acc, v, u)``: ``acc[i] += (v[i] - u[i]) * (v[i] - u[i])``, the squared change summed
  over the iterations (what a convergence check reduces);
- ``copy(u, v)``: ``u[i] = v[i]``.

The five ways, each on arrays of its own, all on ``cl.default_queue()``:

- ``launch(jacobi, v, u, f, w, h2, size, global_size=N)`` (specializer), and the same for the
  other two kernels;
- HostKernels looked up once, ``hk = clfunction(jacobi, tt)``, called ``hk(v, u, f, w, h2, size,
  global_size=N)``;
- typed pyopencl, the baseline: one ``pyopencl.Program`` of the three kernels, each a
  ``pyopencl.Kernel`` retrieved once with ``set_scalar_arg_dtypes``, called ``knl(queue, (N,),
  None, v.data, u.data, f.data, w, h2, size)``;
- ``pyopencl.elementwise.ElementwiseKernel``: the same three statements as element-wise
  operations, called ``knl(v, u, f, w, h2, size)``;
- ``pyopencl.array`` expressions, as a user writes them with numpy: ``v[1:-1] = u[1:-1] + w *
  (0.5 * (u[:-2] + u[2:] + h2 * f[1:-1]) - u[1:-1])``, ``t = v - u; acc += t * t``, ``u[:] =
  v`` (12 kernels an iteration, each temporary from a ``pyopencl.tools.MemoryPool``,
  as pyopencl's documentation advises).

The first four run the same OpenCL C statements. After the loops, every variant must hold
typed pyopencl's final ``u`` and ``acc`` bit for bit, the array expressions numpy's (each
operation rounds as numpy's does), and typed pyopencl's must be numpy's within float32
tolerances (the kernels may fuse multiply-adds): a lost iteration or a wrong argument fails
the run.

Two columns per iteration, each variant in a loop of its own after a warm-up, ``queue.finish()``
at the end of each loop, both less an empty loop's (the same loop choosing the weight, and the
``finish()``):

- host-thread instructions, from a run under ``valgrind --tool=callgrind --separate-threads=yes
  --dump-before=getppid``: a marker call ``os.getppid()`` between the loops, and only the main
  thread's dumps read (``tools/callgrind.py``'s ``thread_dumps``), so PoCL's worker threads,
  which run the kernels, are not counted; 2,000 iterations per variant, the last of 2 passes;
- wall time (``time.perf_counter``) per iteration, the median of interleaved rounds of 2,000
  iterations, in rotating order: what the program takes, host and device together.

Each as a ratio to typed pyopencl. ``--json PATH`` writes the figures for
``tools/plot_benchmarks.py``.

Run: ``python tools/bench_workload.py [--json PATH]`` (about 3 minutes on two cores, most of it
under callgrind); ``--quick`` is a smoke run (a few iterations, no valgrind), ``--rounds`` and
``--iterations`` change the wall-time rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import time
import warnings
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
# tools/ (callgrind.py), then the checkout's specializer before an installed one.
for _path in (_CHECKOUT / "tools", _CHECKOUT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import numpy as np  # noqa: E402
import pyopencl  # noqa: E402
import pyopencl.array as cla  # noqa: E402
import pyopencl.tools  # noqa: E402
from callgrind import (  # noqa: E402  # tools/callgrind.py
    PASSES,
    last_pass,
    marked_passes,
    rotating_rounds,
    thread_dumps,
)
from pyopencl.elementwise import ElementwiseKernel  # noqa: E402

import specializer  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

N = 1024  # grid points
ITERATIONS = 2_000  # the program's length: iterations per variant and pass under callgrind
WARM_UP = 20  # iterations per variant before measuring (builds, cells' entries, pools)
WEIGHTS = [np.float32(w) for w in (0.6, 0.7, 0.8, 0.9)]  # w of iteration k: WEIGHTS[k % 4]
H2 = np.float32(1 / (N - 1) ** 2)  # the grid spacing squared
SIZE = np.int32(N)

# The statements for element i, shared by every variant that runs OpenCL C.
STENCIL = (
    "v[i] = (i > 0 && i < size - 1) "
    "? u[i] + w * (0.5f * (u[i - 1] + u[i + 1] + h2 * f[i]) - u[i]) : u[i]"
)
CHANGE = "acc[i] += (v[i] - u[i]) * (v[i] - u[i])"
COPY = "u[i] = v[i]"
PARAMETERS = {  # each kernel's parameters, as OpenCL C
    "jacobi": "__global float *v, __global const float *u, __global const float *f, "
    "float w, float h2, int size",
    "change": "__global float *acc, __global const float *v, __global const float *u",
    "copy": "__global float *u, __global const float *v",
}
STATEMENTS = {"jacobi": STENCIL, "change": CHANGE, "copy": COPY}
SOURCES = {
    name: f"__kernel void {name}({PARAMETERS[name]})\n"
    f"{{\n    int i = get_global_id(0);\n    {STATEMENTS[name]};\n}}\n"
    for name in PARAMETERS
}

F32 = cl.Array[np.float32]


@cl.kernel
def jacobi(
    v: cl.Array[np.float32],
    u: cl.Array[np.float32],
    f: cl.Array[np.float32],
    w: np.float32,
    h2: np.float32,
    size: np.int32,
) -> str:
    return SOURCES["jacobi"]


@cl.kernel
def change(acc: cl.Array[np.float32], v: cl.Array[np.float32], u: cl.Array[np.float32]) -> str:
    return SOURCES["change"]


@cl.kernel
def copy(u: cl.Array[np.float32], v: cl.Array[np.float32]) -> str:
    return SOURCES["copy"]


BASELINE = "pyopencl typed"
EMPTY = "empty loop"
ROWS = {  # key: the label in the table
    "launch": "specializer `launch(jacobi, v, u, f, w, h2, size, global_size=N)`, 3 kernels",
    "hostkernel": "specializer HostKernels, `hk = clfunction(jacobi, tt)` once, "
    "`hk(v, u, f, w, h2, size, global_size=N)`",
    BASELINE: "pyopencl typed: `knl(queue, (N,), None, v.data, u.data, f.data, w, h2, size)` "
    "after `set_scalar_arg_dtypes`",
    "elementwise": "pyopencl `ElementwiseKernel`: `knl(v, u, f, w, h2, size)`",
    "array": "`pyopencl.array` expressions: `v[1:-1] = u[1:-1] + w * (...)`, `t = v - u; "
    "acc += t * t`, `u[:] = v`",
    EMPTY: "empty loop (the weight chosen, `finish()` at the end), subtracted from every row",
}
SHORT = {  # key: the name on the figure
    "launch": "specializer launch(k, ...)",
    "hostkernel": "specializer HostKernel call",
    BASELINE: "typed pyopencl Kernel call",
    "elementwise": "pyopencl ElementwiseKernel",
    "array": "pyopencl.array expressions",
}


class Variant:
    """One way of writing the program: ``loop(start, n)`` runs iterations start .. start + n - 1
    and then ``queue.finish()``; ``read()`` is the state on the host, (u, acc); ``ran`` how many
    iterations it made, which the check's numpy run repeats."""

    def __init__(self, loop, read) -> None:
        self.loop, self.read, self.ran = loop, read, 0

    def __call__(self, n: int) -> None:
        self.loop(self.ran, n)
        self.ran += n


def _initial() -> tuple[np.ndarray, np.ndarray]:
    """The starting guess u (random inside, 0 and 1 at the ends) and the right-hand side f."""
    x = np.linspace(0, 1, N)
    u = np.random.default_rng(7).random(N).astype(np.float32)
    u[0], u[-1] = 0, 1
    return u, (50 * np.sin(3 * np.pi * x)).astype(np.float32)


def _reference(iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """The program in numpy, on the host: what every variant must hold after as many
    iterations."""
    u, f = _initial()
    v, acc = u.copy(), np.zeros(N, np.float32)
    for k in range(iterations):
        w = WEIGHTS[k % len(WEIGHTS)]
        v[1:-1] = u[1:-1] + w * (0.5 * (u[:-2] + u[2:] + H2 * f[1:-1]) - u[1:-1])
        t = v - u
        acc += t * t
        u[:] = v
    return u, acc


def _arrays(queue, allocator=None):
    """A variant's own device arrays: u, v (the next u), f, acc."""
    u, f = _initial()
    to = cla.to_device
    return (
        to(queue, u, allocator=allocator),
        to(queue, u, allocator=allocator),
        to(queue, f, allocator=allocator),
        cla.zeros(queue, N, np.float32, allocator=allocator),
    )


def _variants() -> dict[str, Variant]:
    queue = cl.default_queue()
    finish = queue.finish
    period = len(WEIGHTS)
    v: dict[str, Variant] = {}

    launch = cl.launch
    u1, v1, f1, acc1 = _arrays(queue)

    def launch_loop(start, n):
        for k in range(start, start + n):
            w = WEIGHTS[k % period]
            launch(jacobi, v1, u1, f1, w, H2, SIZE, global_size=N)
            launch(change, acc1, v1, u1, global_size=N)
            launch(copy, u1, v1, global_size=N)
        finish()

    v["launch"] = Variant(launch_loop, lambda: (u1.get(), acc1.get()))

    hk_jacobi = cl.clfunction(jacobi, (F32, F32, F32, np.float32, np.float32, np.int32))
    hk_change = cl.clfunction(change, (F32, F32, F32))
    hk_copy = cl.clfunction(copy, (F32, F32))
    u2, v2, f2, acc2 = _arrays(queue)

    def hostkernel_loop(start, n):
        for k in range(start, start + n):
            w = WEIGHTS[k % period]
            hk_jacobi(v2, u2, f2, w, H2, SIZE, global_size=N)
            hk_change(acc2, v2, u2, global_size=N)
            hk_copy(u2, v2, global_size=N)
        finish()

    v["hostkernel"] = Variant(hostkernel_loop, lambda: (u2.get(), acc2.get()))

    program = pyopencl.Program(queue.context, "\n".join(SOURCES.values())).build()
    k_jacobi, k_change, k_copy = (pyopencl.Kernel(program, name) for name in SOURCES)
    k_jacobi.set_scalar_arg_dtypes([None, None, None, np.float32, np.float32, np.int32])
    k_change.set_scalar_arg_dtypes([None, None, None])
    k_copy.set_scalar_arg_dtypes([None, None])
    u3, v3, f3, acc3 = _arrays(queue)
    gsize = (N,)

    def typed_loop(start, n):
        for k in range(start, start + n):
            w = WEIGHTS[k % period]
            k_jacobi(queue, gsize, None, v3.data, u3.data, f3.data, w, H2, SIZE)
            k_change(queue, gsize, None, acc3.data, v3.data, u3.data)
            k_copy(queue, gsize, None, u3.data, v3.data)
        finish()

    v[BASELINE] = Variant(typed_loop, lambda: (u3.get(), acc3.get()))

    def elementwise(name):  # ElementwiseKernel's parameters: no address space
        parameters = PARAMETERS[name].replace("__global ", "")
        return ElementwiseKernel(queue.context, parameters, STATEMENTS[name], name)

    e_jacobi, e_change, e_copy = (elementwise(name) for name in SOURCES)
    u4, v4, f4, acc4 = _arrays(queue)

    def elementwise_loop(start, n):
        for k in range(start, start + n):
            w = WEIGHTS[k % period]
            e_jacobi(v4, u4, f4, w, H2, SIZE)
            e_change(acc4, v4, u4)
            e_copy(u4, v4)
        finish()

    v["elementwise"] = Variant(elementwise_loop, lambda: (u4.get(), acc4.get()))

    pool = pyopencl.tools.MemoryPool(pyopencl.tools.ImmediateAllocator(queue))
    u5, v5, f5, acc5 = _arrays(queue, pool)

    def array_loop(start, n):
        u, v, f, acc = u5, v5, f5, acc5
        for k in range(start, start + n):
            w = WEIGHTS[k % period]
            v[1:-1] = u[1:-1] + w * (0.5 * (u[:-2] + u[2:] + H2 * f[1:-1]) - u[1:-1])
            t = v - u
            acc += t * t
            u[:] = v
        finish()

    v["array"] = Variant(array_loop, lambda: (u5.get(), acc5.get()))

    def empty_loop(start, n):
        for k in range(start, start + n):
            w = WEIGHTS[k % period]  # noqa: F841  # what every variant's loop does besides
        finish()

    v[EMPTY] = Variant(empty_loop, lambda: None)
    assert list(v) == list(ROWS)
    return v


def _setup() -> dict[str, Variant]:
    warnings.simplefilter("ignore", pyopencl.RepeatedKernelRetrieval)
    variants = _variants()
    for v in variants.values():  # build, keep the cells' entries, fill the pool, warm up
        v(WARM_UP)
    return variants


def _check(variants: dict[str, Variant]) -> None:
    """Every variant's u and acc after the same iterations: bit for bit those of typed
    pyopencl where the same OpenCL C statements ran, bit for bit numpy's for the array
    expressions (each operation rounds as numpy's does), and typed pyopencl's near numpy's."""
    ran = {v.ran for name, v in variants.items() if name != EMPTY}
    assert len(ran) == 1, f"the variants ran different numbers of iterations: {ran}"
    (iterations,) = ran
    want_u, want_acc = _reference(iterations)
    got = {name: v.read() for name, v in variants.items() if name != EMPTY}
    for name, (u, acc) in got.items():
        same = got[BASELINE] if name != "array" else (want_u, want_acc)
        np.testing.assert_array_equal(u, same[0], err_msg=f"{name}: u")
        np.testing.assert_array_equal(acc, same[1], err_msg=f"{name}: acc")
    # The kernels may fuse multiply-adds where numpy rounds twice: the difference adds up,
    # about 1.5e-9 an iteration here (u is of the order of 1).
    tolerance = 1e-5 + 5e-9 * iterations
    u, acc = got[BASELINE]
    np.testing.assert_allclose(u, want_u, rtol=0, atol=tolerance, err_msg="u against numpy")
    np.testing.assert_allclose(acc, want_acc, rtol=tolerance, err_msg="acc against numpy")


def _under_callgrind(variants: dict[str, Variant], iterations: int) -> None:
    marked_passes(variants, iterations, WARM_UP)
    _check(variants)


def _instructions(iterations: int) -> tuple[dict[str, float], str, float]:
    """Host-thread instructions per iteration of each variant in the last pass (not yet less
    the empty loop), and the variant whose passes differ most, by how much (a fraction)."""
    dumps = thread_dumps(__file__, "--under-callgrind", "--iterations", str(iterations))
    steady = [name for name in ROWS if name != EMPTY]
    return last_pass(dumps, list(ROWS), iterations, steady)


def _rounds(variants: dict[str, Variant], n: int, rounds: int) -> dict[str, float]:
    """Wall µs per iteration, the median over rounds (each loop's ``finish()`` included, the
    variants' order rotating by one a round)."""
    samples = rotating_rounds(variants, n, rounds, WARM_UP, time.perf_counter, 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def _machine(queue) -> dict[str, str]:
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
        "pyopencl": pyopencl.VERSION_TEXT,
        "specializer": specializer.__version__,
        "device": f"{queue.device.name} ({queue.device.platform.name})",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": datetime.date.today().isoformat(),
    }


def _table(wall: dict[str, float], insns: dict[str, float]) -> list[dict]:
    """Print the markdown table; return its rows for the JSON (figures less the empty loop)."""
    net_wall = {k: wall[k] - wall[EMPTY] for k in ROWS}
    net_ins = {k: insns[k] - insns[EMPTY] for k in ROWS} if insns else {}
    print(
        "\n| variant | host insns/iteration | x typed pyopencl | wall µs/iteration "
        "| x typed pyopencl |"
    )
    print("|---|---:|---:|---:|---:|")
    rows = []
    for key, label in ROWS.items():
        if key == EMPTY:
            i = f"{insns[EMPTY]:,.0f}" if insns else "-"
            print(f"| {label} | {i} | | {wall[EMPTY]:.2f} | |")
            continue
        ir = net_ins[key] / net_ins[BASELINE] if insns else None
        wr = net_wall[key] / net_wall[BASELINE]
        i = f"{net_ins[key]:,.0f} | {ir:.2f}" if insns else "- | -"
        print(f"| {label} | {i} | {net_wall[key]:.1f} | {wr:.2f} |")
        rows.append(
            {
                "key": key,
                "label": label,
                "name": SHORT[key],
                "insns": net_ins.get(key),
                "insns_ratio": ir,
                "wall_us": net_wall[key],
                "wall_ratio": wr,
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--iterations", type=int, default=ITERATIONS, help="iterations per variant and round"
    )
    p.add_argument("--rounds", type=int, default=9, help="interleaved wall-time rounds")
    p.add_argument("--quick", action="store_true", help="a smoke run: few iterations, no valgrind")
    p.add_argument("--json", metavar="PATH", help="write the figures here, for the plot")
    args = p.parse_args()
    if args.quick:
        args.iterations, args.rounds = min(args.iterations, 20), min(args.rounds, 2)
    variants = _setup()
    if args.under_callgrind:
        _under_callgrind(variants, args.iterations)
        return 0

    queue = cl.default_queue()
    machine = _machine(queue)
    have_vg = not args.quick and shutil.which("valgrind") is not None
    print(
        ", ".join(
            f"{k} {v}" if k in ("numpy", "pyopencl", "specializer") else v
            for k, v in machine.items()
        )
    )
    print(
        f"A Jacobi iteration on {N} float32 points, 3 kernels; wall time: medians of "
        f"{args.rounds} interleaved rounds of {args.iterations} iterations per variant; host "
        "instructions: "
        + (
            f"{ITERATIONS} iterations per variant under callgrind --separate-threads=yes, main "
            f"thread only, the last of {PASSES} passes"
            if have_vg
            else ("not measured (--quick)" if args.quick else "not measured (no valgrind)")
        )
        + "; finish() at the end of each loop; both less the empty loop's",
        flush=True,
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    wall = _rounds(variants, args.iterations, args.rounds)
    _check(variants)
    insns, worst, spread = _instructions(ITERATIONS) if have_vg else ({}, "", 0.0)
    print(" done", file=sys.stderr)
    rows = _table(wall, insns)
    if insns:
        print(f"callgrind: the {PASSES} passes differ by at most {spread:.1%} ({SHORT[worst]})")
    print("checked: every variant's u and acc match numpy's after the same iterations")
    if args.json:
        figures = {
            "what": f"a Jacobi iteration on {N} float32 points, 3 kernels (jacobi, change, copy)",
            "iterations": ITERATIONS if insns else args.iterations,
            "rounds": args.rounds,
            "baseline": BASELINE,
            **machine,
            "command": " ".join(["python tools/bench_workload.py", *sys.argv[1:]]),
            "rows": rows,
            "empty": {"insns": insns.get(EMPTY), "wall_us": wall[EMPTY]},
            "callgrind_spread": spread if insns else None,
        }
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
