"""A definition passed through a wrapping decorator is the ``def`` it wraps (SPEC 7).

A decorator written with ``functools.wraps`` returns a wrapper that closes over the function
(``fn``), a new closure on every decoration. Keyed by that wrapper, every module-level ``def``
would be a closure kernel of its own and methods would never accumulate; keyed by the
function it wraps (``__wrapped__``), the ``def`` is what it is without the decorator: two
methods of one kernel, a device function redefined by name. Real PoCL launches.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("pyopencl")
import pyopencl.array as cla

from specializer import latest
from specializer.backends import opencl as cl

calls: list[str] = []


def logged(fn):
    """A plain wrapping decorator: its wrapper closes over ``fn``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return wrapper


@cl.kernel
@logged
def put_wrapped(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void put_wrapped(__global float *x, float v) { x[get_global_id(0)] = v; }"


first = put_wrapped


@cl.kernel
@logged
def put_wrapped(x: cl.Array[np.int32], v: np.int32) -> str:  # a second method
    return "__kernel void put_wrapped(__global int *x, int v) { x[get_global_id(0)] = v + 1; }"


def test_two_methods_through_a_wrapping_decorator_are_methods_of_one_kernel():
    assert put_wrapped is first
    assert len(put_wrapped.methods()) == 2
    q = cl.default_queue()
    xf, xi = cla.zeros(q, 4, np.float32), cla.zeros(q, 4, np.int32)
    calls.clear()
    cl.launch(put_wrapped, xf, np.float32(2.5), global_size=4)
    cl.launch(put_wrapped, xi, np.int32(7), global_size=4)
    assert xf.get().tolist() == [2.5] * 4
    assert xi.get().tolist() == [8] * 4
    assert calls == ["put_wrapped", "put_wrapped"]  # the wrappers ran: the methods' bodies


FACTOR = {"value": 2}


def define_scale_by():
    """Run the device function's def (again), through the decorator: no closure of its own
    (``FACTOR`` is a global), so it redefines the one of its name."""

    @cl.device
    @logged
    def scale_by() -> str:
        return f"float scale_by(float v) {{ return v * {FACTOR['value']}; }}"

    return scale_by


SCALE_BY = define_scale_by()


@cl.kernel(callees=[SCALE_BY])
def scale_wrapped(x: cl.Array[np.float32]) -> str:
    return """__kernel void scale_wrapped(__global float *x) {
        size_t i = get_global_id(0); x[i] = scale_by(x[i]); }"""


def test_a_device_function_through_a_wrapping_decorator_redefines_by_name():
    q = cl.default_queue()
    x = cla.to_device(q, np.ones(4, np.float32))
    cl.launch(scale_wrapped, x, global_size=4)
    assert x.get().tolist() == [2.0] * 4
    FACTOR["value"] = 3
    try:
        before = latest()
        assert define_scale_by() is SCALE_BY  # the same device function, redefined
        assert latest() > before
        cl.launch(scale_wrapped, x, global_size=4)
        assert x.get().tolist() == [6.0] * 4  # the kernel that calls it sees the new one
    finally:
        FACTOR["value"] = 2


def test_a_closure_through_a_wrapping_decorator_is_still_keyed_by_its_own_cells():
    def factory(v):
        @cl.kernel
        @logged
        def fill_const(x: cl.Array[np.float32]) -> str:
            return f"__kernel void fill_const(__global float *x) {{ x[get_global_id(0)] = {v}; }}"

        return fill_const

    a, b = factory(1), factory(2)
    assert a is not b  # each run of the factory: its own kernel, as without the decorator
    q = cl.default_queue()
    x = cla.zeros(q, 2, np.float32)
    cl.launch(b, x, global_size=2)
    assert x.get().tolist() == [2.0, 2.0]
    cl.launch(a, x, global_size=2)
    assert x.get().tolist() == [1.0, 1.0]
