"""Benchmark of an OpenCL launch through specializer against pyopencl's own, on PoCL.

Prints one table, every variant measured side by side in one run, for a one-work-item kernel
``k(__global float *a, float b)``; each variant accumulates into an array of its own, and
every loop calls ``queue.finish()`` every 100 launches:

- ``launch(k, x, b, global_size=1)``;
- ``hk = clfunction(k, tt)``, then ``hk(x, b, global_size=1)``;
- ``launch(k, x, b, global_size=1, options=("-cl-fast-relaxed-math",))``, a launch with build
  options that its kernel's front entry holds (a kernel of its own, the same source);
- ``launch`` with the cache bypassed (inside ``specializer.device_code(lambda job, artifact:
  None)``);
- pyopencl typed: ``knl(queue, (1,), None, x.data, b)`` after
  ``knl.set_scalar_arg_dtypes([None, np.float32])``: the baseline, 1.00;
- pyopencl untyped: the same call without ``set_scalar_arg_dtypes`` (the old comparison);
- the floor: the arguments set once, ``pyopencl.enqueue_nd_range_kernel(queue, knl, (1,),
  None)`` only;
- the argument kinds ``cl.Buffer``, ``cl.LocalMemory``, ``np.int32`` (weak): ``launch(kk, buf,
  pyopencl.LocalMemory(64), 1, global_size=1)`` against typed pyopencl with the same arguments.

Two columns per launch, both less an empty loop's (the same ``finish()`` every 100):

- host-thread instructions, from one run of this script under ``valgrind --tool=callgrind
  --separate-threads=yes --dump-before=getppid``: a marker call ``os.getppid()`` between the
  loops, and only the main thread's dumps read, so PoCL's worker threads are not counted;
- per-thread CPU time (``time.thread_time_ns``), the median of interleaved rounds in rotating
  order;

each as a ratio to typed pyopencl, then the performance bars of issue 17, in host
instructions: ``launch`` at most 1.15x typed pyopencl on CPython 3.10, 0.90x on 3.11, 0.95x on
3.12 and 3.13; a HostKernel call at most 0.95x on 3.11 (no bar on 3.10) and 0.85x on 3.12 and
3.13; five contexts in turn at most 1.5x one; of issue 10: ``launch`` at most 1.0x typed
pyopencl's CPU time, a launch with build options the same as one without; and of issue 32: on
3.11 ``launch`` at most 0.88x and a HostKernel call at most 0.80x typed pyopencl, the call at
most ``launch`` on every version. Every variant's launches are checked to have run: its
array's value counts them.

``--backend python`` measures the launch path itself instead, on the test suite's pure-Python
back-end (tests/pybackend.py, ``py``), whose compiled function is trivial (it counts its calls):
a kernel ``k(a: py.Array[np.float32], b: np.float32)`` launched on one work item, each variant a
kernel of its own (the same source), against

- the floor: a plain call of the compiled function, ``fn(0, x, b)``;
- the launch block by hand: what tests/templates/python_entry.py.j2's ``launch`` block does
  (check the size, call ``fn`` once per work item), written in one function and called as
  ``block(x, b, size=1)``;
- ``py.launch`` alternating a float32 and a float64 array (with a scalar of each) on one
  kernel with a method for each: its front entries chain, so neither misses;
- one frame by hand: a function with ``launch``'s signature that makes the front entry's checks
  (the where, the task's world, the compiler kwargs, the arguments' count and guards) and then
  runs the same block: the least a launch with those checks costs in one Python frame;

and ``py.launch(k, x, b, size=1)`` and ``hk = py.function(k, tt)``, then ``hk(x, b, size=1)``.
The same two columns, each also as the instructions and CPU time above the hand-written block:
what the library's launch path costs; the bars: ``launch`` at most 1,000 instructions above it
on CPython 3.11 and 3.12; issue 32's, on 3.11: ``launch`` at most +2,200 and a HostKernel call
at most +1,300 above it, the call at most ``launch`` on every version.

Run: ``python tools/bench_launch.py`` (a couple of minutes on two cores, most of it starting
pyopencl and PoCL under callgrind); ``--python PATH`` runs it all under another interpreter
(one with specializer, pyopencl and pocl installed); ``--quick`` is a smoke run (fewer loops,
no valgrind); ``--backend python`` the pure-Python back-end's table (about a minute).
"""

