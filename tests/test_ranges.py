"""Weak Python scalars out of the declared type's range (SPEC 8): an ``OverflowError`` naming
the kernel, the parameter and the type, on every back-end, from the core's check
(``specializer.types.weak_converter``, ``weak_overflow``). A float past ``finfo(T).max`` would
otherwise become an infinity with only numpy's warning, and an int past ``iinfo(T)`` numpy's
error, which names neither kernel nor parameter.
"""

import re
import sys
import types
import warnings

import numpy as np
import pytest
from test_docs import DOCS, _blocks

from specializer.types import (
    describe_parameter,
    type_name,
    weak_converter,
    weak_overflow,
    weak_range,
)


def _raises(value, t, where):
    """The error of ``value`` for a parameter of type ``t`` (``where``), the whole message."""
    info = np.iinfo(t) if issubclass(t, np.integer) else np.finfo(t)
    message = (
        f"{value!r} does not fit {type_name(t)} ({info.min!s} to {info.max!s}), the type of {where}"
    )
    return pytest.raises(OverflowError, match=f"^{re.escape(message)}$")


# -- the core's helper ----------------------------------------------------------------------


def test_the_core_converts_in_range_values_and_refuses_the_rest_naming_all_three():
    linked = types.SimpleNamespace(name="put", tt=(np.float32, np.int32), params=("v", "n"))
    f32, i32 = weak_converter(np.float32), weak_converter(np.int32)
    assert type(f32(1.5, linked, 0)) is np.float32 and f32(1.5, linked, 0) == 1.5
    big = float(np.finfo(np.float32).max)
    assert f32(big, linked, 0) == big and f32(-big, linked, 0) == -big
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast warning: inf and nan are float32 values
        assert f32(float("inf"), linked, 0) == np.inf and f32(-float("inf"), linked, 0) == -np.inf
        assert np.isnan(f32(float("nan"), linked, 0))
    where = "parameter 0 (v) of kernel put(np.float32, np.int32)"
    for value in (1e39, -1e39, 3.5e38):
        with _raises(value, np.float32, where):
            f32(value, linked, 0)
    assert i32(2**31 - 1, linked, 1) == 2**31 - 1 and i32(-(2**31), linked, 1) == -(2**31)
    for value in (2**40, 2**31, -(2**31) - 1):
        with _raises(value, np.int32, "parameter 1 (n) of kernel put(np.float32, np.int32)"):
            i32(value, linked, 1)
    with _raises(-1, np.uint8, "parameter 1 (n) of kernel put(np.float32, np.int32)"):
        weak_converter(np.uint8)(-1, linked, 1)
    with _raises(2**64, np.int64, "parameter 1 (n) of kernel put(np.float32, np.int32)"):
        weak_converter(np.int64)(2**64, linked, 1)  # the default type is checked too
    assert weak_converter(np.float64)(1e308, linked, 0) == 1e308  # every float fits
    assert weak_converter(np.bool_)(True, linked, 0) is np.True_


def test_the_range_and_the_description_of_a_parameter():
    assert weak_range(np.int8) == (-128, 127)
    assert weak_range(np.uint64) == (0, 2**64 - 1)
    assert weak_range(np.float16) == (-65504.0, 65504.0)
    assert weak_range(np.float64) is None and weak_range(np.longdouble) is None
    assert weak_range(np.bool_) is None
    unnamed = types.SimpleNamespace(name="k", tt=(np.int8,))  # a linked kernel without params
    assert describe_parameter(unnamed, 0) == "parameter 0 of kernel k(np.int8)"
    assert str(weak_overflow(1e39, np.float32, "x")) == (
        "1e+39 does not fit np.float32 (-3.4028235e+38 to 3.4028235e+38), the type of x"
    )


# -- each back-end --------------------------------------------------------------------------


