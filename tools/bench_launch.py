"""Benchmark of an OpenCL launch through specializer against pyopencl's own, on PoCL.

Every variant launches a one-work-item kernel ``k(__global float *a, float b)`` (or ``kk``
below), accumulating into an array of its own (checked: its value counts the launches), with
``queue.finish()`` every 100 launches. Two programs, each in a process of its own:

*A one-queue program*: nothing but the default queue is ever used.

- ``launch(k, x, b, global_size=1)``;
- ``hk = clfunction(k, tt)``, then ``hk(x, b, global_size=1)``;
- ``launch`` with the cache bypassed (inside ``specializer.device_code(lambda job, artifact:
  None)``): what every launch would cost without the cell and the cached lookup;
- pyopencl typed: ``knl(queue, (1,), None, x.data, b)`` after
  ``knl.set_scalar_arg_dtypes([None, np.float32])``: the baseline, 1.00;
- pyopencl untyped: the same call without ``set_scalar_arg_dtypes``;
- the floor: the arguments set once, ``pyopencl.enqueue_nd_range_kernel(queue, knl, (1,),
  None)`` only;
- the argument kinds ``cl.Buffer``, ``cl.LocalMemory``, a Python int: ``launch(kk, buf,
  pyopencl.LocalMemory(64), 1, global_size=1)`` against typed pyopencl with the same arguments.

*A program that used other queues*: the kernel ``k`` was first launched on a second queue of
the default context, on a queue of another context, with ``options=``, and on five contexts,
and then:

- ``launch(k, x, b, global_size=1)`` on the default queue again, each loop right after a
  launch with ``options=`` and one on a second queue of the default context, in the same
  world (2 of its 2,000 launches);
- two queues of one context in turn (``queue=q`` on every other launch);
- ``launch(k, x, b, global_size=1, options=("-cl-fast-relaxed-math",))``;
- five contexts in turn (``queue=queues[i % 5]``);
- a launch right after an unrelated definition (a device function defined again before each
  launch; the definitions alone are measured too and subtracted): a miss that finds valid
  code;
- pyopencl typed, as above, in this process.

Two columns per launch, both less an empty loop's (the same ``finish()`` every 100):

- host-thread instructions, from a run of each program under ``valgrind --tool=callgrind
  --separate-threads=yes --dump-before=getppid``: a marker call ``os.getppid()`` between the
  loops, and only the main thread's dumps read, so PoCL's worker threads are not counted;
- per-thread CPU time (``time.thread_time_ns``), the median of interleaved rounds in rotating
  order;

each as a ratio to the typed pyopencl call of the same program, then the bars: ``launch`` and
a HostKernel call at most 0.90x typed pyopencl in a one-queue program on CPython 3.11 (0.95x on
3.12 and 3.13, 1.15x on 3.10), a launch in a program that used other queues the same as in a
one-queue program (within 5%), five contexts in turn at most 1.5x one context.

``--backend python`` measures the launch path itself instead, on the test suite's pure-Python
back-end (tests/pybackend.py, ``py``), whose compiled function is trivial (it counts its calls):
a kernel ``k(a: py.Array[np.float32], b: np.float32)`` launched on one work item, each variant a
kernel of its own (the same source), against the floor (a plain call of the compiled function,
``fn(0, x, b)``) and the launch block by hand (what tests/templates/python_launch.py.j2's
``invoke`` block does, in one function called as ``block(x, b, size=1)``): ``py.launch(k, x,
b, size=1)``, ``py.launch`` alternating a float32 and a float64 array on one kernel with a
method for each (two entries of its cell), and a HostKernel call.

Run: ``python tools/bench_launch.py`` (a few minutes on two cores, most of it starting pyopencl
and PoCL under callgrind); ``--python PATH`` runs it all under another interpreter (one with
specializer, pyopencl and pocl installed); ``--quick`` is a smoke run (fewer loops, no
valgrind); ``--backend python`` the pure-Python back-end's table (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
# Under the checkout: tools/ (callgrind.py), the checkout's specializer before an installed
# one, and tests/ (pybackend, for --backend python).
for _path in (_CHECKOUT / "tools", _CHECKOUT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
if str(_CHECKOUT / "tests") not in sys.path:
    sys.path.append(str(_CHECKOUT / "tests"))

import numpy as np  # noqa: E402
import pyopencl  # noqa: E402
import pyopencl.array as cla  # noqa: E402
from callgrind import (  # noqa: E402  # tools/callgrind.py
    PASSES,
    last_pass,
    marked_passes,
    rotating_rounds,
    thread_dumps,
)

import specializer  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

FINISH_EVERY = 100
CALLGRIND_LAUNCHES = 2_000  # launches per variant and pass under callgrind
WARM_UP = 200  # launches per variant before measuring (builds, entries)
OPTIONS = ("-cl-fast-relaxed-math",)
SOURCE = "__kernel void k(__global float *a, float b) { a[get_global_id(0)] += b; }"
KINDS_SOURCE = (
    "__kernel void kk(__global float *a, __local float *s, int n) "
    "{ s[0] = n; a[get_global_id(0)] += s[0]; }"
)


def _kernel():
    def k(a: cl.Array[np.float32], b: np.float32) -> str:
        return SOURCE

    return cl.kernel(k)


@cl.kernel
def kk(a: cl.Buffer, s: cl.LocalMemory, n: np.int32) -> str:
    return KINDS_SOURCE


BASELINE = "pyopencl typed"
EMPTY = "empty loop"
DEFINITION = "definition"
ONE_QUEUE = {  # key: the label in the table
    "launch": "`launch(k, x, b, global_size=1)`",
    "hostkernel": "`hk = clfunction(k, tt)`, then `hk(x, b, global_size=1)`",
    "bypassed": "`launch`, cache bypassed (inside `device_code(lambda job, artifact: None)`)",
    BASELINE: "pyopencl typed: `knl(queue, (1,), None, x.data, b)` after "
    "`knl.set_scalar_arg_dtypes([None, np.float32])`",
    "pyopencl untyped": "pyopencl untyped: the same without `set_scalar_arg_dtypes`",
    "floor": "floor: arguments set once, "
    "`pyopencl.enqueue_nd_range_kernel(queue, knl, (1,), None)`",
    "kinds launch": "`launch(kk, buf, pyopencl.LocalMemory(64), 1, global_size=1)` "
    "(`cl.Buffer`, `cl.LocalMemory`, a Python int)",
    "kinds pyopencl": "pyopencl typed, the same arguments: `kk(queue, (1,), None, buf, loc, 1)` "
    "after `set_scalar_arg_dtypes([None, None, np.int32])`",
    EMPTY: "empty loop (`finish()` every 100), subtracted from every row above",
}
OTHER_QUEUES = {
    "launch": "`launch(k, x, b, global_size=1)`, the default queue",
    "two queues": "two queues of one context in turn (`queue=q` every other launch)",
    "options": '`launch(k, x, b, global_size=1, options=("-cl-fast-relaxed-math",))`',
    "five contexts": "`launch(k, xs[j], b, global_size=1, queue=queues[j])`, five contexts in "
    "turn (j = i % 5)",
    "after definition": "`launch` right after an unrelated definition (the definition's "
    "cost subtracted)",
    DEFINITION: "the unrelated definition alone (subtracted from the row above)",
    BASELINE: ONE_QUEUE[BASELINE],
    EMPTY: ONE_QUEUE[EMPTY],
}
PROGRAMS = {"one queue": ONE_QUEUE, "other queues": OTHER_QUEUES}


class Variant:
    """One loop: ``body(n)`` makes n launches (a multiple of FINISH_EVERY, so the queue ends
    finished); ``read()`` is the value its launches accumulated; ``ran`` how many it made."""

    def __init__(self, body, read, per_launch: float) -> None:
        self.body, self.read, self.per_launch, self.ran = body, read, per_launch, 0

    def __call__(self, n: int) -> None:
        self.body(n)
        self.ran += n

    def check(self, name: str) -> None:
        want, got = self.ran * self.per_launch, self.read()
        assert got == want, f"{name}: accumulated {got}, not {want}: launches were lost"


def _loop(launch_once, finish):
    def body(n):
        for i in range(n):
            launch_once()
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    return body


def _typed(queue, finish):
    program = pyopencl.Program(queue.context, SOURCE).build()
    x = cla.zeros(queue, 1, np.float32)
    typed = pyopencl.Kernel(program, "k")
    typed.set_scalar_arg_dtypes([None, np.float32])
    b = np.float32(1)

    def body(n):
        for i in range(n):
            typed(queue, (1,), None, x.data, b)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    return Variant(body, lambda: float(x.get()[0]), 1)


def _empty(finish):
    def body(n):
        for i in range(n):
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    return Variant(body, lambda: 0.0, 0)


def _one_queue() -> dict[str, Variant]:
    queue = cl.default_queue()
    finish = queue.finish
    launch, clfunction = cl.launch, cl.clfunction
    b = np.float32(1)
    tt = (cl.Array[np.float32], np.float32)
    k, k_bypassed = _kernel(), _kernel()
    warnings.simplefilter("ignore", pyopencl.RepeatedKernelRetrieval)
    v: dict[str, Variant] = {}

    x = cla.zeros(queue, 1, np.float32)

    def launch_loop(n):
        for i in range(n):
            launch(k, x, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["launch"] = Variant(launch_loop, lambda: float(x.get()[0]), 1)

    x_hk = cla.zeros(queue, 1, np.float32)
    hk = clfunction(k, tt)

    def hostkernel_loop(n):
        for i in range(n):
            hk(x_hk, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["hostkernel"] = Variant(hostkernel_loop, lambda: float(x_hk.get()[0]), 1)

    x_byp = cla.zeros(queue, 1, np.float32)

    def bypassed_loop(n):
        with specializer.device_code(lambda job, artifact: None):
            for i in range(n):
                launch(k_bypassed, x_byp, b, global_size=1)
                if i % FINISH_EVERY == FINISH_EVERY - 1:
                    finish()

    v["bypassed"] = Variant(bypassed_loop, lambda: float(x_byp.get()[0]), 1)
    v[BASELINE] = _typed(queue, finish)

    program = pyopencl.Program(queue.context, SOURCE).build()
    x_untyped = cla.zeros(queue, 1, np.float32)
    untyped = pyopencl.Kernel(program, "k")

    def untyped_loop(n):
        for i in range(n):
            untyped(queue, (1,), None, x_untyped.data, b)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["pyopencl untyped"] = Variant(untyped_loop, lambda: float(x_untyped.get()[0]), 1)

    x_floor = cla.zeros(queue, 1, np.float32)
    floor_knl = pyopencl.Kernel(program, "k")
    floor_knl.set_args(x_floor.data, b)
    enqueue = pyopencl.enqueue_nd_range_kernel

    def floor_loop(n):
        for i in range(n):
            enqueue(queue, floor_knl, (1,), None)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["floor"] = Variant(floor_loop, lambda: float(x_floor.get()[0]), 1)

    def buffer():
        buf = pyopencl.Buffer(queue.context, pyopencl.mem_flags.READ_WRITE, 4)
        pyopencl.enqueue_fill_buffer(queue, buf, np.float32(0), 0, 4)
        return buf

    def read_buffer(buf):
        out = np.empty(1, np.float32)
        pyopencl.enqueue_copy(queue, out, buf)
        return float(out[0])

    buf, loc = buffer(), pyopencl.LocalMemory(64)

    def kinds_loop(n):
        for i in range(n):
            launch(kk, buf, loc, 1, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["kinds launch"] = Variant(kinds_loop, lambda: read_buffer(buf), 1)

    buf_typed = buffer()
    kinds_program = pyopencl.Program(queue.context, KINDS_SOURCE).build()
    kinds_typed = pyopencl.Kernel(kinds_program, "kk")
    kinds_typed.set_scalar_arg_dtypes([None, None, np.int32])

    def kinds_typed_loop(n):
        for i in range(n):
            kinds_typed(queue, (1,), None, buf_typed, loc, 1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["kinds pyopencl"] = Variant(kinds_typed_loop, lambda: read_buffer(buf_typed), 1)
    v[EMPTY] = _empty(finish)
    return v


def _other_queues() -> dict[str, Variant]:
    queue = cl.default_queue()
    finish = queue.finish
    launch = cl.launch
    b = np.float32(1)
    k = _kernel()
    same = pyopencl.CommandQueue(queue.context)  # a second queue of the default context
    queues = [pyopencl.CommandQueue(pyopencl.Context([queue.device])) for _ in range(5)]
    x = cla.zeros(queue, 1, np.float32)
    xs = [cla.zeros(q, 1, np.float32) for q in queues]
    # the kernel's history: other queues, another context, build options
    for q, xq in ((same, cla.zeros(same, 1, np.float32)), *zip(queues, xs)):
        launch(k, xq, b, global_size=1, queue=q)
    launch(k, x, b, global_size=1, options=OPTIONS)
    for xq in xs:
        xq.fill(0)
    x.fill(0)
    finish()
    v: dict[str, Variant] = {}
    x_other = cla.zeros(queue, 1, np.float32)

    def launch_loop(n):
        # first, in this world, a launch with options= and one on another queue; then the
        # default queue (each loop starts in another world: the definitions' loop below)
        launch(k, x_other, b, global_size=1, options=OPTIONS)
        launch(k, x_other, b, global_size=1, queue=same)
        for i in range(2, n):
            launch(k, x, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()
        finish()
        same.finish()

    v["launch"] = Variant(launch_loop, lambda: float(x.get()[0] + x_other.get()[0]), 1)

    # an array per queue: the queues' commands run at once, in no order between them
    xa, xb = cla.zeros(queue, 1, np.float32), cla.zeros(queue, 1, np.float32)

    def two_queues_loop(n):
        for i in range(n // 2):
            launch(k, xa, b, global_size=1)
            launch(k, xb, b, global_size=1, queue=same)
            if i % (FINISH_EVERY // 2) == FINISH_EVERY // 2 - 1:
                finish()
                same.finish()

    v["two queues"] = Variant(two_queues_loop, lambda: float(xa.get()[0] + xb.get()[0]), 1)

    x_opt = cla.zeros(queue, 1, np.float32)

    def options_loop(n):
        for i in range(n):
            launch(k, x_opt, b, global_size=1, options=OPTIONS)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["options"] = Variant(options_loop, lambda: float(x_opt.get()[0]), 1)
    finishes = [q.finish for q in queues]

    def five_loop(n):
        for i in range(n):
            j = i % 5
            launch(k, xs[j], b, global_size=1, queue=queues[j])
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                for f in finishes:
                    f()

    v["five contexts"] = Variant(five_loop, lambda: float(sum(xq.get()[0] for xq in xs)), 1)

    def define():
        @cl.device
        def unrelated() -> str:
            return "float unrelated(float v) { return v; }"

    x_def = cla.zeros(queue, 1, np.float32)

    def after_definition_loop(n):
        for i in range(n):
            define()
            launch(k, x_def, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v["after definition"] = Variant(after_definition_loop, lambda: float(x_def.get()[0]), 1)

    def definition_loop(n):
        for i in range(n):
            define()
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    v[DEFINITION] = Variant(definition_loop, lambda: 0.0, 0)
    v[BASELINE] = _typed(queue, finish)
    v[EMPTY] = _empty(finish)
    return v


def _setup(program: str) -> dict[str, Variant]:
    variants = _one_queue() if program == "one queue" else _other_queues()
    assert list(variants) == list(PROGRAMS[program])
    for v in variants.values():  # build, keep the cells' entries, warm up
        v(WARM_UP)
    cl.default_queue().finish()
    return variants


def _check(variants: dict[str, Variant]) -> None:
    for name, v in variants.items():
        v.check(name)


def _under_callgrind(variants: dict[str, Variant], launches: int = CALLGRIND_LAUNCHES) -> None:
    marked_passes(variants, launches, WARM_UP)
    _check(variants)


def _instructions(
    names: list[str], *args: str, launches: int = CALLGRIND_LAUNCHES
) -> tuple[dict[str, float], str, float]:
    """Host-thread instructions per launch of each variant in the last pass (not yet less the
    empty loop), and the variant whose passes differ most, by how much (a fraction)."""
    return last_pass(thread_dumps(__file__, "--under-callgrind", *args), names, launches)


def _rounds(variants: dict[str, Variant], n: int, rounds: int) -> dict[str, list[float]]:
    """Thread CPU µs per launch, a sample a round (rounds rotating the variants' order)."""
    return rotating_rounds(variants, n, rounds, WARM_UP, time.thread_time_ns, 1e-3)


def _net(values: dict[str, float]) -> dict[str, float]:
    """Each variant less the empty loop; the launch after a definition less the definition."""
    out = {name: values[name] - values[EMPTY] for name in values}
    if DEFINITION in out:
        out["after definition"] -= out[DEFINITION]
    return out


def _program(name: str, args: argparse.Namespace, have_vg: bool) -> dict:
    """One program's figures, measured in processes of its own: {"cpu": ..., "insns": ...}."""
    rows = PROGRAMS[name]
    argv = [sys.executable, __file__, "--program", name, "--launches", str(args.launches)]
    done = subprocess.run(
        [*argv, "--rounds", str(args.rounds)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"the {name!r} program failed:\n{done.stderr[-3000:]}")
    print(done.stderr.strip(), end="", file=sys.stderr, flush=True)
    cpu = json.loads(done.stdout)
    insns, worst, spread = (
        _instructions(list(rows), "--program", name) if have_vg else ({}, "", 0.0)
    )
    return {
        "cpu": _net(cpu),
        "insns": _net(insns) if insns else {},
        "worst": worst,
        "spread": spread,
        "empty": (cpu[EMPTY], insns.get(EMPTY)),
    }


def _table(name: str, figures: dict) -> None:
    rows, cpu, ins = PROGRAMS[name], figures["cpu"], figures["insns"]
    print(f"\n**{name[0].upper() + name[1:]}** program")
    print(
        "\n| variant | host insns/launch | x typed pyopencl | thread CPU µs/launch "
        "| x typed pyopencl |"
    )
    print("|---|---:|---:|---:|---:|")
    for key, label in rows.items():
        if key == EMPTY:
            empty_cpu, empty_ins = figures["empty"]
            i = f"{empty_ins:,.0f}" if empty_ins is not None else "-"
            print(f"| {label} | {i} | | {empty_cpu:.3f} | |")
            continue
        i, ir = (f"{ins[key]:,.0f}", f"{ins[key] / ins[BASELINE]:.2f}") if ins else ("-", "-")
        print(f"| {label} | {i} | {ir} | {cpu[key]:.3f} | {cpu[key] / cpu[BASELINE]:.2f} |")


def _bar(value: float, limit: float) -> str:
    return f"{value:.3f} (bar: at most {limit:.2f}: {'holds' if value <= limit else 'MISSED'})"


def _same(value: float, tolerance: float = 0.05) -> str:
    ok = abs(value - 1) <= tolerance
    return f"{value:.3f} ({'the same' if ok else 'NOT the same'} within {tolerance:.0%})"


def _opencl_main(args: argparse.Namespace) -> int:
    n = max(FINISH_EVERY, args.launches // FINISH_EVERY * FINISH_EVERY)
    assert 2 * WARM_UP + n * args.rounds < 2**24, "too many launches to count exactly in a float32"
    if args.program:  # a program's own process
        variants = _setup(args.program)
        if args.under_callgrind:
            _under_callgrind(variants)
            return 0
        samples = _rounds(variants, n, args.rounds)
        _check(variants)
        print(json.dumps({k: statistics.median(s) for k, s in samples.items()}))
        return 0
    have_vg = not args.quick and shutil.which("valgrind") is not None
    queue = cl.default_queue()
    print(
        f"Python {sys.version.split()[0]} ({sys.executable}), numpy {np.__version__}, "
        f"pyopencl {pyopencl.VERSION_TEXT}, specializer {specializer.__version__}, "
        f"{queue.device.name} ({queue.device.platform.name}), {os.cpu_count()} CPUs"
    )
    print(
        f"thread CPU time: medians of {args.rounds} interleaved rounds of {n} launches per "
        f"variant; host instructions: "
        + (
            f"{CALLGRIND_LAUNCHES} launches per variant under callgrind --separate-threads=yes, "
            f"main thread only, the last of {PASSES} passes"
            if have_vg
            else ("not measured (--quick)" if args.quick else "not measured (no valgrind)")
        )
        + f"; finish() every {FINISH_EVERY}; both less the empty loop's; each program in "
        "processes of its own",
        flush=True,
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    figures = {name: _program(name, args, have_vg) for name in PROGRAMS}
    print(" done", file=sys.stderr)
    for name, f in figures.items():
        _table(name, f)

    one, other = figures["one queue"], figures["other queues"]
    v = sys.version_info[:2]
    launch_bar = 1.15 if v <= (3, 10) else 0.90 if v == (3, 11) else 0.95
    print(f"\nbars (CPython {v[0]}.{v[1]}):")
    for unit, key in (("host instructions", "insns"), ("thread CPU time", "cpu")):
        a, b = one[key], other[key]
        if not a:
            print(f"  {unit}: not measured")
            continue
        print(
            f"  launch / typed pyopencl, one queue, {unit}: "
            f"{_bar(a['launch'] / a[BASELINE], launch_bar)}"
        )
        print(
            f"  HostKernel call / typed pyopencl, one queue, {unit}: "
            f"{_bar(a['hostkernel'] / a[BASELINE], launch_bar)}"
        )
        print(
            f"  launch after other queues / one queue (each / its typed pyopencl), {unit}: "
            f"{_same((b['launch'] / b[BASELINE]) / (a['launch'] / a[BASELINE]))}"
        )
        print(
            f"  five contexts in turn / one context, {unit}: "
            f"{_bar(b['five contexts'] / b['launch'], 1.5)}"
        )
        print(
            f"  a launch after an unrelated definition / a hit, {unit}: "
            f"{b['after definition'] / b['launch']:.1f}x"
        )
    for f in figures.values():
        if f["worst"]:
            rows = next(r for r in PROGRAMS.values() if f["worst"] in r)
            print(
                f"callgrind: the {PASSES} passes differ by at most {f['spread']:.1%} "
                f"({rows[f['worst']]})"
            )
    print("checked: each variant's array holds the count of its launches")
    return 0


# -- --backend python: the launch path on the test suite's pure-Python back-end --------------

PY_LAUNCHES = 20_000  # launches per variant and pass under callgrind (no device: exact)
PY_SIZE = 1  # work items per launch
PY_SOURCE = "# {tag}\ncalls = 0\ndef k(i, a, b):\n    global calls\n    calls += 1\n"
BY_HAND = "by hand"
ALTERNATING = "alternating"
PY_ROWS = {
    "floor": "floor: the compiled function, `fn(0, x, b)`",
    BY_HAND: "the `invoke` block of python_launch.py.j2 by hand, `block(x, b, size=1)`",
    "launch": "`py.launch(k, x, b, size=1)`",
    ALTERNATING: "`py.launch` with a float32 and a float64 array (and scalar) in turn, "
    "one kernel with a method for each",
    "hostkernel": "`hk = py.function(k, tt)`, then `hk(x, b, size=1)`",
    EMPTY: "empty loop, subtracted from every row above",
}


def _py_setup() -> dict[str, Variant]:
    """The variants of --backend python, each on a kernel of its own (a closure over its tag,
    so a kernel apart), whose compiled function counts its calls."""
    from pybackend import _size, py  # tests/pybackend.py

    tt = (py.Array[np.float32], np.float32)
    b = np.float32(1)
    launch = py.launch

    def kernel(tag: str):
        def k(a: py.Array[np.float32], b: np.float32) -> str:
            return PY_SOURCE.format(tag=tag)

        k = py.kernel(k, localns={"py": py})  # annotations are strings here
        x = np.zeros(1, np.float32)
        launch(k, x, b, size=PY_SIZE)  # compile and link; its cell's entry
        fn = py.function(k, tt).linked.fn
        fn.__globals__["calls"] = 0
        return k, x, fn, lambda: fn.__globals__["calls"]

    variants: dict[str, Variant] = {}
    _, x_floor, fn_floor, calls = kernel("floor")

    def floor_loop(n):
        for _ in range(n):
            fn_floor(0, x_floor, b)

    variants["floor"] = Variant(floor_loop, calls, 1)

    _, x_hand, fn_hand, calls = kernel("by hand")

    def block(a0, a1, size, fn=fn_hand):  # the template's `invoke` block, "value" kinds
        if size.__class__ is not int or size < 0:
            size = _size(size)
        for i in range(size):
            fn(i, a0, a1)

    def by_hand_loop(n):
        for _ in range(n):
            block(x_hand, b, size=PY_SIZE)

    variants[BY_HAND] = Variant(by_hand_loop, calls, PY_SIZE)

    k_launch, x_launch, _, calls = kernel("launch")

    def launch_loop(n):
        for _ in range(n):
            launch(k_launch, x_launch, b, size=PY_SIZE)

    variants["launch"] = Variant(launch_loop, calls, PY_SIZE)

    def k(a: py.Array[np.float32], b: np.float32) -> str:
        return PY_SOURCE.format(tag="alternating float32")

    k_alt = py.kernel(k, localns={"py": py})

    def k(a: py.Array[np.float64], b: np.float64) -> str:  # a second method
        return PY_SOURCE.format(tag="alternating float64")

    k_alt = py.kernel(k, localns={"py": py})
    pairs = ((np.zeros(1, np.float32), b), (np.zeros(1, np.float64), np.float64(1)))
    fns = []
    for x, value in pairs:
        launch(k_alt, x, value, size=PY_SIZE)  # compile and link each
        fn = py.function(k_alt, (py.Array[x.dtype.type], type(value))).linked.fn
        fn.__globals__["calls"] = 0
        fns.append(fn)
    (x32, b32), (x64, b64) = pairs

    def alternating_loop(n):
        for _ in range(n // 2):
            launch(k_alt, x32, b32, size=PY_SIZE)
            launch(k_alt, x64, b64, size=PY_SIZE)

    variants[ALTERNATING] = Variant(
        alternating_loop, lambda: sum(fn.__globals__["calls"] for fn in fns), PY_SIZE
    )

    k_hk, x_hk, _, calls = kernel("hostkernel")
    hk = py.function(k_hk, tt)

    def hostkernel_loop(n):
        for _ in range(n):
            hk(x_hk, b, size=PY_SIZE)

    variants["hostkernel"] = Variant(hostkernel_loop, calls, PY_SIZE)

    def empty_loop(n):
        for _ in range(n):
            pass

    variants[EMPTY] = Variant(empty_loop, lambda: 0, 0)
    assert list(variants) == list(PY_ROWS)
    for v in variants.values():
        v(WARM_UP)
    return variants


def _py_main(args: argparse.Namespace) -> int:
    variants = _py_setup()
    if args.under_callgrind:
        _under_callgrind(variants, PY_LAUNCHES)
        return 0
    have_vg = not args.quick and shutil.which("valgrind") is not None
    print(
        f"Python {sys.version.split()[0]} ({sys.executable}), numpy {np.__version__}, "
        f"specializer {specializer.__version__} ({Path(specializer.__file__).parent}), the "
        f"test suite's pure-Python back-end (tests/pybackend.py), {os.cpu_count()} CPUs"
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    samples = _rounds(variants, args.launches, args.rounds)
    _check(variants)
    insns, worst, spread = (
        _instructions(list(variants), "--backend", "python", launches=PY_LAUNCHES)
        if have_vg
        else ({}, "", 0.0)
    )
    print(" done", file=sys.stderr)
    med = {name: statistics.median(s) * 1000 for name, s in samples.items()}  # ns
    cpu = {name: med[name] - med[EMPTY] for name in variants}
    ins = {name: insns[name] - insns[EMPTY] for name in variants} if insns else {}
    print("\n| variant | insns/launch | above by hand | thread CPU ns/launch | above by hand |")
    print("|---|---:|---:|---:|---:|")
    for name, label in PY_ROWS.items():
        if name == EMPTY:
            i = f"{insns[name]:,.0f}" if insns else "-"
            print(f"| {label} | {i} | | {med[name]:.1f} | |")
            continue
        i = f"{ins[name]:,.0f} | {ins[name] - ins[BY_HAND]:+,.0f}" if ins else "- | -"
        print(f"| {label} | {i} | {cpu[name]:.1f} | {cpu[name] - cpu[BY_HAND]:+.1f} |")
    if insns:
        print(f"callgrind: the {PASSES} passes differ by at most {spread:.1%} ({PY_ROWS[worst]})")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--program", choices=list(PROGRAMS), help=argparse.SUPPRESS)
    p.add_argument("--launches", type=int, default=2000, help="launches per variant and round")
    p.add_argument("--rounds", type=int, default=25, help="interleaved rounds")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer loops, no valgrind")
    p.add_argument(
        "--backend",
        choices=("opencl", "python"),
        default="opencl",
        help="python: the launch path on the test suite's pure-Python back-end",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help="run the whole benchmark under this interpreter (with specializer, pyopencl, pocl)",
    )
    args = p.parse_args()
    if args.python:
        argv = [args.python, os.path.abspath(__file__)]
        argv += ["--launches", str(args.launches), "--rounds", str(args.rounds)]
        argv += ["--quick"] if args.quick else []
        argv += ["--backend", args.backend]
        return subprocess.run(argv).returncode
    if args.quick and not args.program:
        args.launches, args.rounds = min(args.launches, 200), min(args.rounds, 3)
    if args.backend == "python":
        return _py_main(args)
    return _opencl_main(args)


if __name__ == "__main__":
    sys.exit(main())
