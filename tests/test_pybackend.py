"""The Python-items back-end (``pybackend.py``) on the core's launch path, with real outputs.

Its kernels are Python functions ``def <name>(i, *params)`` run once per work item, so every
test checks what the kernel wrote. These are the OpenCL back-end's behaviour tests
(tests/test_opencl.py) on a third back-end written from the launch interface's documentation.
Every kernel has a name of its own: ``@py.kernel`` adds a method to the kernel of that name in
this module.
"""

from __future__ import annotations

import gc
import inspect
import sys
import threading
import weakref

import numpy as np
import pytest
from pybackend import py

import specializer
from specializer import CompileError, MethodError, compile_count, invoke_in_world
from specializer.types import Weak

F32 = py.Array[np.float32]
I32 = py.Array[np.int32]
OBJ = py.Array[np.object_]


@pytest.fixture
def lookups(monkeypatch):
    """Counts the uncached lookups that run (each one a cache miss or a bypass)."""
    calls = []
    site = py.launcher.site
    real = site.link

    def counting(F, tt, key):
        calls.append((F, tt, key))
        return real(F, tt, key)

    monkeypatch.setattr(site, "link", counting)
    return calls


class Ctx:
    """A context a kernel can write to (kernels see theirs as the global ``context``)."""

    def __init__(self, name):
        self.name = name
        self.log = []

    def __repr__(self):
        return f"Ctx({self.name!r})"


def zeros(n=4, dtype=np.float32):
    return np.zeros(n, dtype)


def objects(n=1):
    return np.empty(n, object)


@py.kernel
def set_value(x: py.Array[np.number], v: np.number) -> str:
    return "def set_value(i, x, v): x[i] = v"


@py.kernel
def add_value(x: F32, v: np.float32) -> str:
    return "def add_value(i, x, v): x[i] += v"


@py.kernel
def store(out: OBJ, v: np.generic) -> str:  # out[0] = v, as the kernel received it
    return "def store(i, out, v): out[i] = v"


# -- argument types ----------------------------------------------------------------------------


def test_typeof_maps_python_scalars_numpy_scalars_and_arrays():
    assert py.typeof(3) is Weak[int]
    assert py.typeof(2.5) is Weak[float]
    assert py.typeof(True) is Weak[bool]
    assert py.typeof(np.float32(1)) is np.float32
    assert py.typeof(np.uint16(1)) is np.uint16

    class MyFloat(np.float64):
        pass

    assert py.typeof(MyFloat(1)) is np.float64
    x = zeros(dtype=np.int32)
    assert py.typeof(x) is I32
    assert py.typeof(x).dtype == np.dtype(np.int32)
    assert issubclass(I32, py.Array[np.integer]) and issubclass(I32, py.Array[np.generic])
    assert not issubclass(I32, F32)


def test_typeof_rejects_other_values_naming_the_type_and_what_is_accepted():
    with pytest.raises(TypeError, match=r"builtins\.list.*accepted are numpy arrays, numpy"):
        py.typeof([1.0])
    with pytest.raises(TypeError, match=r"builtins\.str.*Python int, float and bool"):
        py.typeof("x")
    with pytest.raises(ValueError, match="non-native byte order"):
        py.typeof(np.zeros(2, ">f4" if sys.byteorder == "little" else "<f4"))
    with pytest.raises(
        TypeError, match=r"argument 1 of kernel add_value .*: cannot pass a builtins\.str"
    ):
        py.launch(add_value, zeros(), "1", size=4)


# -- kernels, methods and worlds -----------------------------------------------------------------


def test_generic_kernel_runs_on_two_element_types():
    seen = []

    @py.kernel
    def fill_typed(x: py.Array[np.number], v: np.number) -> str:
        seen.append((x, v))  # the body gets the concrete types
        return "def fill_typed(i, x, v): x[i] = v"

    before = compile_count()
    x, y = zeros(16), zeros(16, np.int32)
    assert py.launch(fill_typed, x, np.float32(2.5), size=x.size) is None
    py.launch(fill_typed, y, np.int32(-7), size=y.size)
    np.testing.assert_array_equal(x, np.full(16, 2.5, np.float32))
    np.testing.assert_array_equal(y, np.full(16, -7, np.int32))
    assert seen == [(F32, np.float32), (I32, np.int32)]
    assert compile_count() - before == 2  # one method, two method instances
    py.launch(fill_typed, x, np.float32(4), size=3)  # only the first three work items
    assert x[:4].tolist() == [4, 4, 4, 2.5]
    assert compile_count() - before == 2


