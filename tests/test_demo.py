"""The demo as a newcomer meets it: its arguments checked before anything runs, a --help that
states what it really does and its real defaults, and a line saying what a world is."""

import os
import subprocess
import sys

import pytest

from specializer import demo


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "SPECIALIZER_PRECOMPILE_OUTPUT"}
    return subprocess.run(
        [sys.executable, "-m", "specializer", "demo", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--launches", "0"], "argument --launches: must be at least 1, got 0"),
        (["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
        (["--launches", "-5", "--rounds", "1"], "argument --launches: must be at least 1, got -5"),
        (["--rounds", "two"], "argument --rounds: expected a whole number, got 'two'"),
    ],
)
def test_demo_refuses_counts_below_one_before_running_anything(args, says):
    r = _cli(*args)
    assert r.returncode == 2
    assert f"python -m specializer demo: error: {says}" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_demo_help_states_the_defaults_the_demo_uses():
    r = _cli("--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert f"(default {demo.LAUNCHES})" in text and f"(default {demo.ROUNDS})" in text
    # what it shows, and nothing it does not (no captured value, no bypassed cache)
    assert "naive cache" in text and "pinned to an older world" in text
    assert "captured" not in text and "bypass" not in text
    assert "pip install -e '.[opencl]'" in text


def test_demo_says_what_a_world_is_and_why_each_number_moves():
    # In a process of its own: the demo's kernels are methods of specializer.demo's generic
    # functions, so a second run in one process would add to the first run's.
    pytest.importorskip("pyopencl")
    r = _cli("--launches", "1", "--rounds", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert demo.WORLD_LINE in out and len(demo.WORLD_LINE) <= 100
    w0 = int(out.split("scale(x, 2) in world ")[1].split()[0])
    assert f"(defining scale: {w0 - 1} -> {w0})" in out
    assert f"world {w0} -> {w0 + 1}" in out  # the float32 method
    w2 = w0 + 3  # offset, then shift
    assert f"in world {w2} (defining offset: {w0 + 1} -> {w0 + 2}, then shift:" in out
    assert f"world {w2} -> {w2 + 1}" in out  # offset redefined
