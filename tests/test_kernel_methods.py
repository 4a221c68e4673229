"""``@k.method`` on a ``def`` of any name adds a method to kernel (or device function) ``k``
(SPEC 7, as ``functools.singledispatch``'s ``register``), through the same path as the
back-end's own decorator: annotations checked at definition, callees, the world raised once.
``k.delete_method(signature)`` takes one back (Julia's ``Base.delete_method``): the next
launch dispatches as if it had never been defined, an older world still sees it. On the
pure-Python back-end (real outputs), OpenCL (a real launch on PoCL) and CUDA (NVRTC to PTX, no
GPU needed)."""

import numpy as np
import pytest
from pybackend import py

from specializer import (
    CompileError,
    GenericFunction,
    MethodError,
    compile_count,
    invoke_in_world,
    latest,
)

F32 = py.Array[np.float32]


def zeros(n=4, dtype=np.float32):
    return np.zeros(n, dtype)


# -- the pure-Python back-end --------------------------------------------------------------------


def test_a_method_of_any_name_adds_a_method_to_the_kernel():
    @py.kernel
    def any_name(x: py.Array[np.number], v: np.number) -> str:
        return "def any_name(i, x, v): x[i] = v"

    w = latest()

    @any_name.method
    def _(x: F32, v: np.float32) -> str:  # more specific: doubles
        return "def any_name(i, x, v): x[i] = 2 * v"

    assert _ is any_name  # the decorated name refers to the kernel, as @py.kernel's does
    assert latest() == w + 1  # one definition, one world
    assert [m.signature for m in any_name.methods()] == [
        (py.Array[np.number], np.number),
        (F32, np.float32),
    ]
    x, y = zeros(), zeros(dtype=np.int32)
    py.launch(any_name, x, np.float32(3), size=4)
    py.launch(any_name, y, np.int32(3), size=4)
    assert x.tolist() == [6, 6, 6, 6] and y.tolist() == [3, 3, 3, 3]

    @any_name.method
    def _(x: F32, v: np.float32) -> str:  # the same signature again: replaces that method
        return "def any_name(i, x, v): x[i] = 3 * v"

    py.launch(any_name, x, np.float32(3), size=4)
    assert x.tolist() == [9, 9, 9, 9] and len(any_name.methods()) == 2


def test_a_method_of_any_name_takes_callees_and_is_recompiled_with_them():
    @py.device
    def offset() -> str:
        return "OFFSET = 10"

    @py.kernel
    def with_callee(x: py.Array[np.number]) -> str:
        return "def with_callee(i, x): x[i] = 1"

    @with_callee.method(callees=[offset])
    def _(x: F32) -> str:
        return "def with_callee(i, x): x[i] = OFFSET"

    x = zeros()
    py.launch(with_callee, x, size=4)
    assert x.tolist() == [10, 10, 10, 10]
    before = compile_count()

    @py.device
    def offset() -> str:  # redefined: the method that calls it is compiled again
        return "OFFSET = 20"

    py.launch(with_callee, x, size=4)
    assert x.tolist() == [20, 20, 20, 20] and compile_count() == before + 1


def test_a_device_functions_method_replaces_its_one_method():
    @py.device
    def base() -> str:
        return "BASE = 1"

    @py.kernel(callees=[base])
    def uses_base(x: F32) -> str:
        return "def uses_base(i, x): x[i] = BASE"

    x = zeros()
    py.launch(uses_base, x, size=4)
    w = latest()

    @base.method
    def _() -> str:  # no parameters, so one signature: this replaces the method
        return "BASE = 5"

    assert _ is base and latest() == w + 1 and len(base.methods()) == 1
    py.launch(uses_base, x, size=4)
    assert x.tolist() == [5, 5, 5, 5]
    with pytest.raises(TypeError, match="device function base takes parameters"):

        @base.method
        def _(v: np.float32) -> str:
            return ""

    assert latest() == w + 1  # refused before anything was defined


def test_a_methods_annotations_are_checked_as_the_decorators_are():
    @py.kernel
    def checked(x: F32) -> str:
        return "def checked(i, x): x[i] = 1"

    w, methods = latest(), checked.methods()
    with pytest.raises(TypeError) as e:

        @checked.method
        def _(x: F32, v: int) -> str:
            return ""

    assert str(e.value).startswith("parameter 'v' of kernel checked is annotated int, which no ")
    with pytest.raises(TypeError, match=r"parameter 'v' of .*\._ has no annotation"):

        @checked.method
        def _(x: F32, v) -> str:
            return ""

    assert latest() == w and checked.methods() == methods  # nothing was defined


