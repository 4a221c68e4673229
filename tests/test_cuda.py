"""The CUDA back-end without a GPU: NVRTC to PTX, the compile cache, argument types, the
parameter buffers and launchers, and the error when no GPU or driver is present."""

import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("cuda.bindings")

import specializer
from specializer import CompileError, compile_count, device_code_source, launching
from specializer.backends import cuda
from specializer.backends.cuda import _params

ARCH = "sm_90"
A = cuda.Array


@pytest.fixture(autouse=True, scope="module")
def _own_disk_cache(tmp_path_factory):
    """This module's own disk cache of NVRTC output, never the user's (tests that check the
    cache itself set their own directory)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path_factory.mktemp("nvrtc-cache")))
        yield


SCALARS = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float32,
    np.float64,
]
PTX_PARAM = {1: ".u8", 2: ".u16", 4: ".u32", 8: ".u64"}


def has(ptx, op, t):
    """Whether ``ptx`` has instruction ``op`` on type ``t`` (any rounding modifier)."""
    return re.search(rf"\b{op}(\.\w+)*\.{t}\b", ptx) is not None


def entry(ptx):
    """(name, [parameter types]) of the single .entry in ``ptx``."""
    (m,) = re.findall(r"\.visible \.entry (\S+)\(([^)]*)\)", ptx)
    return m[0], re.findall(r"\.param (\.\w+)", m[1])


@cuda.kernel
def fill(x: A[np.number], v: np.number, n: np.int64) -> str:
    return f"""extern "C" __global__ void fill({cuda.ctype(x.dtype)} *x, {cuda.ctype(v)} v,
                                               long long n) {{
                   long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                   if (i < n) x[i] = v; }}"""


# -- NVRTC: generic kernels, methods, callees, captured values ------------------------------


def test_generic_kernel_compiles_each_instance_with_its_entry_and_parameters():
    assert entry(cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64), arch=ARCH)) == (
        "fill",
        [".u64", ".f32", ".u64"],
    )
    assert entry(cuda.code_ptx(fill, (A[np.float64], np.float64, np.int64), arch=ARCH)) == (
        "fill",
        [".u64", ".f64", ".u64"],
    )
    assert entry(cuda.code_ptx(fill, (A[np.int32], np.int32, np.int64), arch=ARCH)) == (
        "fill",
        [".u64", ".u32", ".u64"],
    )


def test_ptx_targets_the_requested_architecture():
    ptx = cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64), arch="sm_80")
    assert ".target sm_80" in ptx
    assert ".target compute_75" not in ptx


def test_compile_is_cached_per_instance_and_config():
    tt = (A[np.int16], np.int16, np.int64)
    n = compile_count()
    first = cuda.code_ptx(fill, tt, arch=ARCH)
    assert compile_count() == n + 1
    assert cuda.code_ptx(fill, tt, arch=ARCH) == first
    assert compile_count() == n + 1
    cuda.code_ptx(fill, tt, arch="sm_80")
    assert compile_count() == n + 2  # another architecture is another config


def test_more_specific_method_is_compiled_and_the_older_world_still_sees_the_generic_one():
    @cuda.kernel
    def scale(x: A[np.number], v: np.number) -> str:
        return f"""extern "C" __global__ void scale({cuda.ctype(x.dtype)} *x,
                                                    {cuda.ctype(v)} v) {{ x[0] *= v; }}"""

    tt = (A[np.float64], np.float64)
    assert has(cuda.code_ptx(scale, tt, arch=ARCH), "mul", "f64")
    old = specializer.latest()

    @cuda.kernel
    def scale(x: A[np.float64], v: np.float64) -> str:
        return """extern "C" __global__ void scale(double *x, double v) { x[0] += v; }"""

    new = cuda.code_ptx(scale, tt, arch=ARCH)
    assert has(new, "add", "f64") and not has(new, "mul", "f64")
    assert has(specializer.invoke_in_world(old, cuda.code_ptx, scale, tt, arch=ARCH), "mul", "f64")
    assert has(cuda.code_ptx(scale, (A[np.float32], np.float32), arch=ARCH), "mul", "f32")


def test_callee_is_compiled_in_and_its_redefinition_recompiles_only_its_kernels():
    @cuda.device
    def twice() -> str:
        return "__device__ float twice(float v) { return v * 2.0f; }"

    @cuda.kernel(callees=[twice])
    def use_twice(x: A[np.float32]) -> str:
        return """extern "C" __global__ void use_twice(float *x) { x[0] = twice(x[0]); }"""

    tt = (A[np.float32],)
    ptx = cuda.code_ptx(use_twice, tt, arch=ARCH)
    assert has(ptx, "add", "f32") or has(ptx, "mul", "f32")
    other = cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64), arch=ARCH)
    n = compile_count()

    @cuda.device
    def twice() -> str:
        return "__device__ float twice(float v) { return v - 1.0f; }"

    assert cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64), arch=ARCH) == other
    assert compile_count() == n  # not a caller of twice
    new = cuda.code_ptx(use_twice, tt, arch=ARCH)
    assert compile_count() == n + 1
    assert has(new, "add", "f32") and new != ptx
    cuda.code_ptx(use_twice, tt, arch=ARCH)
    assert compile_count() == n + 1


def test_captured_values_are_the_leading_parameters():
    @cuda.kernel
    def axpy(a: np.floating, x: A[np.floating], y: A[np.floating]) -> str:
        t = cuda.ctype(a)
        return f"""extern "C" __global__ void axpy({t} a, const {t} *x, {t} *y) {{
                       y[threadIdx.x] += a * x[threadIdx.x]; }}"""

    inst = axpy.capture(np.float32(2))
    name, params = entry(cuda.code_ptx(inst, (A[np.float32], A[np.float32]), arch=ARCH))
    assert (name, params) == ("axpy", [".f32", ".u64", ".u64"])
    name, params = entry(
        cuda.code_ptx(axpy.capture(2.0), (A[np.float64], A[np.float64]), arch=ARCH)
    )
    assert params == [".f64", ".u64", ".u64"]
    # capture(kernel, *values) is the same as kernel.capture(*values)
    assert type(cuda.capture(axpy, np.float32(3))) is type(inst)
    assert cuda.capture(axpy, np.float32(3)).values == (np.float32(3),)
    with pytest.raises(TypeError, match=r"capture takes a kernel \(from "):
        cuda.capture(print, 1)


def test_kernel_without_extern_c_is_found_under_its_mangled_name():
    @cuda.kernel
    def cxx(x: A[np.float32]) -> str:
        return "__global__ void cxx(float *x) { x[0] = 1.0f; }"

    ptx = cuda.code_ptx(cxx, (A[np.float32],), arch=ARCH)
    assert entry(ptx) == ("_Z3cxxPf", [".u64"])


def test_a_kernel_of_another_back_end_or_not_a_kernel_is_a_type_error():
    from specializer.kernels import Definitions

    other = Definitions(lambda value: np.float32)  # another back-end's decorators

    @other.kernel
    def elsewhere(x: np.float32) -> str:
        return "__kernel void elsewhere(float x) {}"

    with pytest.raises(TypeError, match="defined with another back-end's @kernel"):
        cuda.code_ptx(elsewhere, (np.float32,), arch=ARCH)
    with pytest.raises(TypeError, match="expected a kernel or a kernel instance"):
        cuda.code_ptx(print, (np.float32,), arch=ARCH)


def test_the_modules_example_kernel_compiles():
    example = textwrap.dedent(cuda.__doc__.split("::\n", 1)[1].split("\nDesign notes", 1)[0])
    ns = {}
    exec(example.split("\nx = cuda.CuArray")[0], ns)  # the definitions; launching needs a GPU
    tt = (A[np.float32], np.float32, np.int64)
    assert entry(cuda.code_ptx(ns["fill"], tt, arch=ARCH)) == ("fill", [".u64", ".f32", ".u64"])


def test_compile_hooks_see_the_device_source_with_callees_first():
    @cuda.device
    def helper_hk() -> str:
        return "__device__ int helper_hk() { return 7; }"

    @cuda.kernel(callees=[helper_hk])
    def hooked(x: A[np.int32]) -> str:
        return 'extern "C" __global__ void hooked(int *x) { x[0] = helper_hk(); }'

    with device_code_source() as sources:
        cuda.code_ptx(hooked, (A[np.int32],), arch=ARCH)
    (source,) = sources
    assert source.index("helper_hk()") < source.index("void hooked")


# -- compile errors and compiler kwargs -------------------------------------------------------


def test_nvrtc_failure_names_the_kernel_has_the_log_and_caches_nothing():
    @cuda.kernel
    def broken(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void broken(float *x) { x[0] = undefined_thing; }'

    n = compile_count()
    for _ in range(2):  # nothing was cached: the second try compiles (and fails) again
        with pytest.raises(CompileError, match=r"(?s)kernel broken.*sm_90.*undefined_thing"):
            cuda.code_ptx(broken, (A[np.float32],), arch=ARCH)
    assert compile_count() == n

    @cuda.kernel
    def broken(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void broken(float *x) { x[0] = 1.0f; }'

    assert entry(cuda.code_ptx(broken, (A[np.float32],), arch=ARCH))[0] == "broken"
    assert compile_count() == n + 1


def test_source_without_a_kernel_of_the_methods_name_is_a_compile_error():
    @cuda.kernel
    def misnamed(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void other_name(float *x) { x[0] = 1.0f; }'

    with pytest.raises(CompileError, match=r"(?s)kernel misnamed.*named misnamed"):
        cuda.code_ptx(misnamed, (A[np.float32],), arch=ARCH)


def test_compiler_kwargs_change_the_code_and_unknown_ones_are_a_type_error():
    @cuda.kernel
    def divide(x: A[np.float32], v: np.float32) -> str:
        return 'extern "C" __global__ void divide(float *x, float v) { x[0] = x[0] / v; }'

    tt = (A[np.float32], np.float32)
    precise = cuda.code_ptx(divide, tt, arch=ARCH)
    fast = cuda.code_ptx(divide, tt, arch=ARCH, fastmath=True)
    assert "div.rn.f32" in precise and "div.rn.f32" not in fast
    assert cuda.code_ptx(divide, tt, arch=ARCH, options=["--use_fast_math"]) == fast
    with pytest.raises(
        TypeError, match=r"unknown keyword argument.*fast_math.*compiler options are arch"
    ):
        cuda.code_ptx(divide, tt, arch=ARCH, fast_math=True)
    with pytest.raises(TypeError, match="fastmath= is a bool"):
        cuda.code_ptx(divide, tt, arch=ARCH, fastmath="yes")
    with pytest.raises(ValueError, match=r"arch='sm_52'.*supported: sm_"):
        cuda.code_ptx(divide, tt, arch="sm_52")
    with pytest.raises(CompileError, match="no-such-flag"):
        cuda.code_ptx(divide, tt, arch=ARCH, options=("--no-such-flag",))


def test_a_str_of_options_is_split_by_shell_rules_as_pyopencl_splits_it():
    @cuda.kernel
    def quoted(x: A[np.int32]) -> str:
        return 'extern "C" __global__ void quoted(int *x) { x[0] = VAL + W; }'

    tt = (A[np.int32],)
    split = cuda.code_ptx(quoted, tt, arch=ARCH, options=("-DVAL=1+2", "-DW=1"))
    assert re.search(r"mov\.u32\s+%r\d+, 4;", split)  # 1+2 + 1, as C reads it
    assert cuda.code_ptx(quoted, tt, arch=ARCH, options="-DVAL='1+2' -DW=1") == split
    with pytest.raises(ValueError, match="do not split as shell words"):
        cuda.code_ptx(quoted, tt, arch=ARCH, options="-DVAL='1+2")


# -- argument types -----------------------------------------------------------------------------


class FakeCAI:
    """A foreign device array as CuPy, PyTorch or Numba present one."""

    def __init__(self, typestr, shape=(4,), strides=None, ptr=0x7F0000001000, mask=None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
            "mask": mask,
        }


def test_typeof_maps_python_and_numpy_scalars_and_device_arrays():
    from specializer.types import Weak

    assert cuda.typeof(1) is Weak[int]  # weak: takes the type the method declares
    assert cuda.typeof(1.5) is Weak[float]
    assert cuda.typeof(True) is Weak[bool]
    for t in SCALARS:
        assert cuda.typeof(t(1)) is t
    assert cuda.typeof(FakeCAI("<f4")) is A[np.float32]
    assert cuda.typeof(FakeCAI("<i8", shape=(2, 3), strides=(24, 8))) is A[np.int64]
    assert cuda.typeof(cuda.CuArray.wrap(0x1000, (8,), np.uint16)) is A[np.uint16]
    assert issubclass(cuda.typeof(FakeCAI("<f8")), A[np.floating])


@pytest.mark.parametrize("value", ["text", None, [1.0], np.longdouble(1), 1j, np.zeros(3)])
def test_typeof_rejects_other_values_naming_the_type_and_what_is_accepted(value):
    with pytest.raises(TypeError, match=rf"{type(value).__qualname__}.*accepted are Python bool"):
        cuda.typeof(value)


def test_typeof_rejects_strided_masked_and_non_numeric_device_arrays():
    with pytest.raises(ValueError, match="non-contiguous"):
        cuda.typeof(FakeCAI("<f4", shape=(4,), strides=(8,)))
    with pytest.raises(TypeError, match="masked"):
        cuda.typeof(FakeCAI("<f4", mask=object()))
    with pytest.raises(TypeError, match="numeric or bool"):
        cuda.typeof(FakeCAI("<M8[s]"))


def test_ctype_spells_each_scalar_type_in_cuda_c():
    spelled = {t: cuda.ctype(t) for t in SCALARS}
    assert spelled == {
        np.bool_: "bool",
        np.int8: "signed char",
        np.uint8: "unsigned char",
        np.int16: "short",
        np.uint16: "unsigned short",
        np.int32: "int",
        np.uint32: "unsigned int",
        np.int64: "long long",
        np.uint64: "unsigned long long",
        np.float32: "float",
        np.float64: "double",
    }
    assert cuda.ctype(np.dtype("float32")) == "float"
    assert cuda.ctype(A[np.int16].dtype) == "short"
    assert cuda.ctype(np.float16) == "__half"
    for bad in (np.floating, np.number, np.longdouble, np.complex64, str):
        with pytest.raises(TypeError):
            cuda.ctype(bad)


# -- parameter buffers and launchers ---------------------------------------------------------


@pytest.mark.parametrize("t", SCALARS)
def test_parameter_layout_matches_the_kernels_parameter_in_ptx(t):
    @cuda.kernel
    def one_param(c: np.int8, v: np.generic) -> str:
        return f'extern "C" __global__ void one_param(signed char c, {cuda.ctype(v)} v) {{}}'

    _, params = entry(cuda.code_ptx(one_param, (np.int8, t), arch=ARCH))
    size = np.dtype(t).itemsize
    assert params[1] in (PTX_PARAM[size], f".f{size * 8}", f".s{size * 8}", ".b8")
    buf = _params.ParamBuffer((np.int8, t))
    (_, _), (offset, field) = buf.layout()
    assert field == size and offset == size  # natural alignment after a char, as in C


class Recorder:
    """Stands where cuLaunchKernel is called and reads what the driver would: the value
    each entry of the kernelParams void* array points at, during the call."""

    def __init__(self, tt):
        self.sizes = [
            8
            if issubclass(t, A)
            else t.dtype.itemsize
            if issubclass(t, cuda.Struct)
            else np.dtype(t).itemsize
            for t in tt
        ]
        self.calls = []

    def __call__(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        ptrs = (ctypes.c_void_p * len(self.sizes)).from_address(params) if params else []
        values = [ctypes.string_at(p, n) for p, n in zip(ptrs, self.sizes)]
        self.calls.append(((gx, gy, gz), (bx, by, bz), shmem, int(stream), values))
        return (0,)


class Fun:
    """The fields of a LinkedKernel the launch path reads."""

    name = "k"
    context = None
    function = object()
    get_global = copy_to_global = copy_from_global = None

    def __init__(self, tt):
        self.tt = tt
        self.invokers = {}


def invoker(tt, lookup_tt=None, instance=None):
    """The invoker of concrete types ``tt`` (looked up as ``lookup_tt``) bound to a stand-in
    linked kernel, and its factory."""
    launcher = cuda._launch._launcher
    factory = launcher.invokers.factory(instance, tt if lookup_tt is None else lookup_tt, tt)[0]
    return factory(Fun(tt)), factory


def with_driver(tt, launch, lookup_tt=None):
    """The invoker of concrete types ``tt`` (looked up as ``lookup_tt``) as the slow path
    calls it (arguments it has typed), calling ``launch`` where it calls cuLaunchKernel:
    ``fn(grid, block, shared_mem, stream, args)``."""
    invoke, factory = invoker(tt, lookup_tt)

    def fn(grid, block, shared_mem, stream, args, cooperative=False):
        glb = factory.__globals__
        saved, glb["_launch"] = glb["_launch"], launch
        try:
            return invoke(None, args, grid, block, stream, shared_mem, cooperative, True)
        finally:
            glb["_launch"] = saved

    return fn


def launch_recorded(tt, *args, grid=1, block=1, stream=None, shared_mem=0, lookup_tt=None):
    rec = Recorder(tt)
    if lookup_tt is None:
        lookup_tt = tuple(cuda.typeof(a) for a in args) if len(args) == len(tt) else tt
    with_driver(tt, rec, lookup_tt)(grid, block, shared_mem, stream, args)
    return rec.calls[0]


@pytest.mark.parametrize("t", SCALARS)
def test_launcher_stores_each_scalar_type_as_the_driver_reads_it(t):
    value = t(1) if t is np.bool_ else t(np.iinfo(t).max if t(0).dtype.kind in "iu" else 1.25)
    _, _, _, _, (raw,) = launch_recorded((t,), value)
    assert raw == np.array(value, dtype=t).tobytes()


def test_launcher_stores_python_scalars_and_device_pointers():
    tt = (A[np.float32], A[np.int8], np.float64, np.int64, np.bool_, np.float32)
    own = cuda.CuArray.wrap(0x7F00DEAD0000, (16,), np.float32)
    foreign = FakeCAI("|i1", ptr=0x7F00BEEF0000)
    _, _, _, _, raw = launch_recorded(tt, own, foreign, 2.5, -(2**63), True, 0.1)
    assert raw == [
        (0x7F00DEAD0000).to_bytes(8, "little"),
        (0x7F00BEEF0000).to_bytes(8, "little"),
        np.float64(2.5).tobytes(),
        np.int64(-(2**63)).tobytes(),
        b"\x01",
        np.float32(0.1).tobytes(),
    ]


@settings(max_examples=60, deadline=None)
@given(
    i=st.integers(-(2**63), 2**63 - 1),
    u=st.integers(0, 2**32 - 1),
    f=st.floats(width=32, allow_nan=False),
    d=st.floats(allow_nan=False),
)
def test_launcher_packs_any_value_like_numpy(i, u, f, d):
    tt = (np.int64, np.uint32, np.float32, np.float64)
    _, _, _, _, raw = launch_recorded(tt, i, np.uint32(u), np.float32(f), d)
    assert b"".join(raw) == (
        np.int64(i).tobytes()
        + np.uint32(u).tobytes()
        + np.float32(f).tobytes()
        + np.float64(d).tobytes()
    )


def test_launcher_passes_grid_block_shared_memory_and_stream():
    tt = (np.int32,)
    assert launch_recorded(tt, np.int32(1), grid=(2, 3), block=[4, 5, 6], shared_mem=128, stream=7)[
        :4
    ] == ((2, 3, 1), (4, 5, 6), 128, 7)
    assert launch_recorded(tt, np.int32(1), grid=np.int64(9), block=32)[:4] == (
        (9, 1, 1),
        (32, 1, 1),
        0,
        0,
    )


def test_a_driver_error_from_the_launch_names_the_kernel_and_frees_the_buffer():
    from cuda.bindings import driver

    tt = (np.float32,)
    calls = []

    def failing(*args):
        calls.append(args[9])
        return (driver.CUresult.CUDA_ERROR_INVALID_VALUE,)

    fn = with_driver(tt, failing)
    with pytest.raises(
        cuda.CUDAError,
        match=r"cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"
        r".*kernel k with grid=1, block=2048",
    ):
        fn(1, 2048, 0, None, (np.float32(1),))
    with pytest.raises(cuda.CUDAError):
        fn(1, 2048, 0, None, (np.float32(1),))
    assert calls[0] == calls[1]  # the buffer went back to the pool and was taken again


def test_launcher_of_a_kernel_without_parameters_passes_null():
    assert launch_recorded((), grid=1, block=1)[4] == []


def test_launcher_rejects_bad_launch_configurations_and_out_of_range_ints():
    tt = (np.int64,)
    for grid in (0, (1, 2, 3, 4), (), -1, True, (2, 0)):
        with pytest.raises((TypeError, ValueError), match="grid= is a positive int"):
            launch_recorded(tt, 1, grid=grid)
    with pytest.raises(TypeError, match="block= is a positive int"):
        launch_recorded(tt, 1, block=2.0)
    with pytest.raises(TypeError, match="stream= takes"):
        launch_recorded(tt, 1, stream="default")
    with pytest.raises(OverflowError, match=r"does not fit np\.int64 .*parameter 0 of kernel k"):
        launch_recorded(tt, 2**63)
    # one argument too many: another signature's, which the slow path looks up
    with pytest.raises(launching.Missed):
        with_driver(tt, None)(1, 1, 0, None, (1, 2))


def test_concurrent_launches_of_one_signature_each_pass_their_own_values():
    tt = (np.int64, np.int64)
    seen, bad = [], []

    def driver(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        ptrs = (ctypes.c_void_p * 2).from_address(params)
        first = ctypes.c_int64.from_address(ptrs[0]).value
        threading.Event().wait(0.0001)  # let another thread run while "the driver" reads
        second = ctypes.c_int64.from_address(ptrs[1]).value
        (seen if second == -first else bad).append(first)
        return (0,)

    fn = with_driver(tt, driver)  # the same buffer pool

    def worker(k):
        for j in range(100):
            v = k * 1000 + j
            fn(1, 1, 0, None, (v, -v))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and len(seen) == 400


def test_launcher_source_is_generated_per_signature_and_holds_no_values():
    tt = (A[np.uint8], np.uint8, np.float32)
    launcher = cuda._launch._launcher
    factory = launcher.invokers.factory(None, tt, tt)[0]
    assert launcher.invokers.factory(None, tt, tt)[0] is factory
    (gen,) = [g for g in specializer.generated_sources() if g.name == factory.__name__]
    assert gen.template == "cuda_launch.py.j2"
    assert "v.a2 = a2" in gen.source and "_launch(_function" in gen.source
    assert "0x" not in gen.source and "np." not in gen.source  # names and counts only


# -- no GPU, no driver ---------------------------------------------------------------------


@pytest.mark.skipif(cuda.available(), reason="a GPU and its driver are present")
def test_without_a_driver_launching_is_a_clear_error_and_ptx_still_works():
    x = cuda.CuArray.wrap(0x1000, (4,), np.float32)
    calls = [
        lambda: cuda.launch(fill, x, np.float32(1), 4, grid=1, block=4),
        lambda: cuda.cufunction(fill, (A[np.float32], np.float32, np.int64)),
        lambda: cuda.CuArray.zeros(4),
        lambda: cuda.Context.create(0),
        cuda.current_context,
        lambda: cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64)),  # no arch: a device
    ]
    for call in calls:
        with pytest.raises(
            cuda.CUDAUnavailableError,
            match=r"CUDA is not available: the NVIDIA driver.*code_ptx\(f, tt",
        ):
            call()
    assert not cuda.available() and cuda.device_count() == 0
    assert "libcuda" in cuda.unavailable_reason() or "device" in cuda.unavailable_reason()
    assert entry(cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64), arch=ARCH))[0] == "fill"


def test_importing_specializer_does_not_import_the_cuda_back_end():
    code = (
        "import sys, specializer; "
        "print('specializer.backends.cuda' in sys.modules, 'cuda.bindings' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_importing_the_cuda_back_end_does_not_touch_the_driver():
    code = (
        "from specializer.backends import cuda; "
        "print(cuda.unavailable_reason.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


# -- kernels shaped like real programs (NVIDIA's cuda-samples, CuPy's tests and examples) ------
#
# Each is written here after what the program includes, declares and launches; without a GPU
# each checks its PTX: the .entry names, the parameter lists, .shared and .const declarations.

from specializer import device_code  # noqa: E402
from specializer.backends.cuda import (  # noqa: E402
    _diskcache,
    _program,
    _ptx,
    _toolkit,
    _types,
)
from specializer.backends.cuda._source import KernelSource  # noqa: E402

_ENTRY = re.compile(r"\.(?:visible|weak) \.entry (\S+)\(([^)]*)\)")


def entries(ptx):
    """{name: [parameter types]} of every .entry in ``ptx``."""
    return {m[0]: re.findall(r"\.param (\.\w+)", m[1]) for m in _ENTRY.findall(ptx)}


def shared_bytes(ptx):
    """The sizes of the static .shared arrays in ``ptx``."""
    return sorted(int(n) for n in re.findall(r"\.shared \.align \d+ \.b8 \S+?\[(\d+)\]", ptx))


def compiled_entry(f, tt, **kw):
    """The lowered name of the entry the artifact of ``f`` for ``tt`` loads."""
    seen = []
    with device_code(lambda job, art: seen.append(art)):
        cuda.code_ptx(f, tt, arch=ARCH, **kw)
    return seen[-1].entry


def test_toolkit_header_directories_are_found_and_given_to_nvrtc():
    dirs = _toolkit.toolkit_include_dirs()
    assert any(os.path.isfile(os.path.join(d, "cuda_fp16.h")) for d in dirs)
    assert any(os.path.isfile(os.path.join(d, "cooperative_groups.h")) for d in dirs)
    assert any(os.path.isfile(os.path.join(d, "cuda", "std", "version")) for d in dirs)


@cuda.kernel
def vector_add(a: A[np.float32], b: A[np.float32], c: A[np.float32], n: np.int32) -> str:
    # vectorAdd_nvrtc: one element per thread, extern "C", an int count
    return """extern "C" __global__ void vector_add(const float *a, const float *b, float *c,
                                                    int n) {
        int i = blockDim.x * blockIdx.x + threadIdx.x;
        if (i < n) c[i] = a[i] + b[i];
    }"""


def test_vector_add_nvrtc():
    ptx = cuda.code_ptx(vector_add, (A[np.float32],) * 3 + (np.int32,), arch=ARCH)
    assert entries(ptx) == {"vector_add": [".u64", ".u64", ".u64", ".u32"]}
    assert has(ptx, "add", "f32")


MATRIX_MUL = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// one BLOCK x BLOCK tile of C per block, through shared-memory tiles of A and B
template <int BLOCK, typename Index>
__device__ void tile_product(float *C, const float *A, const float *B, Index wA, Index wB) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float a_tile[BLOCK][BLOCK];
    __shared__ float b_tile[BLOCK][BLOCK];
    const Index row = blockIdx.y * BLOCK + threadIdx.y, col = blockIdx.x * BLOCK + threadIdx.x;
    float acc = 0.0f;
    for (Index t = 0; t < wA; t += BLOCK) {
        a_tile[threadIdx.y][threadIdx.x] = A[row * wA + t + threadIdx.x];
        b_tile[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * wB + col];
        cg::sync(block);
#pragma unroll
        for (int k = 0; k < BLOCK; ++k) acc += a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
        cg::sync(block);
    }
    C[row * wB + col] = acc;
}

extern "C" __global__ void matrixMul_bs16_32bit(float *C, float *A, float *B, int wA, int wB) {
    tile_product<16, int>(C, A, B, wA, wB);
}

extern "C" __global__ void matrixMul_bs32_64bit(float *C, float *A, float *B, size_t wA,
                                                size_t wB) {
    tile_product<32, size_t>(C, A, B, wA, wB);
}
"""


