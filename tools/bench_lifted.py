"""What each lifted compiler kwarg costs a launch that omits it, and what a launch with a value
of a subclass of its guard's class costs (docs/reference-backend.md, "Costs").

A launcher's ``lifted`` kwargs are keyword parameters of its generated ``launch`` (default
``NOTHING``), passed on to the front entry, which compares each with its own: a launch that
gives none still pays for each. Measured on the test suite's pure-Python back-end
(tests/pybackend.py), one launcher per count of lifted kwargs (0, 1, 2, 4), each launching
one kernel that hits, under ``valgrind --tool=callgrind`` (tools/callgrind.py, main thread
only, a marker between the loops, less an empty loop's count). Then the launcher without lifted
kwargs launched with a numpy scalar subclass's value (``class Mine(np.float32)``), which fails
the guard's identity check and so takes the slow path on every launch; and with compiler
kwargs that alternate (``defines={"N": 1}``, then ``{"N": 2}``), which the newest front entry's
``alternates`` hold.

Run: ``PYTHONPATH=. python tools/bench_lifted.py`` (about a minute).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOPS = 5_000
SLOW_LOOPS = 500
COUNTS = (0, 1, 2, 4)


def _measured() -> None:
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    from pybackend import PyLauncher, py

    from specializer.kernels import Definitions

    runs = []
    for n in (*COUNTS, 1):  # the last, with one lifted kwarg, for the alternating kwargs

        class Lifted(PyLauncher):
            name = f"lifted{n}_{len(runs)}"
            front_attr = f"_lifted{n}_{len(runs)}_front"
            lifted = tuple(f"opt{i}" for i in range(n))

        defs = Definitions(py.typeof, "bench")
        launcher = Lifted(defs, py.backend)

        @defs.kernel(localns=locals())
        def k(x: py.Array[np.float32], b: np.float32) -> str:
            return "def k(i, x, b): pass"

        runs.append((launcher, k, np.zeros(1, np.float32), np.float32(1)))

    class Mine(np.float32):
        pass

    mine = Mine(1)
    one, two = {"N": 1}, {"N": 2}
    for launcher, k, x, b in runs:  # after every definition: one world
        for _ in range(200):
            launcher.launch(k, x, b, size=1)
    for _ in range(2):  # two passes: the last is read
        os.getppid()
        for _ in range(LOOPS):
            pass
        for launcher, k, x, b in runs[: len(COUNTS)]:
            launch = launcher.launch
            os.getppid()
            for _ in range(LOOPS):
                launch(k, x, b, size=1)
        launcher, k, x, _ = runs[0]
        os.getppid()
        for _ in range(SLOW_LOOPS):
            launcher.launch(k, x, mine, size=1)
        launcher, k, x, b = runs[-1]
        os.getppid()
        for _ in range(LOOPS // 2):
            launcher.launch(k, x, b, size=1, defines=one)
            launcher.launch(k, x, b, size=1, defines=two)
        os.getppid()
    assert all(launcher.misses == 1 for launcher, *_ in runs[1:-1])  # every measured one hit
    assert runs[0][0].misses == 1 + 2 * SLOW_LOOPS  # the subclass's: every one a miss


def main() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from callgrind import thread_dumps

    dumps = thread_dumps(__file__, "--under-callgrind")
    empty, *loops, slow, alternating = dumps[-4 - len(COUNTS) : -1]
    per = [(c - empty) / LOOPS for c in loops]
    print(f"CPython {sys.version.split()[0]}: instructions per launch (a hit), none given")
    for n, p in zip(COUNTS, per):
        extra = f"  (+{(p - per[0]) / n:,.0f} per lifted kwarg)" if n else ""
        print(f"  {n} lifted kwargs: {p:,.0f}{extra}")
    slow_per = (slow - empty * SLOW_LOOPS / LOOPS) / SLOW_LOOPS
    print(f"a numpy scalar subclass's value (the slow path): {slow_per:,.0f} per launch")
    print(f"defines= alternating, 1 lifted kwarg: {(alternating - empty) / LOOPS:,.0f} per launch")


if __name__ == "__main__":
    if "--under-callgrind" in sys.argv:
        _measured()
    else:
        main()