def test_a_redefined_method_runs_in_the_new_world_and_the_old_one_in_the_old(lookups):
    @py.kernel
    def redefined(x: F32) -> str:
        return "def redefined(i, x): x[i] = 1"

    x = zeros()
    py.launch(redefined, x, size=4)
    assert x.tolist() == [1, 1, 1, 1]
    old_world = specializer.latest()
    old = py.function(redefined, (F32,))

    @py.kernel
    def redefined(x: F32) -> str:  # the same signature: the method is replaced
        return "def redefined(i, x): x[i] = 2"

    py.launch(redefined, x, size=4)
    assert x.tolist() == [2, 2, 2, 2]
    invoke_in_world(old_world, py.launch, redefined, x, size=4)
    assert x.tolist() == [1, 1, 1, 1]
    py.launch(redefined, x, size=4)  # a pinned launch published nothing
    assert x.tolist() == [2, 2, 2, 2]
    new = py.function(redefined, (F32,))
    assert new is not old and new.linked is not old.linked
    old(x, size=4)  # a HostKernel keeps the code it was looked up for
    assert x.tolist() == [1, 1, 1, 1]
    new(x, size=4)
    assert x.tolist() == [2, 2, 2, 2]


def test_more_specific_method_takes_over_while_an_older_world_runs_the_old_one():
    @py.kernel
    def which(x: py.Array[np.number]) -> str:
        return "def which(i, x): x[i] = 1"

    x, y = zeros(), zeros(dtype=np.int32)
    py.launch(which, x, size=4)
    assert x.tolist() == [1, 1, 1, 1]
    old_world = specializer.latest()
    old_kernel = py.function(which, (F32,))

    @py.kernel
    def which(x: F32) -> str:  # a second, more specific method
        return "def which(i, x): x[i] = 2"

    py.launch(which, x, size=4)
    py.launch(which, y, size=4)
    assert x.tolist() == [2, 2, 2, 2]
    assert y.tolist() == [1, 1, 1, 1]  # int32 still takes the generic method
    invoke_in_world(old_world, py.launch, which, x, size=4)
    assert x.tolist() == [1, 1, 1, 1]
    py.launch(which, x, size=4)
    assert x.tolist() == [2, 2, 2, 2]
    new_kernel = py.function(which, (F32,))
    assert new_kernel.linked is not old_kernel.linked
    assert invoke_in_world(old_world, py.function, which, (F32,)).linked is old_kernel.linked
    assert py.function(which, (F32,)).linked is new_kernel.linked
    old_kernel(x, size=4)
    assert x.tolist() == [1, 1, 1, 1]


def test_callee_redefinition_recompiles_exactly_the_dependent_kernels():
    @py.device
    def scaled() -> str:
        return "def scaled(v): return 2.0 * v"

    @py.device(callees=[scaled])
    def scaled_plus() -> str:  # a callee of a callee
        return "def scaled_plus(v): return scaled(v) + 1"

    @py.kernel(callees=[scaled])
    def scale_a(x: F32) -> str:
        return "def scale_a(i, x): x[i] = scaled(1.0)"

    @py.kernel(callees=[scaled_plus])
    def scale_b(x: F32) -> str:
        return "def scale_b(i, x): x[i] = scaled_plus(10.0)"

    @py.kernel
    def no_callee(x: F32) -> str:
        return "def no_callee(i, x): x[i] = 7.0"

    a, b, c = zeros(), zeros(), zeros()

    def run_all():
        for k, arr in ((scale_a, a), (scale_b, b), (no_callee, c)):
            py.launch(k, arr, size=4)
        return a.tolist(), b.tolist(), c.tolist()

    assert run_all() == ([2] * 4, [21] * 4, [7] * 4)
    before = compile_count()
    old_world = specializer.latest()

    @py.device
    def scaled() -> str:  # the redefinition
        return "def scaled(v): return 3.0 * v"

    assert run_all() == ([3] * 4, [31] * 4, [7] * 4)
    assert compile_count() - before == 2  # scale_a and scale_b (transitively); not no_callee
    invoke_in_world(old_world, py.launch, scale_b, b, size=4)
    assert b.tolist() == [21] * 4  # the old world still runs the old callee
    assert compile_count() - before == 2

    world = specializer.latest()

    @py.device
    def unrelated() -> str:
        return "def unrelated(v): return v"

    assert specializer.latest() > world
    assert run_all() == ([3] * 4, [31] * 4, [7] * 4)
    assert compile_count() - before == 2


def test_a_definition_made_while_a_lookup_runs_is_seen_by_the_next_lookup():
    def define_rising(first):  # one qualified name for both, so the second redefines
        if first:

            @py.device
            def rising() -> str:
                return "def rising(): return 1.0"

        else:

            @py.device
            def rising() -> str:
                return "def rising(): return 2.0"

        return rising

    rising = define_rising(True)
    redefined = []

    @py.kernel(callees=[rising])
    def uses_rising(x: F32) -> str:
        if not redefined:
            redefined.append(specializer.latest())
            define_rising(False)
        return "def uses_rising(i, x): x[i] = rising()"

    x = zeros()
    first = py.function(uses_rising, (F32,))
    assert specializer.latest() > redefined[0]
    first(x, size=4)
    assert x.tolist() == [1, 1, 1, 1]  # the code of the world the lookup ran in
    second = py.function(uses_rising, (F32,))
    assert second.linked is not first.linked
    second(x, size=4)
    assert x.tolist() == [2, 2, 2, 2]
    x[:] = 0
    py.launch(uses_rising, x, size=4)
    assert x.tolist() == [2, 2, 2, 2]
    assert py.function(uses_rising, (F32,)).linked is py.function(uses_rising, (F32,)).linked


