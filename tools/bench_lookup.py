"""Benchmark of a cached-lookup hit against its floor and the usual alternatives.

Prints one table measured in one run: instructions per call under
``valgrind --tool=callgrind`` (the difference of two loop lengths, so start-up
cancels; the empty loop is subtracted) and nanoseconds per call (median of
interleaved rounds), for:

- floor: a trivial Python function taking the same arguments, returning a bound default;
- specialize: a hit of the function ``specialize(...)`` returns;
- cached_lookup: a hit of ``cached_lookup(...)`` (which first finds that function);
- lru_cache: ``functools.lru_cache`` on the same (F, tt, key);
- dict+lock: a dict behind a lock, what a back-end writes by hand today.

Run: ``python tools/bench_lookup.py`` (needs valgrind for the instruction column).
``--variant NAME --loops N`` runs one loop under the caller's valgrind.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import sys
import threading
import time

import numpy as np
from callgrind import per_iteration  # tools/callgrind.py, beside this script

import specializer
from specializer import GenericFunction, cached_lookup, specialize

SHORT, LONG = 20_000, 220_000


def _setup():
    """Build every variant on the same (F, tt, key) and return {name: zero-arg loop body maker}."""
    kernel = GenericFunction("bench_kernel")

    @kernel.method
    def bench_kernel(x: np.float32) -> str:
        return ""

    tt = (np.float32,)
    key = ("context-0", ())
    result = ("kernel-handle", "state")

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

    def loop_lru(n):
        for _ in range(n):
            lru(F, tt, key)

    def loop_dict_lock(n):
        for _ in range(n):
            dict_lock(F, tt, key)

    return {
        "empty loop": loop_empty,
        "floor": loop_floor,
        "specialize": loop_specialize,
        "cached_lookup": loop_cached_lookup,
        "lru_cache": loop_lru,
        "dict+lock": loop_dict_lock,
    }


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
    args = p.parse_args()
    loops = _setup()
    if args.variant:
        loops[args.variant](args.loops)
        return

    have_vg = shutil.which("valgrind") is not None
    print(
        f"Python {sys.version.split()[0]}, specializer {specializer.__version__}; "
        f"callgrind loops {SHORT} and {LONG}" + ("" if have_vg else " (valgrind not found)")
    )
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


if __name__ == "__main__":
    main()
