"""Random real interrupts: SIGALRM timers raise KeyboardInterrupt at random moments while
kernels and device functions are defined, the world is bumped, calls are pinned, compile-hook
and precompile blocks are entered and kernels are launched (the pure-Python back-end of the
tests, tests/pybackend.py). After each interrupt it checks what SPEC 9 promises:

- no hook is called after its with statement ended;
- precompile-output mode is as before (off);
- a cached lookup hits again after one slow path;
- the hot path is back on: ``hot_cell[0] == latest()`` after a miss in this thread and in another;
- no pin is in force;
- method tables are consistent: a kernel dispatches to its last definition or to the one the
  interrupt stopped (whole or not at all), and the next definition is seen.

Prints the problems found and the interrupts survived. Run:
``python tools/stress_interrupts.py [--seed S] [--interrupts N]`` (from the repository root).
"""

from __future__ import annotations

import argparse
import gc
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import numpy as np  # noqa: E402
from pybackend import CONFIG, py, typeof  # noqa: E402

from specializer import (  # noqa: E402
    GenericFunction,
    bump,
    cached_lookup,
    current,
    device_code,
    generating_output,
    invoke_in_world,
    latest,
    precompile_output,
)
from specializer import world as world_module  # noqa: E402
from specializer.kernels import DeviceFunction, Kernel, uncached_lookup  # noqa: E402


