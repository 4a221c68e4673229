"""The CUDA back-end without a GPU: NVRTC to PTX, the compile cache, argument types, the
parameter buffers and launchers, and the error when no GPU or driver is present."""

import ctypes
import re
import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("cuda.bindings")

import specializer
from specializer import CompileError, compile_count, device_code_source
from specializer.backends import cuda
from specializer.backends.cuda import _params

ARCH = "sm_90"
A = cuda.Array
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
    with pytest.raises(TypeError, match=r"unknown compiler keyword.*fast_math.*accepted: arch"):
        cuda.code_ptx(divide, tt, arch=ARCH, fast_math=True)
    with pytest.raises(TypeError, match="fastmath= is a bool"):
        cuda.code_ptx(divide, tt, arch=ARCH, fastmath="yes")
    with pytest.raises(ValueError, match=r"arch='sm_52'.*supported: sm_"):
        cuda.code_ptx(divide, tt, arch="sm_52")
    with pytest.raises(CompileError, match="no-such-flag"):
        cuda.code_ptx(divide, tt, arch=ARCH, options=("--no-such-flag",))


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
    assert cuda.typeof(1) is np.int64
    assert cuda.typeof(1.5) is np.float64
    assert cuda.typeof(True) is np.bool_
    for t in SCALARS:
        assert cuda.typeof(t(1)) is t
    assert cuda.typeof(FakeCAI("<f4")) is A[np.float32]
    assert cuda.typeof(FakeCAI("<i8", shape=(2, 3), strides=(24, 8))) is A[np.int64]
    assert cuda.typeof(cuda.CuArray.wrap(0x1000, (8,), np.uint16)) is A[np.uint16]
    assert issubclass(cuda.typeof(FakeCAI("<f8")), A[np.floating])


@pytest.mark.parametrize("value", ["text", None, [1.0], np.float16(1), 1j, np.zeros(3)])
def test_typeof_rejects_other_values_naming_the_type_and_what_is_accepted(value):
    with pytest.raises(TypeError, match=rf"{type(value).__qualname__}.*accepted are Python bool"):
        cuda.typeof(value)


def test_typeof_rejects_strided_masked_and_non_numeric_device_arrays():
    with pytest.raises(TypeError, match="non-contiguous"):
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
    for bad in (np.floating, np.number, np.float16, np.complex64, str):
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
        self.sizes = [8 if issubclass(t, A) else np.dtype(t).itemsize for t in tt]
        self.calls = []

    def __call__(self, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        ptrs = (ctypes.c_void_p * len(self.sizes)).from_address(params) if params else []
        values = [ctypes.string_at(p, n) for p, n in zip(ptrs, self.sizes)]
        self.calls.append(((gx, gy, gz), (bx, by, bz), shmem, int(stream), values))
        return (0,)


class Fun:
    """The fields of a LinkedKernel a launcher reads."""

    name = "k"
    context = None
    function = object()


def with_driver(fn, launch):
    """The launcher ``fn`` calling ``launch`` where it calls cuLaunchKernel."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "_launch": launch}, fn.__name__)


def launch_recorded(tt, *args, grid=1, block=1, stream=None, shared_mem=0):
    rec = Recorder(tt)
    with_driver(_params.launcher(tt), rec)(Fun, grid, block, shared_mem, stream, args)
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

    fn = with_driver(_params.launcher(tt), failing)
    with pytest.raises(
        cuda.CUDAError,
        match=r"cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"
        r".*kernel k with grid=1, block=2048",
    ):
        fn(Fun, 1, 2048, 0, None, (np.float32(1),))
    with pytest.raises(cuda.CUDAError):
        fn(Fun, 1, 2048, 0, None, (np.float32(1),))
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
    with pytest.raises(OverflowError, match="does not fit"):
        launch_recorded(tt, 2**63)
    with pytest.raises(ValueError, match="too many values"):  # one argument too many
        _params.launcher(tt)(Fun, 1, 1, 0, None, (1, 2))


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

    fn = with_driver(_params.launcher(tt), driver)  # the same buffer pool

    def worker(k):
        for j in range(100):
            v = k * 1000 + j
            fn(Fun, 1, 1, 0, None, (v, -v))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and len(seen) == 400


def test_launcher_source_is_generated_per_signature_and_holds_no_values():
    tt = (A[np.uint8], np.uint8, np.float32)
    fn = _params.launcher(tt)
    assert _params.launcher(tt) is fn
    (gen,) = [g for g in specializer.generated_sources() if g.name == fn.__name__]
    assert gen.template == "cuda_launch.py.j2"
    assert "v.a2 = a2" in gen.source and "_launch(fun.function" in gen.source
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
