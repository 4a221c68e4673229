"""Benchmark of a cached-lookup hit against its floor and the usual alternatives.

Prints one table measured in one run: instructions per call under
``valgrind --tool=callgrind`` (the difference of two loop lengths, so start-up
cancels; the empty loop is subtracted) and nanoseconds per call (median of
interleaved rounds), for:

- floor: a trivial Python function taking the same arguments, returning a bound default;
- specialize: a hit of the function ``specialize(...)`` returns;
- cached_lookup: a hit of ``cached_lookup(...)`` (which first finds that function);
- cached_lookup, F a class: the same with ``F`` a back-end's own class (the seed's usage, ``F``
  the function's type), then ``F`` an instance and a plain function;
- lru_cache: ``functools.lru_cache`` on the same (F, tt, key);
- dict+lock: a dict behind a lock, what a back-end writes by hand today;
- specialize, pin elsewhere: the specialize hit while another thread runs pinned
  (``invoke_in_world``, parked inside the call): a pin changes nothing another task reads;
- specialize, pinned, equal world: a hit in a pinned context of an entry stored under an
  equal world that is another int object (worlds above 256 are distinct objects), so the
  world compares by value.

Then the bars: a specialize hit at most 1.8x the floor's instructions, a cached_lookup hit
at most 2.5x; the hit with a pin elsewhere the plain hit's (within 1%); the pinned hit by value
at most 1.15x the plain hit.

``--contended`` prints a second table instead: the floor, the specialize hit and the
cached_lookup hit in the main thread, idle and while another thread compiles in a loop (every
lookup of it a miss: a key never seen and a config never seen, so ``lookup()`` runs pinned by
``invoke_in_world`` and compiles and links a kernel of the test suite's back-end,
tests/pybackend.py, anew; it defines nothing, so the world stays and the main thread's hits stay
hits). Instructions of the main thread only (one run under ``valgrind --tool=callgrind
--separate-threads=yes``, a marker call ``os.getppid()`` between the loops) and its CPU time
(``time.thread_time_ns``, which leaves out the time it waits for the GIL), each less the empty
loop's under the same condition; the bar: contended at most 1.2x idle.

Run: ``python tools/bench_lookup.py [--contended]`` (needs valgrind for the instruction
column). ``--variant NAME --loops N`` runs one loop under the caller's valgrind.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
# Under the checkout: tools/ (callgrind.py), the checkout's specializer before an installed
# one, and tests/ (pybackend, the contender's back-end).
for _path in (_CHECKOUT / "tools", _CHECKOUT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
if str(_CHECKOUT / "tests") not in sys.path:
    sys.path.append(str(_CHECKOUT / "tests"))

import numpy as np  # noqa: E402
from callgrind import per_iteration, thread_dumps  # noqa: E402  # tools/callgrind.py

import specializer  # noqa: E402
from specializer import GenericFunction, bump, cached_lookup, invoke_in_world, specialize  # noqa: E402

SHORT, LONG = 20_000, 220_000
CONTENDED_LOOPS = 100_000  # hits per loop and condition under callgrind (--contended)
CONTENDED_VARIANTS = ("empty loop", "floor", "specialize", "cached_lookup")
BARS = {"specialize": 1.8, "cached_lookup": 2.5}  # instructions, x the floor
#: instructions, x the specialize hit
#: (a pin elsewhere: the same path as the plain hit; its loop, which starts the pinned
#: thread, may differ from the plain one's by an instruction or two a call)
HIT_BARS = {"specialize, pin elsewhere": 1.01, "specialize, pinned, equal world": 1.15}
CONTENDED_BAR = 1.2  # instructions, contended x idle


def _setup():
    """Build every variant on the same (F, tt, key) and return {name: zero-arg loop body maker}."""
    kernel = GenericFunction("bench_kernel")

    @kernel.method
    def bench_kernel(x: np.float32) -> str:
        return ""

    tt = (np.float32,)
    key = ("context-0", ())
    result = ("kernel-handle", "state")

    # An entry stored unpinned in a world above 256, then a pinned context of that world
    # given as another int object: its hits compare the world by value.
    while specializer.latest() <= 300:
        bump()
    old = specializer.latest()

    def lookup_old():
        return result

    fn_old = specialize(lookup_old, tuple, kernel, tt, type(key))
    fn_old(key, lookup_old)  # stored under the very object latest() returns
    bump()
    pinned = invoke_in_world(int(str(old)), contextvars.copy_context)
    assert pinned.run(specializer.current) == old and pinned.run(specializer.current) is not old

    def lookup():
        return result

    def floor(key, lookup, _r=result):
        return _r

    fn = specialize(lookup, tuple, kernel, tt, type(key))

    @functools.cache
    def lru(F, tt, key):
        return lookup()

    table: dict = {}
    lock = threading.Lock()

    def dict_lock(F, tt, key):
        k = (F, tt, key)
        with lock:
            r = table.get(k)
            if r is None:
                r = table[k] = lookup()
        return r

    F = kernel
    assert floor(key, lookup) is fn(key, lookup) is cached_lookup(lookup, tuple, F, tt, key)
    assert lru(F, tt, key) is dict_lock(F, tt, key) is result

    def loop_empty(n):
        for _ in range(n):
            pass

    def loop_floor(n):
        for _ in range(n):
            floor(key, lookup)

    def loop_specialize(n):
        for _ in range(n):
            fn(key, lookup)

    def loop_cached_lookup(n):
        for _ in range(n):
            cached_lookup(lookup, tuple, F, tt, key)

    class EvalFunction:  # a back-end's own function type, as F
        pass

    instance = EvalFunction()

    def plain():
        pass

    def at(F):  # the hit loop for another F (its first call specializes)
        assert cached_lookup(lookup, tuple, F, tt, key) is result

        def loop(n):
            for _ in range(n):
                cached_lookup(lookup, tuple, F, tt, key)

        return loop

    def loop_lru(n):
        for _ in range(n):
            lru(F, tt, key)

    def loop_dict_lock(n):
        for _ in range(n):
            dict_lock(F, tt, key)

    def loop_pin_elsewhere(n):
        held, release = threading.Event(), threading.Event()

        def parked():
            held.set()
            release.wait()

        t = threading.Thread(target=invoke_in_world, args=(old, parked), daemon=True)
        t.start()
        held.wait()
        try:
            loop_specialize(n)
        finally:
            release.set()
            t.join()

    def loop_old(n):
        for _ in range(n):
            fn_old(key, lookup_old)

    def loop_pinned_equal(n):
        pinned.run(loop_old, n)

    return {
        "empty loop": loop_empty,
        "floor": loop_floor,
        "specialize": loop_specialize,
        "cached_lookup": loop_cached_lookup,
        "cached_lookup, F a class": at(EvalFunction),
        "cached_lookup, F an instance": at(instance),
        "cached_lookup, F a function": at(plain),
        "lru_cache": loop_lru,
        "dict+lock": loop_dict_lock,
        "specialize, pin elsewhere": loop_pin_elsewhere,
        "specialize, pinned, equal world": loop_pinned_equal,
    }


class Contender:
    """Another thread that compiles in a loop while resumed: each turn is a cached lookup with
    a key it never used before and a compiler config never seen, so it misses, runs its
    ``lookup()`` pinned (``invoke_in_world``, as every miss does), and that compiles and links
    a kernel of tests/pybackend.py anew (taking the lookup, world and compiled-code locks). It
    defines nothing: the world stays, so other threads' hits stay hits."""

    def __init__(self) -> None:
        from pybackend import BACKEND, kernel  # tests/pybackend.py

        from specializer import CompilerConfig
        from specializer.kernels import uncached_lookup

        @kernel
        def bench_contender(x: np.number) -> str:
            return "def bench_contender(x):\n    return x + 1\n"

        self.F, self.tt, self.context = bench_contender, (np.float32,), "bench-contender"
        self._backend, self._config, self._uncached = BACKEND, CompilerConfig, uncached_lookup
        self.turns = 0  # misses done, each a compile (its code is kept: about 2 KiB a turn)
        self._go, self._parked, self._stop = threading.Event(), threading.Event(), False
        self._thread = threading.Thread(target=self._run, name="contender", daemon=True)
        self._thread.start()
        self._parked.wait()

    def _turn(self, i: int) -> None:
        F, tt, context = self.F, self.tt, self.context
        config = self._config(self._backend, ("bench-contender", i))
        fn = cached_lookup(
            lambda: self._uncached(F, tt, config, context), object, F, tt, (context, i)
        )
        assert fn(np.float32(i)) == i + 1

    def _run(self) -> None:
        while True:
            if not self._go.is_set():
                self._parked.set()
                self._go.wait()
                self._parked.clear()
            if self._stop:
                return
            self._turn(self.turns)
            self.turns += 1

    def resume(self) -> None:
        """Let it run; returns once it has compiled since."""
        n = self.turns
        self._go.set()
        while self.turns == n:
            time.sleep(0.0002)

    def pause(self) -> None:
        """Stop it after its current turn; returns once it waits."""
        self._go.clear()
        self._parked.wait()

    def stop(self) -> None:
        self._stop = True
        self._go.set()
        self._thread.join()


