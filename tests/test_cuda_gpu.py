"""The CUDA back-end on a GPU: results against numpy, dispatch and world age, callees,
captured values, contexts, compile hooks and threads. Skipped cleanly without a GPU
(``tools/gpu_check.sh`` runs these on a machine with one)."""

import gc
import threading
import weakref

import numpy as np
import pytest

pytest.importorskip("cuda.bindings")

import specializer
from specializer import compile_count, device_code, device_code_source
from specializer.backends import cuda

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not cuda.available(),
        reason=f"needs an NVIDIA GPU and its driver: {cuda.unavailable_reason()}",
    ),
]

A = cuda.Array
N = 1000
BLOCK = 128
GRID = (N + BLOCK - 1) // BLOCK


def run(f, *args, **kwargs):
    cuda.launch(f, *args, grid=GRID, block=BLOCK, **kwargs)


@cuda.kernel
def fill(x: A[np.generic], v: np.generic, n: np.int64) -> str:
    return f"""extern "C" __global__ void fill({cuda.ctype(x.dtype)} *x, {cuda.ctype(v)} v,
                                               long long n) {{
                   long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                   if (i < n) x[i] = v; }}"""


@cuda.kernel
def axpy(a: np.floating, x: A[np.floating], y: A[np.floating], n: np.int64) -> str:
    t = cuda.ctype(a)
    return f"""extern "C" __global__ void axpy({t} a, const {t} *x, {t} *y, long long n) {{
                   long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                   if (i < n) y[i] += a * x[i]; }}"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_fill_matches_numpy_for_each_element_type(dtype):
    x = cuda.CuArray.zeros(N, dtype)
    value = dtype(1) if dtype is np.bool_ else dtype(7)
    run(fill, x, value, N)
    np.testing.assert_array_equal(x.get(), np.full(N, value, dtype))


def test_axpy_matches_numpy():
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        hx, hy = rng.random(N).astype(dtype), rng.random(N).astype(dtype)
        x, y = cuda.CuArray.from_numpy(hx), cuda.CuArray.from_numpy(hy)
        run(axpy, dtype(0.5), x, y, N)
        np.testing.assert_allclose(y.get(), hy + dtype(0.5) * hx, rtol=1e-6)


def test_a_hit_reuses_the_function_and_an_unrelated_definition_compiles_nothing():
    tt = (A[np.float32], np.float32, np.int64)
    first = cuda.cufunction(fill, tt)
    assert cuda.cufunction(fill, tt).linked is first.linked
    n = compile_count()

    @cuda.kernel
    def unrelated_gpu(x: A[np.float32]) -> str:
        return 'extern "C" __global__ void unrelated_gpu(float *x) {}'

    again = cuda.cufunction(fill, tt)  # a new world: looked up again, found compiled
    assert again.linked is first.linked and compile_count() == n


def test_more_specific_method_is_seen_after_definition_and_the_older_world_keeps_the_old():
    @cuda.kernel
    def bump_gpu(x: A[np.number], v: np.number, n: np.int64) -> str:
        t = cuda.ctype(v)
        return f"""extern "C" __global__ void bump_gpu({t} *x, {t} v, long long n) {{
                       long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                       if (i < n) x[i] *= v; }}"""

    x = cuda.CuArray.from_numpy(np.ones(N, np.float64))
    run(bump_gpu, x, 3.0, N)
    np.testing.assert_array_equal(x.get(), np.full(N, 3.0))
    old = specializer.latest()

    @cuda.kernel
    def bump_gpu(x: A[np.float64], v: np.float64, n: np.int64) -> str:
        return """extern "C" __global__ void bump_gpu(double *x, double v, long long n) {
                      long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                      if (i < n) x[i] += v; }"""

    run(bump_gpu, x, 3.0, N)  # the specific method, though the generic code is still valid
    np.testing.assert_array_equal(x.get(), np.full(N, 6.0))
    n = compile_count()
    specializer.invoke_in_world(old, run, bump_gpu, x, 3.0, N)
    np.testing.assert_array_equal(x.get(), np.full(N, 18.0))
    assert compile_count() == n  # the old world's code was kept


def test_callee_redefinition_recompiles_and_changes_the_result():
    @cuda.device
    def op_gpu() -> str:
        return "__device__ float op_gpu(float v) { return v * v; }"

    @cuda.kernel(callees=[op_gpu])
    def apply_gpu(x: A[np.float32], n: np.int64) -> str:
        return """extern "C" __global__ void apply_gpu(float *x, long long n) {
                      long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                      if (i < n) x[i] = op_gpu(x[i]); }"""

    x = cuda.CuArray.from_numpy(np.full(N, 3, np.float32))
    run(apply_gpu, x, N)
    np.testing.assert_array_equal(x.get(), np.full(N, 9, np.float32))
    n = compile_count()

    @cuda.device
    def op_gpu() -> str:
        return "__device__ float op_gpu(float v) { return v + 1.0f; }"

    run(apply_gpu, x, N)
    np.testing.assert_array_equal(x.get(), np.full(N, 10, np.float32))
    assert compile_count() == n + 1
    run(apply_gpu, x, N)
    assert compile_count() == n + 1


def test_captured_values_come_from_each_launch_and_the_cache_keeps_no_instance():
    hx = np.arange(N, dtype=np.float32)
    x = cuda.CuArray.from_numpy(hx)
    y = cuda.CuArray.zeros(N, np.float32)
    run(axpy.capture(np.float32(2)), x, y, N)
    n = compile_count()
    inst = axpy.capture(np.float32(3))
    run(inst, x, y, N)
    np.testing.assert_array_equal(y.get(), 5 * hx)
    assert compile_count() == n  # same captured types: the same code
    hk = cuda.cufunction(inst, (A[np.float32], A[np.float32], np.int64))
    hk(x, y, N, grid=GRID, block=BLOCK)
    np.testing.assert_array_equal(y.get(), 8 * hx)
    alive = weakref.ref(inst)
    del inst, hk
    gc.collect()
    assert alive() is None


def test_recreating_a_context_misses_and_reloads_without_recompiling():
    tt = (A[np.float32], np.float32, np.int64)
    first = cuda.Context.create(0)
    with first:
        x = cuda.CuArray.zeros(N, np.float32)
        run(fill, x, np.float32(1), N)
        fun = cuda.cufunction(fill, tt).linked
        np.testing.assert_array_equal(x.get(), np.ones(N, np.float32))
    del x
    first.destroy()
    n = compile_count()
    second = cuda.Context.create(0)
    try:
        with second:
            y = cuda.CuArray.zeros(N, np.float32)
            run(fill, y, np.float32(2), N)
            assert cuda.cufunction(fill, tt).linked is not fun
            assert cuda.cufunction(fill, tt).context is second
            np.testing.assert_array_equal(y.get(), np.full(N, 2, np.float32))
        assert compile_count() == n
    finally:
        second.destroy()


def test_two_contexts_keep_their_own_functions_and_both_keep_hitting():
    tt = (A[np.int32], np.int32, np.int64)
    contexts = [cuda.Context.create(0), cuda.Context.create(0)]
    try:
        funs, arrays = [], []
        for k, ctx in enumerate(contexts):
            with ctx:
                arrays.append(cuda.CuArray.zeros(N, np.int32))
                run(fill, arrays[-1], np.int32(k + 1), N)
                funs.append(cuda.cufunction(fill, tt).linked)
        assert funs[0] is not funs[1]
        for k, ctx in enumerate(contexts):
            with ctx:
                assert cuda.cufunction(fill, tt).linked is funs[k]
            np.testing.assert_array_equal(arrays[k].get(), np.full(N, k + 1, np.int32))
    finally:
        for ctx in contexts:
            ctx.destroy()


@pytest.mark.skipif(cuda.device_count() < 2, reason="needs two GPUs")
def test_two_devices_each_run_their_own_load():
    tt = (A[np.float32], np.float32, np.int64)
    funs = []
    for d in range(2):
        with cuda.Context.primary(d):
            x = cuda.CuArray.zeros(N, np.float32)
            run(fill, x, np.float32(d + 5), N)
            np.testing.assert_array_equal(x.get(), np.full(N, d + 5, np.float32))
            funs.append(cuda.cufunction(fill, tt).linked)
    assert funs[0] is not funs[1]


def test_compile_hooks_see_every_launch_also_of_cached_kernels():
    x = cuda.CuArray.zeros(N, np.float32)
    run(fill, x, np.float32(1), N)  # compiled and cached before the block
    with device_code_source() as sources:
        run(fill, x, np.float32(2), N)
        run(fill, x, np.float32(3), N)
    assert len(sources) == 2 and all("void fill(float *x" in s for s in sources)
    seen = []
    with device_code(lambda job, artifact: seen.append(artifact.arch)):
        run(fill, x, np.float32(4), N)
    assert len(seen) == 1  # the hook saw the cached kernel's artifact
    np.testing.assert_array_equal(x.get(), np.full(N, 4, np.float32))


def test_compiler_kwargs_are_part_of_the_key():
    x = cuda.CuArray.zeros(N, np.float32)
    run(fill, x, np.float32(1), N)
    n = compile_count()
    run(fill, x, np.float32(2), N, fastmath=True)
    assert compile_count() == n + 1
    run(fill, x, np.float32(3), N, fastmath=True)
    assert compile_count() == n + 1
    np.testing.assert_array_equal(x.get(), np.full(N, 3, np.float32))
    with pytest.raises(TypeError, match="unknown compiler keyword"):
        run(fill, x, np.float32(3), N, fast_math=True)


def test_threads_launching_one_signature_each_get_their_own_results():
    arrays = [cuda.CuArray.zeros(N, np.int64) for _ in range(8)]
    errors = []

    def worker(k):
        try:
            for j in range(200):
                run(fill, arrays[k], np.int64(k * 1000 + j), N)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k, a in enumerate(arrays):
        np.testing.assert_array_equal(a.get(), np.full(N, k * 1000 + 199, np.int64))


def test_launch_on_a_stream():
    stream = cuda.Stream()
    x = cuda.CuArray.zeros(N, np.float32)
    run(fill, x, np.float32(9), N, stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(x.get(), np.full(N, 9, np.float32))


def test_code_ptx_without_arch_targets_the_current_device():
    ptx = cuda.code_ptx(fill, (A[np.float32], np.float32, np.int64))
    major, minor = cuda.current_context().capability
    assert f".target sm_{major}{minor}" in ptx or ".target compute_" in ptx


def test_a_bad_launch_configuration_is_an_error_naming_the_kernel():
    x = cuda.CuArray.zeros(N, np.float32)
    with pytest.raises(cuda.CUDAError, match=r"cuLaunchKernel failed.*kernel fill.*block=4096"):
        cuda.launch(fill, x, np.float32(1), N, grid=1, block=4096)
    run(fill, x, np.float32(1), N)  # the buffer's lock was released
    np.testing.assert_array_equal(x.get(), np.ones(N, np.float32))


def test_launching_what_is_not_a_kernel_is_a_type_error():
    x = cuda.CuArray.zeros(N, np.float32)
    with pytest.raises(TypeError, match="expected a kernel or a kernel instance"):
        cuda.launch(print, x, grid=1, block=1)


def test_host_kernel_checks_its_argument_types():
    hk = cuda.cufunction(fill, (A[np.float32], np.float32, np.int64))
    x = cuda.CuArray.zeros(N, np.float32)
    with pytest.raises(TypeError, match="looked up for"):
        hk(x, 1.0, N, grid=GRID, block=BLOCK)
    hk(x, np.float32(1), N, grid=GRID, block=BLOCK)
    np.testing.assert_array_equal(x.get(), np.ones(N, np.float32))


def test_device_arrays_round_trip_and_are_freed_when_collected():
    host = np.arange(12, dtype=np.int16).reshape(3, 4)
    a = cuda.CuArray.from_numpy(host)
    assert a.shape == (3, 4) and cuda.typeof(a) is A[np.int16]
    np.testing.assert_array_equal(a.get(), host)
    assert a.__cuda_array_interface__["data"][0] == a.ptr
    big = 1 << 30  # 1 GiB each: without freeing, this would exhaust any GPU
    for _ in range(200):
        cuda.CuArray(big, np.uint8)


def test_foreign_arrays_with_the_cuda_array_interface_are_launched():
    cp = pytest.importorskip("cupy")
    x = cp.zeros(N, dtype=cp.float32)
    run(fill, x, np.float32(4), N)
    cuda.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(x), np.full(N, 4, np.float32))
