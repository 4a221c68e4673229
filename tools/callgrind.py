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
