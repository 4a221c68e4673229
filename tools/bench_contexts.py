"""What dropped OpenCL contexts cost a long-running process, against plain pyopencl.

Each iteration creates a context and a queue on PoCL's CPU device, allocates an array, launches
a kernel on it twice (specializer: ``launch`` and a ``clfunction`` HostKernel; pyopencl: a
program built and its kernel called with ``set_scalar_arg_dtypes``), checks the result, and
drops everything. Printed: the process's resident size (from ``/proc/self/statm``, after a
collection) every ``--every`` iterations, for both, and the growth per context between the
first report after warm-up and the last. A library that kept each context's built program
would grow by about a megabyte per context.

Run: ``python tools/bench_contexts.py`` (about 25 s for 400 contexts each).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys

SOURCE = "__kernel void k(__global float *a, float b) { a[get_global_id(0)] += b; }"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _run(which: str, n: int, every: int) -> None:
    import numpy as np
    import pyopencl
    import pyopencl.array as cla

    from specializer.backends import opencl as cl

    device = cl.default_queue().device

    @cl.kernel
    def k(a: cl.Array[np.float32], b: np.float32) -> str:
        return SOURCE

    def one_specializer() -> None:
        q = pyopencl.CommandQueue(pyopencl.Context([device]))
        x = cla.zeros(q, 4, np.float32)
        cl.launch(k, x, np.float32(1), global_size=4, queue=q)
        cl.clfunction(k, (cl.Array[np.float32], np.float32), queue=q)(
            x, np.float32(1), global_size=4
        )
        assert x.get().tolist() == [2, 2, 2, 2]

    def one_pyopencl() -> None:
        ctx = pyopencl.Context([device])
        q = pyopencl.CommandQueue(ctx)
        x = cla.zeros(q, 4, np.float32)
        knl = pyopencl.Program(ctx, SOURCE).build().k
        knl.set_scalar_arg_dtypes([None, np.float32])
        knl(q, (4,), None, x.data, 1)
        knl(q, (4,), None, x.data, 1)
        assert x.get().tolist() == [2, 2, 2, 2]

    one = one_specializer if which == "specializer" else one_pyopencl
    for i in range(1, n + 1):
        one()
        if i % every == 0:
            gc.collect()
            print(f"{i} {_rss_mib():.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, default=400)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--run", choices=("specializer", "pyopencl"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.contexts, args.every)
        return
    rows = {}
    for which in ("specializer", "pyopencl"):  # each in a process of its own
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--run",
                which,
                "--contexts",
                str(args.contexts),
                "--every",
                str(args.every),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows[which] = [(int(a), float(b)) for a, b in (line.split() for line in out.splitlines())]
    print(
        f"resident size (MiB) after N contexts created, launched on and dropped, Python "
        f"{sys.version.split()[0]}:\n"
    )
    print("| contexts | specializer | plain pyopencl |")
    print("|---:|---:|---:|")
    for (i, a), (_, b) in zip(rows["specializer"], rows["pyopencl"]):
        print(f"| {i} | {a:.1f} | {b:.1f} |")
    print()
    for which, pts in rows.items():  # from the first report (the warm-up) to the last
        (i0, r0), (i1, r1) = pts[0], pts[-1]
        print(f"{which}: {(r1 - r0) * 1024 / (i1 - i0):.1f} KiB per context ({i0} to {i1})")


if __name__ == "__main__":
    main()
