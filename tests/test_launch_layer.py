"""The launch layer's promises for a process's whole life (issue 31): a kernel is refused by
every back-end but its own, whatever attribute names their launchers use (SPEC 7); a launch
reads a default where once, whatever another thread sets meanwhile; a fork inside a compile
hook of a launch still running gets the fork error, never a hang (SPEC 9); and nothing the
launch layer keeps (where tables, argument-set records) holds a user's kernel, queue,
sampler, local memory or scalar alive (SPEC 9 and 10)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyopencl
import pyopencl.array as cla
import pytest

from specializer.backends import opencl as cl
from specializer.kernels import Definitions

F32 = cl.Array[np.float32]


@pytest.fixture
def queue():
    return cl.default_queue()


# -- a kernel belongs to one back-end's definitions (SPEC 7) --------------------------------------


def test_two_back_ends_whose_launchers_use_one_front_attribute_refuse_each_others_kernels():
    # Two pure-Python back-ends, each with definitions of its own and a launcher of the same
    # class (so the same front_attr, and the same typeof): neither runs the other's kernel.
    from pybackend import PyLauncher, items_typeof, py

    other_defs = Definitions(items_typeof, "the other back-end")
    other = PyLauncher(other_defs, py.backend)
    F = py.Array[np.float32]

    @py.kernel(localns=locals())
    def mine_only(x: F) -> str:
        return "def mine_only(i, x): x[i] = 1"

    @other_defs.kernel(localns=locals())
    def theirs_only(x: F) -> str:
        return "def theirs_only(i, x): x[i] = 2"

    x = np.zeros(2, np.float32)
    for _ in range(2):  # the second time, each kernel has its own back-end's front entry
        py.launch(mine_only, x, size=2)
        other.launch(theirs_only, x, size=2)
    assert x.tolist() == [2, 2]
    for launcher, k in ((other, mine_only), (py.launcher, theirs_only)):
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.launch(k, x, size=2)
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.function(k, (F,), None, {})
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.launch(k.capture(), x, size=2)
    assert x.tolist() == [2, 2]


def test_a_back_end_using_the_opencl_front_attribute_refuses_opencl_kernels(queue):
    from pybackend import PyLauncher, items_typeof, py

    class Same(PyLauncher):
        front_attr = cl._launcher.front_attr  # what OpenCL's launcher asked for

    same = Same(Definitions(items_typeof, "same names"), py.backend)

    @cl.kernel
    def put_seven(x: F32) -> str:
        return "__kernel void put_seven(__global float *x) { x[get_global_id(0)] = 7; }"

    x = cla.zeros(queue, 2, np.float32)
    cl.launch(put_seven, x, global_size=2)
    queue.finish()
    x.fill(0)
    with pytest.raises(TypeError, match="kernel put_seven was defined with another back-end"):
        same.launch(put_seven, x, size=2)
    queue.finish()
    assert x.get().tolist() == [0, 0]


# -- a launch reads a default where once --------------------------------------------------------


def test_set_default_queue_in_another_thread_while_kernels_launch_for_the_first_time(queue):
    # A thread switches the default queue between two queues of one context while the main
    # thread launches fresh kernels (a factory's products) with no queue: each launch runs
    # on one of them, and none is refused as a back-end's mistake.
    q2 = pyopencl.CommandQueue(queue.context)
    x = cla.zeros(queue, 4, np.float32)
    stop = threading.Event()

    def switch():
        while not stop.is_set():
            cl.set_default_queue(q2)
            cl.set_default_queue(queue)

    def factory(v):
        @cl.kernel
        def put_first(x: F32) -> str:
            assert v is not None  # a closure: each run of the factory gives its own kernel
            return "__kernel void put_first(__global float *x) { x[get_global_id(0)] += 1; }"

        return put_first

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    switcher = threading.Thread(target=switch)
    switcher.start()
    errors = []
    try:
        for i in range(60):
            try:
                cl.launch(factory(i), x, global_size=4)
            except TypeError as e:
                errors.append(str(e))
    finally:
        stop.set()
        switcher.join()
        sys.setswitchinterval(interval)
        cl.set_default_queue(queue)
    queue.finish()
    q2.finish()
    assert errors == []
    assert x.get().tolist() == [60] * 4


# -- a fork inside a compile hook of a launch still running (SPEC 9) ----------------------------

HOOK_FORK = """
import os, sys, time
import numpy as np
import pyopencl.array as cla
from specializer import device_code
from specializer.backends import opencl as cl

@cl.kernel
def fill_in_hook(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void fill_in_hook(__global float *x, float v) { x[get_global_id(0)] = v; }"

q = cl.default_queue()
x = cla.zeros(q, 4, np.float32)
r, w = os.pipe()
forks = []

def hook(job, artifact):
    # a compile hook that forks: the child resumes the launch (or lookup) that called it
    if not forks:
        forks.append(os.fork())

with device_code(hook):
    try:
        PATH
        answer = "returned"  # (in a child: anything it enqueued on the parent's queue hangs)
    except BaseException as e:
        answer = f"{type(e).__name__}: {e}"
if forks[0] == 0:  # the child
    os.write(w, answer.encode())
    os._exit(0)
os.close(w)
end = time.monotonic() + DEADLINE
while os.waitpid(forks[0], os.WNOHANG)[0] == 0:
    if time.monotonic() > end:
        os.kill(forks[0], 9)
        os.waitpid(forks[0], 0)
        print("parent:", answer, x.get().tolist())
        print("hung")
        sys.exit(0)
    time.sleep(0.02)
print("parent:", answer, x.get().tolist())
print(os.read(r, 1 << 16).decode())
"""

#: each device path a compile hook can run inside: the launch's miss and clfunction
HOOKED_PATHS = {
    "launch": ("cl.launch(fill_in_hook, x, np.float32(2), global_size=4)", [2.0] * 4),
    "clfunction": ("cl.clfunction(fill_in_hook, (cl.Array[np.float32], np.float32))", [0.0] * 4),
}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("path", sorted(HOOKED_PATHS))
def test_a_fork_inside_a_compile_hook_gives_the_child_the_fork_error_never_a_hang(path):
    code, after = HOOKED_PATHS[path]
    script = HOOK_FORK.replace("PATH", code).replace("DEADLINE", "60")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env
    )
    assert r.returncode == 0, r.stderr
    parent, child = r.stdout.strip().splitlines()[-2:]
    assert parent == f"parent: returned {after}"  # the parent's call ran
    assert child != "hung", "the child hung"
    assert child.startswith("RuntimeError:"), child
    assert "forked" in child and "'spawn'" in child and "opencl" in child, child