# -- weak Python scalars -------------------------------------------------------------------------


def test_python_scalars_take_the_declared_type_and_are_converted_on_every_launch():
    @py.kernel
    def store_three(out: OBJ, a: np.int32, b: np.float32, c: np.bool_) -> str:
        return "def store_three(i, out, a, b, c): out[0] = a; out[1] = b; out[2] = c"

    out = objects(3)
    py.launch(store_three, out, -5, 0.25, True, size=1)
    assert [type(v) for v in out] == [np.int32, np.float32, np.bool_]
    assert out.tolist() == [-5, 0.25, True]
    py.launch(store_three, out, 7, 1.5, False, size=1)  # the front entry converts too
    assert [type(v) for v in out] == [np.int32, np.float32, np.bool_]
    assert out.tolist() == [7, 1.5, False]
    hk = py.function(store_three, (OBJ, int, float, bool))
    assert hk.tt == (OBJ, Weak[int], Weak[float], Weak[bool])
    hk(out, 9, 2.5, True, size=1)
    assert [type(v) for v in out] == [np.int32, np.float32, np.bool_]
    assert out.tolist() == [9, 2.5, True]


def test_a_python_int_dispatches_as_int64_where_a_method_takes_it():
    out = objects()
    py.launch(store, out, 5, size=1)  # store takes np.generic: the default, np.int64
    assert type(out[0]) is np.int64 and out[0] == 5
    py.launch(store, out, 2.5, size=1)
    assert type(out[0]) is np.float64
    py.launch(store, out, True, size=1)
    assert type(out[0]) is np.bool_


def test_out_of_range_weak_values_name_the_kernel_parameter_and_type_before_any_work_item():
    @py.kernel
    def narrow(x: I32, v: np.int8, w: np.float32) -> str:
        return "def narrow(i, x, v, w): x[i] = v"

    x = zeros(dtype=np.int32)
    with pytest.raises(
        OverflowError,
        match=r"300 does not fit np\.int8 \(-128 to 127\), the type of parameter 1 \(v\) of "
        r"kernel narrow\(Array\[np\.int32\], np\.int8, np\.float32\): declare the parameter "
        r"np\.int16 in the method \(and the kernel source\), which holds it, and pass "
        r"np\.int16\(300\); or pass a value in range$",
    ):
        py.launch(narrow, x, 300, 1.0, size=4)
    py.launch(narrow, x, -128, 1.0, size=4)
    assert x.tolist() == [-128] * 4
    with pytest.raises(OverflowError, match=r"parameter 1 \(v\).*np\.int8"):  # the front entry
        py.launch(narrow, x, 128, 1.0, size=4)
    with pytest.raises(
        OverflowError, match=r"1e\+300 does not fit np\.float32 .*parameter 2 \(w\)"
    ):
        py.launch(narrow, x, 1, 1e300, size=4)
    assert x.tolist() == [-128] * 4  # nothing ran
    py.launch(narrow, x, 1, float("inf"), size=4)  # infinities and NaN are float32 values
    py.launch(narrow, x, 2, float("nan"), size=4)
    assert x.tolist() == [2] * 4


def test_a_weak_scalar_and_a_numpy_scalar_are_different_argument_types():
    @py.kernel
    def only_int32(out: OBJ, v: np.int32) -> str:
        return "def only_int32(i, out, v): out[i] = v"

    out = objects()
    py.launch(only_int32, out, 3, size=1)
    assert type(out[0]) is np.int32
    with pytest.raises(MethodError, match=r"only_int32\(Array\[np\.object_\], np\.int64\)"):
        py.launch(only_int32, out, np.int64(3), size=1)
    old_world = specializer.latest()

    @py.kernel
    def only_int32(out: OBJ, v: np.int64) -> str:  # now a Python int has its default
        return "def only_int32(i, out, v): out[i] = -v"

    py.launch(only_int32, out, 3, size=1)
    assert type(out[0]) is np.int64 and out[0] == -3
    invoke_in_world(old_world, py.launch, only_int32, out, 3, size=1)
    assert type(out[0]) is np.int32 and out[0] == 3  # in the old world only the int32 one


# -- captured values -----------------------------------------------------------------------------


def test_captured_values_are_passed_on_every_launch(lookups):
    @py.kernel
    def add_captured(c: np.float32, x: F32) -> str:
        return "def add_captured(i, c, x): x[i] += c"

    before = compile_count()
    x, y = zeros(), zeros()
    py.launch(add_captured.capture(np.float32(1)), x, size=4)
    py.launch(add_captured.capture(np.float32(5)), y, size=4)
    py.launch(add_captured.capture(np.float32(2)), x, size=4)
    assert x.tolist() == [3, 3, 3, 3]
    assert y.tolist() == [5, 5, 5, 5]
    assert compile_count() - before == 1  # one type for all three instances
    assert len(lookups) == 1  # and one cached lookup result serves them all

    hk = py.function(add_captured.capture(np.float32(10)), (F32,))
    hk(y, size=4)
    assert y.tolist() == [15, 15, 15, 15]
    py.launch(py.capture(add_captured, np.float32(1)), y, size=4)  # the same, spelled so
    assert y.tolist() == [16, 16, 16, 16]
    assert len(lookups) == 1
    with pytest.raises(TypeError, match=r"capture takes a kernel \(from pybackend\.py\.kernel"):
        py.capture(np.float32(1), x)


