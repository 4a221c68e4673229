"""The launch layer's promises for a process's whole life: a kernel is refused by every
back-end but its own (SPEC 7); a launch reads a default where once, whatever another thread
sets meanwhile; a fork inside a compile hook of a launch still running gets the fork error,
never a hang (SPEC 9); and nothing the launch layer keeps (launch cells, invokers,
argument-set records) holds a user's kernel, queue, context, sampler, local memory or scalar
alive (SPEC 9 and 10)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import types
import weakref
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


def test_two_back_ends_of_one_launcher_class_refuse_each_others_kernels():
    # Two pure-Python back-ends, each with definitions of its own and a launcher of the same
    # class (the same name, and the same typeof): neither runs the other's kernel.
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
    for _ in range(2):  # the second time, each kernel has its own back-end's entry
        py.launch(mine_only, x, size=2)
        other.launch(theirs_only, x, size=2)
    assert x.tolist() == [2, 2]
    for launcher, k in ((other, mine_only), (py.launcher, theirs_only)):
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.launch(k, x, size=2)
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.function(py.HostKernel, k, (F,), {}, {})
        with pytest.raises(TypeError, match=rf"kernel {k.name} was defined with another back-end"):
            launcher.launch(k.capture(), x, size=2)
    assert x.tolist() == [2, 2]


def test_a_back_end_named_as_opencl_refuses_opencl_kernels(queue):
    from pybackend import PyLauncher, items_typeof, py

    class Same(PyLauncher):
        name = "opencl"  # the attribute its cells would take is OpenCL's: it is numbered

    same = Same(Definitions(items_typeof, "same names"), py.backend)
    assert same.attr != cl._launcher.attr

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


# -- nothing the launch layer keeps holds a user's kernel or value (SPEC 9 and 10) ---------------


def _reached(roots, targets):
    """The ``targets`` (objects, by identity) that strong references lead to from ``roots``,
    through anything but modules, classes (other than targets) and a function's globals (a
    module's state: the core's caches, whose part of this promise is theirs)."""
    wanted = {id(t) for t in targets}
    seen, found, todo = set(), set(), list(roots)
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if id(o) in wanted:
            found.add(id(o))
            continue
        if isinstance(o, (type, types.ModuleType)) or (isinstance(o, dict) and "__builtins__" in o):
            continue
        if isinstance(o, types.FunctionType):
            todo.extend(r for r in gc.get_referents(o) if r is not o.__globals__)
            todo.append(o.__dict__)
            continue
        todo.extend(gc.get_referents(o))
    return [t for t in targets if id(t) in found]


def test_launched_factory_kernels_are_not_held_by_cells_invokers_or_records():
    # Products of a kernel factory launched on two queues (the kernel, a kernel instance,
    # and a clfunction HostKernel's call), then dropped: no launch cell, invoker or
    # argument-set record of a linked kernel refers to one of them.
    q1 = cl.default_queue()
    q2 = pyopencl.CommandQueue(q1.context)
    x1, x2 = cla.zeros(q1, 4, np.float32), cla.zeros(q2, 4, np.float32)

    def factory(v):
        @cl.kernel
        def product(x: F32, s: np.float32) -> str:
            assert v is not None  # a closure: each run of the factory gives its own kernel
            return "__kernel void product(__global float *x, float s) { x[get_global_id(0)] += s; }"

        return product

    refs, linked = [], []
    for i in range(40):
        k = factory(i)
        inst = k.capture()
        for f in (k, inst):
            cl.launch(f, x1, np.float32(1), global_size=4)
            cl.launch(f, x2, np.float32(1), global_size=4, queue=q2)
            cl.launch(f, x1, np.float32(1), global_size=4)  # q1's entry again (a hit)
        hk = cl.clfunction(k, (F32, np.float32))
        hk(x1, np.float32(1), global_size=4)
        linked.append(hk.linked)
        refs += [weakref.ref(k), weakref.ref(type(inst))]
    del k, inst, f, hk
    q1.finish()
    q2.finish()
    assert x1.get().tolist() == [40 * 5] * 4 and x2.get().tolist() == [40 * 2] * 4
    gc.collect()
    alive = [r() for r in refs if r() is not None]  # (the core's caches may still hold them)
    roots = [*(lk.pool for lk in linked), *(lk.invokers for lk in linked)]
    assert _reached(roots, alive) == []
    assert _reached([q1, q2], alive) == []  # nothing was written into the queues


def test_launched_factory_kernels_are_freed_once_dropped():
    q = cl.default_queue()
    x = cla.zeros(q, 4, np.float32)

    def factory(v):
        @cl.kernel
        def freed_product(x: F32) -> str:
            assert v is not None
            return "__kernel void freed_product(__global float *x) { x[get_global_id(0)] += 1; }"

        return freed_product

    refs = []
    for i in range(50):
        k = factory(i)
        cl.launch(k, x, global_size=4)
        cl.launch(k.capture(), x, global_size=4)
        refs.append(weakref.ref(k))
    del k
    q.finish()
    gc.collect()
    assert [r for r in refs if r() is not None] == []


@cl.kernel
def held_args(
    out: F32, scratch: cl.LocalMemory, img: cl.Image, smp: cl.Sampler, v: np.float32
) -> str:
    return """__kernel void held_args(__global float *out, __local float *scratch,
                                      __read_only image2d_t img, sampler_t smp, float v) {
        scratch[0] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        out[0] = scratch[0];
        out[1] = read_imagef(img, smp, (int2)(-1, 0)).x;  /* outside: as the sampler says */
    }"""


def _sampler(queue, mode):
    return pyopencl.Sampler(queue.context, False, mode, pyopencl.filter_mode.NEAREST)


def test_a_record_holds_no_sampler_or_local_memory_and_launches_with_new_ones_stay_right(queue):
    out = cla.zeros(queue, 2, np.float32)
    img = pyopencl.image_from_array(queue.context, np.full((2, 2), 8.0, np.float32), 1)
    edge, border = pyopencl.addressing_mode.CLAMP_TO_EDGE, pyopencl.addressing_mode.CLAMP
    for round_ in range(6):
        # a new sampler and local memory each round (an address may be reused: a sampler
        # that is gone and a new one at its address must not be taken for each other)
        mode = edge if round_ % 2 else border
        smp, lm = _sampler(queue, mode), pyopencl.LocalMemory(4 * (1 + round_ % 3))
        before = (sys.getrefcount(smp), sys.getrefcount(lm))
        for v in (1, 2):
            cl.launch(held_args, out, lm, img, smp, np.float32(v + round_), global_size=1)
            queue.finish()
            assert out.get().tolist() == [v + round_, 8.0 if mode == edge else 0.0]
        assert (sys.getrefcount(smp), sys.getrefcount(lm)) == before  # not held
        del smp, lm


@cl.kernel
def put_captured(v: np.float32, out: F32) -> str:
    return "__kernel void put_captured(float v, __global float *out) { out[0] = v; }"


class Tagged(np.float32):
    """A numpy scalar subclass: it may hold anything, and be referred to weakly."""


def test_a_record_holds_no_captured_scalar_nor_a_scalar_of_a_subclass(queue):
    out = cla.zeros(queue, 1, np.float32)
    for i in range(3):
        v = np.float32(10 + i)
        before = sys.getrefcount(v)
        inst = put_captured.capture(v)
        for _ in range(2):  # the second a hit
            cl.launch(inst, out, global_size=1)
            queue.finish()
            assert out.get().tolist() == [10 + i]
        del inst
        gc.collect()
        assert sys.getrefcount(v) == before
    for i in range(3):
        tagged = Tagged(20 + i)
        ref = weakref.ref(tagged)
        for _ in range(2):
            cl.launch(
                held_args,
                out2 := cla.zeros(queue, 2, np.float32),
                pyopencl.LocalMemory(4),
                pyopencl.image_from_array(queue.context, np.zeros((2, 2), np.float32), 1),
                _sampler(queue, pyopencl.addressing_mode.CLAMP),
                tagged,
                global_size=1,
            )
            queue.finish()
            assert out2.get()[0] == 20 + i
        del tagged
        gc.collect()
        assert ref() is None


# -- SPEC 10: nothing is written into a pyopencl queue; no entry holds a queue or context --------


def test_launches_on_queues_write_nothing_into_them_keep_hitting_and_hold_none():
    q1 = cl.default_queue()
    q2 = pyopencl.CommandQueue(pyopencl.Context([q1.device]))  # another context
    x1, x2 = cla.zeros(q1, 4, np.float32), cla.zeros(q2, 4, np.float32)

    @cl.kernel
    def on_two_queues(x: F32) -> str:
        return "__kernel void on_two_queues(__global float *x) { x[get_global_id(0)] += 1; }"

    hk = cl.clfunction(on_two_queues, (F32,), queue=q2)
    hk(x2, global_size=4)
    for _ in range(2):  # the misses: one per context
        cl.launch(on_two_queues, x1, global_size=4)
        cl.launch(on_two_queues, x2, global_size=4, queue=q2)
    misses = cl._launcher.misses
    for _ in range(5):  # each context's entry: no miss
        cl.launch(on_two_queues, x1, global_size=4)
        cl.launch(on_two_queues, x2, global_size=4, queue=q2)
    assert cl._launcher.misses == misses
    q1.finish()
    q2.finish()
    assert x1.get().tolist() == [7.0] * 4 and x2.get().tolist() == [8.0] * 4
    for q in (q1, q2):  # pyopencl's own caches only
        assert all(name.startswith(("_info_cache_", "_memoize_")) for name in q.__dict__), (
            q.__dict__
        )
    # the kernel's cell keys the second context by its key, which holds it weakly: once the
    # user drops its queue (and what uses the context), the context is freed, its entries go
    cell = getattr(on_two_queues, cl._launcher.attr)
    assert len((cell[0], *cell[1])) == 2
    context_object = weakref.ref(q2.context)
    del q, q2, x2, hk
    gc.collect()
    assert context_object() is None  # the queue and its context object were freed
    assert len((cell[0], *cell[1])) == 1  # the gone context's entry went with it
    cl.launch(on_two_queues, x1, global_size=4)  # and the other still hits
    assert cl._launcher.misses == misses
    q1.finish()
    assert x1.get().tolist() == [8.0] * 4


def test_two_queues_of_one_context_share_its_entry_and_take_their_own_queue():
    q1 = cl.default_queue()
    q2 = pyopencl.CommandQueue(q1.context)
    x = cla.zeros(q1, 4, np.float32)

    @cl.kernel
    def on_one_context(x: F32) -> str:
        return "__kernel void on_one_context(__global float *x) { x[get_global_id(0)] += 1; }"

    cl.launch(on_one_context, x, global_size=4)
    misses = cl._launcher.misses
    for _ in range(4):
        cl.launch(on_one_context, x, global_size=4, queue=q2).wait()
        cl.launch(on_one_context, x, global_size=4, queue=q1).wait()
    assert cl._launcher.misses == misses
    events = [cl.launch(on_one_context, x, global_size=4, queue=q) for q in (q1, q2)]
    assert [e.command_queue.int_ptr for e in events] == [q1.int_ptr, q2.int_ptr]
    q1.finish()
    q2.finish()
    assert x.get().tolist() == [11.0] * 4