def test_a_kernel_instance_takes_no_methods():
    @py.kernel
    def captures(c: np.float32, x: F32) -> str:
        return "def captures(i, c, x): x[i] = c"

    inst = py.capture(captures, np.float32(1))
    with pytest.raises(TypeError) as e:
        inst.method(lambda c, x: "")
    assert "a kernel instance (made by capture) has no methods of its own" in str(e.value)
    assert "use @captures.method on the kernel itself" in str(e.value)


def _kernel_callee_refusals(kernel, device, prefix):
    """Every way to list a kernel in ``callees=``, each refused where it is defined, and what
    it left: nothing (no kernel or device function defined, no method, no world)."""

    @kernel
    def add(x: np.number) -> str:
        return "def add(i, x): pass"

    @device
    def helper() -> str:
        return "def helper(v): return v"

    w = latest()
    said = f"add is a kernel; a callee is a device function: @{prefix}.device (in callees= of "
    with pytest.raises(TypeError) as e:

        @kernel(callees=[helper, add])
        def uses_add(x: np.number) -> str:
            return "def uses_add(i, x): pass"

    assert str(e.value) == said + "uses_add)"
    with pytest.raises(TypeError) as e:

        @device(callees=iter([add]))  # any iterable, a one-shot one too
        def helper_uses_add() -> str:
            return "def helper_uses_add(v): return v"

    assert str(e.value) == said + "helper_uses_add)"
    with pytest.raises(TypeError) as e:

        @add.method(callees=[add])
        def _(x: np.float32) -> str:
            return "def add(i, x): pass"

    assert str(e.value) == said + "add)"
    with pytest.raises(TypeError) as e:
        helper.add_method(lambda: "", None, [add])  # positional callees too

    assert str(e.value) == said + "helper)"
    assert latest() == w and len(add.methods()) == 1 and len(helper.methods()) == 1
    return add, helper


def test_a_kernel_listed_as_a_callee_is_refused_where_it_is_defined():
    # It once failed the compile, saying the kernel "was deleted with add.delete_method".
    from pybackend import device, kernel, run

    _, helper = _kernel_callee_refusals(kernel, device, "this back-end")

    @kernel(callees=(c for c in [helper]))  # a generator of device functions still works
    def uses_helper(x: np.number) -> str:
        return "def uses_helper(x): return helper(x) + 1"

    assert run(uses_helper, np.float32(2)) == 3


def test_a_callee_whose_methods_all_take_arguments_is_no_device_function_when_compiled():
    # a generic function that is no kernel gets past the definition: its compile says what
    # it is, not that a method was deleted
    from pybackend import kernel, run

    takes_one = GenericFunction("takes_one")
    takes_one.add_method(lambda x: "def takes_one(v): return v", signature=(np.number,))

    @kernel(callees=[takes_one])
    def calls_takes_one(x: np.number) -> str:
        return "def calls_takes_one(x): return takes_one(x)"

    with pytest.raises(CompileError) as e:
        run(calls_takes_one, np.float32(1))
    assert "calls device function takes_one (in its callees=), which has no method in " in str(
        e.value
    )
    assert "taking no arguments: a callee is a device function" in str(e.value)
    assert "delete_method" not in str(e.value)


# -- OpenCL: a real launch ----------------------------------------------------------------------


def test_opencl_a_method_of_any_name_runs():
    pytest.importorskip("pyopencl")
    import pyopencl.array as cla

    from specializer.backends import opencl as cl

    @cl.device
    def halve() -> str:
        return "float halve(float v) { return v / 2; }"

    @cl.kernel
    def cl_fill(x: cl.Array[np.number], v: np.number) -> str:
        return f"""__kernel void cl_fill(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                       x[get_global_id(0)] = v; }}"""

    @cl_fill.method(callees=[halve])
    def _(x: cl.Array[np.float32], v: np.float32) -> str:
        return cl.KernelSource(
            """__kernel void cl_fill(__global float *x, float v) {
                   x[get_global_id(0)] = halve(v) + ADD; }""",
            options=("-DADD=1",),
        )

    queue = cl.default_queue()
    x, y = cla.zeros(queue, 8, np.float32), cla.zeros(queue, 8, np.int32)
    cl.launch(cl_fill, x, np.float32(6), global_size=8)
    cl.launch(cl_fill, y, np.int32(6), global_size=8)
    assert (x.get() == 4).all() and (y.get() == 6).all()
    with pytest.raises(
        TypeError, match=r"parameter 'x' of kernel cl_fill is annotated np\.ndarray"
    ):

        @cl_fill.method
        def _(x: np.ndarray, v: np.float64) -> str:
            return ""


def test_opencl_a_kernel_listed_as_a_callee_is_refused_where_it_is_defined():
    pytest.importorskip("pyopencl")
    from specializer.backends import opencl as cl

    _kernel_callee_refusals(cl.kernel, cl.device, "opencl")


# -- CUDA: dispatch to PTX, without a GPU --------------------------------------------------------