def test_captured_weak_values_are_converted_to_the_declared_type():
    @py.kernel
    def store_captured(v: np.int16, out: OBJ) -> str:
        return "def store_captured(i, v, out): out[i] = v"

    out = objects()
    for v in (3, 4):
        py.launch(store_captured.capture(v), out, size=1)
        assert type(out[0]) is np.int16 and out[0] == v
    with pytest.raises(OverflowError, match=r"parameter 0 \(v\) of kernel store_captured"):
        py.launch(store_captured.capture(2**20), out, size=1)


def test_dropped_kernel_instance_and_its_captured_array_are_collected():
    @py.kernel
    def copy_captured(src: F32, dst: F32) -> str:
        return "def copy_captured(i, src, dst): dst[i] = src[i]"

    src, dst = np.arange(4, dtype=np.float32), zeros()
    instance = copy_captured.capture(src)
    py.launch(instance, dst, size=4)
    hk = py.function(instance, (F32,))
    hk(dst, size=4)
    assert dst.tolist() == [0, 1, 2, 3]
    instance_ref, src_ref = weakref.ref(instance), weakref.ref(src)
    del instance, src, hk
    gc.collect()
    assert instance_ref() is None
    assert src_ref() is None
    before = compile_count()  # the cached result is still there for the next instance
    py.launch(copy_captured.capture(np.full(4, 9, np.float32)), dst, size=4)
    assert dst.tolist() == [9, 9, 9, 9]
    assert compile_count() == before


def test_a_kernel_whose_parameters_are_all_captured_launches():
    @py.kernel
    def fill_captured(x: F32, v: np.float32) -> str:
        return "def fill_captured(i, x, v): x[i] = v"

    x = zeros()
    py.launch(fill_captured.capture(x, np.float32(6)), size=4)
    py.launch(fill_captured.capture(x, np.float32(6)), size=4)
    assert x.tolist() == [6, 6, 6, 6]
    with pytest.raises(TypeError, match="was called with arguments of types"):
        py.function(fill_captured.capture(x, np.float32(1)), ())(x, size=4)


def test_function_of_kernel_instances_returns_each_live_instance(lookups):
    @py.kernel
    def scale_captured(c: np.float32, x: F32) -> str:
        return "def scale_captured(i, c, x): x[i] *= c"

    x = np.ones(4, np.float32)
    two, three = scale_captured.capture(np.float32(2)), scale_captured.capture(np.float32(3))
    hk2 = py.function(two, (F32,))
    n = len(lookups)
    hk3 = py.function(three, (F32,))
    assert (hk2.f, hk3.f) == (two, three)
    assert hk2.linked is hk3.linked and hk2 is not hk3
    hk2(x, size=4)
    hk3(x, size=4)
    py.launch(three, x, size=4)
    assert x.tolist() == [18, 18, 18, 18]
    assert len(lookups) == n
    refs = weakref.ref(two), weakref.ref(three)
    del two, three, hk2, hk3
    gc.collect()
    assert refs[0]() is None and refs[1]() is None


# -- what is not a kernel of this back-end ------------------------------------------------------


def test_a_kernel_instance_type_is_not_a_kernel_also_once_it_has_an_entry():
    x = zeros()
    instance = add_value.capture()
    py.launch(instance, x, np.float32(1), size=4)
    py.function(instance, (F32, np.float32))
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <class"):
        py.launch(type(instance), x, np.float32(1), size=4)
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <class"):
        py.function(type(instance), (F32, np.float32))
    capturing = add_value.capture(x)  # a type with captured values: never launched without them
    py.launch(capturing, np.float32(1), size=4)
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <class"):
        py.launch(type(capturing), np.float32(1), size=4)
    assert x.tolist() == [2, 2, 2, 2]


def test_launch_and_function_of_what_is_not_a_kernel_say_what_is_expected():
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got 3"):
        py.function(3, ())
    with pytest.raises(
        TypeError,
        match=r"expected a kernel or a kernel instance, got <built-in function print>: "
        r"define kernels with pybackend\.py\.kernel",
    ):
        py.launch(print, size=1)


def test_kernels_of_other_backends_are_refused():
    import pybackend

    @pybackend.kernel
    def compiler_only(x: np.float32) -> str:  # the compiler-only back-end of pybackend.py
        return "def compiler_only(x): return x"

    with pytest.raises(TypeError, match="compiler_only was defined with another back-end's"):
        py.launch(compiler_only, np.float32(1), size=1)
    with pytest.raises(TypeError, match="compiler_only was defined with another back-end's"):
        py.function(compiler_only, (np.float32,))
    with pytest.raises(TypeError, match="defined with another back-end's @kernel"):
        py.capture(compiler_only, np.float32(1))


