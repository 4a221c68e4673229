"""Instruction counts for the benchmarks: a script's loop run under ``valgrind --tool=callgrind``.

Counts repeat exactly for the same binary and inputs, whatever else the machine does, once the
environment is quiet: no idle BLAS worker threads (callgrind counts every thread) and fixed
string hashes.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping

QUIET_ENV = {
    **os.environ,
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
}


def instructions(script: str, *args: str, timeout: float = 300) -> int:
    """Instructions retired by ``python script args...`` under callgrind (all threads)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                os.path.abspath(script),
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=timeout,
            env=QUIET_ENV,
        )
        with open(out) as f:
            text = f.read()
    m = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)", text, re.M)
    return int(m.group(1))


def per_iteration(
    script: str, flag: str, variant: str, short: int, long: int, timeout: float = 300
) -> float:
    """Instructions per iteration of ``script flag variant --loops N``: the difference of two
    loop lengths, so start-up cancels."""
    a = instructions(script, flag, variant, "--loops", str(short), timeout=timeout)
    b = instructions(script, flag, variant, "--loops", str(long), timeout=timeout)
    return (b - a) / (long - short)


def thread_dumps(
    script: str,
    *args: str,
    python: str | None = None,
    marker: str = "getppid",
    thread: int = 1,
    timeout: float = 900,
) -> list[int]:
    """One thread's instruction counts, dump by dump, of ``python script args...`` under
    ``valgrind --tool=callgrind --separate-threads=yes --dump-before=<marker>``.

    The script calls the marker (``os.getppid()``, libc's ``getppid``) between the loops it
    measures; callgrind dumps its counters before each call, so the list holds what ran before
    the first marker, then between each two markers, then (the final, un-numbered dump) the
    remainder after the last. Only ``thread``'s files are read (1: the main thread, files
    ``<out>.<N>-01`` and ``<out>-01``), so the worker threads of an OpenCL runtime or a BLAS are
    not counted. ``python`` defaults to this interpreter.
    """
    tid = f"{thread:02d}"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--dump-before={marker}",
            f"--callgrind-out-file={out}",
            python or sys.executable,
            os.path.abspath(script),
            *args,
        ]
        run = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=QUIET_ENV
        )
        if run.returncode:
            raise RuntimeError(
                f"{' '.join(command)} exited with {run.returncode}:\n{run.stderr[-3000:]}"
            )
        numbered: dict[int, str] = {}
        remainder = None
        for name in os.listdir(d):
            m = re.fullmatch(r"cg\.out(?:\.(\d+))?-(\d+)", name)
            if m and m.group(2) == tid:
                if m.group(1) is None:
                    remainder = name
                else:
                    numbered[int(m.group(1))] = name
        if sorted(numbered) != list(range(1, len(numbered) + 1)) or remainder is None:
            raise RuntimeError(f"callgrind left dumps {sorted(os.listdir(d))} for thread {tid}")
        counts = []
        for name in [numbered[n] for n in sorted(numbered)] + [remainder]:
            with open(os.path.join(d, name)) as f:
                text = f.read()
            m = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(
                r"^totals:\s*(\d+)", text, re.M
            )
            counts.append(int(m.group(1)) if m else 0)
    return counts


#: passes over the variants under callgrind: the last is reported, the spread says how they differ
PASSES = 2

Loop = Callable[[int], object]  # a variant: runs its loop n times


def settle(variants: Mapping[str, Loop], warm_up: int) -> None:
    """Collect, then run every variant ``warm_up`` times more, then stop the collector: the
    first loop of some variant after a collection can cost milliseconds, which no measured loop
    should hold. The caller enables the collector again."""
    gc.collect()
    for v in variants.values():
        v(warm_up)
    gc.disable()


def marked_passes(variants: Mapping[str, Loop], n: int, warm_up: int) -> None:
    """What a script runs under :func:`thread_dumps`: PASSES passes over the variants, each
    loop of ``n`` between two markers, in the mapping's order. Dump 1 is start-up, dump
    ``2 + pass * len(variants) + i`` variant ``i``, the remainder what follows."""
    settle(variants, warm_up)
    os.getppid()
    try:
        for _ in range(PASSES):
            for v in variants.values():
                v(n)
                os.getppid()
    finally:
        gc.enable()


def last_pass(
    dumps: list[int], names: list[str], n: int, steady: Iterable[str] | None = None
) -> tuple[dict[str, float], str, float]:
    """From the dumps of :func:`marked_passes` over ``names``: instructions per loop of each
    variant in the last pass, and of the ``steady`` variants (default: all) the one whose
    passes differ most, by how much (a fraction of its last pass)."""
    if len(dumps) != PASSES * len(names) + 2:
        raise RuntimeError(f"{len(dumps)} dumps for {PASSES} passes of {len(names)} variants")
    passes = [
        {name: dumps[1 + p * len(names) + i] / n for i, name in enumerate(names)}
        for p in range(PASSES)
    ]
    spread = {
        name: (max(q[name] for q in passes) - min(q[name] for q in passes)) / passes[-1][name]
        for name in (names if steady is None else steady)
    }
    worst = max(spread, key=spread.__getitem__)
    return passes[-1], worst, spread[worst]


def rotating_rounds(
    variants: Mapping[str, Loop],
    n: int,
    rounds: int,
    warm_up: int,
    clock: Callable[[], float],
    to_us: float,
) -> dict[str, list[float]]:
    """µs per loop of each variant, a sample a round: every round runs each loop of ``n``
    once, in an order rotating by one variant per round (``clock``'s difference times
    ``to_us`` is microseconds). A dot on standard error per round."""
    samples: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    settle(variants, warm_up)
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                v = variants[name]
                t = clock()
                v(n)
                samples[name].append((clock() - t) * to_us / n)
            print(".", end="", file=sys.stderr, flush=True)
    finally:
        gc.enable()
    return samples