@cuda.kernel
def matrix_mul(
    c: A[np.float32], a: A[np.float32], b: A[np.float32], wa: np.integer, wb: np.integer
):
    # matrixMul_nvrtc: one file, two kernels; the method picks one by its index type
    wide = np.dtype(wa).itemsize == 8
    return KernelSource(
        MATRIX_MUL, entry="matrixMul_bs32_64bit" if wide else "matrixMul_bs16_32bit"
    )


@pytest.mark.slow
def test_matrix_mul_nvrtc_with_cooperative_groups_and_an_entry_among_two_kernels():
    arrays = (A[np.float32],) * 3
    ptx = cuda.code_ptx(matrix_mul, (*arrays, np.int32, np.int32), arch=ARCH)
    assert entries(ptx) == {
        "matrixMul_bs16_32bit": [".u64", ".u64", ".u64", ".u32", ".u32"],
        "matrixMul_bs32_64bit": [".u64"] * 5,
    }
    assert shared_bytes(ptx) == [16 * 16 * 4] * 2 + [32 * 32 * 4] * 2
    assert compiled_entry(matrix_mul, (*arrays, np.int32, np.int32)) == "matrixMul_bs16_32bit"
    assert compiled_entry(matrix_mul, (*arrays, np.uint64, np.uint64)) == "matrixMul_bs32_64bit"