def test_an_opencl_kernel_is_refused_and_refuses_this_backend():
    pytest.importorskip("pyopencl")
    from specializer.backends import opencl as cl

    @cl.kernel(localns=locals())  # its annotation names this function's cl
    def cl_only(x: cl.Array[np.float32]) -> str:
        return "__kernel void cl_only(__global float *x) { x[get_global_id(0)] = 1.0f; }"

    x = zeros()
    for _ in range(2):
        with pytest.raises(TypeError, match="cl_only was defined with another back-end's"):
            py.launch(cl_only, x, size=4)
        with pytest.raises(TypeError, match="cl_only was defined with another back-end's"):
            py.function(cl_only, (F32,))
        with pytest.raises(TypeError, match="cl_only was defined with another back-end's"):
            py.launch(cl_only.capture(), x, size=4)
    with pytest.raises(TypeError, match="add_value was defined with another back-end's"):
        cl.launch(add_value, np.float32(1), global_size=1)
    assert x.tolist() == [0, 0, 0, 0]


# -- the lookup: function, HostKernels, contexts ------------------------------------------------


def test_function_hit_returns_the_cached_result_and_runs_no_lookup(lookups):
    x = zeros()
    hk = py.function(add_value, (F32, np.float32))
    assert isinstance(hk, py.HostKernel) and hk.f is add_value and hk.tt == (F32, np.float32)
    assert hk.context == py.default_context()
    n = len(lookups)
    for _ in range(5):
        assert py.function(add_value, (F32, np.float32)).linked is hk.linked
        hk(x, np.float32(1), size=4)
    assert len(lookups) == n
    assert x.tolist() == [5, 5, 5, 5]
    assert "add_value(Array[np.float32], np.float32)" in repr(hk)


def test_function_returns_the_same_linked_kernel_while_the_lookup_result_is_the_same(lookups):
    @py.kernel
    def kept_host(x: F32) -> str:
        return "def kept_host(i, x): x[i] = 1"

    first = py.function(kept_host, (F32,))
    specializer.bump()  # a world later, the same code: the lookup runs, its result stays
    assert py.function(kept_host, (F32,)).linked is first.linked
    assert py.function(kept_host, [F32]).linked is first.linked  # tt as a list: the same
    x = zeros()
    py.launch(kept_host, x, size=4)
    specializer.bump()
    py.launch(kept_host, x, size=4)  # a launch's new entry keeps the HostKernel too
    assert py.function(kept_host, (F32,)).linked is first.linked
    other = py.function(kept_host, (F32,), context=Ctx("other"))
    assert other is not first and other.linked is not first.linked  # another context: its own
    assert py.function(kept_host, (F32,)).linked is first.linked
    assert x.tolist() == [1, 1, 1, 1]

    @py.kernel
    def kept_host(x: F32) -> str:  # a new result: a new HostKernel
        return "def kept_host(i, x): x[i] = 2"

    assert py.function(kept_host, (F32,)).linked is not first.linked


def test_function_returns_each_contexts_result_across_alternating_contexts():
    @py.kernel
    def alternating_host(x: F32) -> str:
        return "def alternating_host(i, x): x[i] = 1"

    a, b = Ctx("a"), Ctx("b")
    first = py.function(alternating_host, (F32,), a)
    second = py.function(alternating_host, (F32,), b)
    assert py.function(alternating_host, (F32,), a).linked is first.linked
    assert py.function(alternating_host, (F32,), b).linked is second.linked
    assert py.function(alternating_host, (F32,), a).context is first.context


def test_host_kernel_called_with_other_argument_types_says_how_to_look_them_up():
    hk = py.function(add_value, (F32, np.float32))
    with pytest.raises(
        TypeError,
        match=r"add_value\(Array\[np\.float32\], np\.float32\) was called with arguments of "
        r"types \(Array\[np\.float32\], Weak\[float\]\).*look it up for those with py\.function",
    ):
        hk(zeros(), 1.0, size=4)

    class Sub(np.float32):
        pass

    x = zeros()
    hk(x, Sub(2), size=4)  # fails the guard, but has its types after all
    assert x.tolist() == [2, 2, 2, 2]


@py.kernel
def weak_int64(out: OBJ, n: np.int64) -> str:
    return "def weak_int64(i, out, n): out[i] = n"


@py.kernel
def weak_int32(out: OBJ, n: np.int32) -> str:
    return "def weak_int32(i, out, n): out[i] = n"


def test_a_python_int_is_taken_where_a_host_kernel_takes_np_int64_whatever_ran_before():
    # decided by the types alone: the first call in a fresh context, with no launch before it
    # that bound a Python int's path, takes it, converted as np.int64(n) would be
    hk = py.function(weak_int64, (OBJ, np.int64), context=Ctx("fresh"))
    out = np.zeros(2, object)
    hk(out, 7, size=2)
    assert [type(v) for v in out] == [np.int64, np.int64] and out.tolist() == [7, 7]
    with pytest.raises(OverflowError, match=r"np\.int64"):
        hk(out, 1 << 63, size=2)


