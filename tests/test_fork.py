"""SPEC 9's fork rule: a child of a process that used a back-end's device gets the fork error
on every path to that device (launch, a HostKernel call, ``clfunction``, the queue helpers),
never a hang; a child of one that used none works fully; every lock of the package is fresh
in a child, whichever thread held it at the fork.

Each case runs in a fresh interpreter (the test process itself may have used the device),
which sets up, forks and waits for its child with a deadline, killing it if it hangs."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import specializer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: how long a child may take (a hang is a child still running then)
CHILD_DEADLINE = 60

PRELUDE = """
import os, sys, threading, time
import numpy as np
from specializer import compile_count, launching

def run_forked(child, holding=()):
    # child() in a forked child, with a thread of this process holding the locks `holding`
    # at the fork; what it returned or raised, or "hung" if it ran past the deadline.
    held, release = threading.Event(), threading.Event()
    def hold():
        for box in holding:
            box().acquire()
        held.set()
        release.wait()
        for box in reversed(holding):
            box().release()
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            answer = repr(child())
        except BaseException as e:
            answer = f"{type(e).__name__}: {e}"
        os.write(w, answer.encode())
        os._exit(0)
    release.set()
    holder.join()
    os.close(w)
    end = time.monotonic() + DEADLINE
    while os.waitpid(pid, os.WNOHANG)[0] == 0:
        if time.monotonic() > end:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.02)
    return os.read(r, 1 << 16).decode()
"""

OPENCL = """
import pyopencl.array as cla
from specializer.backends import opencl as cl