@cuda.kernel
def atomics(out: A[np.int32]) -> str:
    # simpleAtomicIntrinsics_nvrtc: every atomic of the runtime on one int array
    return """extern "C" __global__ void atomics(int *out) {
        const unsigned int t = blockDim.x * blockIdx.x + threadIdx.x;
        atomicAdd(&out[0], 10);
        atomicSub(&out[1], 10);
        atomicExch(&out[2], (int)t);
        atomicMax(&out[3], (int)t);
        atomicMin(&out[4], (int)t);
        atomicInc((unsigned int *)&out[5], 17u);
        atomicDec((unsigned int *)&out[6], 137u);
        atomicCAS(&out[7], (int)t - 1, (int)t);
        atomicAnd(&out[8], 2 * (int)t + 7);
        atomicOr(&out[9], 1 << (t % 32));
        atomicXor(&out[10], (int)t);
    }"""


def test_simple_atomic_intrinsics_nvrtc():
    ptx = cuda.code_ptx(atomics, (A[np.int32],), arch=ARCH)
    assert entries(ptx) == {"atomics": [".u64"]}
    for op in ("add", "exch", "max", "min", "inc", "dec", "cas", "and", "or", "xor"):
        assert re.search(rf"\b(atom|red)(\.\w+)*\.{op}\b", ptx), op


@cuda.kernel
def transposeNoBankConflicts(out: A[np.float32], inp: A[np.float32], w: np.int32, h: np.int32):
    # transpose: a C++ kernel (mangled entry), a padded shared tile, cooperative groups
    return r"""
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    #define TILE 16
    __global__ void transposeNoBankConflicts(float *out, const float *in, int w, int h) {
        cg::thread_block block = cg::this_thread_block();
        __shared__ float tile[TILE][TILE + 1];   // +1: columns fall in different banks
        int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
        if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = in[y * w + x];
        cg::sync(block);
        x = blockIdx.y * TILE + threadIdx.x;
        y = blockIdx.x * TILE + threadIdx.y;
        if (x < h && y < w) out[y * h + x] = tile[threadIdx.x][threadIdx.y];
    }"""


def test_transpose_cxx_kernel_with_a_padded_shared_tile():
    ptx = cuda.code_ptx(transposeNoBankConflicts, (A[np.float32],) * 2 + (np.int32,) * 2, arch=ARCH)
    ((name, params),) = entries(ptx).items()
    assert name == "_Z24transposeNoBankConflictsPfPKfii"
    assert params == [".u64", ".u64", ".u32", ".u32"]
    assert shared_bytes(ptx) == [16 * 17 * 4]


@cuda.kernel
def scalarProductKernel_intrinsics(
    a: A[np.float16], b: A[np.float16], results: A[np.float32], size: np.uint64
) -> str:
    # fp16ScalarProduct: "cuda_fp16.h" in quotes, half2 pointers, __hfma2, a shared reduction
    return r"""
    #include "cuda_fp16.h"
    #define THREADS 128
    __forceinline__ __device__ void halve_into_first(half2 *v) {
        for (int s = THREADS / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) v[threadIdx.x] = __hadd2(v[threadIdx.x], v[threadIdx.x + s]);
            __syncthreads();
        }
    }
    __global__ void scalarProductKernel_intrinsics(half2 const *const a, half2 const *const b,
                                                   float *const results, size_t const size) {
        __shared__ half2 partial[THREADS];
        half2 acc = __float2half2_rn(0.f);
        for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < size;
             i += gridDim.x * blockDim.x)
            acc = __hfma2(a[i], b[i], acc);
        partial[threadIdx.x] = acc;
        __syncthreads();
        halve_into_first(partial);
        if (threadIdx.x == 0)
            results[blockIdx.x] = __low2float(partial[0]) + __high2float(partial[0]);
    }"""


def test_fp16_scalar_product_includes_cuda_fp16():
    tt = (A[np.float16], A[np.float16], A[np.float32], np.uint64)
    ptx = cuda.code_ptx(scalarProductKernel_intrinsics, tt, arch=ARCH)
    ((name, params),) = entries(ptx).items()
    assert name.startswith("_Z30scalarProductKernel_intrinsics")
    assert params == [".u64"] * 4
    assert "fma.rn.f16x2" in ptx
    assert shared_bytes(ptx) == [128 * 4]


@cuda.kernel
def axpy_half(a: np.float16, x: A[np.float16], y: A[np.float16], n: np.int32) -> str:
    t = cuda.ctype(a)  # __half
    return f"""#include <cuda_fp16.h>
    extern "C" __global__ void axpy_half({t} a, const {t} *x, {t} *y, int n) {{
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = __hfma(a, x[i], y[i]);
    }}"""


def test_a_float16_scalar_is_a_half_parameter_of_two_bytes():
    assert cuda.ctype(np.float16) == "__half"
    assert cuda.typeof(np.float16(1.5)) is np.float16
    assert _types.param_ctype(np.float16) is ctypes.c_uint16
    assert _types.half_bits(np.float16(1.0)) == 0x3C00 and _types.half_bits(-2) == 0xC000
    ptx = cuda.code_ptx(axpy_half, (np.float16, A[np.float16], A[np.float16], np.int32), arch=ARCH)
    (decl,) = re.findall(r"\.visible \.entry axpy_half\(([^)]*)\)", ptx)
    first = decl.split(",")[0]
    assert re.search(r"\.param (\.b16|\.align 2 \.b8) axpy_half_param_0(\[2\])?", first), first
    assert "fma.rn.f16" in ptx
    (_, _), (offset, size) = _params.ParamBuffer((np.int8, np.float16)).layout()
    assert (offset, size) == (2, 2)  # a __half's size and alignment


REDUCTION = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// dynamic shared memory typed as T (one extern array per type would clash)
template <class T> struct DynamicShared {
    __device__ operator T *() { extern __shared__ int raw[]; return (T *)raw; }
};
template <> struct DynamicShared<double> {
    __device__ operator double *() { extern __shared__ double raw_d[]; return raw_d; }
};

template <class T> __device__ __forceinline__ T warp_sum(unsigned int mask, T v) {
    for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(mask, v, d);
    return v;
}
#if __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ int warp_sum<int>(unsigned int mask, int v) {
    return __reduce_add_sync(mask, v);
}
#endif

