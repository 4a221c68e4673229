"""Weak Python scalars out of the declared type's range (SPEC 8): an ``OverflowError`` naming
the kernel, the parameter and the type, on every back-end, from the core's check
(``specializer.types.weak_converter``, ``weak_overflow``). A float that rounds to an infinity
of ``T`` (past ``finfo(T).max`` by half an ulp of it) would otherwise become an infinity with
only numpy's warning, and an int past ``iinfo(T)`` numpy's error, which names neither kernel
nor parameter; ``finfo(T).max`` as numpy prints it (``3.4028235e38``) fits."""

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
        f"{value!r} does not fit {type_name(t)} ({info.min!s} to {info.max!s}), the type of "
        f"{where}: "
    )
    fix = r"(declare the parameter np\.\w+ in the method .*; or pass a value in range|no wider.*)"
    return pytest.raises(OverflowError, match=f"^{re.escape(message)}{fix}$")


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
    assert weak_range(np.float16) == (-F16_EDGE, F16_EDGE)
    assert weak_range(np.float64) is None and weak_range(np.longdouble) is None
    assert weak_range(np.bool_) is None
    unnamed = types.SimpleNamespace(name="k", tt=(np.int8,))  # a linked kernel without params
    assert describe_parameter(unnamed, 0) == "parameter 0 of kernel k(np.int8)"
    assert str(weak_overflow(1e39, np.float32, "x")) == (
        "1e+39 does not fit np.float32 (-3.4028235e+38 to 3.4028235e+38), the type of x: "
        "declare the parameter np.float64 in the method (and the kernel source), which holds "
        "it, and pass np.float64(1e+39); or pass a value in range"
    )
    assert str(weak_overflow(2**64, np.uint64, "x")).endswith(
        "the type of x: no wider type of its kind holds it: pass a value in range"
    )
    assert "declare the parameter np.int16 " in str(weak_overflow(-1, np.uint16, "x"))


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
    factory = launcher.invokers.factory(None, (resolved[0], Weak[float], Weak[int]), resolved)[0]
    linked = types.SimpleNamespace(name="put", tt=resolved, context=None, function=object())
    linked.invokers = {}
    invoke = factory(linked)

    def run(params, *opts):
        return invoke(None, params, *opts, True)  # as the slow path calls it

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


# -- the edge of a float type: what rounds to a finite value fits (SPEC 8) -------------------

#: the largest Python floats that round to a finite float32 and float16: below max plus half
#: an ulp of it (the tie itself rounds to an infinity, max's last mantissa bit being odd)
F32_EDGE = float(np.nextafter(3.4028235677973366e38, 0.0))
F16_EDGE = float(np.nextafter(65520.0, 0.0))
F32_MAX, F16_MAX = float(np.finfo(np.float32).max), float(np.finfo(np.float16).max)
#: (type, values that fit and the value each becomes, values that round to an infinity)
EDGES = [
    (
        np.float32,
        [(3.4028235e38, F32_MAX), (F32_MAX, F32_MAX), (F32_EDGE, F32_MAX)],
        [3.4028236e38, float(np.nextafter(F32_EDGE, np.inf)), 1e39],
    ),
    (np.float16, [(65504.0, 65504.0), (65519.99, 65504.0), (F16_EDGE, 65504.0)], [65520.0, 7e4]),
]


def _signed(values):
    return [(v, w) for a, b in values for v, w in ((a, b), (-a, -b))]