def _contended_under_callgrind(loops: dict, contender: Contender, report: str) -> None:
    """The idle loops, then the contended ones, each between two markers: dump 1 is start-up,
    2..V+1 the idle loops, V+2 the contender starting, V+3..2V+2 the contended loops; the
    remainder the rest. Writes each contended loop's compiles (and the worlds) to ``report``."""
    world = specializer.latest()
    names = list(CONTENDED_VARIANTS)
    for name in names:  # warm up
        loops[name](1000)
    gc.collect()
    gc.disable()  # no collection of the contender's garbage in a measured loop
    compiles: dict[str, int] = {}
    os.getppid()
    for name in names:
        loops[name](CONTENDED_LOOPS)
        os.getppid()
    contender.resume()
    os.getppid()
    for name in names:
        n = specializer.compile_count()
        loops[name](CONTENDED_LOOPS)
        os.getppid()
        compiles[name] = specializer.compile_count() - n
    contender.pause()
    gc.enable()
    with open(report, "w") as f:
        json.dump({"compiles": compiles, "worlds": [world, specializer.latest()]}, f)
    contender.stop()


def _contended_insns() -> tuple[dict[str, float], dict[str, float], dict]:
    """Main-thread instructions per call of each variant, idle and contended (not yet less
    the empty loop), and the child's report."""
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        dumps = thread_dumps(__file__, "--contended-under-callgrind", report, timeout=1800)
        with open(report) as f:
            child = json.load(f)
    names = list(CONTENDED_VARIANTS)
    if len(dumps) != 2 * len(names) + 3:
        raise RuntimeError(f"{len(dumps)} dumps for {len(names)} variants idle and contended")
    idle = {name: dumps[1 + i] / CONTENDED_LOOPS for i, name in enumerate(names)}
    busy = {name: dumps[2 + len(names) + i] / CONTENDED_LOOPS for i, name in enumerate(names)}
    return idle, busy, child