def test_cuda_a_method_of_any_name_compiles(monkeypatch, tmp_path):
    pytest.importorskip("cuda.bindings")
    from specializer.backends import cuda

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))  # not the user's disk cache
    A = cuda.Array

    @cuda.kernel
    def cu_fill(x: A[np.number], v: np.number) -> str:
        t = cuda.ctype(x.dtype)
        return f"""extern "C" __global__ void cu_fill({t} *x, {cuda.ctype(v)} v) {{
                       x[threadIdx.x] = v; }}"""

    @cu_fill.method
    def _(x: A[np.float64], v: np.float32) -> str:
        return """extern "C" __global__ void cu_fill(double *x, float v) {
                      x[threadIdx.x] = 2.0 * v; }"""

    ptx = cuda.code_ptx(cu_fill, (A[np.float64], np.float32), arch="sm_90")
    assert "mul.f64" in ptx or "add.f64" in ptx  # the new method's body
    generic = cuda.code_ptx(cu_fill, (A[np.float32], np.float32), arch="sm_90")
    assert "mul.f" not in generic and "add.f" not in generic


# -- delete_method: a method taken back (Julia's Base.delete_method) -----------------------------


def test_a_deleted_method_no_longer_dispatches_while_an_older_world_still_sees_it():
    @py.kernel
    def taken_back(x: py.Array[np.number], v: np.number) -> str:
        return "def taken_back(i, x, v): x[i] = v"

    @taken_back.method
    def _(x: F32, v: np.float32) -> str:
        return "def taken_back(i, x, v): x[i] = 2 * v"

    x = zeros()
    py.launch(taken_back, x, np.float32(3), size=4)
    assert x.tolist() == [6, 6, 6, 6]
    kept = py.function(taken_back, (F32, np.float32))  # a lookup of this world
    w = latest()
    (generic, specific) = taken_back.methods()

    deleted = taken_back.delete_method((F32, np.float32))  # a signature, as methods() shows it
    assert deleted is specific and latest() == w + 1  # one world
    assert specific.max_world == w and taken_back.methods() == [generic]
    py.launch(taken_back, x, np.float32(3), size=4)  # the less specific method takes it again
    assert x.tolist() == [3, 3, 3, 3]
    invoke_in_world(w, py.launch, taken_back, x, np.float32(3), size=4)  # an older world
    assert x.tolist() == [6, 6, 6, 6]
    kept(x, np.float32(4), size=4)  # a HostKernel keeps the code it was looked up for
    assert x.tolist() == [8, 8, 8, 8]
    py.launch(taken_back, x, np.float32(3), size=4)  # a pinned launch published nothing
    assert x.tolist() == [3, 3, 3, 3]

    @taken_back.method
    def _(x: F32, v: np.float32) -> str:  # defined again: a new method, from a new world
        return "def taken_back(i, x, v): x[i] = 3 * v"

    py.launch(taken_back, x, np.float32(3), size=4)
    assert x.tolist() == [9, 9, 9, 9]
    invoke_in_world(w + 1, py.launch, taken_back, x, np.float32(3), size=4)  # deleted there
    assert x.tolist() == [3, 3, 3, 3]
    invoke_in_world(w, py.launch, taken_back, x, np.float32(3), size=4)
    assert x.tolist() == [6, 6, 6, 6]

    # a Method from methods() names it too; deleting the last one leaves a MethodError
    taken_back.delete_method(taken_back.methods()[1])
    taken_back.delete_method(generic)
    assert taken_back.methods() == []
    with pytest.raises(MethodError, match="no method of taken_back matches"):
        py.launch(taken_back, x, np.float32(3), size=4)
    invoke_in_world(w, py.launch, taken_back, x, np.float32(3), size=4)
    assert x.tolist() == [6, 6, 6, 6]


def test_deleting_a_method_that_is_not_there_is_a_clear_error():
    @py.kernel
    def not_there(x: F32) -> str:
        return "def not_there(i, x): x[i] = 1"

    (m,) = not_there.methods()
    w = latest()
    with pytest.raises(ValueError) as e:
        not_there.delete_method((F32, np.float32))
    assert str(e.value) == (
        "not_there has no method not_there(Array[np.float32], np.float32) to delete; its "
        "methods are: not_there(Array[np.float32]). Pass one of not_there.methods() or its "
        "signature as m.signature shows it"
    )

    @not_there.method
    def _(x: F32) -> str:  # replaces m
        return "def not_there(i, x): x[i] = 2"

    with pytest.raises(ValueError, match=r"\(that method was replaced or deleted already\)"):
        not_there.delete_method(m)
    other = GenericFunction("other")
    other.add_method(lambda x: 0, (np.float32,))
    with pytest.raises(ValueError, match=r"it is a method of other; delete it with other\.delete"):
        not_there.delete_method(other.methods()[0])
    with pytest.raises(TypeError, match="delete_method takes a method of not_there"):
        not_there.delete_method([F32])
    with pytest.raises(TypeError, match="signature"):
        not_there.delete_method((3,))
    with pytest.raises(TypeError, match=r"use captures_d\.delete_method"):

        @py.kernel
        def captures_d(c: np.float32, x: F32) -> str:
            return ""

        py.capture(captures_d, np.float32(1)).delete_method((np.float32, F32))
    assert latest() == w + 3  # only the three definitions raised the world, no deletion