// sequential addressing in shared memory
template <class T> __global__ void reduce2(T *in, T *out, unsigned int n) {
    cg::thread_block block = cg::this_thread_block();
    T *s = DynamicShared<T>();
    unsigned int tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
    s[tid] = i < n ? in[i] : T(0);
    cg::sync(block);
    for (unsigned int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        cg::sync(block);
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

// several elements per thread, then warps
template <class T, unsigned int blockSize, bool nIsPow2>
__global__ void reduce7(const T *__restrict__ in, T *__restrict__ out, unsigned int n) {
    T *s = DynamicShared<T>();
    unsigned int tid = threadIdx.x, step = blockSize * gridDim.x * (nIsPow2 ? 2 : 1);
    T sum = 0;
    for (unsigned int i = blockIdx.x * blockSize * (nIsPow2 ? 2 : 1) + tid; i < n; i += step) {
        sum += in[i];
        if (nIsPow2 && i + blockSize < n) sum += in[i + blockSize];
    }
    sum = warp_sum<T>(0xffffffffu, sum);
    if (tid % warpSize == 0) s[tid / warpSize] = sum;
    __syncthreads();
    if (tid < warpSize)  // the whole first warp sums the warps' sums
        sum = warp_sum<T>(0xffffffffu, tid < blockSize / warpSize ? s[tid] : T(0));
    if (tid == 0) out[blockIdx.x] = sum;
}
"""


@cuda.kernel
def reduce2(x: A[np.number], out: A[np.number], n: np.uint32):
    return KernelSource(REDUCTION, entry=f"reduce2<{cuda.ctype(x.dtype)}>")


@cuda.kernel
def reduce7(x: A[np.number], out: A[np.number], n: np.uint32):
    return KernelSource(REDUCTION, entry=f"reduce7<{cuda.ctype(x.dtype)}, 256, true>")


@pytest.mark.slow
def test_reduction_template_kernels_are_instantiated_from_the_concrete_types():
    for t, code in ((np.float32, "f"), (np.float64, "d"), (np.int32, "i")):
        tt = (A[t], A[t], np.uint32)
        ptx = cuda.code_ptx(reduce2, tt, arch=ARCH)
        assert entries(ptx) == {f"_Z7reduce2I{code}EvPT_S1_j": [".u64", ".u64", ".u32"]}
        assert compiled_entry(reduce2, tt) == f"_Z7reduce2I{code}EvPT_S1_j"
    ptx = cuda.code_ptx(reduce7, (A[np.int32], A[np.int32], np.uint32), arch=ARCH)
    ((name, params),) = entries(ptx).items()
    assert name.startswith("_Z7reduce7IiLj256ELb1EEvPKT_PS0_j") and params == [".u64"] * 2 + [
        ".u32"
    ]
    assert "redux.sync.add" in ptx  # the sm_80+ specialization for int
    ptx = cuda.code_ptx(reduce7, (A[np.float32], A[np.float32], np.uint32), arch=ARCH)
    assert "shfl.sync.down" in ptx


@cuda.kernel
def reduceSinglePassMultiBlockCG(x: A[np.float32], out: A[np.float32], n: np.uint32) -> str:
    # reductionMultiBlockCG: a grid-wide sync between the per-block and the final sum
    return r"""
    #include <cooperative_groups.h>
    #include <cooperative_groups/reduce.h>
    namespace cg = cooperative_groups;
    extern "C" __global__ void reduceSinglePassMultiBlockCG(const float *x, float *out,
                                                            unsigned int n) {
        cg::thread_block block = cg::this_thread_block();
        cg::grid_group grid = cg::this_grid();
        cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
        extern __shared__ float per_warp[];
        float sum = 0.0f;
        for (unsigned long long i = grid.thread_rank(); i < n; i += grid.size()) sum += x[i];
        sum = cg::reduce(warp, sum, cg::plus<float>());
        if (warp.thread_rank() == 0) per_warp[warp.meta_group_rank()] = sum;
        block.sync();
        if (block.thread_rank() == 0) {
            float b = 0.0f;
            for (unsigned int w = 0; w < warp.meta_group_size(); ++w) b += per_warp[w];
            out[blockIdx.x] = b;
        }
        grid.sync();
        if (grid.thread_rank() == 0) {
            float total = 0.0f;
            for (unsigned int k = 0; k < gridDim.x; ++k) total += out[k];
            out[0] = total;
        }
    }"""


@pytest.mark.slow
def test_reduction_multi_block_cg_with_grid_sync():
    ptx = cuda.code_ptx(
        reduceSinglePassMultiBlockCG, (A[np.float32], A[np.float32], np.uint32), arch=ARCH
    )
    assert entries(ptx) == {"reduceSinglePassMultiBlockCG": [".u64", ".u64", ".u32"]}
    assert re.search(r"\b(bar|barrier)\.sync\b", ptx)


CONVOLUTION = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define RADIUS 8
#define TAPS (2 * RADIUS + 1)
#define BX 32
#define BY 4

__constant__ float c_Kernel[TAPS];   // set from the host before the launch

// one output per thread along rows; a block loads its row segment and both halos
__global__ void convolutionRowsKernel(float *dst, const float *src, int w, int h, int pitch) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float rows[BY][BX + 2 * RADIUS];
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
    for (int k = threadIdx.x; k < BX + 2 * RADIUS; k += BX) {
        int sx = blockIdx.x * BX + k - RADIUS;
        rows[threadIdx.y][k] = (sx >= 0 && sx < w && y < h) ? src[y * pitch + sx] : 0.0f;
    }
    cg::sync(block);
    if (x >= w || y >= h) return;
    float acc = 0.0f;
#pragma unroll
    for (int j = -RADIUS; j <= RADIUS; ++j)
        acc += c_Kernel[RADIUS - j] * rows[threadIdx.y][threadIdx.x + RADIUS + j];
    dst[y * pitch + x] = acc;
}
"""


@cuda.kernel
def convolutionRowsKernel(
    dst: A[np.float32], src: A[np.float32], w: np.int32, h: np.int32, pitch: np.int32
):
    return CONVOLUTION


def test_convolution_separable_declares_its_constant_table():
    tt = (A[np.float32], A[np.float32], np.int32, np.int32, np.int32)
    ptx = cuda.code_ptx(convolutionRowsKernel, tt, arch=ARCH)
    ((name, params),) = entries(ptx).items()
    assert name == "_Z21convolutionRowsKernelPfPKfiii"
    assert params == [".u64", ".u64", ".u32", ".u32", ".u32"]
    assert re.search(r"^(\.visible )?\.const \.align 4 \.b8 c_Kernel\[68\];", ptx, re.M)
    assert _ptx.ptx_globals(ptx) == ["c_Kernel"]
    assert shared_bytes(ptx) == [4 * (32 + 16) * 4]


@cuda.kernel
def raw_sum(x1: A[np.float32], x2: A[np.float32], y: A[np.float32], n: np.uint32) -> str:
    # CuPy's RawKernel test: extern "C", an unsigned count
    return """extern "C" __global__
    void raw_sum(const float* x1, const float* x2, float* y, unsigned int N) {
        unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
        if (tid < N) y[tid] = x1[tid] + x2[tid];
    }"""


@cuda.kernel
def raw_cmul(a: A[np.complex128], b: A[np.complex128], out: A[np.complex128], n: np.int32):
    # CuPy's RawKernel tests with <cuComplex.h>, and CCCL's complex
    return r"""
    #include <cuComplex.h>
    #include <cuda/std/complex>
    #include <cuda/std/cstdint>
    extern "C" __global__ void raw_cmul(const cuDoubleComplex *a, const cuDoubleComplex *b,
                                        cuDoubleComplex *out, int n) {
        cuda::std::int32_t i = blockDim.x * blockIdx.x + threadIdx.x;
        if (i >= n) return;
        cuda::std::complex<double> z(cuCreal(a[i]), cuCimag(a[i]));
        z *= cuda::std::complex<double>(cuCreal(b[i]), cuCimag(b[i]));
        out[i] = cuCadd(make_cuDoubleComplex(z.real(), z.imag()), make_cuDoubleComplex(0, 0));
    }"""


@pytest.mark.slow
def test_cupy_raw_kernels_extern_c_and_complex_headers():
    ptx = cuda.code_ptx(raw_sum, (A[np.float32],) * 3 + (np.uint32,), arch=ARCH)
    assert entries(ptx) == {"raw_sum": [".u64", ".u64", ".u64", ".u32"]}
    ptx = cuda.code_ptx(raw_cmul, (A[np.complex128],) * 3 + (np.int32,), arch=ARCH)
    assert entries(ptx) == {"raw_cmul": [".u64", ".u64", ".u64", ".u32"]}
    assert has(ptx, "mul", "f64")


RAW_MODULE = r"""
extern "C" {
__constant__ float some_table[100];
__device__ int calls;
}

template <typename T> __global__ void my_pow2(T *x, int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * x[i] * (T)some_table[i % 100];
    if (i == 0) atomicAdd(&calls, 1);
}

namespace ns {
template <typename T, int Scale> __global__ void scaled(T *x, int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= Scale;
}
}
"""


@cuda.kernel
def my_pow2(x: A[np.number], n: np.int32):
    return KernelSource(RAW_MODULE, entry=f"my_pow2<{cuda.ctype(x.dtype)}>")


@cuda.kernel
def scaled(x: A[np.number], n: np.int32):
    return KernelSource(RAW_MODULE, entry=f"ns::scaled<{cuda.ctype(x.dtype)}, 3>")


def test_cupy_raw_module_templates_namespaces_and_globals():
    ptx = cuda.code_ptx(my_pow2, (A[np.int32], np.int32), arch=ARCH)
    assert entries(ptx) == {"_Z7my_pow2IiEvPT_i": [".u64", ".u32"]}
    assert _ptx.ptx_globals(ptx) == ["some_table", "calls"]
    assert re.search(r"\.const \.align 4 \.b8 some_table\[400\]", ptx)
    assert re.search(r"\.global \.align 4 \.u32 calls", ptx)
    ptx = cuda.code_ptx(my_pow2, (A[np.float64], np.int32), arch=ARCH)
    assert list(entries(ptx)) == ["_Z7my_pow2IdEvPT_i"]
    assert compiled_entry(scaled, (A[np.float32], np.int32)) == "_ZN2ns6scaledIfLi3EEEvPT_i"


SGEMM = r"""
// tile sizes come from the options (-DDIM_X=... and so on), as CuPy's gemm example passes them
#define IDX(r, c, ld) ((r) * (ld) + (c))
extern "C" __global__ void sgemm(int M, int N, int K, float alpha, const float *A,
                                 const float *B, float beta, float *C) {
    __shared__ float sA[BLK_K][BLK_M + 1];
    __shared__ float sB[BLK_N][BLK_K + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * BLK_M, col0 = blockIdx.x * BLK_N;
    float acc[BLK_M / DIM_Y][BLK_N / DIM_X] = {};
    for (int k0 = 0; k0 < K; k0 += BLK_K) {
        for (int r = ty; r < BLK_K; r += DIM_Y)
            for (int c = tx; c < BLK_M; c += DIM_X)
                sA[r][c] = (row0 + c < M && k0 + r < K) ? A[IDX(row0 + c, k0 + r, K)] : 0.0f;
        for (int r = ty; r < BLK_N; r += DIM_Y)
            for (int c = tx; c < BLK_K; c += DIM_X)
                sB[r][c] = (k0 + c < K && col0 + r < N) ? B[IDX(k0 + c, col0 + r, N)] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BLK_K; ++k)
#pragma unroll
            for (int i = 0; i < BLK_M / DIM_Y; ++i)
#pragma unroll
                for (int j = 0; j < BLK_N / DIM_X; ++j)
                    acc[i][j] += sA[k][ty + i * DIM_Y] * sB[tx + j * DIM_X][k];
        __syncthreads();
    }
    for (int i = 0; i < BLK_M / DIM_Y; ++i)
        for (int j = 0; j < BLK_N / DIM_X; ++j) {
            int r = row0 + ty + i * DIM_Y, c = col0 + tx + j * DIM_X;
            if (r < M && c < N) C[IDX(r, c, N)] = alpha * acc[i][j] + beta * C[IDX(r, c, N)];
        }
}
"""


@cuda.kernel
def sgemm(
    m: np.int32,
    n: np.int32,
    k: np.int32,
    alpha: np.float32,
    a: A[np.float32],
    b: A[np.float32],
    beta: np.float32,
    c: A[np.float32],
):
    return SGEMM


def test_cupy_gemm_example_takes_its_tile_sizes_from_options():
    tt = (np.int32,) * 3 + (np.float32, A[np.float32], A[np.float32], np.float32, A[np.float32])
    sizes = ("-DDIM_X=16", "-DDIM_Y=16", "-DBLK_M=64", "-DBLK_N=64", "-DBLK_K=8")
    ptx = cuda.code_ptx(sgemm, tt, arch=ARCH, options=sizes)
    assert entries(ptx) == {"sgemm": [".u32"] * 3 + [".f32", ".u64", ".u64", ".f32", ".u64"]}
    assert shared_bytes(ptx) == [8 * 65 * 4, 64 * 9 * 4]
    with pytest.raises(CompileError, match=r"(?s)kernel sgemm.*options \[\].*BLK_K.*undefined"):
        cuda.code_ptx(sgemm, tt, arch=ARCH)


@cuda.kernel
def scale_vec4(v: A[np.float32], s: np.float32, n: np.int32) -> str:
    # CuPy's custom_struct example (builtin vectors), with the vectors behind a pointer
    return """extern "C" __global__ void scale_vec4(float4 *v, float s, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { float4 a = v[i]; v[i] = make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }
    }"""


def test_builtin_vector_types_compile():
    ptx = cuda.code_ptx(scale_vec4, (A[np.float32], np.float32, np.int32), arch=ARCH)
    assert entries(ptx) == {"scale_vec4": [".u64", ".f32", ".u32"]}
    assert re.search(r"ld\.global(\.\w+)*\.v4\.f32", ptx)


# -- entries, errors and hints ------------------------------------------------------------------


def test_kernel_source_is_a_str_with_its_entry_and_checks_it():
    src = KernelSource("__global__ void k() {}", entry=" k<int> ")
    assert isinstance(src, str) and src == "__global__ void k() {}" and src.entry == "k<int>"
    assert "entry='k<int>'" in repr(src)
    for bad in ("", "  ", "a;b", "a\nb", 3):
        with pytest.raises(ValueError, match="entry= is the name expression"):
            KernelSource("x", entry=bad)
    with pytest.raises(TypeError, match="source as a str"):
        KernelSource(b"x", entry="k")


def test_a_template_kernel_without_its_instance_gets_a_hint_to_name_it():
    @cuda.kernel
    def templ_only(x: A[np.float32]) -> str:
        return "template <typename T> __global__ void templ_only(T *x) { x[0] = T(1); }"

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(templ_only, (A[np.float32],), arch=ARCH)
    msg = str(e.value)
    assert "cannot determine which instance of function template" in msg
    assert "templ_only is a function template" in msg and "KernelSource(source, entry=" in msg
    assert "must define" not in msg  # not told to define what is there


def test_a_wrong_entry_names_the_kernels_the_source_defines():
    @cuda.kernel
    def picks_wrong(x: A[np.float32]):
        return KernelSource(
            'extern "C" __global__ void first(float *x) {}\n'
            'extern "C" __global__ void second(float *x) {}',
            entry="third",
        )

    with pytest.raises(
        CompileError, match=r"(?s)kernel picks_wrong \(entry third\).*first, second"
    ):
        cuda.code_ptx(picks_wrong, (A[np.float32],), arch=ARCH)


@pytest.mark.parametrize(
    "include", ["<cstdio>", "<iostream>", '"helper_cuda.h"', "<stdio.h>", "<cstdint>"]
)
def test_host_headers_say_the_file_includes_host_code(include):
    @cuda.kernel
    def with_host_code(x: A[np.float32]) -> str:
        return f"""#include {include}
        extern "C" __global__ void with_host_code(float *x) {{ x[0] = 1.0f; }}"""

    name = include.strip('<>"')
    with pytest.raises(CompileError) as e:
        cuda.code_ptx(with_host_code, (A[np.float32],), arch=ARCH, options=("-DHOSTY=1",))
    msg = str(e.value)
    assert "kernel with_host_code" in msg and "-DHOSTY=1" in msg
    assert f'cannot open source file "{name}"' in msg  # the log
    assert f"<{name}> is a host header: the file includes host code" in msg


def test_a_missing_toolkit_header_directory_is_named_with_how_to_get_it(monkeypatch):
    none = tuple(_toolkit._HeaderDir(k, None, "") for k in ("cudart", "cccl"))
    monkeypatch.setattr(_toolkit, "_header_dirs", lambda: none)
    assert _toolkit.toolkit_include_dirs() == ()

    @cuda.kernel
    def needs_headers(x: A[np.float16]) -> str:
        return """#include <cuda_fp16.h>
        extern "C" __global__ void needs_headers(__half *x) { x[0] = __float2half(1.0f); }"""

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(needs_headers, (A[np.float16],), arch=ARCH)
    msg = str(e.value)
    assert "<cuda_fp16.h> is one of the CUDA runtime headers" in msg
    assert "no directory of them was found" in msg and "cudart" in msg
    assert "pip install -e '.[cuda]'" in msg and "CUDA_HOME" in msg

    @cuda.kernel
    def needs_cccl(x: A[np.int32]) -> str:
        return """#include <cuda/std/cstdint>
        extern "C" __global__ void needs_cccl(int *x) { x[0] = (cuda::std::int32_t)1; }"""

    with pytest.raises(CompileError, match=r"<cuda/std/cstdint> is one of CCCL's headers"):
        cuda.code_ptx(needs_cccl, (A[np.int32],), arch=ARCH)


def test_header_directories_from_cuda_home_without_cuda_pathfinder(monkeypatch, tmp_path):
    (tmp_path / "include" / "cccl" / "cuda" / "std").mkdir(parents=True)
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    (tmp_path / "include" / "cccl" / "cuda" / "std" / "version").write_text("")
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # importing it fails
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    cudart = _toolkit._locate("cudart")
    cccl = _toolkit._locate("cccl")
    assert cudart.path == str(tmp_path / "include") and cudart.found_via == "CUDA_PATH/CUDA_HOME"
    assert cccl.path == str(tmp_path / "include" / "cccl")
    monkeypatch.delenv("CUDA_HOME")
    assert _toolkit._locate("cudart").path is None


def test_an_undefined_device_function_not_in_callees_gets_a_hint_to_add_it():
    @cuda.device
    def square_dev() -> str:
        return "__device__ float square_dev(float v) { return v * v; }"

    @cuda.kernel
    def forgot_callee(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void forgot_callee(float *x) { x[0] = square_dev(x[0]); }'

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(forgot_callee, (A[np.float32],), arch=ARCH)
    msg = str(e.value)
    assert 'identifier "square_dev" is undefined' in msg
    assert "square_dev is a device function of this back-end" in msg
    assert "@cuda.kernel(callees=[square_dev" in msg

    @cuda.kernel
    def other_undefined(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void other_undefined(float *x) { x[0] = nowhere(x[0]); }'

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(other_undefined, (A[np.float32],), arch=ARCH)
    assert "callees" not in str(e.value)


def test_every_nvrtc_failure_names_the_kernel_architecture_options_and_log():
    @cuda.kernel
    def bad_syntax(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void bad_syntax(float *x) { x[0] = ; }'

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(bad_syntax, (A[np.float32],), arch="sm_80", options=("-DX=1",), lineinfo=True)
    msg = str(e.value)
    assert msg.startswith("kernel bad_syntax failed to compile with NVRTC ")
    assert "for sm_80" in msg and "'-DX=1'" in msg and "--generate-line-info" in msg
    assert "expected an expression" in msg  # NVRTC's log


# -- argument kinds ---------------------------------------------------------------------------


def test_numpy_scalar_subclasses_dispatch_as_their_nearest_numpy_base():
    class MyFloat(np.float64):
        pass

    class MyInt(np.int32):
        pass

    class Deeper(MyInt):
        pass

    assert cuda.typeof(MyFloat(1.5)) is np.float64
    assert cuda.typeof(MyInt(3)) is np.int32
    assert cuda.typeof(Deeper(3)) is np.int32
    assert cuda.typeof(np.float32(1)) is np.float32
    assert cuda.ctype(MyInt) == "int"
    # subclassing a numpy type leaves that type concrete
    assert cuda.ctype(np.int32) == "int" and _types.param_ctype(np.float64) is ctypes.c_double


def test_fortran_ordered_device_arrays_are_accepted_and_other_strides_refused():
    f_order = FakeCAI("<f4", shape=(3, 4), strides=(4, 12))
    assert cuda.typeof(f_order) is A[np.float32]
    assert cuda.typeof(FakeCAI("<f8", shape=(3, 4), strides=(32, 8))) is A[np.float64]
    assert cuda.typeof(FakeCAI("<f4", shape=(1, 4), strides=(999, 4))) is A[np.float32]
    assert cuda.typeof(FakeCAI("<f4", shape=(0, 4), strides=(4, 4))) is A[np.float32]
    assert cuda.typeof(FakeCAI("<i2", shape=(2, 3, 4), strides=(2, 4, 12))) is A[np.int16]
    for shape, strides in (((3, 4), (8, 24)), ((3, 4), (20, 4)), ((4,), (-4,)), ((2, 2), (4,))):
        with pytest.raises(ValueError, match=r"non-contiguous .*FakeCAI.*strides"):
            cuda.typeof(FakeCAI("<f4", shape=shape, strides=strides))


def test_non_native_byte_order_is_a_value_error():
    other = ">" if sys.byteorder == "little" else "<"
    with pytest.raises(ValueError, match="non-native byte order"):
        cuda.typeof(FakeCAI(f"{other}f4"))
    assert cuda.typeof(FakeCAI("|u1")) is A[np.uint8]
    with pytest.raises(ValueError, match="native byte order"):
        cuda.CuArray.wrap(0x1000, (4,), np.dtype(f"{other}f4"))


# -- __constant__ and __device__ variables -----------------------------------------------------


class FakeModule(cuda.LinkedKernel):
    """A LinkedKernel whose module has one global of ``size`` bytes (no GPU)."""

    __slots__ = ()

    def get_global(self, name):
        if name != "table":
            raise cuda.CUDAError("cuModuleGetGlobal", 500, f"no {name}")
        return 0x7F0000000000, 68


def test_copy_to_global_checks_the_size_and_byte_order_before_copying():
    k = FakeModule("conv", None, None, None, (), ARCH, "")
    with pytest.raises(
        ValueError,
        match=r"global 'table' of kernel conv has 68 bytes; the float64\[17\] array has 136",
    ):
        k.copy_to_global("table", np.zeros(17))
    other = ">" if sys.byteorder == "little" else "<"
    with pytest.raises(ValueError, match="non-native byte order"):
        k.copy_to_global("table", np.zeros(17, f"{other}f4"))
    with pytest.raises(cuda.CUDAError, match="no other"):
        k.copy_to_global("other", np.zeros(17, np.float32))
    with pytest.raises(ValueError, match="not a whole number of float64"):
        k.copy_from_global("table", np.float64)
    with pytest.raises(ValueError, match=r"has 68 bytes; a float32\[16\]"):
        k.copy_from_global("table", np.float32, (16,))


def test_ptx_globals_lists_the_modules_variables():
    ptx = cuda.code_ptx(my_pow2, (A[np.float32], np.int32), arch=ARCH)
    assert _ptx.ptx_globals(ptx) == ["some_table", "calls"]
    assert (
        _ptx.ptx_globals(cuda.code_ptx(vector_add, (A[np.float32],) * 3 + (np.int32,), arch=ARCH))
        == []
    )


# -- the disk cache of compiled code -----------------------------------------------------------

_PROGRAM = """
import hashlib, json, sys, time, os
import numpy as np
from specializer.backends import cuda
from specializer.backends.cuda import _program

@cuda.kernel
def disk_cached(x: cuda.Array[np.float32], n: np.int32) -> str:
    return '''#include <cooperative_groups.h>
    extern "C" __global__ void disk_cached(float *x, int n) {
        cooperative_groups::this_thread_block().sync();
        if (threadIdx.x < n) x[threadIdx.x] *= VALUE; }'''.replace("VALUE", sys.argv[1])

gate = os.environ.get("GATE")
while gate and not os.path.exists(gate):
    time.sleep(0.005)
ptx = cuda.code_ptx(disk_cached, (cuda.Array[np.float32], np.int32), arch=sys.argv[2])
print(json.dumps({"compiles": _program.nvrtc_compiles(),
                  "ptx": hashlib.sha256(ptx.encode()).hexdigest()}))
"""


def run_program(cache, value="2.0f", arch=ARCH, **env):
    environ = {**os.environ, "SPECIALIZER_CACHE_DIR": str(cache), **env}
    out = subprocess.run(
        [sys.executable, "-c", _PROGRAM, value, arch], capture_output=True, text=True, env=environ
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def entry_files(cache):
    return sorted(p.name for p in (cache / "cuda").iterdir()) if (cache / "cuda").exists() else []


@pytest.mark.slow
def test_a_second_process_runs_nvrtc_zero_times(tmp_path):
    first = run_program(tmp_path)
    assert first["compiles"] == 1 and len(entry_files(tmp_path)) == 1
    second = run_program(tmp_path)
    assert second == {"compiles": 0, "ptx": first["ptx"]}
    # another source or another architecture is another entry
    assert run_program(tmp_path, value="3.0f")["compiles"] == 1
    assert run_program(tmp_path, arch="sm_80")["compiles"] == 1
    assert len(entry_files(tmp_path)) == 3


def test_a_disk_entry_misses_on_any_part_of_its_key(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void keyed(float *x) { x[0] = 1.0f; }\n'
    tmpl = "template <int N> __global__ void keyed_t(float *x) { x[0] = N; }\n"

    def compiles(source=src, names=("keyed",), arch=ARCH, options=()):
        n = _program.nvrtc_compiles()
        r = _program.nvrtc_compile(source, names, arch, options, kernel="keyed")
        return _program.nvrtc_compiles() - n, r

    assert compiles()[0] == 1
    ran, r = compiles()
    assert ran == 0 and r.cached and r.lowered == {"keyed": "keyed"} and r.cubin
    assert compiles(source=src + "// another source\n")[0] == 1
    assert compiles(source=src + tmpl, names=("keyed", "keyed_t<1>"))[0] == 1
    assert compiles(source=src + tmpl, names=("keyed", "keyed_t<2>"))[0] == 1  # name expressions
    assert compiles(arch="sm_80")[0] == 1
    assert compiles(arch="compute_90")[1].cubin is None
    assert compiles(options=("-DX=1",))[0] == 1
    monkeypatch.setattr(_program, "nvrtc_version", lambda: (99, 0))
    assert compiles()[0] == 1  # another NVRTC
    monkeypatch.undo()
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_program, "headers_fingerprint", lambda: (("other.h", 1, 2),))
    assert compiles()[0] == 1  # other headers
    monkeypatch.setattr(_program, "toolkit_include_dirs", lambda: ("/elsewhere",))
    assert compiles()[0] == 1  # other header directories: other options
    monkeypatch.undo()
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    assert compiles()[0] == 0  # the first entry is still there


def test_a_corrupt_or_unreadable_entry_is_ignored_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void damaged(int *x) { x[0] = 7; }'
    args = (src, ("damaged",), ARCH, ())
    good = _program.nvrtc_compile(*args, kernel="damaged")
    (path,) = (tmp_path / "cuda").iterdir()
    whole = path.read_bytes()
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF
    other = src.replace("7", "8").replace("damaged", "other")
    _program.nvrtc_compile(other, ("other",), ARCH, (), kernel="other")
    (foreign,) = (p for p in (tmp_path / "cuda").iterdir() if p != path)  # another entry's
    damages = (b"", b"garbage", whole[: len(whole) // 2], whole[:-1], bytes(flipped), whole + b"x")
    for damage in (*damages, foreign.read_bytes()):
        path.write_bytes(damage)
        n = _program.nvrtc_compiles()
        again = _program.nvrtc_compile(*args, kernel="damaged")
        assert _program.nvrtc_compiles() == n + 1 and not again.cached
        assert again.ptx == good.ptx and path.read_bytes() == whole  # rewritten whole
    path.unlink()
    path.mkdir()  # an entry that cannot be read or replaced: compiling still works
    assert _program.nvrtc_compile(*args, kernel="damaged").ptx == good.ptx


@pytest.mark.slow
def test_two_processes_writing_one_entry_at_once_both_succeed(tmp_path):
    gate = tmp_path / "go"
    environ = {**os.environ, "SPECIALIZER_CACHE_DIR": str(tmp_path), "GATE": str(gate)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROGRAM, "5.0f", ARCH],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        for _ in range(2)
    ]
    time.sleep(1.0)  # both have imported and wait at the gate
    gate.write_text("")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert results[0]["ptx"] == results[1]["ptx"]
    files = entry_files(tmp_path)
    assert len(files) == 1 and not any(f.endswith(".tmp") for f in files)
    assert run_program(tmp_path, "5.0f") == {"compiles": 0, "ptx": results[0]["ptx"]}


_WRITER = """
import sys
from specializer.backends.cuda import _diskcache
key, tag = sys.argv[1], sys.argv[2]
for i in range(300):
    body = (tag * (1000 + i % 7))
    assert _diskcache.store(key, body, tag.encode() * 5000, {"e": tag}, "log")
"""


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    key = "ab" * 32
    environ = {**os.environ, "SPECIALIZER_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, key, tag], env=environ)
        for tag in ("A", "B")
    ]
    seen = set()
    while any(p.poll() is None for p in procs):
        e = _diskcache.load(key)
        if e is not None:  # a whole entry of one writer, never a mix
            tag = e["lowered"]["e"]
            assert set(e["ptx"]) == {tag} and e["cubin"] == tag.encode() * 5000
            seen.add(tag)
    assert [p.wait() for p in procs] == [0, 0]
    assert _diskcache.load(key) is not None
    assert [f for f in entry_files(tmp_path) if f.endswith(".tmp")] == []


@pytest.mark.parametrize("value", ["", "0", " 0 "])
@pytest.mark.slow
def test_the_disk_cache_is_off_with_an_empty_or_zero_directory(tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", value)
    assert _diskcache.cache_dir() is None
    src = 'extern "C" __global__ void uncached(int *x) { x[0] = 3; }'
    n = _program.nvrtc_compiles()
    for _ in range(2):
        assert not _program.nvrtc_compile(src, ("uncached",), ARCH, (), kernel="u").cached
    assert _program.nvrtc_compiles() == n + 2
    assert list(tmp_path.iterdir()) == []
    if value == "":  # and in other processes
        assert run_program(value, value="7.0f")["compiles"] == 1
        assert run_program(value, value="7.0f")["compiles"] == 1
        assert list(tmp_path.iterdir()) == []


def test_the_default_directory_is_under_the_users_cache_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECIALIZER_CACHE_DIR", raising=False)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        assert _diskcache.cache_dir() == tmp_path / "specializer" / "cuda"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert _diskcache.cache_dir() == Path.home() / ".cache" / "specializer" / "cuda"
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path / "mine"))
    assert _diskcache.cache_dir() == tmp_path / "mine" / "cuda"


def test_an_entry_holds_compiled_code_only_and_precompile_mode_reads_it_but_writes_none(
    tmp_path, monkeypatch
):
    # SPEC 6: in precompile-output mode nothing generated is written to disk (no entry, no
    # directory); a valid entry written before is still read
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))

    def define():  # each time a new definition of the same source: compiled again
        @cuda.kernel
        def built_for_later(x: A[np.float32]) -> str:
            return 'extern "C" __global__ void built_for_later(float *x) { x[0] = 4.0f; }'

        return built_for_later

    tt = (A[np.float32],)
    later = type(_program._programs)
    with specializer.precompile_output():
        assert specializer.generating_output()
        ptx = cuda.code_ptx(define(), tt, arch=ARCH)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(_program, "_programs", later())  # as in a later process
    assert cuda.code_ptx(define(), tt, arch=ARCH) == ptx  # the mode off: written
    (path,) = (tmp_path / "cuda").iterdir()
    data = path.read_bytes()
    start = len(_diskcache._MAGIC) + 8
    (n,) = _diskcache._LEN.unpack_from(data, len(_diskcache._MAGIC))
    meta = json.loads(data[start : start + n])
    assert set(meta) == {"key", "ptx", "cubin", "lowered", "log"}  # no worlds, no handles
    assert meta["lowered"] == {"built_for_later": "built_for_later"}
    assert _diskcache.load(path.name.split(".")[0])["ptx"] == ptx
    # (The world's number itself may occur in PTX by chance; what holds is that no field can
    # carry it: the fields are exactly the ones above, and none is named for a world.)
    assert b"world" not in data[start : start + n]
    monkeypatch.setattr(_program, "_programs", later())
    compiles = _program.nvrtc_compiles()
    with specializer.precompile_output():
        assert cuda.code_ptx(define(), tt, arch=ARCH) == ptx
    assert _program.nvrtc_compiles() == compiles  # read from disk in the mode
    assert [p.name for p in tmp_path.rglob("*")] == ["cuda", path.name]


def test_an_unwritable_cache_directory_never_fails_a_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(blocker))
    src = 'extern "C" __global__ void nowhere_to_write(int *x) { x[0] = 1; }'
    r = _program.nvrtc_compile(src, ("nowhere_to_write",), ARCH, (), kernel="n")
    assert r.ptx and not r.cached


# -- the disk cache is private to the user and never blocks (SPEC 9) -------------------------


def nvrtc_run(name):
    """Compile a small kernel called ``name`` through the disk cache: (whether NVRTC ran,
    the result)."""
    src = f'extern "C" __global__ void {name}(int *x) {{ x[0] = 5; }}'
    n = _program.nvrtc_compiles()
    r = _program.nvrtc_compile(src, (name,), ARCH, (), kernel=name)
    return _program.nvrtc_compiles() - n, r


def entry_of(cache):
    (path,) = [p for p in (cache / "cuda").iterdir() if p.name.endswith(".nvrtc")]
    return path


def test_cache_directories_are_0700_and_entries_0600_whatever_the_umask(tmp_path, monkeypatch):
    root = tmp_path / "made" / "here"
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(root))
    old = os.umask(0)
    try:
        assert nvrtc_run("under_umask_0")[0] == 1
    finally:
        os.umask(old)
    for d in (tmp_path / "made", root, root / "cuda"):
        assert oct(d.stat().st_mode & 0o777) == "0o700", d
    assert oct(entry_of(root).stat().st_mode & 0o777) == "0o600"
    assert nvrtc_run("under_umask_0")[0] == 0  # and it is used


def test_a_fifo_at_an_entry_path_is_a_miss_and_never_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    first = nvrtc_run("fifo_planted")[1]
    path = entry_of(tmp_path)
    path.unlink()
    os.mkfifo(path)
    out = []
    t = threading.Thread(target=lambda: out.append(nvrtc_run("fifo_planted")), daemon=True)
    t.start()
    t.join(timeout=60)
    if t.is_alive():  # blocked opening the FIFO: a writer lets it go, then fail
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(timeout=10)
        pytest.fail("opening a FIFO at an entry's path blocked the compile")
    ((ran, again),) = out
    assert ran == 1 and not again.cached and again.ptx == first.ptx
    assert path.is_file() and not path.is_symlink()  # the rewrite replaced the FIFO
    assert nvrtc_run("fifo_planted")[0] == 0


@pytest.mark.parametrize("target", ["a copy of the entry", "/dev/zero"])
def test_a_symlink_at_an_entry_path_is_never_followed(tmp_path, monkeypatch, target):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path / "cache"))
    first = nvrtc_run("linked_entry")[1]
    path = entry_of(tmp_path / "cache")
    if target == "/dev/zero":
        pointee = Path("/dev/zero")
    else:  # even a valid entry of the user's own is not read through a link
        pointee = tmp_path / "elsewhere.nvrtc"
        pointee.write_bytes(path.read_bytes())
        pointee.chmod(0o600)
    path.unlink()
    path.symlink_to(pointee)
    ran, again = nvrtc_run("linked_entry")
    assert ran == 1 and not again.cached and again.ptx == first.ptx
    assert not path.is_symlink() and path.is_file()  # the rewrite replaced the link itself
    assert nvrtc_run("linked_entry")[0] == 0