def _contended_timings(
    loops: dict, contender: Contender, rounds: int, n: int
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Main-thread CPU ns per call, idle and contended: medians of interleaved rounds (each
    variant idle, then contended), and the compiles the contender made in the contended ones."""
    clock = time.thread_time_ns
    idle: dict[str, list[float]] = {k: [] for k in CONTENDED_VARIANTS}
    busy: dict[str, list[float]] = {k: [] for k in CONTENDED_VARIANTS}
    compiles = dict.fromkeys(CONTENDED_VARIANTS, 0)
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name in CONTENDED_VARIANTS:
                body = loops[name]
                contender.pause()
                t = clock()
                body(n)
                idle[name].append((clock() - t) / n)
                contender.resume()
                c = specializer.compile_count()
                t = clock()
                body(n)
                busy[name].append((clock() - t) / n)
                compiles[name] += specializer.compile_count() - c
            print(".", end="", file=sys.stderr, flush=True)
    finally:
        contender.pause()
        gc.enable()
    med = statistics.median
    return {k: med(v) for k, v in idle.items()}, {k: med(v) for k, v in busy.items()}, compiles


def _contended(loops: dict, contender: Contender, have_vg: bool, rounds: int, n: int) -> None:
    world = specializer.latest()
    print(
        f"main thread: {CONTENDED_LOOPS} hits per loop under callgrind --separate-threads=yes; "
        f"thread CPU time, medians of {rounds} interleaved rounds of {n}; both less the empty "
        f"loop's under the same condition; switch interval {sys.getswitchinterval() * 1000:g} "
        "ms",
        flush=True,
    )
    print("measuring", end="", file=sys.stderr, flush=True)
    ns_idle, ns_busy, ns_compiles = _contended_timings(loops, contender, rounds, n)
    contender.stop()
    if have_vg:
        i_idle, i_busy, child = _contended_insns()
        vg_compiles = child["compiles"]
        assert child["worlds"][0] == child["worlds"][1], "the contender raised the world"
    print(" done", file=sys.stderr)
    assert specializer.latest() == world, "the contender raised the world: hits missed"

    print(
        "\n| hit | insns/call idle | contended | x idle | thread CPU ns/call idle "
        "| contended | x idle | contender's compiles (callgrind; timing) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = {}
    for name in CONTENDED_VARIANTS[1:]:
        if have_vg:
            a = i_idle[name] - i_idle["empty loop"]
            b = i_busy[name] - i_busy["empty loop"]
            ratios[name] = b / a
            ins = f"{a:.0f} | {b:.0f} | {b / a:.2f}"
            vg = f"{vg_compiles[name]}"
        else:
            ins, vg = "- | - | -", "-"
        c = ns_idle[name] - ns_idle["empty loop"]
        d = ns_busy[name] - ns_busy["empty loop"]
        print(f"| {name} | {ins} | {c:.1f} | {d:.1f} | {d / c:.2f} | {vg}; {ns_compiles[name]} |")
    if have_vg:
        e_idle, e_busy = i_idle["empty loop"], i_busy["empty loop"]
        print(
            f"\n(empty loop subtracted: {e_idle:.0f} instructions idle, {e_busy:.0f} contended; "
            f"{ns_idle['empty loop']:.1f} and {ns_busy['empty loop']:.1f} ns per iteration)"
        )
    print(f"\nbars (instructions, contended x idle, at most {CONTENDED_BAR}):")
    for name in ("specialize", "cached_lookup"):
        r = ratios.get(name)
        print(
            f"  {name} hit: "
            + ("not measured" if r is None else f"{r:.3f} ({_holds(r, CONTENDED_BAR)})")
        )
    print(f"checked: the world stayed {world}, so every contended hit was a hit")


def _holds(value: float, limit: float) -> str:
    return "holds" if value <= limit else "MISSED"


def _per_call_insns(variant: str) -> float:
    return per_iteration(__file__, "--variant", variant, SHORT, LONG)


def _timings(loops: dict, rounds: int = 15, n: int = 200_000) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in loops}
    for _ in range(rounds):
        for name, body in loops.items():  # interleaved, so drift hits every variant alike
            t = time.perf_counter_ns()
            body(n)
            samples[name].append((time.perf_counter_ns() - t) / n)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant")
    p.add_argument("--loops", type=int)
    p.add_argument(
        "--contended",
        action="store_true",
        help="hits idle and while another thread compiles (main thread only)",
    )
    p.add_argument("--rounds", type=int, default=7, help="--contended: interleaved rounds")
    p.add_argument("--calls", type=int, default=200_000, help="--contended: calls per round")
    p.add_argument("--contended-under-callgrind", metavar="REPORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    # The contender's kernel is defined first: the definition raises the world, which would
    # make the main thread's first hits miss.
    contended = args.contended or args.contended_under_callgrind
    contender = Contender() if contended else None
    loops = _setup()
    if args.variant:
        loops[args.variant](args.loops)
        return
    if args.contended_under_callgrind:
        _contended_under_callgrind(loops, contender, args.contended_under_callgrind)
        return

    have_vg = shutil.which("valgrind") is not None
    print(
        f"Python {sys.version.split()[0]} ({sys.executable}), specializer "
        f"{specializer.__version__} ({Path(specializer.__file__).parent}), {os.cpu_count()} CPUs; "
        + (
            "--contended"
            if args.contended
            else f"callgrind loops {SHORT} and {LONG}"
            + ("" if have_vg else " (valgrind not found)")
        )
    )
    if args.contended:
        _contended(loops, contender, have_vg, args.rounds, args.calls)
        return
    insns = {k: _per_call_insns(k) for k in loops} if have_vg else {}
    ns = _timings(loops)
    base_i = insns.get("empty loop", 0.0)
    base_t = ns["empty loop"]
    floor_i = insns.get("floor", 0.0) - base_i
    floor_t = ns["floor"] - base_t
    print("\n| variant | instructions/call | x floor | ns/call | x floor |")
    print("|---|---:|---:|---:|---:|")
    for k in loops:
        if k == "empty loop":
            continue
        i = insns.get(k, float("nan")) - base_i
        t = ns[k] - base_t
        print(
            f"| {k} | {i:.0f} | {i / floor_i if floor_i else float('nan'):.2f} "
            f"| {t:.1f} | {t / floor_t:.2f} |"
        )
    print(f"\n(loop overhead subtracted: {base_i:.0f} instructions, {base_t:.1f} ns per iteration)")
    print("\nbars (instructions, x the floor):")
    for name, limit in BARS.items():
        if insns:
            r = (insns[name] - base_i) / floor_i
            print(f"  {name} hit: {r:.3f} (at most {limit}: {_holds(r, limit)})")
        else:
            print(f"  {name} hit: not measured (at most {limit})")
    if insns:
        hit = insns["specialize"] - base_i
        for name in ("cached_lookup", *(k for k in loops if k.startswith("cached_lookup, F"))):
            print(f"  {name}: the specialize hit + {insns[name] - base_i - hit:,.0f}")
    print("\nbars (instructions, x the specialize hit):")
    for name, limit in HIT_BARS.items():
        if insns:
            r = (insns[name] - base_i) / (insns["specialize"] - base_i)
            print(f"  {name}: {r:.3f} (at most {limit}: {_holds(r, limit)})")
        else:
            print(f"  {name}: not measured (at most {limit})")


if __name__ == "__main__":
    main()
