"""``python -m specializer demo``: OpenCL kernels on PoCL, a callee redefined, and launch costs.

It defines a few kernels (a generic one, one calling a device function, one with a captured
value), runs them on PoCL's CPU device and checks each result against numpy; redefines the
device function and shows the kernel that calls it follow (and only that kernel recompile);
then measures what a launch costs with the cached lookup, with the cache bypassed, and as
pyopencl's own call of a kernel retrieved once. It exits non-zero if any result is wrong.
"""

# No `from __future__ import annotations`: the kernels below are defined inside main(), and
# their annotations name its locals, so they must be evaluated where they are written.
import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _say(text: str = "", end: str = "\n") -> None:
    print(text, end=end, flush=True)


class _Checks:
    """Runs each step with a line of progress and records whether its result matched numpy."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def run(self, label: str, step: Callable[[], tuple[Any, Any]]) -> None:
        _say(f"  {label:<58}", end="")
        t = time.perf_counter()
        got, expected = step()
        took = time.perf_counter() - t
        ok = np.array_equal(np.asarray(got), np.asarray(expected))
        note = f" ({took:.2f} s)" if took >= 0.1 else ""
        _say(("ok" if ok else "WRONG") + note)
        if not ok:
            self.failed.append(label)
            _say(f"    got      {np.asarray(got)[:8]}\n    expected {np.asarray(expected)[:8]}")


def _define_square(cl: Any, power: int) -> Any:
    body = " * ".join(["v"] * power)

    @cl.device
    def square() -> str:
        return f"float square(float v) {{ return {body}; }}"

    return square


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m specializer demo", description=__doc__)
    p.add_argument("--launches", type=int, default=2000, help="launches per timed block")
    p.add_argument("--rounds", type=int, default=9, help="timed blocks per variant")
    args = p.parse_args(argv)

    _say("specializer demo: OpenCL kernels through cached_lookup", end="")
    try:
        import pyopencl
        import pyopencl.array as cla

        from specializer.backends import opencl as cl

        queue = cl.default_queue()
    except (ImportError, RuntimeError) as e:
        _say(f"\nthe demo needs pyopencl and PoCL (pip install 'specializer[opencl]'): {e}")
        return 1
    import specializer

    _say(
        f" on {queue.device.name} ({queue.device.platform.name}), pyopencl {pyopencl.VERSION_TEXT}"
    )
    checks = _Checks()
    n = 1024
    rng = np.random.default_rng(0)
    host = rng.integers(-8, 8, n).astype(np.float32)

    # -- 1. kernels --------------------------------------------------------------------------
    square = _define_square(cl, 2)

    @cl.kernel(callees=[square])
    def apply(x: cl.Array[np.float32]) -> str:
        return """__kernel void apply(__global float *x) {
                      size_t i = get_global_id(0); x[i] = square(x[i]); }"""

    @cl.kernel  # generic: one method for every element type
    def fill(x: cl.Array[np.number], v: np.number) -> str:
        return f"""__kernel void fill(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                       x[get_global_id(0)] = v; }}"""

    @cl.kernel  # a = captured, passed on every launch of an instance
    def axpy(a: np.floating, x: cl.Array[np.floating], y: cl.Array[np.floating]) -> str:
        t = cl.ctype(x.dtype)
        return f"""__kernel void axpy({cl.ctype(a)} a, __global const {t} *x, __global {t} *y) {{
                       size_t i = get_global_id(0); y[i] += a * x[i]; }}"""

    _say("\n1. Kernels on PoCL, each result checked against numpy (a first launch builds)")
    x32 = cla.zeros(queue, n, np.float32)
    x64 = cla.zeros(queue, n, np.int64)

    def run_fill32():
        cl.launch(fill, x32, np.float32(2.5), global_size=n)
        return x32.get(), np.full(n, 2.5, np.float32)

    def run_fill64():
        cl.launch(fill, x64, 7, global_size=n)  # a Python int is an np.int64
        return x64.get(), np.full(n, 7, np.int64)

    def run_axpy():
        xa = cla.to_device(queue, host)
        ya = cla.to_device(queue, np.ones(n, np.float32))
        cl.launch(axpy.capture(np.float32(3)), xa, ya, global_size=n)
        return ya.get(), np.ones(n, np.float32) + np.float32(3) * host

    xs = cla.to_device(queue, host)

    def run_apply():
        xs.set(host)
        cl.launch(apply, xs, global_size=n)
        return xs.get(), host**2

    checks.run("launch(fill, x: Array[np.float32], np.float32(2.5))", run_fill32)
    checks.run("launch(fill, x: Array[np.int64], 7): the same method", run_fill64)
    checks.run("launch(axpy.capture(np.float32(3)), x, y): y += 3x", run_axpy)
    checks.run("launch(apply, x): x = square(x), a device function", run_apply)

    # -- 2. redefinition ---------------------------------------------------------------------
    compiles, world = specializer.compile_count(), specializer.latest()
    _define_square(cl, 3)
    _say(
        f"\n2. Redefine the device function square as v*v*v (world {world} -> "
        f"{specializer.latest()}); apply follows"
    )

    def run_apply_again():
        xs.set(host)
        cl.launch(apply, xs, global_size=n)
        return xs.get(), host**3

    checks.run("launch(apply, x): now x = x^3", run_apply_again)
    checks.run("launch(fill, ...) again, unchanged", run_fill32)
    checks.run("launch(axpy.capture(...), ...) again, unchanged", run_axpy)
    recompiled = specializer.compile_count() - compiles
    _say(f"  recompiled: {recompiled} kernel (apply); fill and axpy kept their code")
    if recompiled != 1:
        checks.failed.append(f"the redefinition recompiled {recompiled} kernels, not 1")

    # -- 3. launch costs ---------------------------------------------------------------------
    source = "__kernel void acc(__global float *x, float a) { x[get_global_id(0)] += a; }"

    @cl.kernel
    def acc(x: cl.Array[np.float32], a: np.float32) -> str:
        return source

    knl = pyopencl.Kernel(pyopencl.Program(queue.context, source).build(), "acc")
    x = cla.zeros(queue, 1, np.float32)
    one = np.float32(1)
    launches, rounds = args.launches, args.rounds

    def cached(m: int) -> None:
        launch = cl.launch
        for i in range(m):
            launch(acc, x, one, global_size=(1,))
            if i % 100 == 99:
                queue.finish()

    def bypassed(m: int) -> None:
        launch = cl.launch
        with specializer.device_code(lambda job, artifact: None):
            for i in range(m):
                launch(acc, x, one, global_size=(1,))
                if i % 100 == 99:
                    queue.finish()

    def reference(m: int) -> None:
        k, q = knl, queue
        for i in range(m):
            k(q, (1,), None, x.data, one)
            if i % 100 == 99:
                q.finish()

    variants = {
        "specializer launch(acc, x, a, ...), cached lookup": cached,
        "specializer launch, cache bypassed (in device_code)": bypassed,
        "pyopencl knl(queue, (1,), None, x.data, a), knl made once": reference,
    }
    for body in variants.values():  # warm up (and build acc)
        body(100)
    queue.finish()
    x.fill(0)
    _say(
        f"\n3. What a launch costs: one work item, two arguments; medians of {rounds} rounds "
        f"of {launches} launches,\n   variants interleaved; measuring",
        end="",
    )
    samples: dict[str, list[float]] = {name: [] for name in variants}
    gc.disable()
    try:
        for r in range(rounds):
            names = list(variants)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                t = time.perf_counter_ns()
                variants[name](launches)
                queue.finish()
                samples[name].append((time.perf_counter_ns() - t) / launches / 1000)
            _say(".", end="")
    finally:
        gc.enable()
    _say(" done")
    total = x.get()[0]
    expected = launches * rounds * len(variants)
    if total != expected:
        checks.failed.append(f"the timed launches added up to {total}, not {expected}")
    medians = {name: statistics.median(s) for name, s in samples.items()}
    ref = medians[list(variants)[-1]]
    _say(f"\n  | {'launch path':<58} | µs/launch | x pyopencl |")
    _say(f"  |{'-' * 60}|----------:|-----------:|")
    for name, m in medians.items():
        _say(f"  | {name:<58} | {m:9.2f} | {m / ref:10.2f} |")
    _say(f"  all {expected} timed launches ran: x[0] = {total:.0f}")

    if checks.failed:
        _say(f"\nFAILED: {'; '.join(checks.failed)}")
        return 1
    _say("\nAll results match numpy.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