from __future__ import annotations

import argparse
import gc
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
from callgrind import thread_dumps  # noqa: E402  # tools/callgrind.py

import specializer  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

FINISH_EVERY = 100
CALLGRIND_LAUNCHES = 2_000  # launches per variant and pass under callgrind
PASSES = 2  # passes over the variants under callgrind: the last is reported
WARM_UP = 200  # launches per variant before measuring (builds, front entries)
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


k = _kernel()  # launch and the HostKernel call
k_options = _kernel()  # the launch with build options: a front entry of its own
k_bypassed = _kernel()  # the launch inside device_code


@cl.kernel
def kk(a: cl.Buffer, s: cl.LocalMemory, n: np.int32) -> str:
    return KINDS_SOURCE


BASELINE = "pyopencl typed"
EMPTY = "empty loop"
ROWS = {  # key: the label in the table
    "launch": "`launch(k, x, b, global_size=1)`",
    "hostkernel": "`hk = clfunction(k, tt)`, then `hk(x, b, global_size=1)`",
    "options": '`launch(k, x, b, global_size=1, options=("-cl-fast-relaxed-math",))`',
    "bypassed": "`launch`, cache bypassed (inside `device_code(lambda job, artifact: None)`)",
    BASELINE: "pyopencl typed: `knl(queue, (1,), None, x.data, b)` after "
    "`knl.set_scalar_arg_dtypes([None, np.float32])`",
    "pyopencl untyped": "pyopencl untyped: the same without `set_scalar_arg_dtypes`",
    "floor": "floor: arguments set once, "
    "`pyopencl.enqueue_nd_range_kernel(queue, knl, (1,), None)`",
    "kinds launch": "`launch(kk, buf, pyopencl.LocalMemory(64), 1, global_size=1)` "
    "(`cl.Buffer`, `cl.LocalMemory`, `np.int32`)",
    "kinds pyopencl": "pyopencl typed, the same arguments: `kk(queue, (1,), None, buf, loc, 1)` "
    "after `set_scalar_arg_dtypes([None, None, np.int32])`",
    "five contexts": "`launch(k, xs[j], b, global_size=1, queue=queues[j])`, five contexts in "
    "turn (j = i % 5)",
    EMPTY: "empty loop (`finish()` every 100), subtracted from every row above",
}


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