@pytest.mark.parametrize(("t", "fit", "overflow"), EDGES)
def test_the_core_takes_every_float_that_rounds_to_a_finite_value_and_refuses_the_rest(
    t, fit, overflow
):
    linked = types.SimpleNamespace(name="put", tt=(t,), params=("v",))
    where = f"parameter 0 (v) of kernel put({type_name(t)})"
    convert = weak_converter(t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast to inf with numpy's warning
        for value, becomes in _signed(fit):
            assert convert(value, linked, 0) == becomes, value
        for value in overflow:
            for v in (value, -value):
                with _raises(v, t, where):
                    convert(v, linked, 0)
    big = float(np.finfo(np.float64).max)  # every Python float fits a float64
    assert weak_converter(np.float64)(big, linked, 0) == big and weak_range(np.float64) is None


@pytest.mark.parametrize(("t", "fit", "overflow"), EDGES)
def test_the_python_items_back_end_takes_a_float_types_printed_max(t, fit, overflow):
    from pybackend import py

    @py.kernel
    def put_edge(x: py.Array[t], v: t) -> str:  # a method per type
        return "def put_edge(i, x, v): x[i] = v"

    x = np.zeros(1, t)
    where = f"parameter 1 (v) of kernel put_edge(Array[{type_name(t)}], {type_name(t)})"
    for _ in range(2):  # the slow path, then the front entry
        for value, becomes in _signed(fit):
            py.launch(put_edge, x, t(0), size=1)  # the same entry, typed the numpy way
            py.launch(put_edge, x, value, size=1)
            assert x[0] == becomes, value
        for value in overflow:
            with _raises(value, t, where):
                py.launch(put_edge, x, value, size=1)


def test_opencl_writes_float32s_printed_max_and_refuses_what_rounds_to_an_infinity():
    pytest.importorskip("pyopencl")
    import pyopencl.array as cla

    from specializer.backends import opencl as cl

    @cl.kernel
    def put_edge32(x: cl.Array[np.float32], v: np.float32) -> str:
        return "__kernel void put_edge32(__global float *x, float v) { x[0] = v; }"

    (_, fit, overflow), sig = EDGES[0], "put_edge32(Array[np.float32], np.float32)"
    x = cla.zeros(cl.default_queue(), 1, np.float32)
    for _ in range(2):  # the slow path, then the front entry
        for value, becomes in _signed(fit):
            cl.launch(put_edge32, x, 0.0, global_size=1)
            cl.launch(put_edge32, x, value, global_size=1)
            assert float(x.get()[0]) == becomes, value
        for value in overflow:
            with _raises(value, np.float32, f"parameter 1 (v) of kernel {sig}"):
                cl.launch(put_edge32, x, value, global_size=1)
    for t, fit, overflow in EDGES:  # the packing of every float type agrees
        pack = cl._args.packer(t)
        for value, becomes in _signed(fit):
            assert np.frombuffer(pack(value), t)[0] == becomes, value
        for value in overflow:
            with pytest.raises(OverflowError):
                pack(value)


@pytest.mark.parametrize(("t", "fit", "overflow"), EDGES)
def test_cuda_packs_a_float_types_printed_max_and_refuses_what_rounds_to_an_infinity(
    t, fit, overflow
):
    pytest.importorskip("cuda.bindings")
    from specializer.backends import cuda
    from specializer.types import Weak

    launcher = cuda._launch._launcher
    resolved = (cuda.Array[t], t)
    factory = launcher.invokers.factory(None, (resolved[0], Weak[float]), resolved)[0]
    linked = types.SimpleNamespace(name="put", tt=resolved, context=None, function=object())
    linked.invokers = {}
    invoke = factory(linked)

    def run(params, *opts):
        return invoke(None, params, *opts, True)  # as the slow path calls it

    calls = []
    glb = factory.__globals__
    packed = glb["_half"] if t is np.float16 else None
    saved, glb["_launch"] = glb["_launch"], lambda *a: calls.append(a) or (0,)
    try:
        x = cuda.CuArray.wrap(0x7F00DEAD0000, (1,), t)
        for value, becomes in _signed(fit):
            run((x, value), 1, 1, None, 0, False)
            if packed is not None:  # a __half's 16 bits: the value it rounds to
                assert packed(value) == packed(becomes), value
        assert len(calls) == 2 * len(fit)
        for value in overflow:
            with _raises(
                value, t, f"parameter 1 of kernel put(Array[{type_name(t)}], {type_name(t)})"
            ):
                run((x, value), 1, 1, None, 0, False)
        assert len(calls) == 2 * len(fit)
    finally:
        glb["_launch"] = saved
