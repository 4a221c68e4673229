"""Benchmark: a kernel factory's products, launched and dropped, are freed (SPEC 9).

A kernel factory is a function that defines an ``@cl.kernel`` closure over one of its locals:
each call makes a kernel of its own. This launches ``--n`` (2,000) products on the OpenCL
back-end (PoCL's CPU device by default), each twice (the miss, then its cell's entry), drops
them, collects, and prints how many are still alive (weak references) and how much the
process grew (resident set, MiB, after a warm-up of 50 products so that the runtime's own
first-use costs are not counted, and after glibc's ``malloc_trim`` where there is one, so
that freed memory the allocator kept does not count). Then it does the same again: a
second batch that grows the process as much as the first keeps what the first did, one
that reuses the first's memory does not. By default the products share one source (one
program per context); ``--distinct`` gives each its own source (a build each: slower).

Run: ``python tools/bench_lifetime.py [--n 2000] [--distinct]``; exits 1 if any is alive.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import weakref
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if str(_CHECKOUT) not in sys.path:  # the checkout's specializer before an installed one
    sys.path.insert(0, str(_CHECKOUT))

import numpy as np  # noqa: E402
import pyopencl.array as cla  # noqa: E402

from specializer.backends import opencl as cl  # noqa: E402

SOURCE = """__kernel void scale(__global float *x, float v) {
    x[get_global_id(0)] *= v%s; }"""


def factory(n: int, distinct: bool):
    """One product: a kernel closing over ``n`` (its source names ``n`` only if ``distinct``)."""

    @cl.kernel
    def scale(x: cl.Array[np.float32], v: np.float32) -> str:
        return SOURCE % (f" + {n}.0f" if distinct else "")

    return scale


def rss_mib() -> float:
    """The process's resident set now, MiB (``/proc/self/statm``), after a collection and
    glibc's ``malloc_trim(0)`` (where the C library has it)."""
    gc.collect()
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def launch_products(start: int, n: int, distinct: bool, x) -> list[weakref.ref]:
    refs = []
    for i in range(start, start + n):
        k = factory(i, distinct)
        for _ in range(2):
            cl.launch(k, x, np.float32(1), global_size=x.size)
        refs.append(weakref.ref(k))
    x.queue.finish()
    return refs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=2_000, help="products launched and dropped")
    p.add_argument("--distinct", action="store_true", help="a source of its own per product")
    args = p.parse_args()
    queue = cl.default_queue()
    x = cla.zeros(queue, 64, np.float32)
    launch_products(-50, 50, args.distinct, x)  # warm-up: the runtime's first-use costs
    print(
        f"Python {sys.version.split()[0]}; {queue.device.name.strip()}; "
        f"{'distinct sources' if args.distinct else 'one shared source'}"
    )
    alive = 0
    for batch in ("first", "second"):
        before = rss_mib()
        refs = launch_products(0 if batch == "first" else args.n, args.n, args.distinct, x)
        grown = rss_mib() - before
        left = sum(r() is not None for r in refs)
        alive += left
        print(
            f"{batch} {args.n} factory products launched and dropped: {left} alive after "
            f"gc.collect(); the process grew {grown:+.1f} MiB "
            f"({grown * 1024 / args.n:+.1f} KiB per product)"
        )
    return 1 if alive else 0


if __name__ == "__main__":
    sys.exit(main())