def test_a_python_int_is_refused_where_a_host_kernel_takes_another_int_whatever_ran_before():
    # a Python int dispatches to np.int32 here (the only method), and a launch binds that path
    # to the same compiled kernel; a HostKernel looked up for np.int32 refuses it all the same
    out = np.zeros(2, object)
    py.launch(weak_int32, out, 5, size=2)
    assert [type(v) for v in out] == [np.int32, np.int32]
    hk = py.function(weak_int32, (OBJ, np.int32))
    with pytest.raises(TypeError, match=r"of types \(Array\[np\.object_\], Weak\[int\]\)"):
        hk(out, 5, size=2)
    py.function(weak_int32, (OBJ, int))(out, 6, size=2)  # looked up for a Python int, it takes one
    assert out.tolist() == [6, 6]


def test_host_kernel_refuses_another_context():
    a, b = Ctx("a"), Ctx("b")
    hk = py.function(add_value, (F32, np.float32), context=a)
    x = zeros()
    hk(x, np.float32(1), size=4, context=a)
    with pytest.raises(
        ValueError,
        match=r"was looked up in Ctx\('a'\), but called in Ctx\('b'\): look it up there "
        r"with py\.function",
    ):
        hk(x, np.float32(1), size=4, context=b)
    assert x.tolist() == [1, 1, 1, 1]


def test_each_context_links_its_own_kernel_and_both_keep_hitting(lookups):
    @py.kernel
    def where_am_i(out: OBJ) -> str:
        return "def where_am_i(i, out): out[i] = context"

    a, b = Ctx("a"), Ctx("b")
    out = objects(2)
    before, links = compile_count(), py.backend.links
    for _ in range(3):
        py.launch(where_am_i, out, size=1, context=a)
        assert out[0] is a
        py.launch(where_am_i, out, size=2, context=b)
        assert out[0] is b and out[1] is b
    assert len(lookups) == 2  # both contexts' entries stay in the cache
    assert compile_count() - before == 1  # a new context links; it does not recompile
    assert py.backend.links - links == 2
    ha, hb = py.function(where_am_i, (OBJ,), a), py.function(where_am_i, (OBJ,), b)
    assert ha.linked is not hb.linked and ha.linked.fn is not hb.linked.fn
    py.launch(where_am_i, out, size=1)
    assert out[0] == py.default_context()


def test_a_kernel_without_parameters_runs_once_per_work_item():
    @py.kernel
    def tick() -> str:
        return "def tick(i): context.log.append(i)"

    ctx = Ctx("log")
    py.launch(tick, size=3, context=ctx)
    py.launch(tick, size=2, context=ctx)
    py.function(tick, (), ctx)(size=1)
    assert ctx.log == [0, 1, 2, 0, 1, 0]


def test_set_default_context_picks_the_context_launches_use():
    @py.kernel
    def default_ctx(out: OBJ) -> str:
        return "def default_ctx(i, out): out[i] = context"

    out, mine, old = objects(), Ctx("mine"), py.default_context()
    py.launch(default_ctx, out, size=1)
    assert out[0] == old
    py.set_default_context(mine)
    try:
        py.launch(default_ctx, out, size=1)  # the front entry sees the default change
        assert out[0] is mine
        assert py.function(default_ctx, (OBJ,)).context is mine
    finally:
        py.set_default_context(old)
    py.launch(default_ctx, out, size=1)
    assert out[0] == old
    with pytest.raises(TypeError, match="must be hashable"):
        py.launch(default_ctx, out, size=1, context=[])


def test_alternating_kernels_and_contexts_each_get_their_own_lookup(lookups):
    @py.kernel
    def add_one(x: F32) -> str:
        return "def add_one(i, x): x[i] += 1"

    @py.kernel
    def add_ten(x: F32) -> str:
        return "def add_ten(i, x): x[i] += 10"

    a, b = Ctx("a"), Ctx("b")
    x, y = zeros(), zeros(dtype=np.int32)
    for c in (a, b):
        py.function(add_one, (F32,), c)
        py.function(add_ten, (F32,), c)
        py.launch(set_value, y, np.int32(0), size=4, context=c)
    n = len(lookups)
    for _ in range(3):
        for c in (a, b):
            hk = py.function(add_one, (F32,), c)
            assert hk.context is c and hk.f is add_one
            hk(x, size=4)
            py.launch(add_ten, x, size=4, context=c)
            py.launch(set_value, y, np.int32(7), size=4, context=c)
            py.launch(add_one, x, size=4, context=c)
    assert x.tolist() == [72, 72, 72, 72]
    assert y.tolist() == [7, 7, 7, 7]
    assert len(lookups) == n  # every lookup hit