def _setup() -> tuple[pyopencl.CommandQueue, dict[str, Variant]]:
    queue = cl.default_queue()
    finish = queue.finish
    launch, clfunction = cl.launch, cl.clfunction
    b = np.float32(1)
    tt = (cl.Array[np.float32], np.float32)
    program = pyopencl.Program(queue.context, SOURCE).build()
    kinds_program = pyopencl.Program(queue.context, KINDS_SOURCE).build()
    warnings.simplefilter("ignore", pyopencl.RepeatedKernelRetrieval)

    def array():
        return cla.zeros(queue, 1, np.float32)

    def buffer():
        buf = pyopencl.Buffer(queue.context, pyopencl.mem_flags.READ_WRITE, 4)
        pyopencl.enqueue_fill_buffer(queue, buf, np.float32(0), 0, 4)
        return buf

    def read_buffer(buf):
        out = np.empty(1, np.float32)
        pyopencl.enqueue_copy(queue, out, buf)
        return float(out[0])

    variants: dict[str, Variant] = {}

    x = array()

    def launch_loop(n):
        for i in range(n):
            launch(k, x, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["launch"] = Variant(launch_loop, lambda x=x: float(x.get()[0]), 1)

    x_hk = array()
    hk = clfunction(k, tt)

    def hostkernel_loop(n):
        for i in range(n):
            hk(x_hk, b, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["hostkernel"] = Variant(hostkernel_loop, lambda: float(x_hk.get()[0]), 1)

    x_opt = array()

    def options_loop(n):
        for i in range(n):
            launch(k_options, x_opt, b, global_size=1, options=OPTIONS)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["options"] = Variant(options_loop, lambda: float(x_opt.get()[0]), 1)

    x_byp = array()

    def bypassed_loop(n):
        with specializer.device_code(lambda job, artifact: None):
            for i in range(n):
                launch(k_bypassed, x_byp, b, global_size=1)
                if i % FINISH_EVERY == FINISH_EVERY - 1:
                    finish()

    variants["bypassed"] = Variant(bypassed_loop, lambda: float(x_byp.get()[0]), 1)

    x_typed = array()
    typed = pyopencl.Kernel(program, "k")
    typed.set_scalar_arg_dtypes([None, np.float32])

    def typed_loop(n):
        for i in range(n):
            typed(queue, (1,), None, x_typed.data, b)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants[BASELINE] = Variant(typed_loop, lambda: float(x_typed.get()[0]), 1)

    x_untyped = array()
    untyped = pyopencl.Kernel(program, "k")

    def untyped_loop(n):
        for i in range(n):
            untyped(queue, (1,), None, x_untyped.data, b)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["pyopencl untyped"] = Variant(untyped_loop, lambda: float(x_untyped.get()[0]), 1)

    x_floor = array()
    floor_knl = pyopencl.Kernel(program, "k")
    floor_knl.set_args(x_floor.data, b)
    enqueue = pyopencl.enqueue_nd_range_kernel

    def floor_loop(n):
        for i in range(n):
            enqueue(queue, floor_knl, (1,), None)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["floor"] = Variant(floor_loop, lambda: float(x_floor.get()[0]), 1)

    buf, loc = buffer(), pyopencl.LocalMemory(64)

    def kinds_loop(n):
        for i in range(n):
            launch(kk, buf, loc, 1, global_size=1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["kinds launch"] = Variant(kinds_loop, lambda: read_buffer(buf), 1)

    buf_typed = buffer()
    kinds_typed = pyopencl.Kernel(kinds_program, "kk")
    kinds_typed.set_scalar_arg_dtypes([None, None, np.int32])

    def kinds_typed_loop(n):
        for i in range(n):
            kinds_typed(queue, (1,), None, buf_typed, loc, 1)
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants["kinds pyopencl"] = Variant(kinds_typed_loop, lambda: read_buffer(buf_typed), 1)

    k_five = _kernel()
    queues = [pyopencl.CommandQueue(pyopencl.Context([queue.device])) for _ in range(5)]
    xs = [cla.zeros(q, 1, np.float32) for q in queues]
    finishes = [q.finish for q in queues]

    def five_loop(n):
        for i in range(n):
            j = i % 5
            launch(k_five, xs[j], b, global_size=1, queue=queues[j])
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                for f in finishes:
                    f()
        finish()

    variants["five contexts"] = Variant(five_loop, lambda: float(sum(x.get()[0] for x in xs)), 1)

    def empty_loop(n):
        for i in range(n):
            if i % FINISH_EVERY == FINISH_EVERY - 1:
                finish()

    variants[EMPTY] = Variant(empty_loop, lambda: 0.0, 0)

    assert list(variants) == list(ROWS)
    for v in variants.values():  # build, publish the front entries, warm up
        v(WARM_UP)
    finish()
    return queue, variants


def _check(variants: dict[str, Variant]) -> None:
    for name, v in variants.items():
        v.check(name)


def _settle(variants: dict[str, Variant]) -> None:
    """Collect, then run every variant once more, then stop the collector: the first launch of
    some variant after a collection can cost milliseconds, which no measured loop should hold."""
    gc.collect()
    for v in variants.values():
        v(WARM_UP)
    gc.disable()


def _under_callgrind(variants: dict[str, Variant], launches: int = CALLGRIND_LAUNCHES) -> None:
    """PASSES passes over the variants, each loop between two markers, in table order: dump 1
    is start-up, dump 2 + pass * len(variants) + i variant i, the remainder the check."""
    _settle(variants)
    os.getppid()
    for _ in range(PASSES):
        for v in variants.values():
            v(launches)
            os.getppid()
    gc.enable()
    _check(variants)


def _instructions(
    names: list[str], *args: str, launches: int = CALLGRIND_LAUNCHES
) -> tuple[dict[str, float], str, float]:
    """Host-thread instructions per launch of each variant in the last pass (not yet less the
    empty loop), and the variant whose passes differ most, by how much (a fraction)."""
    dumps = thread_dumps(__file__, "--under-callgrind", *args)
    if len(dumps) != PASSES * len(names) + 2:
        raise RuntimeError(f"{len(dumps)} dumps for {PASSES} passes of {len(names)} variants")
    passes = [
        {name: dumps[1 + p * len(names) + i] / launches for i, name in enumerate(names)}
        for p in range(PASSES)
    ]
    spread = {
        name: (max(q[name] for q in passes) - min(q[name] for q in passes)) / passes[-1][name]
        for name in names
    }
    worst = max(spread, key=spread.__getitem__)
    return passes[-1], worst, spread[worst]


def _rounds(variants: dict[str, Variant], n: int, rounds: int) -> dict[str, list[float]]:
    """Thread CPU µs per launch: every round runs each loop once, in an order rotating by one
    variant per round."""
    samples: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    clock = time.thread_time_ns
    _settle(variants)
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                v = variants[name]
                t = clock()
                v(n)
                samples[name].append((clock() - t) / n / 1000)
            print(".", end="", file=sys.stderr, flush=True)
    finally:
        gc.enable()
    return samples


# -- --backend python: the launch path on the test suite's pure-Python back-end --------------

PY_LAUNCHES = 20_000  # launches per variant and pass under callgrind (no device: exact)
PY_SIZE = 1  # work items per launch
PY_BAR = 1_000  # instructions of `launch` above the hand-written block, on 3.11 and 3.12
PY_SOURCE = "# {tag}\ncalls = 0\ndef k(i, a, b):\n    global calls\n    calls += 1\n"
BY_HAND = "by hand"
ONE_FRAME = "one frame"
ALTERNATING = "alternating"
PY_ROWS = {
    "floor": "floor: the compiled function, `fn(0, x, b)`",
    BY_HAND: "the `launch` block of python_entry.py.j2 by hand, `block(x, b, size=1)`",
    ONE_FRAME: "one function by hand: a front entry's checks, then the block, called as `launch`",
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
        launch(k, x, b, size=PY_SIZE)  # compile and link; its front entry
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

    def by_hand(fn):
        def block(a0, a1, size):  # the template's `launch` block, "value" kinds
            if size.__class__ is not int or size < 0:
                size = _size(size)
            for i in range(size):
                fn(i, a0, a1)

        return block

    block = by_hand(fn_hand)

    def by_hand_loop(n):
        for _ in range(n):
            block(x_hand, b, size=PY_SIZE)

    variants[BY_HAND] = Variant(by_hand_loop, calls, PY_SIZE)

    k_one, x_one, fn_one, one_calls = kernel("one frame")
    variants[ONE_FRAME] = None  # its place in the table; made once every kernel is defined

    k_launch, x_launch, _, calls = kernel("launch")

    def launch_loop(n):
        for _ in range(n):
            launch(k_launch, x_launch, b, size=PY_SIZE)

    variants["launch"] = Variant(launch_loop, calls, PY_SIZE)

    def alternating_kernel():
        def k(a: py.Array[np.float32], b: np.float32) -> str:
            return PY_SOURCE.format(tag="alternating float32")

        k = py.kernel(k, localns={"py": py})

        def k(a: py.Array[np.float64], b: np.float64) -> str:  # a second method
            return PY_SOURCE.format(tag="alternating float64")

        k = py.kernel(k, localns={"py": py})
        args = ((np.zeros(1, np.float32), b), (np.zeros(1, np.float64), np.float64(1)))
        fns = []
        for x, v in args:
            launch(k, x, v, size=PY_SIZE)  # compile and link each
            fn = py.function(k, (py.Array[x.dtype.type], type(v))).linked.fn
            fn.__globals__["calls"] = 0
            fns.append(fn)
        return k, args, lambda: sum(fn.__globals__["calls"] for fn in fns)

    k_alt, ((x32, b32), (x64, b64)), calls = alternating_kernel()

    def alternating_loop(n):
        for _ in range(n // 2):
            launch(k_alt, x32, b32, size=PY_SIZE)
            launch(k_alt, x64, b64, size=PY_SIZE)

    variants[ALTERNATING] = Variant(alternating_loop, calls, PY_SIZE)

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

    # in the world after the last definition, as the front entries are after a launch
    one_frame = _one_frame(fn_one, py.function(k_one, tt).__func__.__globals__)

    def one_frame_loop(n):
        for _ in range(n):
            one_frame(k_one, x_one, b, size=PY_SIZE)

    variants[ONE_FRAME] = Variant(one_frame_loop, one_calls, PY_SIZE)

    assert list(variants) == list(PY_ROWS)
    for v in variants.values():
        v(WARM_UP)
    return variants


def _one_frame(fn, g):
    """What the least a launch could cost with the checks a front entry makes: one function
    with `launch`'s signature doing what python_entry.py.j2's front entry for this signature
    does (the where, the task's world, the compiler kwargs, the arguments' count and guards)
    and then its `launch` block, with the generated code's own globals. It stands for any
    design in which a launch is one Python frame; the library's `launch` is two (`launch`
    finds the kernel's front entry and calls it)."""
    _TASK, _default_context, _size, _C0, _D0, _C1 = (
        g[name] for name in ("_TASK", "_default_context", "_size", "_C0", "_D0", "_C1")
    )
    _w, _where, _kw = _TASK()[0], _default_context[0], {}
    assert _w is not None, "measured outside the latest world"

    def launch(f, /, *args, size, context=None, **kw):
        if context is None:
            context = _default_context[0]
        where = context
        if _w != _TASK()[0] or where is not _where or ((kw or _kw) and kw != _kw):
            raise AssertionError("the one-frame launch would miss")
        try:
            a0, a1 = args
        except ValueError:
            raise AssertionError("the one-frame launch would miss") from None
        if not (
            a0.__class__ is _C0 and (a0.dtype is _D0 or a0.dtype == _D0) and a1.__class__ is _C1
        ):
            raise AssertionError("the one-frame launch would miss")
        if size.__class__ is not int or size < 0:
            size = _size(size)
        for i in range(size):
            fn(i, a0, a1)

    return launch


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
    print(
        f"thread CPU time: medians of {args.rounds} interleaved rounds of {args.launches} "
        "launches per variant; instructions: "
        + (
            f"{PY_LAUNCHES} launches per variant under callgrind --separate-threads=yes, main "
            f"thread only, the last of {PASSES} passes"
            if have_vg
            else ("not measured (--quick)" if args.quick else "not measured (no valgrind)")
        )
        + f"; {PY_SIZE} work item per launch; both less the empty loop's",
        flush=True,
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
    print(
        "\n| variant | insns/launch | above by hand | x floor | thread CPU ns/launch "
        "| above by hand |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in PY_ROWS.items():
        if name == EMPTY:
            i = f"{insns[name]:,.0f}" if insns else "-"
            print(f"| {label} | {i} | | | {med[name]:.1f} | |")
            continue
        if ins:
            above, x = ins[name] - ins[BY_HAND], ins[name] / ins["floor"]
            i = f"{ins[name]:,.0f} | {above:+,.0f} | {x:.2f}"
        else:
            i = "- | - | -"
        print(f"| {label} | {i} | {cpu[name]:.1f} | {cpu[name] - cpu[BY_HAND]:+.1f} |")

    v = sys.version_info[:2]
    over = ins["launch"] - ins[BY_HAND] if ins else None
    if over is None:
        line = "not measured"
    elif v in ((3, 11), (3, 12)):
        line = f"{over:,.0f} (bar: at most {PY_BAR:,}: {'holds' if over <= PY_BAR else 'MISSED'})"
    else:
        line = f"{over:,.0f} (the bar of {PY_BAR:,} is for 3.11 and 3.12)"
    print(f"\nbar (CPython {v[0]}.{v[1]}): launch above the block by hand, instructions: {line}")
    if ins:  # issue 32's: on 3.11, launch and the HostKernel call; the call at most launch
        hk = ins["hostkernel"] - ins[BY_HAND]
        if v == (3, 11):
            print(f"  launch above the block: {over:,.0f} (issue 32: at most +2,200: ", end="")
            print(f"{_ok(over, 2200)})")
            print(
                f"  HostKernel call above the block: {hk:,.0f} (issue 32: at most +1,300: ", end=""
            )
            print(f"{_ok(hk, 1300)})")
        hk_i, launch_i = ins["hostkernel"], ins["launch"]
        print(f"  HostKernel call / launch, instructions: {hk_i / launch_i:.3f} ", end="")
        print(f"(at most 1: {_ok(hk_i, launch_i)})")
    if insns:
        print(f"callgrind: the {PASSES} passes differ by at most {spread:.1%} ({PY_ROWS[worst]})")
    print(
        "checked: each variant's compiled function counted its calls "
        f"({variants['launch'].ran} launches here"
        + (f", {2 * WARM_UP + PASSES * PY_LAUNCHES} under callgrind)" if insns else ")")
    )
    return 0


def _ok(value: float, limit: float) -> str:
    return "holds" if value <= limit else "MISSED"


def _bar(value: float, limit: float) -> str:
    return f"{value:.3f} (bar: at most {limit:.2f}: {'holds' if value <= limit else 'MISSED'})"


def _same(value: float, tolerance: float = 0.05) -> str:
    ok = abs(value - 1) <= tolerance
    return f"{value:.3f} ({'the same' if ok else 'NOT the same'} within {tolerance:.0%})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
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
    if args.quick:
        args.launches, args.rounds = min(args.launches, 200), min(args.rounds, 3)
    if args.backend == "python":
        return _py_main(args)
    n = max(FINISH_EVERY, args.launches // FINISH_EVERY * FINISH_EVERY)
    assert 2 * WARM_UP + n * args.rounds < 2**24, "too many launches to count exactly in a float32"

    queue, variants = _setup()
    if args.under_callgrind:
        _under_callgrind(variants)
        return 0

    have_vg = not args.quick and shutil.which("valgrind") is not None
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
        + f"; finish() every {FINISH_EVERY}; both less the empty loop's",
        flush=True,
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    samples = _rounds(variants, n, args.rounds)
    _check(variants)
    insns, worst, spread = (  # its own run checks its launches
        _instructions(list(variants)) if have_vg else ({}, "", 0.0)
    )
    print(" done", file=sys.stderr)

    med = {name: statistics.median(s) for name, s in samples.items()}
    cpu = {name: med[name] - med[EMPTY] for name in variants}
    ins = {name: insns[name] - insns[EMPTY] for name in variants} if insns else {}
    print(
        "\n| variant | host insns/launch | x typed pyopencl | thread CPU µs/launch "
        "| x typed pyopencl |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, label in ROWS.items():
        if name == EMPTY:
            i = f"{insns[name]:,.0f}" if insns else "-"
            print(f"| {label} | {i} | | {med[name]:.3f} | |")
            continue
        i, ir = (f"{ins[name]:,.0f}", f"{ins[name] / ins[BASELINE]:.2f}") if ins else ("-", "-")
        print(f"| {label} | {i} | {ir} | {cpu[name]:.3f} | {cpu[name] / cpu[BASELINE]:.2f} |")

    def ratio(a: str, b: str) -> tuple[float | None, float]:
        return (ins[a] / ins[b] if ins else None), cpu[a] / cpu[b]

    def fmt(r: float | None, bar) -> str:
        return "not measured" if r is None else bar(r)

    v = sys.version_info[:2]
    launch_bar = 1.15 if v <= (3, 10) else 0.90 if v == (3, 11) else 0.95
    host_bar = None if v <= (3, 10) else 0.95 if v == (3, 11) else 0.85
    print(f"\nbars (issue 17, CPython {v[0]}.{v[1]}; issue 10 for CPU time and options):")
    r_i, r_c = ratio("launch", BASELINE)
    print(
        f"  launch / typed pyopencl, host instructions: {fmt(r_i, lambda r: _bar(r, launch_bar))}"
    )
    print(f"  launch / typed pyopencl, thread CPU time: {_bar(r_c, 1.0)}")
    r_i, r_c = ratio("hostkernel", BASELINE)
    print(
        "  HostKernel call / typed pyopencl, host instructions: "
        f"{fmt(r_i, lambda r: f'{r:.3f}' if host_bar is None else _bar(r, host_bar))}"
    )
    print(f"  HostKernel call / typed pyopencl, thread CPU time: {r_c:.3f}")
    if v == (3, 11):  # issue 32's bars
        r_i, _ = ratio("launch", BASELINE)
        print("  issue 32: launch / typed pyopencl, host instructions: ", end="")
        print(fmt(r_i, lambda r: _bar(r, 0.88)))
        r_i, _ = ratio("hostkernel", BASELINE)
        print("  issue 32: HostKernel call / typed pyopencl, host instructions: ", end="")
        print(fmt(r_i, lambda r: _bar(r, 0.80)))
    r_i, _ = ratio("hostkernel", "launch")
    print(f"  HostKernel call / launch, host instructions: {fmt(r_i, lambda r: _bar(r, 1.0))}")
    r_i, r_c = ratio("options", "launch")
    print(f"  launch with options / without, host instructions: {fmt(r_i, _same)}")
    print(f"  launch with options / without, thread CPU time: {_same(r_c, 0.1)}")
    r_i, r_c = ratio("five contexts", "launch")
    print(
        "  five contexts in turn / one context, host instructions: "
        f"{fmt(r_i, lambda r: _bar(r, 1.5))}"
    )
    r_i, r_c = ratio("kinds launch", "kinds pyopencl")
    print(
        "  launch with Buffer, LocalMemory, int / typed pyopencl with the same arguments, "
        f"host instructions: {fmt(r_i, lambda r: _bar(r, 0.9))}"
    )
    print(
        "  launch with Buffer, LocalMemory, int / typed pyopencl with the same arguments, "
        f"thread CPU time: {_bar(r_c, 1.0)}"
    )
    if insns:
        print(f"callgrind: the {PASSES} passes differ by at most {spread:.1%} ({ROWS[worst]})")
    ran = variants["launch"].ran
    print(
        f"checked: each variant's array holds the count of its launches ({ran} here"
        + (f", {2 * WARM_UP + PASSES * CALLGRIND_LAUNCHES} under callgrind)" if insns else ")")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
