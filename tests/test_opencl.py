"""The OpenCL back-end on real PoCL: kernels run, and each lookup is exactly right.

Every kernel here has a name of its own: ``@cl.kernel`` adds a method to the kernel of that
qualified name in this module, so two module-level ``fill`` definitions share one kernel.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402

import specializer  # noqa: E402
from specializer import CompileError, MethodError, compile_count, invoke_in_world  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

F32 = cl.Array[np.float32]


@pytest.fixture(scope="module")
def queue():
    return cl.default_queue()


@pytest.fixture
def lookups(monkeypatch):
    """Counts the uncached lookups that run (each one a cache miss or a bypass)."""
    calls = []
    real = cl._site.link

    def counting(F, tt, key):
        calls.append((F, tt, key))
        return real(F, tt, key)

    monkeypatch.setattr(cl._site, "link", counting)
    return calls


def zeros(queue, n=8, dtype=np.float32):
    return cla.zeros(queue, n, dtype)


@cl.kernel
def set_value(x: cl.Array[np.number], v: np.number) -> str:
    return f"""__kernel void set_value(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                   x[get_global_id(0)] = v; }}"""


@cl.kernel
def add_value(x: F32, v: np.float32) -> str:
    return """__kernel void add_value(__global float *x, float v) {
                  x[get_global_id(0)] += v; }"""


# -- argument types ------------------------------------------------------------------------


def test_typeof_maps_python_scalars_numpy_scalars_and_device_arrays(queue):
    assert cl.typeof(3) is specializer.types.Weak[int]
    assert cl.typeof(2.5) is specializer.types.Weak[float]
    assert cl.typeof(True) is specializer.types.Weak[bool]
    assert cl.typeof(np.float32(1)) is np.float32
    assert cl.typeof(np.uint16(1)) is np.uint16
    x = zeros(queue, dtype=np.int32)
    assert cl.typeof(x) is cl.Array[np.int32]
    assert cl.typeof(x).dtype == np.dtype(np.int32)
    assert issubclass(cl.typeof(x), cl.Array[np.integer])


def test_typeof_rejects_other_values_naming_the_type_and_what_is_accepted():
    with pytest.raises(TypeError, match=r"numpy\.ndarray.*accepted are .*pyopencl\.array\.Array"):
        cl.typeof(np.zeros(3))
    with pytest.raises(TypeError, match=r"builtins\.str.*Python int, float and bool"):
        cl.typeof("x")


def test_ctype_spells_scalar_types_in_opencl_c():
    assert cl.ctype(np.float32) == "float"
    assert cl.ctype(np.float64) == "double"
    assert cl.ctype(np.float16) == "half"
    assert cl.ctype(np.int8) == "char"
    assert cl.ctype(np.uint8) == "uchar"
    assert cl.ctype(np.int16) == "short"
    assert cl.ctype(np.int32) == "int"
    assert cl.ctype(np.uint32) == "uint"
    assert cl.ctype(np.int64) == "long"
    assert cl.ctype(np.longlong) == "long"
    assert cl.ctype(np.uint64) == "ulong"
    assert cl.ctype(np.bool_) == "uchar"
    assert cl.ctype(np.dtype("float32")) == "float"
    assert cl.ctype(F32.dtype) == "float"


def test_ctype_rejects_abstract_array_and_unsupported_types_saying_what_to_do():
    with pytest.raises(TypeError, match=r"np\.floating is abstract"):
        cl.ctype(np.floating)
    with pytest.raises(TypeError, match=r"array type: use ctype\(x\.dtype\)"):
        cl.ctype(F32)
    with pytest.raises(TypeError, match="OpenCL has no type for float128"):
        cl.ctype(np.longdouble)
    with pytest.raises(TypeError, match="numpy scalar type or dtype"):
        cl.ctype("float")


# -- kernels, methods and worlds -------------------------------------------------------------


def test_generic_kernel_runs_on_two_element_types(queue):
    before = compile_count()
    x = zeros(queue, 16, np.float32)
    y = zeros(queue, 16, np.int32)
    ev = cl.launch(set_value, x, np.float32(2.5), global_size=x.size)
    assert isinstance(ev, pyopencl.Event)
    cl.launch(set_value, y, np.int32(-7), global_size=y.size)
    np.testing.assert_array_equal(x.get(), np.full(16, 2.5, np.float32))
    np.testing.assert_array_equal(y.get(), np.full(16, -7, np.int32))
    assert compile_count() - before == 2  # one method, two method instances
    cl.launch(set_value, x, np.float32(4), global_size=x.size)
    np.testing.assert_array_equal(x.get(), np.full(16, 4, np.float32))
    assert compile_count() - before == 2


def test_python_scalars_are_passed_as_the_types_they_map_to(queue):
    @cl.kernel
    def store_three(x: cl.Array[np.float64], a: np.int64, b: np.float64, c: np.bool_) -> str:
        return """__kernel void store_three(__global double *x, long a, double b, uchar c) {
                      x[0] = a; x[1] = b; x[2] = c; }"""

    x = zeros(queue, 3, np.float64)
    cl.launch(store_three, x, -(2**40), 0.25, True, global_size=1)
    np.testing.assert_array_equal(x.get(), [-(2.0**40), 0.25, 1.0])
    cl.launch(store_three, x, np.int64(5), np.float64(1.5), np.bool_(False), global_size=1)
    np.testing.assert_array_equal(x.get(), [5.0, 1.5, 0.0])


def test_more_specific_method_takes_over_while_an_older_world_runs_the_old_one(queue):
    @cl.kernel
    def which(x: cl.Array[np.number]) -> str:
        return f"""__kernel void which(__global {cl.ctype(x.dtype)} *x) {{
                       x[get_global_id(0)] = 1; }}"""

    x = zeros(queue, 4, np.float32)
    cl.launch(which, x, global_size=4)
    assert x.get().tolist() == [1, 1, 1, 1]
    old_world = specializer.latest()
    old_kernel = cl.clfunction(which, (F32,))

    @cl.kernel
    def which(x: F32) -> str:  # a second, more specific method
        return "__kernel void which(__global float *x) { x[get_global_id(0)] = 2; }"

    cl.launch(which, x, global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]
    invoke_in_world(old_world, cl.launch, which, x, global_size=4)
    assert x.get().tolist() == [1, 1, 1, 1]
    cl.launch(which, x, global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]
    # clfunction likewise: a new kernel now, the old one in the old world.
    new_kernel = cl.clfunction(which, (F32,))
    assert new_kernel.linked is not old_kernel.linked
    assert invoke_in_world(old_world, cl.clfunction, which, (F32,)).linked is old_kernel.linked
    assert cl.clfunction(which, (F32,)).linked is new_kernel.linked
    # each call a new HostKernel (nothing but the lookup's result is kept), as documented
    assert cl.clfunction(which, (F32,)) is not new_kernel
    old_kernel(x, global_size=4)
    assert x.get().tolist() == [1, 1, 1, 1]


@pytest.mark.slow
def test_callee_redefinition_recompiles_exactly_the_dependent_kernels(queue):
    @cl.device
    def scaled() -> str:
        return "float scaled(float v) { return 2.0f * v; }"

    @cl.kernel(callees=[scaled])
    def scale_a(x: F32) -> str:
        return "__kernel void scale_a(__global float *x) { x[get_global_id(0)] = scaled(1.0f); }"

    @cl.kernel(callees=[scaled])
    def scale_b(x: F32) -> str:
        return "__kernel void scale_b(__global float *x) { x[get_global_id(0)] = scaled(10.0f); }"

    @cl.kernel
    def no_callee(x: F32) -> str:
        return "__kernel void no_callee(__global float *x) { x[get_global_id(0)] = 7.0f; }"

    a, b, c = zeros(queue, 4), zeros(queue, 4), zeros(queue, 4)

    def run_all():
        for k, arr in ((scale_a, a), (scale_b, b), (no_callee, c)):
            cl.launch(k, arr, global_size=4)
        return a.get()[0], b.get()[0], c.get()[0]

    assert run_all() == (2, 20, 7)
    before = compile_count()

    @cl.device
    def scaled() -> str:  # the redefinition
        return "float scaled(float v) { return 3.0f * v; }"

    assert run_all() == (3, 30, 7)
    assert compile_count() - before == 2  # scale_a and scale_b; no_callee kept its code

    world = specializer.latest()

    @cl.device
    def unrelated() -> str:
        return "float unrelated(float v) { return v; }"

    assert specializer.latest() > world
    assert run_all() == (3, 30, 7)
    assert compile_count() - before == 2


# -- captured values ---------------------------------------------------------------------------


def test_captured_values_are_passed_on_every_launch(queue, lookups):
    @cl.kernel
    def add_captured(c: np.float32, x: F32) -> str:
        return """__kernel void add_captured(float c, __global float *x) {
                      x[get_global_id(0)] += c; }"""

    before = compile_count()
    x, y = zeros(queue, 4), zeros(queue, 4)
    cl.launch(add_captured.capture(np.float32(1)), x, global_size=4)
    cl.launch(add_captured.capture(np.float32(5)), y, global_size=4)
    cl.launch(add_captured.capture(np.float32(2)), x, global_size=4)
    assert x.get().tolist() == [3, 3, 3, 3]
    assert y.get().tolist() == [5, 5, 5, 5]
    assert compile_count() - before == 1  # one type for all three instances
    assert len(lookups) == 1  # and one cached lookup result serves them all

    hk = cl.clfunction(add_captured.capture(np.float32(10)), (F32,))
    hk(y, global_size=4)
    assert y.get().tolist() == [15, 15, 15, 15]
    cl.launch(cl.capture(add_captured, np.float32(1)), y, global_size=4)  # the same, spelled so
    assert y.get().tolist() == [16, 16, 16, 16]
    assert len(lookups) == 1
    with pytest.raises(TypeError, match=r"capture takes a kernel \(from specializer\.backends"):
        cl.capture(np.float32(1), x)
    other = specializer.kernels.Definitions(lambda v: np.float32)

    @other.kernel
    def add_captured_elsewhere(c: np.float32) -> str:
        return ""

    with pytest.raises(TypeError, match="defined with another back-end's @kernel"):
        cl.capture(add_captured_elsewhere, np.float32(1))


@pytest.mark.parametrize("first", ["numpy", "int"])
def test_instances_capturing_a_numpy_scalar_and_a_python_int_each_get_their_own_code(queue, first):
    """The captured values' types are in the invoker's key: an instance capturing
    ``np.int64(5)`` and one capturing ``7`` (the same method instance) each set their value as
    its type needs, in either order, as launch and as HostKernel (a set_arg failure before)."""

    @cl.kernel
    def addk(c: np.int64, x: cl.Array[np.int64]) -> str:
        return "__kernel void addk(long c, __global long *x) { x[get_global_id(0)] += c; }"

    x = zeros(queue, 4, np.int64)
    values = [np.int64(5), 7] if first == "numpy" else [7, np.int64(5)]
    for v in values:
        cl.launch(addk.capture(v), x, global_size=4)
    assert x.get().tolist() == [12] * 4
    for v in values:
        cl.clfunction(addk.capture(v), (cl.Array[np.int64],))(x, global_size=4)
    assert x.get().tolist() == [24] * 4


def test_dropped_kernel_instance_and_its_captured_array_are_collected(queue):
    @cl.kernel
    def copy_captured(src: F32, dst: F32) -> str:
        return """__kernel void copy_captured(__global float *src, __global float *dst) {
                      size_t i = get_global_id(0); dst[i] = src[i]; }"""

    src = cla.to_device(queue, np.arange(4, dtype=np.float32))
    dst = zeros(queue, 4)
    instance = copy_captured.capture(src)
    cl.launch(instance, dst, global_size=4)
    hk = cl.clfunction(instance, (F32,))
    hk(dst, global_size=4)
    assert dst.get().tolist() == [0, 1, 2, 3]
    queue.finish()
    instance_ref, src_ref = weakref.ref(instance), weakref.ref(src)
    del instance, src, hk
    gc.collect()
    assert instance_ref() is None
    assert src_ref() is None
    # The cached result is still there for the next instance of the same type.
    before = compile_count()
    other = cla.to_device(queue, np.full(4, 9, np.float32))
    cl.launch(copy_captured.capture(other), dst, global_size=4)
    assert dst.get().tolist() == [9, 9, 9, 9]
    assert compile_count() == before


def test_a_kernel_whose_parameters_are_all_captured_launches(queue):
    @cl.kernel
    def fill_captured(x: F32, v: np.float32) -> str:
        return """__kernel void fill_captured(__global float *x, float v) {
                      x[get_global_id(0)] = v; }"""

    x = zeros(queue, 4)
    cl.launch(fill_captured.capture(x, np.float32(6)), global_size=4)
    assert x.get().tolist() == [6, 6, 6, 6]


# -- the lookup: clfunction, keys, contexts ----------------------------------------------------


def test_clfunction_hit_returns_the_same_kernel_object_and_runs_no_lookup(queue, lookups):
    x = zeros(queue, 4)
    hk = cl.clfunction(add_value, (F32, np.float32))
    assert isinstance(hk, cl.HostKernel)
    n = len(lookups)
    for _ in range(5):
        again = cl.clfunction(add_value, (F32, np.float32))
        assert again.kernel is hk.kernel and again.linked is hk.linked
        again(x, np.float32(1), global_size=4)
    assert len(lookups) == n
    assert x.get().tolist() == [5, 5, 5, 5]


@pytest.mark.slow
def test_launches_create_no_kernel_object_after_the_first(queue, monkeypatch):
    @cl.kernel
    def count_kernels(x: F32) -> str:
        return "__kernel void count_kernels(__global float *x) { x[get_global_id(0)] += 1.0f; }"

    created = []
    real = pyopencl.Kernel

    def counting(*args):
        created.append(args)
        return real(*args)

    monkeypatch.setattr(pyopencl, "Kernel", counting)
    x = zeros(queue, 4)
    for _ in range(20):
        cl.launch(count_kernels, x, global_size=4)
        cl.clfunction(count_kernels, (F32,))(x, global_size=4)
    assert len(created) == 2  # the one HostKernel.kernel shows, and the one launches set
    assert x.get().tolist() == [40, 40, 40, 40]


def test_set_default_queue_picks_the_queue_launches_use(queue):
    other = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    x = zeros(other, 4)
    cl.set_default_queue(other)
    try:
        assert cl.default_queue() is other
        cl.launch(add_value, x, np.float32(2), global_size=4)
        assert cl.clfunction(add_value, (F32, np.float32)).context == other.context
    finally:
        cl.set_default_queue(queue)
    assert cl.default_queue() is queue
    assert x.get().tolist() == [2, 2, 2, 2]
    with pytest.raises(TypeError, match=r"expected a pyopencl\.CommandQueue or None"):
        cl.set_default_queue("gpu")


def test_host_kernel_called_with_other_argument_types_says_how_to_look_them_up(queue):
    hk = cl.clfunction(add_value, (F32, np.float32))
    with pytest.raises(
        TypeError,
        match=r"add_value\(Array\[np\.float32\], np\.float32\) was "
        r"called with arguments of types \(Array\[np\.float32\], "
        r"Weak\[float\]\).*look it up for those with clfunction",
    ):
        hk(zeros(queue, 4), 1.0, global_size=4)


def test_second_context_on_the_same_device_gets_its_own_kernel_and_both_keep_hitting(
    queue, lookups
):
    q2 = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    hk1 = cl.clfunction(add_value, (F32, np.float32), queue=queue)
    hk2 = cl.clfunction(add_value, (F32, np.float32), queue=q2)
    assert hk1.context != hk2.context
    assert hk1.kernel is not hk2.kernel
    x1, x2 = zeros(queue, 4), zeros(q2, 4)
    before, n = compile_count(), len(lookups)
    for _ in range(3):
        cl.launch(add_value, x1, np.float32(1), global_size=4, queue=queue)
        cl.launch(add_value, x2, np.float32(2), global_size=4, queue=q2)
    assert x1.get().tolist() == [3, 3, 3, 3]
    assert x2.get().tolist() == [6, 6, 6, 6]
    assert len(lookups) == n  # both contexts' entries stay in the cache
    assert compile_count() == before  # a new context links; it does not recompile


@pytest.mark.slow
def test_alternating_kernels_and_queues_each_get_their_own_lookup(queue, lookups):
    # Each kernel keeps its newest lookup inline (its front entry); alternating kernels,
    # queues of one context and argument types must never see another's.
    @cl.kernel
    def add_one(x: F32) -> str:
        return "__kernel void add_one(__global float *x) { x[get_global_id(0)] += 1.0f; }"

    @cl.kernel
    def add_ten(x: F32) -> str:
        return "__kernel void add_ten(__global float *x) { x[get_global_id(0)] += 10.0f; }"

    q2 = pyopencl.CommandQueue(queue.context)
    x, y = zeros(queue, 4), zeros(queue, 4, np.int32)
    for q in (queue, q2):
        cl.clfunction(add_one, (F32,), q)
        cl.clfunction(add_ten, (F32,), q)
    n = len(lookups)
    for _ in range(3):
        for q in (queue, q2):
            hk = cl.clfunction(add_one, (F32,), q)
            assert hk.queue is q and hk.f is add_one and hk.tt == (F32,)
            hk(x, global_size=4)
            assert cl.clfunction(add_ten, (F32,), queue=q).queue is q
            cl.launch(add_ten, x, global_size=4, queue=q)
            cl.launch(set_value, y, np.int32(7), global_size=4, queue=q)
            cl.launch(add_one, x, global_size=4, queue=q)
        q2.finish()
    assert x.get().tolist() == [72, 72, 72, 72]
    assert y.get().tolist() == [7, 7, 7, 7]
    assert len(lookups) == n + 1  # set_value's first launch; every other lookup hit


def test_a_definition_made_while_a_lookup_runs_is_seen_by_the_next_lookup(queue):
    # The world rises while the lookup runs: its result belongs to the world it started in,
    # and the next lookup, in the newer world, must not reuse it.
    def define_rising(first):  # one qualified name for both, so the second redefines
        if first:

            @cl.device
            def rising() -> str:
                return "float rising(void) { return 1.0f; }"

        else:

            @cl.device
            def rising() -> str:
                return "float rising(void) { return 2.0f; }"

        return rising

    redefined = []

    @cl.kernel(callees=[define_rising(True)])
    def uses_rising(x: F32) -> str:
        if not redefined:
            redefined.append(specializer.latest())
            define_rising(False)
        return "__kernel void uses_rising(__global float *x) { x[get_global_id(0)] = rising(); }"

    x = zeros(queue, 4)
    first = cl.clfunction(uses_rising, (F32,))
    assert specializer.latest() > redefined[0]
    first(x, global_size=4)
    assert x.get().tolist() == [1, 1, 1, 1]  # the code of the world the lookup ran in
    second = cl.clfunction(uses_rising, (F32,))
    assert second.linked is not first.linked
    second(x, global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]
    cl.launch(uses_rising, x.fill(0), global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]
    assert cl.clfunction(uses_rising, (F32,)).linked is cl.clfunction(uses_rising, (F32,)).linked


def test_clfunction_of_kernel_instances_returns_each_live_instance(queue, lookups):
    @cl.kernel
    def scale_captured(c: np.float32, x: F32) -> str:
        return """__kernel void scale_captured(float c, __global float *x) {
                      x[get_global_id(0)] *= c; }"""

    x = cla.to_device(queue, np.ones(4, np.float32))
    two, three = scale_captured.capture(np.float32(2)), scale_captured.capture(np.float32(3))
    hk2 = cl.clfunction(two, (F32,))
    n = len(lookups)
    hk3 = cl.clfunction(three, (F32,))
    assert (hk2.f, hk3.f) == (two, three)
    assert hk2.linked is hk3.linked and hk2 is not hk3
    hk2(x, global_size=4)
    hk3(x, global_size=4)
    cl.launch(three, x, global_size=4)
    assert x.get().tolist() == [18, 18, 18, 18]
    assert len(lookups) == n
    refs = weakref.ref(two), weakref.ref(three)
    del two, three, hk2, hk3
    gc.collect()
    assert refs[0]() is None and refs[1]() is None


def test_clfunction_and_launch_of_what_is_not_a_kernel_say_what_is_expected(queue):
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got 3"):
        cl.clfunction(3, ())
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got 'acc'"):
        cl.launch("acc", global_size=1)

    class Fronted:  # something else with a front attribute
        front = "not an entry"

    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <"):
        cl.clfunction(Fronted(), ())
    # A kernel instance's type is F, but not something to launch, also once it has an entry.
    x = zeros(queue, 4)
    instance = add_value.capture()
    cl.launch(instance, x, np.float32(1), global_size=4)
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <class"):
        cl.clfunction(type(instance), (F32, np.float32))
    with pytest.raises(TypeError, match=r"expected a kernel or a kernel instance, got <class"):
        cl.launch(type(instance), x, np.float32(1), global_size=4)
    assert x.get().tolist() == [1, 1, 1, 1]


def test_clfunction_returns_the_same_linked_kernel_across_unrelated_definitions(queue, lookups):
    @cl.kernel
    def kept_host(x: F32) -> str:
        return "__kernel void kept_host(__global float *x) { x[get_global_id(0)] = 1.0f; }"

    first = cl.clfunction(kept_host, (F32,))
    specializer.bump()  # a world later, the same code: the lookup runs, its result stays
    assert cl.clfunction(kept_host, (F32,)).linked is first.linked
    assert cl.clfunction(kept_host, [F32]).linked is first.linked  # tt as a list: the same
    x = zeros(queue, 4)
    cl.launch(kept_host, x, global_size=4)
    specializer.bump()
    cl.launch(kept_host, x, global_size=4)
    assert cl.clfunction(kept_host, (F32,)).linked is first.linked
    q2 = pyopencl.CommandQueue(queue.context)
    assert cl.clfunction(kept_host, (F32,), q2).queue is q2  # the same context, its queue
    assert x.get().tolist() == [1, 1, 1, 1]


def test_a_lookup_during_which_precompile_mode_came_on_is_not_remembered(queue, lookups):
    started, go = threading.Event(), threading.Event()

    @cl.kernel
    def slow_lookup(x: F32) -> str:
        started.set()  # the lookup is compiling: precompile mode comes on meanwhile
        assert go.wait(10)
        return "__kernel void slow_lookup(__global float *x) { x[get_global_id(0)] = 1.0f; }"

    results = []
    t = threading.Thread(target=lambda: results.append(cl.clfunction(slow_lookup, (F32,))))
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
    cl.clfunction(slow_lookup, (F32,))  # nothing was remembered: the lookup runs again
    assert len(lookups) == n + 1
    x = zeros(queue, 4)
    cl.clfunction(slow_lookup, (F32,))(x, global_size=4)
    assert len(lookups) == n + 1  # and is remembered now
    assert x.get().tolist() == [1, 1, 1, 1]


def test_host_kernel_refuses_a_queue_of_another_context(queue):
    q2 = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    hk = cl.clfunction(add_value, (F32, np.float32), queue=queue)
    with pytest.raises(
        ValueError,
        match=r"was looked up in <pyopencl\.Context .*, but called in <pyopencl\.Context .*: "
        r"look it up there with clfunction",
    ):
        hk(zeros(q2, 4), np.float32(1), global_size=4, queue=q2)


def test_build_options_are_part_of_the_config_and_the_key(queue, lookups):
    @cl.kernel
    def macro_value(x: F32) -> str:
        return "__kernel void macro_value(__global float *x) { x[get_global_id(0)] = VALUE; }"

    x = zeros(queue, 4)
    before = compile_count()
    for _ in range(2):
        cl.launch(macro_value, x, global_size=4, options=("-DVALUE=3",))
        assert x.get().tolist() == [3, 3, 3, 3]
        cl.launch(macro_value, x, global_size=4, options=["-DVALUE=4"])
        assert x.get().tolist() == [4, 4, 4, 4]
    assert compile_count() - before == 2
    assert len(lookups) == 2  # the second round hit both entries
    hk = cl.clfunction(macro_value, (F32,), options="-DVALUE=5")
    hk(x, global_size=4)
    assert x.get().tolist() == [5, 5, 5, 5]


def test_unknown_compiler_keyword_is_a_type_error_naming_the_accepted_one(queue):
    x = zeros(queue, 4)
    with pytest.raises(
        TypeError,
        match=r"unknown keyword argument\(s\) fastmath: launch options are global_size, "
        r"local_size, global_offset, wait_for, queue; the compiler option is options=",
    ):
        cl.launch(add_value, x, np.float32(1), global_size=4, fastmath=True)
    with pytest.raises(TypeError, match="options are OpenCL build options"):
        cl.clfunction(add_value, (F32, np.float32), options=3)


# -- compile hooks and precompile-output mode --------------------------------------------------


def test_compile_hooks_and_device_code_source_see_cached_kernels(queue):
    @cl.device
    def hooked_helper() -> str:
        return "float hooked_helper(void) { return 8.0f; }"

    @cl.kernel(callees=[hooked_helper])
    def hooked(x: F32) -> str:
        return "__kernel void hooked(__global float *x) { x[get_global_id(0)] = hooked_helper(); }"

    x = zeros(queue, 4)
    cl.launch(hooked, x, global_size=4)  # compiled and cached before the hooks
    before = compile_count()
    with specializer.device_code_source() as sources:
        cl.launch(hooked, x, global_size=4)
    assert len(sources) == 1
    assert "__kernel void hooked" in sources[0] and "float hooked_helper(void)" in sources[0]
    seen = []
    with specializer.device_code(lambda job, artifact: seen.append((job.name, artifact.name))):
        cl.launch(hooked, x, global_size=4)
        cl.clfunction(hooked, (F32,))
    assert seen == [("hooked", "hooked"), ("hooked", "hooked")]
    assert x.get().tolist() == [8, 8, 8, 8]
    assert compile_count() == before


def test_precompile_output_mode_launches_correctly_and_stores_nothing(queue, lookups):
    @cl.kernel
    def in_precompile(x: F32, v: np.float32) -> str:
        return """__kernel void in_precompile(__global float *x, float v) {
                      x[get_global_id(0)] += v; }"""

    x = zeros(queue, 4)
    before = compile_count()
    with specializer.precompile_output():
        assert specializer.generating_output()
        for v in (1, 2, 3):
            cl.launch(in_precompile, x, np.float32(v), global_size=4)
        assert x.get().tolist() == [6, 6, 6, 6]
        assert len(lookups) == 3  # every launch ran its lookup
    assert compile_count() - before == 1  # the compiled-code cache still works
    cl.launch(in_precompile, x, np.float32(1), global_size=4)
    cl.launch(in_precompile, x, np.float32(1), global_size=4)
    assert len(lookups) == 4  # nothing was stored: one miss, then a hit
    assert x.get().tolist() == [8, 8, 8, 8]


# -- errors ------------------------------------------------------------------------------------


def test_unsupported_argument_is_a_type_error_naming_its_type(queue):
    with pytest.raises(TypeError, match=r"cannot pass a numpy\.ndarray to a kernel: accepted"):
        cl.launch(add_value, np.zeros(4, np.float32), np.float32(1), global_size=4)


def test_no_applicable_method_is_a_method_error_naming_kernel_and_argument_types(queue):
    y = zeros(queue, 4, np.int32)
    with pytest.raises(
        MethodError,
        match=r"no method of add_value matches "
        r"add_value\(Array\[np\.int32\], np\.float32\)",
    ):
        cl.launch(add_value, y, np.float32(1), global_size=4)


def test_build_failure_names_the_kernel_and_log_and_a_fixed_redefinition_works_at_once(
    queue, lookups
):
    @cl.kernel
    def fixable(x: F32) -> str:
        return "__kernel void fixable(__global float *x) { x[0] = not_declared_anywhere; }"

    x = zeros(queue, 4)
    for _ in range(2):  # nothing was cached: the second launch builds (and fails) again
        with pytest.raises(CompileError) as err:
            cl.launch(fixable, x, global_size=1)
        message = str(err.value)
        assert "OpenCL kernel fixable(Array[np.float32]) does not build" in message
        assert "not_declared_anywhere" in message.split("--- its source")[0]  # the log
    assert len(lookups) == 2

    @cl.kernel
    def fixable(x: F32) -> str:  # the fix
        return "__kernel void fixable(__global float *x) { x[get_global_id(0)] = 11.0f; }"

    cl.launch(fixable, x, global_size=4)
    assert x.get().tolist() == [11, 11, 11, 11]


def test_source_without_a_kernel_of_the_methods_name_is_a_compile_error(queue):
    @cl.kernel
    def misnamed(x: F32) -> str:
        return "__kernel void other_name(__global float *x) { x[0] = 1.0f; }"

    with pytest.raises(
        CompileError,
        match=r"defines no __kernel named 'misnamed' "
        r"\(it defines: other_name\)",
    ):
        cl.launch(misnamed, zeros(queue, 4), global_size=1)


def test_array_view_with_an_offset_or_gaps_is_rejected_before_launch(queue):
    x = cla.to_device(queue, np.arange(8, dtype=np.float32))
    with pytest.raises(
        ValueError,
        match=r"parameter 0 \(x\) of kernel add_value\(Array\[np\.float32\], np\.float32\) "
        r"starts at byte 8 of its buffer \(a view\).*view\.copy\(\)",
    ):
        cl.launch(add_value, x[2:], np.float32(1), global_size=6)
    with pytest.raises(ValueError, match=r"parameter 0 \(x\) of kernel add_value.* is not contig"):
        cl.launch(add_value, x[::2], np.float32(1), global_size=4)
    assert x.get().tolist() == list(range(8))


def test_kernel_of_another_backend_is_refused(queue):
    import pybackend

    @pybackend.kernel
    def py_only(x: np.float32) -> str:
        return "def py_only(x): return x"

    with pytest.raises(TypeError, match="py_only was defined with another back-end's @kernel"):
        cl.launch(py_only, np.float32(1), global_size=1)


def test_launch_of_something_that_is_not_a_kernel_says_what_is_expected():
    with pytest.raises(
        TypeError,
        match=r"expected a kernel or a kernel instance, got <built-in function print>: define "
        r"kernels with specializer\.backends\.opencl\.kernel",
    ):
        cl.launch(print, global_size=1)


# -- threads -----------------------------------------------------------------------------------


def test_threads_launching_on_their_own_queues_at_once_get_correct_results(queue):
    threads, launches = 4, 1000
    ctx = queue.context
    queues = [pyopencl.CommandQueue(ctx) for _ in range(threads)]
    arrays = [zeros(q, 64) for q in queues]
    # One more thread in a context of its own.
    queues.append(pyopencl.CommandQueue(pyopencl.Context([queue.device])))
    arrays.append(zeros(queues[-1], 64))
    start = threading.Barrier(len(queues))
    errors = []

    def work(i):
        try:
            q, x, v = queues[i], arrays[i], np.float32(i + 1)
            start.wait()
            for _ in range(launches):
                cl.launch(add_value, x, v, global_size=64, queue=q)
            q.finish()
        except BaseException as e:  # reported below, with the thread's index
            errors.append((i, e))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(queues))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, also between setting args and enqueueing
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    for i, x in enumerate(arrays):
        np.testing.assert_array_equal(x.get(), np.full(64, launches * (i + 1), np.float32))


# -- the demo ----------------------------------------------------------------------------------


def test_demo_checks_its_results_and_prints_the_launch_cost_table(capsys):
    from specializer import demo

    assert demo.main(["--launches", "100", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("STALE: old code ran") == 2  # the naive cache, twice
    assert "WRONG" not in out
    assert "recompiled: 1 kernel (shift)" in out
    assert "| specializer launch(acc, x, a, global_size=1)" in out
    assert "typed scalars" in out and "floor: arguments set once" in out
    assert "Every result matched numpy" in out


# -- errors a new user meets ---------------------------------------------------------------


def test_calling_a_kernel_directly_says_to_launch_it():
    with pytest.raises(TypeError, match=r"kernel add_value is not called directly: launch it"):
        add_value(np.float32(1))


def test_clfunction_given_values_instead_of_types_says_to_pass_types(queue):
    x = zeros(queue, 4)
    with pytest.raises(TypeError, match=r"takes argument types, not values.*typeof\(value\)"):
        cl.clfunction(add_value, (x, np.float32(1)))
    with pytest.raises(TypeError, match=r"takes a tuple of argument types"):
        cl.clfunction(add_value, F32)
    # Python's scalar types stand for the weak types, as a Python value would.
    hk = cl.clfunction(add_value, (F32, float))
    hk(x, 2.0, global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]


def test_a_device_function_with_parameters_is_refused_when_defined():
    with pytest.raises(TypeError, match=r"device function takes_params takes parameters \(v\)"):

        @cl.device
        def takes_params(v: np.float32) -> str:
            return "float takes_params(float v) { return v; }"


def test_a_device_function_missing_from_callees_gets_a_hint_in_the_build_error(queue):
    @cl.device
    def twice() -> str:
        return "float twice(float v) { return 2.0f * v; }"

    @cl.kernel  # calls twice, but forgets callees=[twice]
    def forgets_callee(x: F32) -> str:
        return """__kernel void forgets_callee(__global float *x) {
                      x[get_global_id(0)] = twice(x[get_global_id(0)]); }"""

    with pytest.raises(
        CompileError,
        match=r"(?s)implicit declaration.*hint: twice is a device function of this back-end "
        r"that the kernel calls but does not list: add it to @kernel\(callees=\[twice\]\)",
    ):
        cl.launch(forgets_callee, zeros(queue, 4), global_size=4)


def test_an_unknown_launch_keyword_names_the_launch_and_compiler_options(queue):
    with pytest.raises(
        TypeError,
        match=r"unknown keyword argument\(s\) local \(did you mean local_size\?\): launch options "
        r"are global_size, local_size, global_offset, wait_for, queue; the compiler option is "
        r"options=",
    ):
        cl.launch(add_value, zeros(queue, 4), np.float32(1), global_size=4, local=2)


def test_a_launch_with_build_options_hits_its_front_entry(queue, lookups):
    x = zeros(queue, 4)
    opts = ("-cl-fast-relaxed-math",)
    cl.launch(add_value, x, np.float32(1), global_size=4, options=opts)
    n = len(lookups)
    for _ in range(5):
        cl.launch(add_value, x, np.float32(1), global_size=4, options=opts)
    assert len(lookups) == n  # no lookup ran: the front entry held it
    assert x.get().tolist() == [6, 6, 6, 6]


def _references(probe):
    """How many references the OpenCL context behind ``probe`` has (``probe`` is one)."""
    return probe.get_info(pyopencl.context_info.REFERENCE_COUNT)


def test_a_dropped_context_is_freed_with_what_was_built_for_it():
    device = cl.default_queue().device
    refs, probes = [], []
    for _ in range(3):
        ctx = pyopencl.Context([device])
        q = pyopencl.CommandQueue(ctx)
        x = cla.zeros(q, 4, np.float32)
        cl.launch(add_value, x, np.float32(1), global_size=4, queue=q)
        hk = cl.clfunction(add_value, (F32, np.float32), queue=q)
        hk(x, np.float32(1), global_size=4)
        assert x.get().tolist() == [2, 2, 2, 2]
        refs.append(weakref.ref(ctx))
        # A second handle of the same OpenCL context, which this test holds: once the user's
        # objects are gone, it must be the context's only reference (a queue, a program or a
        # kernel object kept by the library would each hold one).
        probes.append(pyopencl.Context.from_int_ptr(ctx.int_ptr, retain=True))
        assert _references(probes[-1]) > 1
        del ctx, q, x, hk
    # Launch and look up elsewhere, so that the kernel's newest entries are another queue's.
    cl.launch(add_value, zeros(cl.default_queue(), 4), np.float32(1), global_size=4)
    cl.clfunction(add_value, (F32, np.float32))
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert [_references(p) for p in probes] == [1, 1, 1]


def test_a_context_outlives_its_first_queue_and_keeps_working_on_another():
    # Each queue is finished before another writes x: launches on two queues of one context
    # are not ordered by anything else, and each adds to what the one before wrote.
    ctx = pyopencl.Context([cl.default_queue().device])
    q1 = pyopencl.CommandQueue(ctx)
    x = cla.zeros(q1, 4, np.float32)
    cl.launch(add_value, x, np.float32(1), global_size=4, queue=q1)
    q1.finish()
    q2 = pyopencl.CommandQueue(ctx)
    hk = cl.clfunction(add_value, (F32, np.float32), queue=q2)
    del q1
    gc.collect()
    hk(x, np.float32(1), global_size=4)  # its own queue
    q2.finish()
    q3 = pyopencl.CommandQueue(ctx)
    hk(x, np.float32(1), global_size=4, queue=q3)  # another queue of the same context
    cl.launch(add_value, x, np.float32(1), global_size=4, queue=q3)
    q3.finish()
    assert x.get(queue=q2).tolist() == [4, 4, 4, 4]
    other = pyopencl.CommandQueue(pyopencl.Context([ctx.devices[0]]))
    with pytest.raises(ValueError, match="looked up in"):
        hk(x, np.float32(1), global_size=4, queue=other)


@pytest.mark.slow
def test_many_dropped_contexts_keep_the_process_size_bounded():
    """Each context the library held cost about 1.1 MiB (its built program among them): 200
    of them would add over 200 MiB; plain pyopencl adds almost nothing."""
    device = cl.default_queue().device

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def one():
        q = pyopencl.CommandQueue(pyopencl.Context([device]))
        x = cla.zeros(q, 4, np.float32)
        cl.launch(add_value, x, np.float32(1), global_size=4, queue=q)
        cl.clfunction(add_value, (F32, np.float32), queue=q)(x, np.float32(1), global_size=4)
        assert x.get().tolist() == [2, 2, 2, 2]

    for _ in range(60):  # the allocator's and PoCL's own caches settle first
        one()
    gc.collect()
    before = rss_mib()
    for _ in range(200):
        one()
    gc.collect()
    # held per context, 200 would add over 200 MiB; the allocator's and PoCL's own growth
    # moves the resident size by up to about 30 MiB either way on this machine
    assert rss_mib() - before < 60


def test_kernels_launched_on_several_contexts_in_turn_keep_an_entry_for_each(queue, lookups):
    device = queue.device
    queues = [pyopencl.CommandQueue(pyopencl.Context([device])) for _ in range(5)]
    xs = [cla.zeros(q, 4, np.float32) for q in queues]
    for q, x in zip(queues, xs):  # the first launch on each looks up (and builds)
        cl.launch(add_value, x, np.float32(1), global_size=4, queue=q)
    n = len(lookups)
    for _ in range(3):
        for q, x in zip(queues, xs):
            cl.launch(add_value, x, np.float32(1), global_size=4, queue=q)
    assert len(lookups) == n  # each context's entry served its launches
    assert [x.get().tolist() for x in xs] == [[4, 4, 4, 4]] * 5
    specializer.bump()  # a new world: every entry is stale, each context looks up once
    for q, x in zip(queues, xs):
        cl.launch(add_value, x, np.float32(1), global_size=4, queue=q)
    assert len(lookups) == n + 5
    assert [x.get().tolist() for x in xs] == [[5, 5, 5, 5]] * 5