def test_the_python_items_back_end_refuses_out_of_range_weak_values():
    from pybackend import py

    @py.kernel
    def put(x: py.Array[np.float32], v: np.float32) -> str:
        return "def put(i, x, v): x[i] = v"

    @py.kernel
    def put_int(x: py.Array[np.int32], v: np.int32) -> str:
        return "def put_int(i, x, v): x[i] = v"

    x, n = np.zeros(2, np.float32), np.zeros(2, np.int32)
    where = "parameter 1 (v) of kernel put(Array[np.float32], np.float32)"
    for _ in range(2):  # the slow path, then the front entry
        with _raises(1e39, np.float32, where):
            py.launch(put, x, 1e39, size=2)
        with _raises(
            2**40, np.int32, "parameter 1 (v) of kernel put_int(Array[np.int32], np.int32)"
        ):
            py.launch(put_int, n, 2**40, size=2)
    assert not x.any() and not n.any()
    py.launch(put, x, float("inf"), size=2)
    assert (x == np.inf).all()


def _docs_minimal_back_end():
    """The namespace of docs/backend.md's whole back-end (its block defining MiniLauncher),
    run as tests/test_docs.py runs it."""
    (code,) = [c for _, c, _ in _blocks(DOCS / "backend.md") if "class MiniLauncher" in c]
    namespace = {"__name__": "docs_backend_minimal"}
    exec(compile(code, "backend.md", "exec"), namespace)
    return namespace


def test_the_docs_minimal_back_end_refuses_out_of_range_weak_values(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    ns = _docs_minimal_back_end()
    kernel, launch = ns["kernel"], ns["launch"]

    @kernel
    def keep(v: np.float32) -> str:
        return "def keep(v): return v"

    @kernel
    def keep_int(v: np.int32) -> str:
        return "def keep_int(v): return v"

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not numpy's cast to inf with a warning
        for _ in range(2):
            with _raises(1e39, np.float32, "parameter 0 of kernel keep(np.float32)"):
                launch(keep, 1e39)
            with _raises(2**40, np.int32, "parameter 0 of kernel keep_int(np.int32)"):
                launch(keep_int, 2**40)
    assert type(launch(keep, 1.5)) is np.float32 and launch(keep_int, -5) == -5


def test_opencl_refuses_out_of_range_weak_values():
    pytest.importorskip("pyopencl")
    from specializer.backends import opencl as cl

    source = """__kernel void put_range(__global float *x, const float v, const int n)
    { x[get_global_id(0)] = v + n; }"""

    @cl.kernel
    def put_range(x: cl.Array[np.float32], v: np.float32, n: np.int32) -> str:
        return source

    import pyopencl.array as cla

    queue = cl.default_queue()
    x = cla.zeros(queue, 2, np.float32)
    sig = "put_range(Array[np.float32], np.float32, np.int32)"
    for _ in range(2):
        with _raises(1e39, np.float32, f"parameter 1 (v) of kernel {sig}"):
            cl.launch(put_range, x, 1e39, 0, global_size=2)
        with _raises(2**40, np.int32, f"parameter 2 (n) of kernel {sig}"):
            cl.launch(put_range, x, 1.0, 2**40, global_size=2)
    assert not x.get().any()  # nothing ran


def test_cuda_refuses_out_of_range_weak_values_before_the_driver_call():
    pytest.importorskip("cuda.bindings")
    from specializer.backends import cuda
    from specializer.types import Weak

    launcher = cuda._launch._launcher
    resolved = (cuda.Array[np.float32], np.float32, np.int32)
    factory = launcher._factory((resolved[0], Weak[float], Weak[int]), resolved, 0, False)
    linked = types.SimpleNamespace(name="put", tt=resolved, context=None, function=object())
    linked.bound = {}
    run = factory(linked, None, None, None)[0]
    calls = []
    glb = factory.__globals__
    saved, glb["_launch"] = glb["_launch"], lambda *a: calls.append(a) or (0,)
    try:
        x = cuda.CuArray.wrap(0x7F00DEAD0000, (2,), np.float32)
        sig = "put(Array[np.float32], np.float32, np.int32)"
        with _raises(1e39, np.float32, f"parameter 1 of kernel {sig}"):
            run((x, 1e39, 0), 1, 1, None, 0, False)
        with _raises(2**40, np.int32, f"parameter 2 of kernel {sig}"):
            run((x, 1.0, 2**40), 1, 1, None, 0, False)
        assert calls == []
        run((x, float("inf"), -(2**31)), 1, 1, None, 0, False)
        assert len(calls) == 1
    finally:
        glb["_launch"] = saved
