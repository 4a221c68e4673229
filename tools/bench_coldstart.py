"""Cold start: a fresh process that imports specializer's OpenCL back-end, defines a kernel,
launches it once and waits for it, against the same program written with plain pyopencl.

Each program runs in its own fresh interpreter, the two interleaved (their order alternating
round to round), with PoCL's kernel cache warm (a cache directory both share, filled before
the first round) and cold (POCL_CACHE_DIR a new empty directory for every run, so PoCL
builds the kernel). Reported per program: the median wall time and the median CPU time
(user + system of the child, which other work on a shared machine disturbs less), and the
ratio specializer / pyopencl. Both import from bytecode caches (``.pyc``), as installed
packages do; the first run writes any that are missing.

Usage: python tools/bench_coldstart.py [--rounds N]   (about 2.5 s a round; 9 rounds ~25 s)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = "__kernel void add(__global float *x, float a) { x[get_global_id(0)] += a; }"

SPECIALIZER = f"""
import numpy as np
import pyopencl.array as cla
from specializer.backends import opencl as cl

@cl.kernel
def add(x: cl.Array[np.float32], a: np.float32) -> str:
    return {SOURCE!r}

queue = cl.default_queue()
x = cla.zeros(queue, 16, np.float32)
cl.launch(add, x, np.float32(1), global_size=16)
queue.finish()
assert x.get()[0] == 1
"""

PYOPENCL = f"""
import numpy as np
import pyopencl as cl
import pyopencl.array as cla

device = next(
    d for p in cl.get_platforms() if "portable computing language" in p.name.lower()
    for d in p.get_devices(device_type=cl.device_type.CPU)
)
queue = cl.CommandQueue(cl.Context([device]))
program = cl.Program(queue.context, {SOURCE!r}).build()
add = cl.Kernel(program, "add")
add.set_scalar_arg_dtypes([None, np.float32])
x = cla.zeros(queue, 16, np.float32)
add(queue, (16,), None, x.data, np.float32(1))
queue.finish()
assert x.get()[0] == 1
"""

PROGRAMS = {"specializer": SPECIALIZER, "pyopencl": PYOPENCL}


def run_once(code: str, cache_dir: str) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one fresh interpreter running ``code``."""
    env = {**os.environ, "POCL_CACHE_DIR": cache_dir}
    env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    # Both programs import from bytecode caches, as installed packages do (pip compiles a
    # wheel's modules when it installs them): the first, unmeasured run writes any missing,
    # also where the environment turns writing them off.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"a benchmark program failed (exit {proc.returncode})")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9, help="runs of each program per cache state")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    print(f"Python {sys.version.split()[0]} ({sys.executable}); {args.rounds} rounds")
    ratios = {}
    with tempfile.TemporaryDirectory(prefix="bench_coldstart.") as tmp:
        warm_dir = os.path.join(tmp, "warm")
        os.mkdir(warm_dir)
        for code in PROGRAMS.values():  # fill the shared cache (and the OS's file cache)
            run_once(code, warm_dir)
        for state in ("warm", "cold"):
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in PROGRAMS}
            for r in range(args.rounds):
                names = list(PROGRAMS) if r % 2 == 0 else list(PROGRAMS)[::-1]
                for name in names:
                    cache = warm_dir if state == "warm" else tempfile.mkdtemp(dir=tmp)
                    samples[name].append(run_once(PROGRAMS[name], cache))
            print(f"\nPoCL cache {state}: medians of {args.rounds} fresh processes each")
            print(f"  {'program':<12} {'wall s':>8} {'CPU s':>8}")
            med = {}
            for name, s in samples.items():
                med[name] = (
                    statistics.median(w for w, _ in s),
                    statistics.median(c for _, c in s),
                )
                print(f"  {name:<12} {med[name][0]:8.3f} {med[name][1]:8.3f}")
            ratio = [med["specializer"][i] / med["pyopencl"][i] for i in (0, 1)]
            ratios[state] = ratio
            print(f"  {'ratio':<12} {ratio[0]:8.2f} {ratio[1]:8.2f}   (specializer / pyopencl)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