def test_compiler_options_are_part_of_the_config_and_the_key(lookups):
    @py.kernel
    def macro_value(x: F32) -> str:
        return "def macro_value(i, x): x[i] = VALUE"

    x = zeros()
    before = compile_count()
    for _ in range(2):
        py.launch(macro_value, x, size=4, defines={"VALUE": 3})
        assert x.tolist() == [3, 3, 3, 3]
        py.launch(macro_value, x, size=4, defines=[("VALUE", 4)])
        assert x.tolist() == [4, 4, 4, 4]
    assert compile_count() - before == 2
    assert len(lookups) == 2  # the second round hit both entries
    hk = py.function(macro_value, (F32,), defines={"VALUE": 5})
    hk(x, size=4)
    assert x.tolist() == [5, 5, 5, 5]


def test_unknown_keyword_is_a_type_error_naming_launch_and_compiler_options():
    x = zeros()
    with pytest.raises(
        TypeError,
        match=r"unknown keyword argument\(s\) fastmath: launch options are size, context; "
        r"the compiler option is defines=\{name: value\}",
    ):
        py.launch(add_value, x, np.float32(1), size=4, fastmath=True)
    with pytest.raises(TypeError, match="defines are the kernel source's extra globals"):
        py.function(add_value, (F32, np.float32), defines=3)
    with pytest.raises(TypeError, match="'1x' is not an identifier"):
        py.launch(add_value, x, np.float32(1), size=4, defines={"1x": 1})
    assert x.tolist() == [0, 0, 0, 0]


def test_sizes_are_checked_before_any_work_item_runs():
    x = zeros()
    hk = py.function(add_value, (F32, np.float32))
    for run in (
        lambda **kw: py.launch(add_value, x, np.float32(1), **kw),
        lambda **kw: hk(x, np.float32(1), **kw),
    ):
        for _ in range(2):  # twice: a refused launch publishes nothing
            with pytest.raises(TypeError, match="size"):
                run()
            with pytest.raises(ValueError, match=r"size must be >= 0.*got -1"):
                run(size=-1)
            with pytest.raises(TypeError, match=r"size must be an int.*float 2\.0"):
                run(size=2.0)
            with pytest.raises(TypeError, match=r"size must be an int.*bool True"):
                run(size=True)
            run(size=0)
    assert x.tolist() == [0, 0, 0, 0]
    py.launch(add_value, x, np.float32(1), size=np.int64(2))
    hk(x, np.float32(1), size=np.uint8(3))
    assert x.tolist() == [2, 2, 1, 0]


# -- compile hooks and precompile-output mode ----------------------------------------------------


def test_compile_hooks_and_device_code_source_see_cached_kernels(lookups):
    @py.device
    def hooked_helper() -> str:
        return "def hooked_helper(): return 8.0"

    @py.kernel(callees=[hooked_helper])
    def hooked(x: F32) -> str:
        return "def hooked(i, x): x[i] = hooked_helper()"

    x = zeros()
    py.launch(hooked, x, size=4)  # compiled and cached before the hooks
    py.launch(hooked, x, size=4)
    before, n = compile_count(), len(lookups)
    with specializer.device_code_source() as sources:
        py.launch(hooked, x, size=4)
    assert len(sources) == 1
    assert "def hooked(i, x)" in sources[0] and "def hooked_helper()" in sources[0]
    assert sources[0].index("hooked_helper") < sources[0].index("def hooked(")
    seen = []
    with specializer.device_code(lambda job, artifact: seen.append((job.name, artifact.name))):
        py.launch(hooked, x, size=4)
        py.launch(hooked, x, size=4)  # no front entry is taken while a hook is active
        py.function(hooked, (F32,))
    assert seen == [("hooked", "hooked")] * 3
    assert len(lookups) - n == 4
    assert x.tolist() == [8, 8, 8, 8]
    assert compile_count() == before
    py.launch(hooked, x, size=4)
    py.launch(hooked, x, size=4)
    assert len(lookups) - n == 4  # the entries from before the hooks hit again


def test_precompile_output_mode_launches_correctly_and_stores_nothing(lookups):
    @py.kernel
    def in_precompile(x: F32, v: np.float32) -> str:
        return "def in_precompile(i, x, v): x[i] += v"

    x = zeros()
    before = compile_count()
    with specializer.precompile_output():
        assert specializer.generating_output()
        for v in (1, 2, 3):
            py.launch(in_precompile, x, np.float32(v), size=4)
        hk = py.function(in_precompile, (F32, np.float32))
        assert py.function(in_precompile, (F32, np.float32)).linked is hk.linked
        assert x.tolist() == [6, 6, 6, 6]
        assert len(lookups) == 5  # every launch and lookup ran its lookup
    assert compile_count() - before == 1  # the compiled-code cache still works
    py.launch(in_precompile, x, np.float32(1), size=4)
    py.launch(in_precompile, x, np.float32(1), size=4)
    assert len(lookups) == 6  # nothing was stored: one miss, then a hit
    assert x.tolist() == [8, 8, 8, 8]


