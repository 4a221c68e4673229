"""Kernels travel to worker processes: they pickle by reference, as functions do, and each
worker launches the kernel of its own import on its own PoCL queue."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402

from specializer.backends import opencl as cl  # noqa: E402
from specializer.types import Struct, Weak  # noqa: E402


@cl.kernel
def fill_in_worker(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void fill_in_worker(__global float *x, float v) { x[get_global_id(0)] = v; }"


@cl.kernel
def axpy_in_worker(a: np.float32, x: cl.Array[np.float32], y: cl.Array[np.float32]) -> str:
    return """__kernel void axpy_in_worker(float a, __global const float *x, __global float *y) {
                  size_t i = get_global_id(0); y[i] += a * x[i]; }"""


def _fill(job):
    k, v = job
    x = cla.zeros(cl.default_queue(), 8, np.float32)
    cl.launch(k, x, v, global_size=8)
    return x.get()


def _axpy(job):
    k, x, y = job
    q = cl.default_queue()
    dy = cla.to_device(q, y)
    cl.launch(k, cla.to_device(q, x), dy, global_size=len(x))
    return dy.get()


def test_kernels_and_kernel_instances_pickle_by_reference():
    assert pickle.loads(pickle.dumps(fill_in_worker)) is fill_in_worker
    inst = axpy_in_worker.capture(np.float32(2))
    back = pickle.loads(pickle.dumps(inst))
    assert type(back) is type(inst) and back.values == inst.values


@pytest.mark.slow
def test_a_spawn_pool_launches_kernels_and_kernel_instances_on_pocl():
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, np.float32)
    jobs = [(fill_in_worker, np.float32(3)), (fill_in_worker, np.float32(4))]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        filled = pool.map(_fill, jobs)
        summed = pool.map(_axpy, [(axpy_in_worker.capture(np.float32(a)), x, y) for a in (2, 3)])
    assert [a.tolist() for a in filled] == [[3] * 8, [4] * 8]
    for a, got in zip((2, 3), summed):
        assert np.array_equal(got, y + np.float32(a) * x)


def _clfunction_in_worker(job):
    k, tt, v = job
    hk = cl.clfunction(k, tt)
    x = cla.zeros(cl.default_queue(), 8, np.float32)
    hk(x, v, global_size=8)
    return tt, x.get()


STRUCT = np.dtype([("x", "<f4"), ("n", "<i4")])


@pytest.mark.parametrize(
    "t",
    [
        cl.Array[np.float32],
        cl.Array[np.floating],
        cl.Array,
        cl.Array[STRUCT],
        cl.Buffer,
        Weak[int],
        Weak[float],
        Weak,
        Struct[STRUCT],
        Struct,
    ],
    ids=repr,
)
def test_argument_types_pickle_to_the_same_interned_type(t):
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(t, protocol)) is t


def test_cuda_argument_types_pickle_to_the_same_interned_type():
    cuda = pytest.importorskip("specializer.backends.cuda")
    for t in (cuda.Array[np.float16], cuda.Array[np.integer], cuda.Array):
        assert pickle.loads(pickle.dumps(t)) is t
    assert pickle.loads(pickle.dumps(cuda.Array[np.float16])) is not cl.Array[np.float16]


def _interned_in_worker(tt):
    mine = (cl.Array[np.float32], cl.Array[STRUCT], Weak[int], Struct[STRUCT])
    return [a is b for a, b in zip(tt, mine)]


def test_argument_types_sent_to_a_spawn_worker_are_its_own_interned_types():
    tt = (cl.Array[np.float32], cl.Array[STRUCT], Weak[int], Struct[STRUCT])
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(_interned_in_worker, [tt]) == [[True] * 4]


def test_clfunction_runs_in_a_spawn_worker_with_argument_types_from_the_parent():
    jobs = [
        (fill_in_worker, (cl.Array[np.float32], np.float32), np.float32(5)),
        (fill_in_worker, (cl.Array[np.float32], Weak[float]), 6.0),
    ]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_clfunction_in_worker, jobs)
    assert [tt for tt, _ in results] == [tt for _, tt, _ in jobs]  # the same types came back
    assert [x.tolist() for _, x in results] == [[5] * 8, [6] * 8]


def _launch_in_fork(conn):
    try:
        _fill((fill_in_worker, np.float32(1)))
        conn.send("launched")
    except RuntimeError as e:
        conn.send(str(e))
    conn.close()


@pytest.mark.skipif(not hasattr(multiprocessing, "get_context"), reason="no multiprocessing")
def test_a_fork_after_launches_gets_a_clear_error_instead_of_hanging():
    import os
    import warnings

    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    _fill((fill_in_worker, np.float32(2)))  # the parent uses the back-end
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        p = ctx.Process(target=_launch_in_fork, args=(child,))
        p.start()
    assert parent.poll(60), "the forked child did not answer: it hung"
    message = parent.recv()
    p.join(30)
    assert "forked" in message and "'spawn' start method" in message, message


FORK_BEFORE_ANY_LAUNCH = r"""
import os, sys
import numpy as np
import pyopencl.array as cla
from specializer import compile_count
from specializer.backends import opencl as cl

@cl.kernel
def fill_forked(x: cl.Array[np.number], v: np.number) -> str:
    return f'''__kernel void fill_forked(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                   x[get_global_id(0)] = v; }}'''

pid = os.fork()  # defined, never launched: the child may use the back-end fully
if pid == 0:
    code = 1
    try:
        q = cl.default_queue()
        xs = [cla.zeros(q, 4, np.float32), cla.zeros(q, 4, np.int32)]
        for i in range(6):  # two signatures, each launched three times
            x = xs[i % 2]
            cl.launch(fill_forked, x, x.dtype.type(i), global_size=4)
        after = compile_count()
        for i in range(4):
            cl.launch(fill_forked, xs[0], np.float32(7), global_size=4)
        ok = xs[0].get().tolist() == [7] * 4 and xs[1].get().tolist() == [5] * 4
        print("child", ok, compile_count() == after, flush=True)
        code = 0
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_process_forked_before_it_launched_anything_works_fully_in_the_child():
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", FORK_BEFORE_ANY_LAUNCH], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "child True True"  # right results; later launches compile nothing
