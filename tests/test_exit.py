"""A clean exit, every run (SPEC 9, the project's exit-crash issue): a program that leaves
launches of kernels new to PoCL on the library's default queue, unwaited, exits 0. The library
finishes and drops its default queue at exit, before the interpreter's (and the C library's)
exit handlers run, so no PoCL worker thread still compiles for it then.
``python tools/stress_exit.py --runs 30`` runs the full program 30 times."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyopencl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from stress_exit import run_once


@pytest.mark.slow
def test_a_program_leaving_launches_unwaited_on_the_default_queue_exits_cleanly_every_run():
    base = random.SystemRandom().randrange(10**6, 10**9, 100_000)  # sources new to PoCL
    statuses = []
    for n in range(8):
        status, out, err = run_once(base + n * 100_000, factory=10, tail=26)
        assert out.endswith("done\n"), out + err  # the program ran to its last line
        statuses.append((status, err) if status else 0)
    assert statuses == [0] * 8


def test_the_library_finishes_and_drops_its_default_queue_at_exit():
    from specializer.backends import opencl as cl
    from specializer.backends.opencl import _queues

    queue = cl.default_queue()
    assert _queues.default_where[0][0] is queue
    try:
        _queues.finish_default_queue()  # what runs at exit (atexit, at the back-end's import)
        assert _queues.default_where[0] == (None, None)
    finally:
        cl.set_default_queue(queue)  # the other tests' default, as it was
    assert cl.default_queue() is queue
