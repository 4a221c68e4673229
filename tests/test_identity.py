"""Which definitions are one kernel (SPEC 7): a kernel is keyed by its module and qualified
name and, for a closure, by its closure cells, so each run of a kernel factory gives its own
kernel, and a definition inside a function never replaces a module-level one."""

from __future__ import annotations

import gc
import pickle
import weakref

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402

from specializer import compile_count  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402
from specializer.kernels import DeviceFunction, Kernel  # noqa: E402

F32 = cl.Array[np.float32]


@pytest.fixture(scope="module")
def queue():
    return cl.default_queue()


@pytest.fixture
def fresh_queue():
    """A queue in a new context: programs are built once per context, so a build counted
    here is this test's own."""
    return pyopencl.CommandQueue(pyopencl.Context([cl.default_queue().device]))


@pytest.fixture
def builds(monkeypatch):
    """Counts ``pyopencl.Program.build`` calls (the back-end builds through it)."""
    calls = []
    real = pyopencl.Program.build

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("options", args[0] if args else None))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pyopencl.Program, "build", counting)
    return calls


def threes(queue, n=4, dtype=np.float32):
    return cla.to_device(queue, np.full(n, 3, dtype))


def run(queue, k, *args, dtype=np.float32):
    x = threes(queue, dtype=dtype)
    cl.launch(k, x, *args, global_size=x.size, queue=queue)
    return x.get()


def make_binop(op):
    @cl.kernel
    def binop(x: F32, v: np.float32) -> str:
        return f"""__kernel void binop(__global float *x, float v) {{
                       x[get_global_id(0)] = x[get_global_id(0)] {op} v; }}"""

    return binop


@cl.device
def ident_bump() -> str:
    return "float ident_bump(float v) { return v + 1.0f; }"


@cl.kernel(callees=[ident_bump])
def ident_bumped(x: F32) -> str:
    return """__kernel void ident_bumped(__global float *x) {
                  x[get_global_id(0)] = ident_bump(x[get_global_id(0)]); }"""


@cl.kernel
def ident_module_level(x: F32) -> str:
    return "__kernel void ident_module_level(__global float *x) { }"


def test_each_run_of_a_kernel_factory_gives_its_own_kernel(queue):
    add, mul = make_binop("+"), make_binop("*")
    assert add is not mul
    assert run(queue, add, np.float32(2)).tolist() == [5] * 4
    assert run(queue, mul, np.float32(2)).tolist() == [6] * 4


def test_a_device_function_defined_in_a_function_leaves_the_module_level_one(queue):
    @cl.device
    def ident_bump() -> str:
        return "float ident_bump(float v) { return v + 100.0f; }"

    assert run(queue, ident_bumped).tolist() == [4] * 4  # the module-level ident_bump
    assert ident_bump is not ident_bumped.methods()[0].callees[0]


def test_definitions_in_one_run_closing_over_one_variable_are_methods_of_one_kernel(queue):
    def make(value):
        @cl.kernel
        def ident_fill(x: F32) -> str:
            return (
                f"__kernel void ident_fill(__global float *x) {{ x[get_global_id(0)] = {value}; }}"
            )

        first = ident_fill

        @cl.kernel  # more specific: another method of the same kernel
        def ident_fill(x: cl.Array[np.int32]) -> str:
            return f"__kernel void ident_fill(__global int *x) {{ x[get_global_id(0)] = {value}; }}"

        assert ident_fill is first
        return ident_fill

    seven, nine = make(7), make(9)
    assert seven is not nine
    assert len(seven.methods()) == 2
    assert run(queue, seven).tolist() == [7] * 4
    assert run(queue, seven, dtype=np.int32).tolist() == [7] * 4
    assert run(queue, nine, dtype=np.int32).tolist() == [9] * 4


def test_a_closure_free_definition_in_a_function_body_redefines_by_qualname(queue):
    def define(step):  # as the demo does: no closure, so each run redefines the same one
        if step == 1:

            @cl.device
            def ident_offset() -> str:
                return "float ident_offset(float v) { return v + 10.0f; }"

        else:

            @cl.device
            def ident_offset() -> str:
                return "float ident_offset(float v) { return v + 100.0f; }"

        return ident_offset

    offset = define(1)

    @cl.kernel(callees=[offset])
    def ident_shift(x: F32) -> str:
        return """__kernel void ident_shift(__global float *x) {
                      x[get_global_id(0)] = ident_offset(x[get_global_id(0)]); }"""

    assert run(queue, ident_shift).tolist() == [13] * 4
    assert define(2) is offset
    assert run(queue, ident_shift).tolist() == [103] * 4  # the kernel sees the redefinition


def test_kernels_and_device_functions_carry_name_and_qualname():
    assert (ident_bumped.__name__, ident_bumped.__qualname__) == ("ident_bumped",) * 2
    assert (ident_bump.__name__, ident_bump.__module__) == ("ident_bump", __name__)
    add = make_binop("+")
    assert add.__name__ == add.name == "binop"  # the C name in messages
    assert add.__qualname__ == "make_binop.<locals>.binop"
    assert add.__module__ == __name__


def test_a_factory_run_many_times_keeps_only_the_kernels_still_referenced(queue):
    made = [make_binop("+") for _ in range(10_000)]
    refs = [weakref.ref(k) for k in made]
    kept = made[::1000]
    del made
    gc.collect()
    assert sum(r() is not None for r in refs) == len(kept) == 10
    live = [
        o
        for o in gc.get_objects()
        if isinstance(o, Kernel) and o.__qualname__ == "make_binop.<locals>.binop"
    ]
    assert len(live) == 10
    assert run(queue, kept[-1], np.float32(2)).tolist() == [5] * 4


def test_two_factory_products_of_one_source_build_one_program(fresh_queue, builds):
    a, b = make_binop("-"), make_binop("-")
    assert a is not b
    before = compile_count()
    assert run(fresh_queue, a, np.float32(1)).tolist() == [2] * 4
    assert run(fresh_queue, b, np.float32(2)).tolist() == [1] * 4
    assert compile_count() - before == 2  # two kernels, each compiled
    assert len(builds) == 1  # one source: built once in this context


def test_module_level_kernels_pickle_by_name_and_closures_say_why_not():
    assert pickle.loads(pickle.dumps(ident_module_level)) is ident_module_level
    assert pickle.loads(pickle.dumps(ident_bump)) is ident_bump
    with pytest.raises(
        pickle.PicklingError,
        match=r"kernel make_binop\.<locals>\.binop of test_identity was defined inside a "
        r"function, so it cannot be pickled: .* define it at module level",
    ):
        pickle.dumps(make_binop("+"))

    @cl.device
    def ident_local() -> str:
        return "float ident_local(float v) { return v; }"

    assert isinstance(ident_local, DeviceFunction)
    with pytest.raises(pickle.PicklingError, match=r"device function .*ident_local of "):
        pickle.dumps(ident_local)
