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