def test_deleting_a_device_functions_method_fails_its_callers_next_compile():
    @py.device
    def helper() -> str:
        return "HELP = 7"

    @py.kernel(callees=[helper])
    def helped(x: F32) -> str:
        return "def helped(i, x): x[i] = HELP"

    x = zeros()
    py.launch(helped, x, size=4)
    w = latest()
    helper.delete_method(())
    assert helper.methods() == [] and latest() == w + 1
    with pytest.raises(CompileError) as e:
        py.launch(helped, x, size=4)
    assert str(e.value).startswith(
        "kernel helped cannot be compiled: helped(Array[np.float32]) calls device function "
        f"helper (in its callees=), which has no method in world {w + 1} (its method was "
        "deleted with helper.delete_method)"
    )
    invoke_in_world(w, py.launch, helped, x, size=4)  # an older world still has it
    assert x.tolist() == [7, 7, 7, 7]

    @helper.method
    def _() -> str:  # defined again: the callers compile again
        return "HELP = 8"

    py.launch(helped, x, size=4)
    assert x.tolist() == [8, 8, 8, 8]


def test_opencl_a_deleted_method_gives_its_types_back():
    pytest.importorskip("pyopencl")
    import pyopencl.array as cla

    from specializer.backends import opencl as cl

    @cl.kernel
    def cl_back(x: cl.Array[np.number], v: np.number) -> str:
        return f"""__kernel void cl_back(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                       x[get_global_id(0)] = v; }}"""

    @cl_back.method
    def _(x: cl.Array[np.float32], v: np.float32) -> str:
        return """__kernel void cl_back(__global float *x, float v) {
                      x[get_global_id(0)] = -v; }"""

    x = cla.zeros(cl.default_queue(), 8, np.float32)
    cl.launch(cl_back, x, np.float32(5), global_size=8)
    assert (x.get() == -5).all()
    w = latest()
    cl_back.delete_method((cl.Array[np.float32], np.float32))
    cl.launch(cl_back, x, np.float32(5), global_size=8)
    assert (x.get() == 5).all()
    invoke_in_world(w, cl.launch, cl_back, x, np.float32(5), global_size=8)
    assert (x.get() == -5).all()


def test_cuda_a_deleted_method_gives_its_types_back(monkeypatch, tmp_path):
    pytest.importorskip("cuda.bindings")
    from specializer.backends import cuda

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))  # not the user's disk cache
    A = cuda.Array

    @cuda.kernel
    def cu_back(x: A[np.number], v: np.number) -> str:
        t = cuda.ctype(x.dtype)
        return f"""extern "C" __global__ void cu_back({t} *x, {cuda.ctype(v)} v) {{
                       x[threadIdx.x] = v; }}"""

    @cu_back.method
    def _(x: A[np.float64], v: np.float32) -> str:
        return """extern "C" __global__ void cu_back(double *x, float v) {
                      x[threadIdx.x] = 2.0 * v; }"""

    tt = (A[np.float64], np.float32)

    def doubles(ptx):  # the specific method's body: 2.0 * v
        return "mul.f64" in ptx or "add.f64" in ptx

    assert doubles(cuda.code_ptx(cu_back, tt, arch="sm_90"))
    w = latest()
    cu_back.delete_method(tt)
    assert not doubles(cuda.code_ptx(cu_back, tt, arch="sm_90"))  # the generic method's
    assert doubles(invoke_in_world(w, cuda.code_ptx, cu_back, tt, arch="sm_90"))
    cu_back.delete_method(cu_back.methods()[0])
    with pytest.raises(MethodError, match="no method of cu_back matches"):
        cuda.code_ptx(cu_back, tt, arch="sm_90")


def test_a_signature_to_delete_may_be_spelled_as_its_annotations():
    from typing import Annotated

    from specializer.types import Struct

    pair = np.dtype([("x", np.float32), ("n", np.int32)])
    gf = GenericFunction("annotated")

    @gf.method
    def _(s: Annotated[Struct, pair]) -> int:
        return 0

    assert gf.methods()[0].signature == (Struct[pair],)
    gf.delete_method((Annotated[Struct, pair],))  # the annotation, as the def spelled it
    assert gf.methods() == []
