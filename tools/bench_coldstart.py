"""Cold start: a user's program, run as ``python program.py`` in a fresh process, that imports
specializer's OpenCL back-end, defines one kernel, launches it once and waits for it, against
the same program written with plain pyopencl (``Program(...).build()``, a ``Kernel`` with
``set_scalar_arg_dtypes``, one call).

Each program is a script file in a temporary directory, run by its own fresh interpreter
(``sys.executable program.py``, as a user runs it, not ``-c``); the two are interleaved, their
order alternating round to round. Both import from bytecode caches (``.pyc``), as installed
packages do: the first, unmeasured run of each writes any that are missing, also where the
environment sets ``PYTHONDONTWRITEBYTECODE``. That run also fills the warm caches: PoCL's
kernel cache (one ``POCL_CACHE_DIR`` both programs share) and specializer's own
(``SPECIALIZER_CACHE_DIR``, the renders of its launch-path templates). With ``--cold``, a second
pass gives every run a new, empty ``POCL_CACHE_DIR``, so PoCL builds the kernel.

Measured per run: wall time, and CPU time (user + system of the child, from ``wait4``), which
other work on a shared machine disturbs less. Reported per program the median of the rounds,
and specializer / pyopencl two ways: the median of the per-round ratios (each round's two
runs side by side), and the ratio of the medians.

Usage: python tools/bench_coldstart.py [--rounds N] [--cold]
(on a shared 2-core machine about 1.5 s a round warm, 4 s cold; 21 rounds warm, about 35 s)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

SOURCE = "__kernel void add(__global float *x, float a) { x[get_global_id(0)] += a; }"

SPECIALIZER = f"""\
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

PYOPENCL = f"""\
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


def run_once(script: str, pocl_cache: str, spec_cache: str) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one fresh interpreter running ``script``."""
    env = {**os.environ, "POCL_CACHE_DIR": pocl_cache, "SPECIALIZER_CACHE_DIR": spec_cache}
    env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    # Both programs import from bytecode caches, as installed packages do (pip compiles a
    # wheel's modules when it installs them): the first, unmeasured run writes any missing,
    # also where the environment turns writing them off.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t = time.perf_counter()
    pid = os.posix_spawn(sys.executable, [sys.executable, script], env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"a benchmark program failed ({script}, exit {code})")
    return wall, usage.ru_utime + usage.ru_stime


def report(state: str, samples: dict[str, list[tuple[float, float]]]) -> None:
    """Medians per program, and specializer / pyopencl as the median of the per-round ratios
    and as the ratio of the medians, for wall and CPU time."""
    n = len(samples["specializer"])
    print(f"\nPoCL cache {state}: {n} rounds, one fresh process of each program a round")
    print(f"  {'':<34} {'wall s':>8} {'CPU s':>8}")
    med = {}
    for name, s in samples.items():
        med[name] = [statistics.median(x[i] for x in s) for i in (0, 1)]
        print(f"  {name + ' (median)':<34} {med[name][0]:8.3f} {med[name][1]:8.3f}")
    per_round = [
        statistics.median(a[i] / b[i] for a, b in zip(samples["specializer"], samples["pyopencl"]))
        for i in (0, 1)
    ]
    of_medians = [med["specializer"][i] / med["pyopencl"][i] for i in (0, 1)]
    print(f"  {'ratio: median of per-round ratios':<34} {per_round[0]:8.3f} {per_round[1]:8.3f}")
    print(f"  {'ratio: ratio of medians':<34} {of_medians[0]:8.3f} {of_medians[1]:8.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=21, help="runs of each program per cache state")
    p.add_argument("--cold", action="store_true", help="also measure with PoCL's cache cold")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    print(f"Python {sys.version.split()[0]} ({sys.executable}); {args.rounds} rounds")
    with tempfile.TemporaryDirectory(prefix="bench_coldstart.") as tmp:
        scripts = {}
        for name, code in PROGRAMS.items():
            scripts[name] = os.path.join(tmp, f"{name}_program.py")
            with open(scripts[name], "w", encoding="utf-8") as f:
                f.write(code)
        warm_dir, spec_cache = os.path.join(tmp, "pocl"), os.path.join(tmp, "specializer")
        os.mkdir(warm_dir)
        for script in scripts.values():  # bytecode, both warm caches, the OS's file cache
            run_once(script, warm_dir, spec_cache)
        for state in ("warm", "cold") if args.cold else ("warm",):
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in PROGRAMS}
            for r in range(args.rounds):
                for name in list(PROGRAMS) if r % 2 == 0 else list(PROGRAMS)[::-1]:
                    pocl = warm_dir if state == "warm" else tempfile.mkdtemp(dir=tmp)
                    samples[name].append(run_once(scripts[name], pocl, spec_cache))
            report(state, samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