def test_an_entry_others_can_write_or_another_user_owns_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    first = nvrtc_run("foreign_entry")[1]
    path = entry_of(tmp_path)
    whole = path.read_bytes()
    for mode in (0o666, 0o620, 0o602):  # a valid checksum does not make it the user's
        path.chmod(mode)
        ran, again = nvrtc_run("foreign_entry")
        assert ran == 1 and not again.cached and again.ptx == first.ptx
        assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == whole
    if os.getuid() == 0:  # only root can give a file away
        os.chown(path, 4242, 4242)
        ran, again = nvrtc_run("foreign_entry")
        assert ran == 1 and not again.cached and path.stat().st_uid == 0
    assert nvrtc_run("foreign_entry")[0] == 0


def test_an_entry_larger_than_the_bound_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    nvrtc_run("bounded_entry")
    monkeypatch.setattr(_diskcache, "_MAX_ENTRY", entry_of(tmp_path).stat().st_size - 1)
    assert nvrtc_run("bounded_entry")[0] == 1


@pytest.mark.parametrize("shared", ["root", "cuda"])
def test_a_cache_directory_others_can_write_is_not_used_with_one_warning(
    tmp_path, monkeypatch, shared
):
    root = tmp_path / f"shared-{shared}"
    (root / "cuda").mkdir(parents=True)
    (root if shared == "root" else root / "cuda").chmod(0o777)
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(root))
    with pytest.warns(RuntimeWarning) as caught:
        assert nvrtc_run("shared_root")[0] == 1
        assert nvrtc_run("shared_root")[0] == 1  # not used: NVRTC runs each time
    assert len(caught) == 1
    where = "it" if shared == "root" else "its cuda/"
    assert str(caught[0].message) == (
        f"specializer: the CUDA disk cache at {root} is not used: {where} is writable by "
        "group or others (mode 777), and the cache is private to the user. Point "
        "SPECIALIZER_CACHE_DIR at a directory of your own (chmod 700), or set it empty to "
        "turn the cache off."
    )
    assert list((root / "cuda").iterdir()) == []
    (root / "cuda").chmod(0o700)
    root.chmod(0o700)  # made private: used from then on
    assert nvrtc_run("shared_root")[0] == 1
    assert nvrtc_run("shared_root")[0] == 0


