"""A clean exit, every run: a program that defines, redefines and drops kernels while it
launches, and leaves its last launches on the default queue unwaited, run in fresh processes.

Each run gets a number that makes every kernel source new to PoCL's cache (so PoCL's worker
threads compile the work-group functions of the last launches as the program ends). Before
the library finished and released its default queue at exit, some runs ended with signal 11
(or 6): the main thread ran the C library's exit handlers (``OPENSSL_cleanup``) while a PoCL
worker still compiled for a launch nobody waited for. Plain pyopencl releases the user's queue
as the interpreter finalizes, and PoCL waits for its commands then.

Run: ``python tools/stress_exit.py --runs 30`` (about 10 s a run on two cores): prints each
run's exit status and the count of clean exits (exit 0, the program's last line printed);
exits 1 unless every run was clean.
``--factory N`` and ``--tail N`` set how many kernels the program makes before and at its end
(200 and 26, as the program that showed the crash).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time

PROGRAM = """
import sys, numpy as np, pyopencl.array as cla, specializer
from specializer.backends import opencl as cl
BASE = int(sys.argv[1]); FACTORY = int(sys.argv[2]); TAIL = int(sys.argv[3])
q = cl.default_queue()
@cl.kernel
def g(x: cl.Array[np.number]) -> str:
    return f"__kernel void g(__global {cl.ctype(x.dtype)} *x) {{ x[get_global_id(0)] += 1; }}"
x = cla.zeros(q, 8, np.float32)
with specializer.device_code(lambda job, art: None):
    cl.launch(g, x, global_size=8)
@g.method
def _(x: cl.Array[np.float32]) -> str:
    return "__kernel void g(__global float *x) { x[get_global_id(0)] += 2; }"
cl.launch(g, x, global_size=8)
g.delete_method((cl.Array[np.float32],))
cl.launch(g, x, global_size=8)
def make(c):
    @cl.kernel
    def prod(x: cl.Array[np.float32]) -> str:
        return f"__kernel void prod(__global float *x) {{ x[get_global_id(0)] += {c % 2**24}.0f; }}"
    return prod
for i in range(FACTORY):
    make(BASE + 10_000 + i); cl.launch(g, x, global_size=8)
print(x.get()[:2])
for i in range(TAIL):
    k = make(BASE + 20_000 + i); cl.launch(k, x, global_size=8)
del k; print("done")  # the last launches are not waited for
"""


def run_once(base: int, factory: int, tail: int, timeout: float = 300) -> tuple[int, str, str]:
    """The program's exit status in a fresh process, its output, and the end of its errors."""
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(base), str(factory), str(tail)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr[-2000:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--factory", type=int, default=200)
    p.add_argument("--tail", type=int, default=26)
    args = p.parse_args()
    base = random.SystemRandom().randrange(10**6, 10**9, 100_000)
    clean = 0
    for n in range(args.runs):
        t = time.monotonic()
        status, out, err = run_once(base + n * 100_000, args.factory, args.tail)
        clean += status == 0 and out.endswith("done\n")
        print(f"run {n + 1}: exit {status} ({time.monotonic() - t:.1f} s)", flush=True)
        if status or not out.endswith("done\n"):
            print(out[-400:] + err, file=sys.stderr)
    print(
        f"{clean} of {args.runs} clean (exit 0 after the last line; pid {os.getpid()}, base {base})"
    )
    return 0 if clean == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