@cl.kernel
def fill_fork(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void fill_fork(__global float *x, float v) { x[get_global_id(0)] = v; }"

TT = (cl.Array[np.float32], np.float32)
"""


def forked(setup: str, child: str, backend: str = OPENCL) -> str:
    """What ``child`` (a function body) returned or raised in a child forked after ``setup``
    ran in a fresh interpreter, or ``"hung"``."""
    script = "\n".join(
        [
            PRELUDE,
            f"DEADLINE = {CHILD_DEADLINE}",
            backend,
            textwrap.dedent(setup),
            "def child():",
            textwrap.indent(textwrap.dedent(child), "    "),
            "print(run_forked(child, HOLDING if 'HOLDING' in globals() else ()))",
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    r = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=CHILD_DEADLINE + 120,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def assert_fork_error(answer: str) -> None:
    assert answer != "hung", "the child hung"
    assert answer.startswith("RuntimeError:"), answer
    assert "forked" in answer and "'spawn'" in answer, answer
    assert "OpenCL" in answer or "opencl" in answer, answer


# -- a child of a process that used the device --------------------------------------------

USED_A_QUEUE = """
q = cl.default_queue()
x = cla.zeros(q, 4, np.float32)
"""


@pytest.mark.slow
def test_a_host_kernel_made_before_a_fork_refuses_to_run_in_the_child():
    pytest.importorskip("pyopencl")
    setup = (
        USED_A_QUEUE
        + """
hk = cl.clfunction(fill_fork, TT)
hk(x, np.float32(1), global_size=4)
assert x.get().tolist() == [1] * 4
"""
    )
    child = """
hk(x, np.float32(2), global_size=4)
return x.get().tolist()
"""
    assert_fork_error(forked(setup, child))


@pytest.mark.slow
def test_a_host_kernel_made_before_a_fork_refuses_another_queue_in_the_child():
    # the HostKernel's call given a queue of its own: no queue of the parent reaches it
    pytest.importorskip("pyopencl")
    setup = USED_A_QUEUE + "hk = cl.clfunction(fill_fork, TT)\n"
    child = "hk(x, np.float32(2), global_size=4, queue=q)"
    assert_fork_error(forked(setup, child))


@pytest.mark.slow
def test_a_second_launcher_of_a_used_back_end_refuses_in_the_child_as_the_first_does():
    # the record of device use is the back-end's HostKernel class's, which the child's
    # HostKernels check: a second launcher of the same back-end agrees with it
    pytest.importorskip("pyopencl")
    setup = (
        USED_A_QUEUE
        + """
from specializer.backends.opencl._launch import _launcher, definitions
second = type(_launcher)(definitions)
cl.launch(fill_fork, x, np.float32(1), global_size=4)
"""
    )
    assert_fork_error(forked(setup, "second.launch(fill_fork, x, np.float32(2), global_size=4)"))
    assert_fork_error(
        forked(setup, 'second.function(cl.HostKernel, fill_fork, TT, {"queue": None}, {})')
    )


@pytest.mark.slow
def test_the_first_launch_in_a_child_of_a_process_that_only_made_a_queue_is_refused():
    pytest.importorskip("pyopencl")
    child = """
cl.launch(fill_fork, x, np.float32(2), global_size=4)
return x.get().tolist()
"""
    assert_fork_error(forked(USED_A_QUEUE, child))


@pytest.mark.slow
def test_the_queue_helper_in_a_child_of_a_process_that_made_a_queue_is_refused():
    pytest.importorskip("pyopencl")
    assert_fork_error(forked(USED_A_QUEUE, "return cl.default_queue()"))


@pytest.mark.slow
def test_clfunction_in_a_child_of_a_process_that_made_a_queue_is_refused():
    pytest.importorskip("pyopencl")
    assert_fork_error(forked(USED_A_QUEUE, "return cl.clfunction(fill_fork, TT)"))


# -- a child of a process that used no device ----------------------------------------------

NO_DEVICE = """
inst = fill_fork.capture()          # a kernel instance, types: no device
assert cl.typeof(np.float32(1)) is np.float32
"""

WORKS = """
q = cl.default_queue()
x = cla.zeros(q, 4, np.float32)
cl.launch(fill_fork, x, np.float32(1), global_size=4)
first = x.get().tolist()
compiled = compile_count()
cl.launch(fill_fork, x, np.float32(2), global_size=4)  # the cached lookup's front entry
hk = cl.clfunction(fill_fork, TT)
hk(x, np.float32(3), global_size=4)
return first, x.get().tolist(), compile_count() - compiled
"""


@pytest.mark.slow
def test_a_child_of_a_process_that_used_no_device_launches_with_cached_lookups():
    pytest.importorskip("pyopencl")
    assert forked(NO_DEVICE, WORKS) == repr(([1.0] * 4, [3.0] * 4, 0))


# -- locks held by a thread at the fork ------------------------------------------------------

HELD = {
    "launching._lock": "cl._launcher._lock",
    "opencl._programs_lock": "cl._program._programs_lock",
    "opencl._keys_lock": "cl._queues._keys_lock",
    "opencl._default_lock": "cl._queues._default_lock",
}


@pytest.mark.slow
@pytest.mark.parametrize("lock", sorted(HELD))
@pytest.mark.parametrize("used", [False, True], ids=["parent-used-no-device", "parent-used-it"])
def test_a_lock_a_thread_held_at_the_fork_is_fresh_in_the_child(lock, used):
    pytest.importorskip("pyopencl")
    setup = (USED_A_QUEUE if used else NO_DEVICE) + f"HOLDING = [{HELD[lock]}]\n"
    answer = forked(setup, WORKS)
    if used:
        assert_fork_error(answer)
    else:
        assert answer == repr(([1.0] * 4, [3.0] * 4, 0))


@pytest.mark.slow
def test_the_cuda_compiler_locks_are_fresh_in_a_child():
    # NVRTC only (no GPU): code_ptx for an architecture takes the compiler's locks
    pytest.importorskip("cuda.bindings")
    backend = """
from specializer.backends import cuda
from specializer.backends.cuda import _program

@cuda.kernel
def one(x: cuda.Array[np.float32]) -> str:
    return 'extern "C" __global__ void one(float *x) { x[0] = 1; }'
"""
    setup = (
        "HOLDING = [_program._programs_lock, _program._compiles_lock, *_program._compile_locks]\n"
    )
    child = "return '.entry one' in cuda.code_ptx(one, (cuda.Array[np.float32],), arch='sm_90')"
    assert forked(setup, child, backend) == "True"


# -- one registry of locks -------------------------------------------------------------------

PACKAGE = Path(specializer.__file__).resolve().parent  # the package under test
#: what makes a lock (or an object holding one) that the registry would not renew
LOCK_MAKERS = {
    ("threading", n) for n in ("Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore")
} | {("_thread", "allocate_lock"), ("_thread", "RLock")}


def _lock_makers(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in LOCK_MAKERS:
                found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module in ("threading", "_thread"):
            for alias in node.names:
                if (node.module, alias.name) in LOCK_MAKERS:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    return found


def test_every_lock_of_the_package_comes_from_the_registry():
    # specializer.locks renews each lock it made in a forked child; a lock made elsewhere a
    # thread of the parent may hold there for ever
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "locks.py"
        for line, what in _lock_makers(ast.parse(path.read_text(), str(path)))
    ]
    assert not found, "use specializer.locks.new_lock():\n" + "\n".join(found)


def test_the_lock_check_sees_each_way_to_make_a_lock():
    source = "import threading\nfrom threading import RLock\na = threading.Lock()\n"
    assert [what for _, what in _lock_makers(ast.parse(source))] == [
        "from threading import RLock",
        "threading.Lock",
    ]


# -- a fork while another thread imports a dependency ----------------------------------------

# Imported with every render on disk (no Jinja), then each round in a process of its own with
# the disk caches off: a thread makes first lookups (its first render imports Jinja) while the
# round forks children, a few milliseconds apart, that each define a kernel and launch it for
# the first time (renders of their own, which need Jinja). A child forked while the thread was
# importing Jinja would wait for ever on Jinja's import lock. Prints the children that did
# not finish in time and those that failed, per round.
IMPORTING = """
import os, sys, threading, time
import numpy as np
from pybackend import kernel, py, pyfunction

assert "jinja2" not in sys.modules, "a render at import was not on disk"
ROUNDS, CHILDREN, DEADLINE = 3, 16, 30.0  # a hang never ends; a loaded machine is slow

def first_lookups(stop):
    while not stop.is_set():
        @kernel
        def looked_up(x: np.float32) -> str:
            return "def looked_up(x):\\n    return x"

        pyfunction(looked_up, (np.float32,))

def child():
    @py.kernel
    def put(x: py.Array[np.float32]) -> str:
        return "def put(i, x): x[i] = 7"

    x = np.zeros(2, np.float32)
    py.launch(put, x, size=2)
    return x.tolist() == [7.0, 7.0]

def one_round():
    os.environ["SPECIALIZER_CACHE_DIR"] = ""  # every render from here on needs Jinja
    stop = threading.Event()
    thread = threading.Thread(target=first_lookups, args=(stop,))
    thread.start()
    pids = []
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            try:
                ok = child()
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        pids.append(pid)
        time.sleep(0.002)
    stop.set()
    thread.join()
    end = time.monotonic() + DEADLINE
    hung = failed = 0
    for pid in pids:
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > end:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.01)
        else:
            failed += os.waitstatus_to_exitcode(done[1]) != 0
    return hung, failed

rounds = []
for _ in range(ROUNDS):  # each round in a process that has not imported Jinja
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, repr(one_round()).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    rounds.append(os.read(r, 100).decode())
    os.close(r)
print(rounds)
"""


def test_a_fork_while_another_thread_imports_jinja_never_hangs(tmp_path):
    # SPEC 9: a fork never hangs, also while another thread was importing one of the
    # library's dependencies (a fork imports Jinja first, waiting for that thread's import)
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)]),
        "SPECIALIZER_CACHE_DIR": str(tmp_path),
    }
    env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    warm = subprocess.run(
        [sys.executable, "-c", "import pybackend"], env=env, capture_output=True, text=True
    )
    assert warm.returncode == 0, warm.stderr
    r = subprocess.run(
        [sys.executable, "-c", IMPORTING], env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() and ast.literal_eval(r.stdout) == ["(0, 0)"] * 3, r.stdout