def test_a_struct_by_value_is_its_bytes_in_the_parameter_buffer_at_its_alignment():
    float4 = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("w", "<f4")])
    pair = np.dtype([("a", "<i4"), ("b", "<f8")], align=True)
    S4, SP = cuda.Struct[float4], cuda.Struct[pair]
    v4 = np.array((1.0, 2.0, 3.0, 4.0), dtype=float4)[()]  # an np.void
    vp = np.zeros((), dtype=pair)  # a 0-d array, as pyopencl.cltypes makes them
    vp["a"], vp["b"] = 7, 2.5
    assert cuda.typeof(v4) is S4 and cuda.typeof(vp) is SP
    _, _, _, _, raw = launch_recorded((np.int8, S4, SP), np.int8(1), v4, vp)
    assert raw == [b"\x01", v4.tobytes(), vp.tobytes()]
    layout = _params.ParamBuffer((np.int8, S4, SP)).layout()
    assert layout[1] == (16, 16)  # float4 is 16-aligned in CUDA C, after a char
    assert layout[2][0] % 8 == 0 and layout[2][1] == 16


def _from_module(module):
    def mark(fn):
        fn.__module__ = module
        return fn

    return mark


def test_device_functions_of_one_name_from_two_libraries_compile_together_or_say_so():
    @cuda.device
    @_from_module("lib_one")
    def scale() -> str:
        return "__device__ float scale_one(float v) { return v * 2.0f; }"

    one = scale

    @cuda.device(callees=[one])
    @_from_module("lib_two")
    def scale() -> str:  # lib_two's scale, calling lib_one's: other C names, no clash
        return "__device__ float scale_two(float v) { return scale_one(v) + 1.0f; }"

    @cuda.kernel(callees=[scale])
    def scaled(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void scaled(float *x) { x[0] = scale_two(x[0]); }'

    assert "scaled" in entries(cuda.code_ptx(scaled, (A[np.float32],), arch=ARCH))

    @cuda.device
    @_from_module("lib_one")
    def same_c() -> str:
        return "__device__ float same_c(float v) { return v; }"

    first = same_c

    @cuda.device(callees=[first])
    @_from_module("lib_two")
    def same_c() -> str:  # the same C name as lib_one's: a real clash
        return "__device__ float same_c(float v) { return -v; }"

    @cuda.kernel(callees=[same_c])
    def clashing(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void clashing(float *x) { x[0] = same_c(x[0]); }'

    with pytest.raises(CompileError) as e:
        cuda.code_ptx(clashing, (A[np.float32],), arch=ARCH)
    assert str(e.value).endswith(
        "\nnote: device functions same_c of lib_one and same_c of lib_two are compiled into "
        "kernel clashing together: if their sources define the same C name, rename one of them"
    )


# -- one NVRTC program per source; in-memory headers; included headers in every key ------------

TWO_KERNELS = """
extern "C" __global__ void twin_a(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void __launch_bounds__(128) twin_b(float *x) { x[threadIdx.x] *= 2.0f; }
"""


def test_two_kernels_of_one_source_are_one_nvrtc_run_and_one_disk_entry(tmp_path, monkeypatch):
    from specializer.backends.cuda import _program

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    src = TWO_KERNELS + f"// {tmp_path}\n"  # a source of this test only

    @cuda.kernel
    def twin_a(x: A[np.float32]) -> str:
        return src

    @cuda.kernel
    def twin_b(x: A[np.float32]) -> str:
        return src

    seen = []
    n, core = _program.nvrtc_compiles(), compile_count()
    with specializer.device_code(lambda job, artifact: seen.append(artifact)):
        ptx_a = cuda.code_ptx(twin_a, (A[np.float32],), arch=ARCH)
        ptx_b = cuda.code_ptx(twin_b, (A[np.float32],), arch=ARCH)
    assert _program.nvrtc_compiles() == n + 1  # one NVRTC run for both kernels
    assert compile_count() == core + 2  # two method instances, as before
    assert ptx_a == ptx_b and ".entry twin_a" in ptx_a and ".entry twin_b" in ptx_a
    a, b = seen
    assert a.program == b.program and (a.entry, b.entry) == ("twin_a", "twin_b")
    assert len(entry_files(tmp_path)) == 1
    # another process: either kernel first, the disk entry serves both, no NVRTC run
    prog = f"""
import json, numpy as np
from specializer.backends import cuda
from specializer.backends.cuda import _program
src = {src!r}
@cuda.kernel
def twin_b(x: cuda.Array[np.float32]) -> str:
    return src
@cuda.kernel
def twin_a(x: cuda.Array[np.float32]) -> str:
    return src
for k in (twin_b, twin_a):
    cuda.code_ptx(k, (cuda.Array[np.float32],), arch={ARCH!r})
print(json.dumps(_program.nvrtc_compiles()))
"""
    env = {**os.environ, "SPECIALIZER_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == 0 and len(entry_files(tmp_path)) == 1


def _programs_by_stripe(tmp_path, n):
    """NVRTC programs of one kernel each, new to the disk cache, whose compiles hold different
    locks (n of them), with the kernels' names."""
    from specializer.backends.cuda import _program
    from specializer.backends.cuda._source import Program

    found = {}
    for i in range(200):
        name = f"striped_{i}"
        src = f'extern "C" __global__ void {name}(float *x) {{ x[0] = {i}; }} // {tmp_path}\n'
        p = Program(src, None, (), ARCH, ())
        key = _program._program_key(p, _program.included_digest(src, (), None, (), name))
        found.setdefault(_program.compile_lock(key), (p, name))
        if len(found) == n:
            return list(found.values())
    raise AssertionError("no programs with different compile locks")


def test_programs_compile_at_once_in_two_threads_and_one_program_once(tmp_path, monkeypatch):
    # NVRTC releases the GIL: a compile must not hold a lock that another program's waits for
    from specializer.backends.cuda import _program

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    real, runs = _program.nvrtc_compile, []
    barrier = threading.Barrier(2, timeout=30)

    def meeting(*args, **kwargs):  # each compile waits until the other one runs too
        runs.append(args[0])
        barrier.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(_program, "nvrtc_compile", meeting)
    (a, a_name), (b, b_name) = _programs_by_stripe(tmp_path, 2)
    results, errors = {}, []

    def compile_(p, name):
        try:
            results[name] = _program.compile_program(p, name, kernel=name)[1]
        except Exception as e:  # a broken barrier: the compiles ran one after the other
            errors.append(e)

    threads = [threading.Thread(target=compile_, args=pn) for pn in ((a, a_name), (b, b_name))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(runs) == 2
    assert f".entry {a_name}" in results[a_name].ptx and f".entry {b_name}" in results[b_name].ptx
    # one program asked for by two threads at once: one NVRTC run, both get it
    monkeypatch.setattr(
        _program, "nvrtc_compile", lambda *a, **k: (runs.append(a[0]), real(*a, **k))[1]
    )
    ((c, c_name),) = _programs_by_stripe(tmp_path / "c", 1)
    both = []
    threads = [
        threading.Thread(target=lambda: both.append(_program.compile_program(c, c_name)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 3 and both[0] == both[1]


def test_a_template_instance_is_its_own_program_with_the_sources_kernels():
    from specializer.backends.cuda import _program

    src = """
    extern "C" __global__ void plain_k(float *x) { x[0] = 1.0f; }
    template <typename T> __global__ void tmpl_k(T *x) { x[0] = T(2); }
    """

    @cuda.kernel
    def tmpl_k(x: A[np.number]) -> str:
        return cuda.KernelSource(src, entry=f"tmpl_k<{cuda.ctype(x.dtype)}>")

    @cuda.kernel
    def plain_k(x: A[np.float32]) -> str:
        return src

    n = _program.nvrtc_compiles()
    seen = []
    with specializer.device_code(lambda job, artifact: seen.append(artifact)):
        f32 = cuda.code_ptx(tmpl_k, (A[np.float32],), arch=ARCH)
        assert cuda.code_ptx(plain_k, (A[np.float32],), arch=ARCH) == f32  # the same program
        f64 = cuda.code_ptx(tmpl_k, (A[np.float64],), arch=ARCH)
    assert _program.nvrtc_compiles() == n + 2
    # a context loads one module per program key: the key names the output, not the source
    a32, plain, a64 = seen
    assert a32.program == plain.program != a64.program
    assert "_Z6tmpl_kIfEvPT_" in f32 and "_Z6tmpl_kIdEvPT_" not in f32
    assert "_Z6tmpl_kIdEvPT_" in f64 and ".entry plain_k" in f64


def test_a_name_that_is_no_nameable_kernel_falls_back_to_the_entry_alone():
    src = """
    #define DECLARE(name) extern "C" __global__ void name(float *x)
    #if 0
    extern "C" __global__ void hidden_k(float *x) {}
    #endif
    extern "C" __global__ void shown_k(float *x) { x[0] = 3.0f; }
    """

    @cuda.kernel
    def shown_k(x: A[np.float32]) -> str:
        return src

    ptx = cuda.code_ptx(shown_k, (A[np.float32],), arch=ARCH)
    assert ".entry shown_k" in ptx and "hidden_k" not in ptx


def test_kernel_names_finds_file_scope_non_template_kernels():
    from specializer.backends.cuda._cxx import kernel_names

    src = """
    using namespace cooperative_groups;
    extern "C" __global__ void a(float *x) { if (1) { } }
    extern "C" {
    __global__ void __launch_bounds__(256) b(int *y) {}
    }
    template <typename T> __global__ void t(T *x) {}
    namespace ns { __global__ void n(float *x) {} }
    __global__ void o(int*); __global__ void o(float*) {}
    // __global__ void commented(int *x)
    static __global__ void
      c(float *x) {}
    """
    assert kernel_names(src) == ["a", "b", "c"]


BINOMIAL_COMMON = "#define STEPS {steps}\ntypedef float real;\n"
BINOMIAL = """
#include "binomial_common.h"
extern "C" __global__ void binomial_k(real *x) { x[threadIdx.x] = STEPS; }
"""


def test_kernel_source_takes_in_memory_headers_and_a_program_name():
    def kernel_for(steps):
        @cuda.kernel
        def binomial_k(x: A[np.float32]) -> str:
            return cuda.KernelSource(
                BINOMIAL,
                name="binomial_kernel.cu",
                headers={"binomial_common.h": BINOMIAL_COMMON.format(steps=steps)},
            )

        return binomial_k

    ptx = cuda.code_ptx(kernel_for(2048), (A[np.float32],), arch=ARCH)
    assert "1157627904" in ptx  # 2048.0f's bits
    # the headers' contents are part of the key: another text is another program
    assert "1149239296" in cuda.code_ptx(kernel_for(1024), (A[np.float32],), arch=ARCH)
    s = cuda.KernelSource("x", name="k.cu", headers={"h.h": "1"})
    assert (s.entry, s.name, s.headers) == (None, "k.cu", (("h.h", "1"),))
    assert repr(s) == "KernelSource('x', entry=None, name='k.cu', headers={'h.h': '1'})"
    with pytest.raises(TypeError, match="headers= maps include names to header texts"):
        cuda.KernelSource("x", headers={"h.h": b"1"})
    with pytest.raises(ValueError, match="name= is the program's file name"):
        cuda.KernelSource("x", name="")


def test_a_source_with_a_nul_byte_is_a_compile_error():
    @cuda.kernel
    def nul_k(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void nul_k(float *x) { x[0] = 1.0f; }\0 garbage'

    with pytest.raises(CompileError, match=r"source of kernel nul_k holds a NUL character"):
        cuda.code_ptx(nul_k, (A[np.float32],), arch=ARCH)


PARAMS_KERNEL = """#include "params.h"
extern "C" __global__ void hdr_k(float *x) { x[threadIdx.x] = SCALE; }
"""


def _hdr_kernel():
    @cuda.kernel
    def hdr_k(x: A[np.float32]) -> str:
        return PARAMS_KERNEL

    return hdr_k


def test_editing_an_included_header_and_redefining_rebuilds_in_this_process(tmp_path):
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "params.h").write_text("#define SCALE 2.0f\n")
    opts = (f"-I{inc}",)
    before = cuda.code_ptx(_hdr_kernel(), (A[np.float32],), arch=ARCH, options=opts)
    (inc / "params.h").write_text("#define SCALE 4.0f\n")
    after = cuda.code_ptx(_hdr_kernel(), (A[np.float32],), arch=ARCH, options=opts)
    assert "1073741824" in before and "1082130432" in after  # 2.0f, 4.0f


_HEADER_PROGRAM = """
import json, sys, numpy as np
from specializer.backends import cuda
from specializer.backends.cuda import _program
@cuda.kernel
def hdr_k(x: cuda.Array[np.float32]) -> str:
    return '''#include "params.h"
extern "C" __global__ void hdr_k(float *x) { x[threadIdx.x] = SCALE; }
'''
ptx = cuda.code_ptx(hdr_k, (cuda.Array[np.float32],), arch=sys.argv[1], options=("-Iinclude",))
print(json.dumps({"compiles": _program.nvrtc_compiles(), "four": "1082130432" in ptx}))
"""


def test_an_edited_header_or_another_projects_header_misses_the_disk_cache(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "SPECIALIZER_CACHE_DIR": str(cache)}

    def run_in(project):
        out = subprocess.run(
            [sys.executable, "-c", _HEADER_PROGRAM, ARCH],
            capture_output=True,
            text=True,
            env=env,
            cwd=project,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    for p, scale in ((p1, "2.0f"), (p2, "4.0f")):
        (p / "include").mkdir(parents=True)
        (p / "include" / "params.h").write_text(f"#define SCALE {scale}\n")
    assert run_in(p1) == {"compiles": 1, "four": False}
    assert run_in(p1) == {"compiles": 0, "four": False}
    assert run_in(p2) == {"compiles": 1, "four": True}  # the same -Iinclude, another header
    (p1 / "include" / "params.h").write_text("#define SCALE 4.0f\n")
    assert run_in(p1) == {"compiles": 1, "four": True}  # the edited header


# -- arguments: byte order of struct fields, __half range, structs, the kernel's own types ------


def test_a_struct_with_a_big_endian_field_is_refused_like_a_big_endian_array():
    from specializer.backends.cuda import _launch

    be = np.dtype([("x", ">f4"), ("y", "<f4")])
    with pytest.raises(ValueError, match=r"cannot pass a struct of dtype .* native byte order"):
        cuda.typeof(np.zeros((), be))
    with pytest.raises(ValueError, match=r"argument 1 of kernel fill .*native byte order"):
        _launch._launcher.argtypes((np.float32(1), np.zeros(1, be)[0]), fill)
    with pytest.raises(ValueError, match="native byte order"):  # a cufunction's tt, too
        _launch._launcher.kind(cuda.Struct[be], cuda.Struct[be], False)


def test_a_python_float_too_large_for_a_half_parameter_is_an_overflow_error():
    from specializer.types import Weak

    tt = (np.float16,)
    with pytest.raises(OverflowError, match=r"1000000\.0 does not fit np\.float16 .*parameter 0"):
        launch_recorded(tt, 1e6, lookup_tt=(Weak[float],))
    raw = launch_recorded(tt, 1.5, lookup_tt=(Weak[float],))[4]
    assert raw == [np.float16(1.5).tobytes()]
    assert launch_recorded(tt, float("inf"), lookup_tt=(Weak[float],))[4] == [
        np.float16(np.inf).tobytes()
    ]
    assert launch_recorded(tt, np.float16(2))[4] == [np.float16(2).tobytes()]


def test_the_type_error_for_an_unsupported_value_lists_every_kind_with_structs():
    with pytest.raises(TypeError) as e:
        cuda.typeof("a string")
    msg = str(e.value)
    for kind in ("Python bool, int and float", "float16", "np.void", "structured dtype"):
        assert kind in msg
    assert "__cuda_array_interface__" in msg and "CuArray" in msg


def test_a_one_element_array_of_a_struct_dtype_passes_by_value_like_a_0d_one():
    double3 = np.dtype([("x", "<f8"), ("y", "<f8"), ("z", "<f8")])
    rhs = np.array([1.0, 2.0, 3.0])
    one = rhs.view(double3)  # as CuPy's examples pass a struct
    assert one.shape == (1,) and cuda.typeof(one) is cuda.Struct[double3]
    assert cuda.typeof(one.reshape(())) is cuda.Struct[double3]
    assert launch_recorded((cuda.Struct[double3],), one)[4] == [rhs.tobytes()]
    with pytest.raises(TypeError, match=r"cannot pass a numpy\.ndarray"):
        cuda.typeof(np.zeros(2, double3))  # two structs are no struct


def test_a_captured_array_and_a_launch_array_reach_the_driver_as_pointers_on_every_path():
    # the slow path reads both pointers; a hit reads the captured one, its guard the launch
    # argument's
    tt = (A[np.float32], A[np.float32], np.float32)
    invoke, factory = invoker(tt, tt[1:], instance=tt[:1])

    class Instance:
        values = (cuda.CuArray.wrap(0x7F00DEAD0000, (4,), np.float32),)

    rec = Recorder(tt)
    glb = factory.__globals__
    saved, glb["_launch"] = glb["_launch"], rec
    try:
        foreign = FakeCAI("<f4", ptr=0x7F00BEEF0000)
        cuda.typeof(foreign)  # the slow path has typed one: its class has a reader
        invoke(Instance(), (foreign, np.float32(2)), 1, 1, None, 0, False, True)  # the slow path
        invoke(Instance(), (foreign, np.float32(2)), 1, 1, None, 0, False)  # a hit
    finally:
        glb["_launch"] = saved
    pointers = [(0x7F00DEAD0000).to_bytes(8, "little"), (0x7F00BEEF0000).to_bytes(8, "little")]
    assert [c[4][:2] for c in rec.calls] == [pointers, pointers]


def test_a_one_element_struct_array_passes_the_guard_as_a_0d_one_does():
    # the fast path takes what the slow path types as the struct, and nothing else
    double3 = np.dtype([("x", "<f8"), ("y", "<f8"), ("z", "<f8")])
    tt = (cuda.Struct[double3],)
    invoke, factory = invoker(tt)
    rec = Recorder(tt)
    glb = factory.__globals__
    saved, glb["_launch"] = glb["_launch"], rec
    try:
        rhs = np.array([1.0, 2.0, 3.0])
        for value in (rhs.view(double3), rhs.view(double3).reshape(()), rhs.view(double3)[0]):
            assert invoke(None, (value,), 1, 1, None, 0, False) is None  # launched
        two, swapped = np.zeros(2, double3), rhs.view(double3).astype(double3.newbyteorder())
        for value in (two, swapped):
            with pytest.raises(launching.Missed):  # another signature's: nothing touched
                invoke(None, (value,), 1, 1, None, 0, False)
    finally:
        glb["_launch"] = saved
    assert [c[4] for c in rec.calls] == [[rhs.tobytes()]] * 3


@cuda.kernel
def int_param(x: A[np.int32], v: np.number) -> str:
    return 'extern "C" __global__ void int_param(int *x, int v) { x[0] = v; }'


def test_an_argument_of_another_kind_or_size_than_the_kernels_parameter_is_a_type_error():
    assert ".entry int_param" in cuda.code_ptx(int_param, (A[np.int32], np.int32), arch=ARCH)
    assert cuda.code_ptx(int_param, (A[np.int32], np.uint32), arch=ARCH)  # same kind, size
    msg = (
        r"argument 1 of kernel int_param \(counting from 0, captured values first\) is a "
        r"np\.float32 \(4-byte floating-point\), but the kernel's parameter 1 is a 4-byte "
        r"integer \(PTX \.u32\)"
    )
    with pytest.raises(TypeError, match=msg):
        cuda.code_ptx(int_param, (A[np.int32], np.float32), arch=ARCH)
    with pytest.raises(TypeError, match=r"is a np\.int64 \(8-byte integer\), but .* 4-byte"):
        cuda.code_ptx(int_param, (A[np.int32], np.int64), arch=ARCH)


def test_a_kernel_launched_with_too_few_arguments_is_a_type_error():
    @cuda.kernel
    def two_params(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void two_params(float *x, int n) { x[0] = n; }'

    with pytest.raises(TypeError, match=r"kernel two_params takes 2 parameter\(s\)"):
        cuda.code_ptx(two_params, (A[np.float32],), arch=ARCH)


def test_ptx_parameters_reads_every_kind_of_parameter():
    from specializer.backends.cuda import _program, _ptx

    src = """#include <cuda_fp16.h>
    struct S { double a; int b; };
    extern "C" __global__ void every_param(float *x, int v, double d, __half h, S s,
                                           float4 f, bool b, long long l) {}"""
    ptx = _program.nvrtc_compile(src, ("every_param",), ARCH).ptx
    kinds = [(k, n) for k, n, _ in _ptx.ptx_parameters(ptx, "every_param")]
    assert kinds[1:] == [
        ("i", 4),
        ("f", 8),
        ("bytes", 2),
        ("bytes", 16),
        ("bytes", 16),
        ("i", 1),
        ("i", 8),
    ]
    assert kinds[0] in (("i", 8), ("ptr", 8))


# -- foreign device arrays on the front entry's fast path ---------------------------------------


class Published:
    """``fill``'s cell entry for (Array[np.float32], np.float32, Weak[int]) in a context
    stand-in, kept as a miss keeps it, with the driver replaced by a recorder and misses
    counted (a miss is not launched)."""

    def __init__(self):
        from specializer.types import Weak

        self.launcher = cuda._launch._launcher
        self.tt = (A[np.float32], np.float32, Weak[int])
        resolved = (A[np.float32], np.float32, np.int64)
        self.invoke, self.factory = invoker(resolved, self.tt)
        self.rec = Recorder(resolved)
        self.misses = []
        from specializer.backends.cuda._driver import ContextKey

        self.ctx = type("Ctx", (), {})()  # what a key needs of its context: a weak reference
        self.where = (ContextKey(self.ctx), ())

    def miss(self, *args):
        self.misses.append(args[1])

    def __enter__(self):
        from specializer import world
        from specializer.backends.cuda._driver import local

        self.local = local
        self.hooked = [
            (self.factory.__globals__, "_launch", self.rec),
            (self.launcher.launch.__globals__, "_miss", self.miss),
            (self.launcher._cell_function.__globals__, "_miss", self.miss),
            (self.launcher.host_call.__globals__, "_mismatch", self.miss),
        ]
        self.saved = [glb[name] for glb, name, _ in self.hooked], local.key
        for glb, name, value in self.hooked:
            glb[name] = value
        local.key = self.where
        self.launcher._store(fill, world.task_cell()[0], self.where, {}, self.invoke)
        return self

    def __exit__(self, *exc):
        for (glb, name, _), value in zip(self.hooked, self.saved[0]):
            glb[name] = value
        self.local.key = self.saved[1]
        setattr(fill, self.launcher.attr, None)

    def launch(self, x):
        n = len(self.rec.calls)
        cuda.launch(fill, x, np.float32(2), 4, grid=1, block=1)
        return self.rec.calls[n][4][0] if len(self.rec.calls) > n else None

    def host_kernel(self):
        return cuda.HostKernel(fill, self.tt, Fun(self.tt), self.where, self.invoke, {})


def test_a_kernel_keeps_an_entry_per_context_so_alternating_contexts_never_miss():
    import gc
    import weakref

    from specializer import world
    from specializer.backends.cuda._driver import ContextKey, _forget, local
    from specializer.types import Weak

    class Ctx:  # what a key needs of its context: a weak reference to it
        pass

    @cuda.kernel
    def alternate(x: A[np.float32], v: np.float32, n: np.int64) -> str:
        return 'extern "C" __global__ void alternate(float *x, float v, long long n) {}'

    launcher = cuda._launch._launcher
    tt = (A[np.float32], np.float32, Weak[int])
    resolved = (A[np.float32], np.float32, np.int64)
    factory = launcher.invokers.factory(None, tt, resolved)[0]
    contexts = [Ctx(), Ctx()]
    wheres = [(ContextKey(c), ()) for c in contexts]
    functions, misses, called = [object(), object()], [], []

    def recorder(function, *rest):
        called.append(function)
        return (0,)

    linked = []
    for function, where in zip(functions, wheres):  # as two misses keep them
        linked.append(Fun(resolved))
        linked[-1].function = function
        launcher._store(alternate, world.task_cell()[0], where, {}, factory(linked[-1]))
    glb, launch_glb = factory.__globals__, launcher.launch.__globals__
    saved = glb["_launch"], local.key, launch_glb["_miss"]
    x = cuda.CuArray.wrap(0x7F00DEAD0000, (4,), np.float32)
    try:
        glb["_launch"], launch_glb["_miss"] = recorder, lambda *a: misses.append(a)
        for i in range(6):
            local.key = wheres[i % 2]
            cuda.launch(alternate, x, np.float32(1), 4, grid=1, block=1)
    finally:
        glb["_launch"], local.key, launch_glb["_miss"] = saved
    assert misses == [] and called == functions * 3
    # a context gone takes its entries with it: what they held is freed
    cell = getattr(alternate, launcher.attr)
    assert [e[1] for e in (cell[0], *cell[1])] == [wheres[1], wheres[0]]
    gone = weakref.ref(linked[0])
    _forget(wheres[0][0])
    del linked[0]
    gc.collect()
    assert [e[1] for e in (cell[0], *cell[1])] == [wheres[1]] and gone() is None


def test_a_foreign_array_of_a_known_class_takes_the_fast_path_with_its_pointer():
    cuda.typeof(FakeCAI("<f4"))  # the slow path has typed one: its class has a reader
    own = cuda.CuArray.wrap(0x7F00DEAD0000, (4,), np.float32)
    with Published() as p:
        assert p.launch(own) == (0x7F00DEAD0000).to_bytes(8, "little")
        assert p.launch(FakeCAI("<f4", ptr=0x7F00BEEF0000)) == (0x7F00BEEF0000).to_bytes(
            8, "little"
        )
        v2 = FakeCAI("<f4", ptr=0x7F00BEEF1000)
        v2.__cuda_array_interface__["version"] = 2
        del v2.__cuda_array_interface__["strides"], v2.__cuda_array_interface__["mask"]
        assert p.launch(v2) == (0x7F00BEEF1000).to_bytes(8, "little")
        assert p.misses == []
        # what the fast path cannot vouch for takes the slow path, which checks it all
        for other in (
            FakeCAI("<f8"),  # another element type: another method, maybe
            FakeCAI(">f4"),  # another byte order
            FakeCAI("<f4", shape=(2, 2), strides=(4, 8)),  # F-order: contiguous, checked slow
            FakeCAI("<f4", shape=(4,), strides=(8,)),  # strided
            FakeCAI("<f4", mask=(0x1000, False)),  # masked
        ):
            assert p.launch(other) is None
        assert len(p.misses) == 5
        odd = FakeCAI("<f4", ptr=np.uint64(0x7F00BEEF4000))  # a pointer that is no int
        assert p.launch(odd) == (0x7F00BEEF4000).to_bytes(8, "little")
        # a HostKernel call's guard is the same
        hk = p.host_kernel()
        hk(FakeCAI("<f4", ptr=0x7F00BEEF2000), np.float32(1), 4, grid=1, block=1)
        assert p.rec.calls[-1][4][0] == (0x7F00BEEF2000).to_bytes(8, "little")
        assert len(p.misses) == 5


def test_a_foreign_class_never_typed_takes_the_slow_path_once():
    class Unseen(FakeCAI):
        pass

    from specializer.backends.cuda._array import foreign

    with Published() as p:
        assert p.launch(Unseen("<f4")) is None and len(p.misses) == 1
        assert Unseen not in foreign
        assert cuda.typeof(Unseen("<f4")) is A[np.float32]  # what the miss does first
        assert p.launch(Unseen("<f4", ptr=0x7F00BEEF3000)) == (0x7F00BEEF3000).to_bytes(8, "little")
        assert len(p.misses) == 1


class FakeDLPack:
    """A DLPack array, as a library without __cuda_array_interface__ presents one."""

    def __init__(self, device=(2, 0)):
        self.device = device

    def __dlpack__(self, stream=None):
        raise AssertionError("not reached in this test")

    def __dlpack_device__(self):
        return self.device


def test_a_dlpack_array_on_the_host_is_refused_and_one_on_a_gpu_needs_cuda_core():
    with pytest.raises(TypeError, match=r"on DLPack device \(1, 0\)"):
        cuda.typeof(FakeDLPack((1, 0)))
    with pytest.raises(TypeError, match="accepted are"):
        cuda.typeof(np.zeros(3, np.float32))  # a numpy array is a DLPack array on the host
    import importlib.util

    if importlib.util.find_spec("cuda.core") is None:
        with pytest.raises(TypeError, match=r"reading it needs cuda\.core"):
            cuda.typeof(FakeDLPack())


def test_cuda_core_buffers_and_strided_memory_views_are_device_arrays():
    # Stand-ins with cuda.core's class names and attributes (cuda.core needs a GPU to make a
    # Buffer); the GPU tests pass the real ones.
    Buffer = type("Buffer", (), {"__module__": "cuda.core._memory"})
    View = type("StridedMemoryView", (), {"__module__": "cuda.core.utils"})
    b = Buffer()
    b.handle, b.size, b.is_device_accessible, b.device_id = 0x7F00CAFE0000, 64, True, 0
    v = View()
    v.ptr, v.shape, v.strides, v.dtype = 0x7F00CAFE1000, (4,), None, np.dtype(np.float32)
    v.is_device_accessible, v.device_id = True, 0
    assert cuda.typeof(b) is A[np.uint8] and cuda.typeof(v) is A[np.float32]
    with Published() as p:
        assert p.launch(v) == (0x7F00CAFE1000).to_bytes(8, "little") and not p.misses
    v.strides = (2,)
    with pytest.raises(ValueError, match="non-contiguous"):
        cuda.typeof(v)
    b.is_device_accessible = False
    with pytest.raises(ValueError, match="Buffer in host memory"):
        cuda.typeof(b)