class Stress:
    """One run: ``Stress(seed).run(interrupts)`` returns (problems, interrupts survived)."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.leaf = DeviceFunction(f"stress_leaf_{seed}")
        self.leaf_version = 0
        self.leaf.add_method(self._leaf_body(0), signature=())
        self.k = Kernel(f"stress_k_{seed}", typeof)
        self.version = 0  # the kernel's last completed definition
        self.k.add_method(self._body(0), signature=(np.number,), callees=[self.leaf])
        self.pk = py.kernel(self._launch_body)  # a launching kernel
        self.hooks_ended: list[Any] = []  # the records of hooks whose with statement ended
        self.problems: list[str] = []
        self.site = GenericFunction(f"stress_site_{seed}")
        self.lookups = 0
        self.durations: dict[str, float] = {}
        self.w0 = latest()  # the first world where everything is defined
        self.attempt = self.leaf_attempt = 0  # the definitions last begun

    # -- what is defined -------------------------------------------------------------------

    def _leaf_body(self, v: int) -> Any:
        return lambda: f"def {self.leaf.name}(): return {v}"

    def _body(self, v: int) -> Any:
        return lambda x: f"def {self.k.name}(x): return ({v}, {self.leaf.name}())"

    @staticmethod
    def _launch_body(x: py.Array[np.int64], v: np.int64) -> str:  # type: ignore[name-defined]
        return "def _launch_body(i, x, v): x[i] = v"

    def call(self, *args: Any) -> Any:
        return uncached_lookup(self.k, tuple(typeof(a) for a in args), CONFIG, "ctx")(*args)

    def cached(self) -> tuple[int, int]:
        def lookup() -> tuple[int, int]:
            self.lookups += 1
            return (current(), self.lookups)

        return cached_lookup(lookup, tuple, self.site, (), "key")

    # -- operations (each may be interrupted anywhere) ----------------------------------------

    def op_define(self) -> None:
        self.attempt = self.version + 1
        self.k.add_method(self._body(self.attempt), signature=(np.number,), callees=[self.leaf])
        self.version = self.attempt

    def op_define_leaf(self) -> None:
        self.leaf_attempt = self.leaf_version + 1
        self.leaf.add_method(self._leaf_body(self.leaf_attempt), signature=())
        self.leaf_version = self.leaf_attempt

    def op_bump(self) -> None:
        bump()

    def op_pin(self) -> None:
        w = self.rnd.randint(max(self.w0, latest() - 5), latest())
        invoke_in_world(w, self.call, 1)
        invoke_in_world(w, self.cached)

    def op_hook(self) -> None:
        record: dict[str, Any] = {"calls": 0}

        def hook(job: Any, artifact: Any) -> None:
            record["calls"] += 1

        try:
            with device_code(hook):
                self.call(1)
                self.cached()
        finally:
            # From here on the hook must not be called. The record is whole before it is
            # listed: an interrupt between the two stores leaves it unlisted, never half-made.
            record["ended_at"] = record["calls"]
            self.hooks_ended.append(record)

    def op_precompile(self) -> None:
        with precompile_output():
            self.call(1)
            with precompile_output(False):
                self.cached()
            self.cached()

    def op_launch(self) -> None:
        x = np.zeros(8, np.int64)
        py.launch(self.pk, x, np.int64(3), size=8)
        py.launch(self.pk, x, np.int64(4), size=8)

    OPS = (
        "op_define",
        "op_define_leaf",
        "op_bump",
        "op_pin",
        "op_hook",
        "op_precompile",
        "op_launch",
    )

    # -- the invariants ------------------------------------------------------------------------

    def problem(self, what: str) -> None:
        self.problems.append(what)

    def check(self, op: str, interrupted: bool, n: int) -> None:
        where = f"after interrupt {n} ({op})" if interrupted else f"after {op}"
        # A definition is whole or not at all: the one the interrupt stopped may have landed.
        if op == "op_define" and interrupted and self.version != self.attempt:
            got = self.call(1)[0]
            if got == self.attempt:
                self.version = self.attempt
            elif got != self.version:
                self.problem(f"{where}: kernel returns version {got}, not {self.version}")
        leaf_stopped = op == "op_define_leaf" and interrupted
        if leaf_stopped and self.call(1)[1] == self.leaf_attempt:
            self.leaf_version = self.leaf_attempt
        got = self.call(1)
        if got != (self.version, self.leaf_version):
            self.problem(f"{where}: dispatch gives {got}, not {(self.version, self.leaf_version)}")
        # no hook called after its with statement ended
        for rec in self.hooks_ended:
            if rec["calls"] != rec["ended_at"]:
                self.problem(f"{where}: a hook was called after its with statement ended")
                rec["ended_at"] = rec["calls"]
        self.hooks_ended = self.hooks_ended[-20:]
        # precompile mode as before (off); a switch precompile_output(False) left by an
        # interrupt before its block began is a plain call's switch: off as before too
        if generating_output():
            self.problem(f"{where}: precompile-output mode left on")
        world_module.switch_precompile(None)
        # cached lookups hit again after one slow path, the hot path back on in this thread
        self.cached()
        before = self.lookups
        r = self.cached()
        if self.lookups != before or r[0] != latest():
            self.problem(f"{where}: a cached lookup does not hit again")
        if world_module.hot_cell[0] != latest():
            self.problem(f"{where}: the hot path is off (hot_cell[0] = {world_module.hot_cell[0]})")
        # ... and in another thread
        seen: list[Any] = []

        def other() -> None:
            getattr(world_module, "settle", world_module.refresh)()  # what a slow path does
            seen.append((world_module.task_cell()[0], self.cached()[0]))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        if seen != [(latest(), latest())]:
            self.problem(f"{where}: another thread's hot path is off: {seen}")
        # no pin in force (a pin lives while a context that can run code holds it)
        if world_module.pins():
            gc.collect()
            if world_module.pins():
                self.problem(f"{where}: {world_module.pins()} pin(s) left in force")
        # the launch works
        x = np.zeros(4, np.int64)
        py.launch(self.pk, x, np.int64(7), size=4)
        if x.tolist() != [7] * 4:
            self.problem(f"{where}: a launch wrote {x.tolist()}")

    # -- the run ---------------------------------------------------------------------------------

    def run(self, interrupts: int, seconds: float | None = None, verbose: bool = False) -> int:
        armed = [False]

        def handler(signum: int, frame: Any) -> None:
            if armed[0]:
                armed[0] = False
                raise KeyboardInterrupt("timer")

        old = signal.signal(signal.SIGALRM, handler)
        survived, runs = 0, 0
        deadline = None if seconds is None else time.monotonic() + seconds
        gc.collect()
        gc.disable()  # a collection's callbacks and finalizers would swallow the interrupt
        try:
            while survived < interrupts and (deadline is None or time.monotonic() < deadline):
                op = self.rnd.choice(self.OPS)
                runs += 1
                delay = self.rnd.random() * self.durations.get(op, 1e-3)
                interrupted = False
                t = time.perf_counter()
                try:
                    armed[0] = True
                    signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
                    getattr(self, op)()
                    armed[0] = False  # before the timer stops: a late signal does nothing
                    signal.setitimer(signal.ITIMER_REAL, 0)
                except KeyboardInterrupt:
                    armed[0] = False
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    interrupted = True
                else:
                    self.durations[op] = time.perf_counter() - t
                n_before = len(self.problems)
                try:
                    self.check(op, interrupted, survived + 1)
                except Exception as e:  # a check that cannot even run is a problem too
                    self.problem(f"after {op} (interrupted: {interrupted}): {e!r}")
                if interrupted:
                    survived += 1
                if verbose and len(self.problems) > n_before:
                    for p in self.problems[n_before:]:
                        print(p, flush=True)
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            gc.enable()
        return survived


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interrupts", type=int, default=2000)
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    args = ap.parse_args(argv)
    s = Stress(args.seed)
    t = time.perf_counter()
    survived = s.run(args.interrupts, verbose=not args.quiet)
    first = ""
    if s.problems:
        first = f" (the first: {s.problems[0]})"
    print(
        f"seed {args.seed}: {len(s.problems)} problems found{first}, {survived} interrupts "
        f"survived, {time.perf_counter() - t:.1f} s"
    )
    return 1 if s.problems else 0


if __name__ == "__main__":
    sys.exit(main())
