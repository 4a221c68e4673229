"""Instruction counts for the benchmarks: a script's loop run under ``valgrind --tool=callgrind``.

Counts repeat exactly for the same binary and inputs, whatever else the machine does, once the
environment is quiet: no idle BLAS worker threads (callgrind counts every thread) and fixed
string hashes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

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
