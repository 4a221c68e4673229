"""``python -m specializer demo``: why a kernel cache must know the world age, on PoCL.

Each definition of a kernel method or device function raises a global counter, the *world*
("world 5 -> 6"); a kernel cache not keyed on it keeps running replaced code. The demo runs the
same kernels through a naive dict cache and specializer's side by side, shows a task pinned to an
older world, times one launch against pyopencl's fastest call, and exits non-zero if a result
differs from numpy's.
"""

# No `from __future__ import annotations`: the kernels below are defined inside main(), and
# their annotations name its locals, so they must be evaluated where they are written.
import argparse
import gc
import statistics
import sys
import time
from typing import Any

import numpy as np


def _say(text: str = "", end: str = "\n") -> None:
    print(text, end=end, flush=True)


LAUNCHES, ROUNDS = 3000, 7  # the defaults; `python -m specializer demo --help` states them

WORLD_LINE = (
    "A world counts the definitions so far; each kernel method or device function defined adds one."
)


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (a count of launches or rounds)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specializer demo", description=__doc__.split("\n\n")[1]
    )
    p.add_argument(
        "--launches", type=positive_int, default=LAUNCHES, help="launches per timed round"
    )
    p.add_argument("--rounds", type=positive_int, default=ROUNDS, help="timed rounds per variant")
    args = p.parse_args(argv)

    _say("specializer demo: world age and kernel caches", end="")
    try:
        import pyopencl
        import pyopencl.array as cla

        from specializer.backends import opencl as cl

        queue = cl.default_queue()
    except (ImportError, RuntimeError) as e:
        _say(
            f"\nthe demo needs pyopencl and PoCL ({e}); install them with the opencl extra: "
            "pip install -e '.[opencl]' in a checkout, or "
            "pip install 'specializer-VERSION-py3-none-any.whl[opencl]' from a built wheel"
        )
        return 1
    import specializer

    _say(f", on {queue.device.name} ({queue.device.platform.name})")
    _say(WORLD_LINE)
    failed: list[str] = []  # the results that differ from numpy's

    def expect(label: str, got: Any, expected: Any) -> None:
        if not np.array_equal(np.asarray(got), np.asarray(expected)):
            failed.append(label)

    n = 8
    host = np.arange(1, n + 1, dtype=np.float32)

    # The naive cache: compiled kernels in a dict keyed on (kernel, argument types).
    naive: dict[tuple[Any, tuple[type, ...]], Any] = {}

    def naive_launch(k: Any, *a: Any) -> None:
        tt = tuple(map(cl.typeof, a))
        hk = naive.get((k, tt))
        if hk is None:
            hk = naive[k, tt] = cl.clfunction(k, tt)
        hk(*a, global_size=n)

    def run_ours(k: Any, scalar: Any) -> np.ndarray:
        x = cla.to_device(queue, host)
        cl.launch(k, x, scalar, global_size=n)
        return x.get()

    def run_both(k: Any, scalar: Any) -> tuple[np.ndarray, np.ndarray]:
        x = cla.to_device(queue, host)
        naive_launch(k, x, scalar)
        return x.get(), run_ours(k, scalar)

    def show(what: str, expected: np.ndarray, naive_got: np.ndarray, ours: np.ndarray) -> None:
        _say(f"  {what}")
        _say(f"    expected        {expected}")
        n_ok = np.array_equal(naive_got, expected)
        o_ok = np.array_equal(ours, expected)
        _say(f"    naive cache     {naive_got}  {'right' if n_ok else 'STALE: old code ran'}")
        _say(f"    specializer     {ours}  {'right' if o_ok else 'WRONG'}")

    # -- 1. a more specific method -------------------------------------------------------
    @cl.kernel  # generic: every floating element type
    def scale(x: cl.Array[np.floating], a: np.floating) -> str:
        # ctype imported here: main()'s `cl` would make this def a closure, which is a kernel
        # of its own, not a method of the scale defined below
        from specializer.backends.opencl import ctype

        t = ctype(x.dtype)
        return f"""__kernel void scale(__global {t} *x, {t} a) {{
                       x[get_global_id(0)] *= a; }}"""

    w0 = specializer.latest()
    _say("\n1. A kernel, then a more specific method for float32 (building; about a second)")
    naive_got, ours = run_both(scale, np.float32(2))
    expect("scale before", ours, host * 2)
    expect("naive scale before", naive_got, host * 2)
    _say(f"  scale(x, 2) in world {w0} (defining scale: {w0 - 1} -> {w0}):")
    _say(f"    both caches run x * 2: {ours}")

    @cl.kernel  # more specific: float32 arrays also get 1 added
    def scale(x: cl.Array[np.float32], a: np.float32) -> str:
        return """__kernel void scale(__global float *x, float a) {
                      x[get_global_id(0)] = x[get_global_id(0)] * a + 1.0f; }"""

    w1 = specializer.latest()
    naive_got, ours = run_both(scale, np.float32(2))
    what = f"a method scale(Array[np.float32], np.float32) is defined: world {w0} -> {w1}"
    show(what, host * 2 + 1, naive_got, ours)
    expect("scale after a more specific method", ours, host * 2 + 1)
    expect("the naive cache keeps the old code", naive_got, host * 2)

    # -- 2. a device function redefined --------------------------------------------------
    _say("\n2. A kernel calling a device function, then the device function redefined")
    w_before = specializer.latest()

    @cl.device
    def offset() -> str:
        return "float offset(float v) { return v + 10.0f; }"

    @cl.kernel(callees=[offset])
    def shift(x: cl.Array[np.float32], a: np.float32) -> str:
        return """__kernel void shift(__global float *x, float a) {
                      x[get_global_id(0)] = offset(x[get_global_id(0)]) * a; }"""

    naive_got, ours = run_both(shift, np.float32(1))
    expect("shift before", ours, host + 10)
    expect("naive shift before", naive_got, host + 10)
    w2 = specializer.latest()
    _say(
        f"  shift(x, 1) in world {w2} (defining offset: {w_before} -> {w_before + 1}, "
        f"then shift: {w_before + 1} -> {w2}):"
    )
    _say(f"    both caches run (x + 10) * 1: {ours}")
    compiles = specializer.compile_count()

    @cl.device
    def offset() -> str:
        return "float offset(float v) { return v + 100.0f; }"

    w3 = specializer.latest()
    naive_got, ours = run_both(shift, np.float32(1))
    show(f"offset() redefined to add 100: world {w2} -> {w3}", host + 100, naive_got, ours)
    expect("shift after the callee changed", ours, host + 100)
    expect("the naive cache keeps the old callee", naive_got, host + 10)
    recompiled = specializer.compile_count() - compiles
    _say(f"  recompiled: {recompiled} kernel (shift); scale kept its code")
    if recompiled != 1:
        failed.append(f"the redefinition recompiled {recompiled} kernels, not 1")

    # -- 3. an older world -----------------------------------------------------------------
    _say(f"\n3. A task pinned to world {w2} (before offset changed) runs that world's code")

    old = specializer.invoke_in_world(w2, run_ours, shift, np.float32(1))
    new = run_ours(shift, np.float32(1))
    _say(f"  in world {w2}: {old}   (x + 10)")
    _say(f"  in world {w3}: {new}   (x + 100)")
    expect("the pinned task runs the old callee", old, host + 10)
    expect("the latest world runs the new callee", new, host + 100)

    # -- 4. what a launch costs ------------------------------------------------------------
    source = "__kernel void acc(__global float *x, float a) { x[get_global_id(0)] += a; }"

    @cl.kernel
    def acc(x: cl.Array[np.float32], a: np.float32) -> str:
        return source

    program = pyopencl.Program(queue.context, source).build()
    typed = pyopencl.Kernel(program, "acc")
    typed.set_scalar_arg_dtypes([None, np.float32])
    floor = pyopencl.Kernel(program, "acc")
    x = cla.zeros(queue, 1, np.float32)
    one = np.float32(1)
    # pyopencl's stubs: Array.data (a Buffer) is a MemoryObjectHolder, not in set_args' types
    floor.set_args(x.data, one)  # type: ignore[arg-type]
    hk = cl.clfunction(acc, (cl.Array[np.float32], np.float32))
    launches, rounds = args.launches, args.rounds
    launch, enqueue, finish = cl.launch, pyopencl.enqueue_nd_range_kernel, queue.finish

    def ours_launch(m: int) -> None:
        for _ in range(m):
            launch(acc, x, one, global_size=1)

    def ours_host(m: int) -> None:
        for _ in range(m):
            hk(x, one, global_size=1)

    def pyopencl_typed(m: int) -> None:
        for _ in range(m):
            typed(queue, (1,), None, x.data, one)  # type: ignore[arg-type]  # as set_args above

    def bare(m: int) -> None:
        for _ in range(m):
            enqueue(queue, floor, (1,), None)

    variants = {
        "specializer launch(acc, x, a, global_size=1)": ours_launch,
        "specializer hk(x, a, global_size=1), hk = clfunction(...)": ours_host,
        "pyopencl knl(queue, (1,), None, x.data, a), typed scalars": pyopencl_typed,
        "floor: arguments set once, enqueue only": bare,
    }
    for body in variants.values():  # warm up (and build acc)
        body(100)
    finish()
    x.fill(0)
    _say(
        f"\n4. What one launch costs (one work item, two arguments): CPU time of this thread,\n"
        f"   medians of {rounds} interleaved rounds of {launches} launches; measuring",
        end="",
    )
    samples: dict[str, list[float]] = {name: [] for name in variants}
    gc.disable()
    try:
        for r in range(rounds):
            names = list(variants)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                t = time.thread_time_ns()
                for done in range(0, launches, 100):  # a finish every 100 launches
                    variants[name](min(100, launches - done))
                    finish()
                samples[name].append((time.thread_time_ns() - t) / launches / 1000)
            _say(".", end="")
    finally:
        gc.enable()
    _say(" done")
    total = x.get()[0]
    expected = launches * rounds * len(variants)
    if total != expected:
        failed.append(f"the timed launches added up to {total}, not {expected}")
    medians = {name: statistics.median(s) for name, s in samples.items()}
    ref = medians["pyopencl knl(queue, (1,), None, x.data, a), typed scalars"]
    _say(f"\n  | {'launch':<58} | µs/launch | x typed pyopencl |")
    _say(f"  |{'-' * 60}|----------:|-----------------:|")
    for name, m in medians.items():
        _say(f"  | {name:<58} | {m:9.2f} | {m / ref:16.2f} |")
    _say(f"  all {expected} timed launches ran: x[0] = {total:.0f}")
    _say("  (instruction counts, which a shared machine does not disturb: tools/bench_launch.py)")

    if failed:
        _say(f"\nFAILED: {'; '.join(failed)}")
        return 1
    _say("\nEvery result matched numpy; the naive cache ran stale code twice, as expected.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