def test_a_lookup_during_which_precompile_mode_came_on_is_not_remembered(lookups):
    started, go = threading.Event(), threading.Event()

    @py.kernel
    def slow_lookup(x: F32) -> str:
        started.set()  # the lookup is compiling: precompile mode comes on meanwhile
        assert go.wait(10)
        return "def slow_lookup(i, x): x[i] = 1"

    results = []
    t = threading.Thread(target=lambda: results.append(py.function(slow_lookup, (F32,))))
    t.start()
    try:
        assert started.wait(10)
        specializer.precompile_output(True)
    finally:
        go.set()
        t.join(10)
    specializer.precompile_output(False)
    assert results and not t.is_alive()
    n = len(lookups)
    py.function(slow_lookup, (F32,))  # nothing was remembered: the lookup runs again
    assert len(lookups) == n + 1
    x = zeros()
    py.function(slow_lookup, (F32,))(x, size=4)
    assert len(lookups) == n + 1  # and is remembered now
    assert x.tolist() == [1, 1, 1, 1]


# -- errors --------------------------------------------------------------------------------------


def test_no_applicable_method_is_a_method_error_naming_kernel_and_argument_types():
    with pytest.raises(
        MethodError,
        match=r"no method of add_value matches add_value\(Array\[np\.int32\], np\.float32\)",
    ):
        py.launch(add_value, zeros(dtype=np.int32), np.float32(1), size=4)


def test_a_syntax_error_names_the_kernel_and_a_fixed_redefinition_works_at_once(lookups):
    @py.kernel
    def fixable(x: F32) -> str:
        return "def fixable(i, x): x[i] = = 1"

    x = zeros()
    for _ in range(2):  # nothing was cached: the second launch compiles (and fails) again
        with pytest.raises(CompileError, match=r"kernel fixable\(Array\[np\.float32\]\) does not"):
            py.launch(fixable, x, size=4)
    assert len(lookups) == 2

    @py.kernel
    def fixable(x: F32) -> str:  # the fix
        return "def fixable(i, x): x[i] = 11"

    py.launch(fixable, x, size=4)
    assert x.tolist() == [11, 11, 11, 11]


def test_source_without_a_function_of_the_methods_name_is_a_compile_error():
    @py.kernel
    def misnamed(x: F32) -> str:
        return "def other_name(i, x): x[i] = 1"

    with pytest.raises(
        CompileError, match=r"defines no function named 'misnamed' \(it defines: other_name\)"
    ):
        py.launch(misnamed, zeros(), size=1)


def test_an_error_in_a_work_item_propagates_with_the_device_source_in_the_traceback():
    @py.kernel
    def fails_at_two(x: F32) -> str:
        return "def fails_at_two(i, x):\n    x[i] = 1\n    if i == 2:\n        raise KeyError(i)"

    x = zeros()
    with pytest.raises(KeyError) as err:
        py.launch(fails_at_two, x, size=4)
    assert x.tolist() == [1, 1, 1, 0]
    lines = [str(entry.statement).strip() for entry in err.traceback]
    assert "raise KeyError(i)" in lines


# -- generated source, threads --------------------------------------------------------------------


def test_the_launch_path_is_generated_from_this_backends_template_and_reviewable():
    @py.kernel
    def reviewed(x: I32, v: np.int16) -> str:
        return "def reviewed(i, x, v): x[i] = v"

    x = zeros(dtype=np.int32)
    py.launch(reviewed, x, 5, size=4)
    assert x.tolist() == [5, 5, 5, 5]
    invokers = [
        g
        for g in specializer.generated_sources()
        if g.template == "python_launch.py.j2" and "Weak_int" in g.name and "int32" in g.name
    ]
    assert invokers, [g.name for g in specializer.generated_sources()]
    g = invokers[-1]
    assert g.name.startswith("py_invoker_Array_np_int32_Weak_int")
    assert "a1 = _convert1(a1, linked, 1)" in g.source  # the core's weak_converter
    assert g.source.count("for i in range(size):") == 1  # the launch body, once
    assert all(len(line) <= 100 for line in g.source.splitlines())
    hk = py.function(reviewed, (I32, int))
    # a HostKernel is an instance of the back-end's class; its call runs the invoker
    assert type(hk) is py.HostKernel
    assert inspect.getsource(type(hk).__call__).startswith("def py_host(")
    assert inspect.getsource(hk.invoke).startswith("    def invoke(f, args, size, context")


def test_threads_launching_in_their_own_contexts_at_once_get_correct_results():
    threads, launches = 4, 300
    contexts = [Ctx(str(i)) for i in range(threads)]
    arrays = [zeros(8) for _ in range(threads)]
    start = threading.Barrier(threads)
    errors = []

    def work(i):
        try:
            c, x, v = contexts[i], arrays[i], np.float32(i + 1)
            start.wait()
            for n in range(launches):
                if n % 2:
                    py.launch(add_value, x, v, size=8, context=c)
                else:
                    py.function(add_value, (F32, np.float32), c)(x, v, size=8)
        except BaseException as e:  # reported below, with the thread's index
            errors.append((i, e))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    for i, x in enumerate(arrays):
        np.testing.assert_array_equal(x, np.full(8, launches * (i + 1), np.float32))
