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


def test_a_context_dropped_without_destroy_is_collected_with_what_was_loaded_into_it():
    tt = (A[np.float32], np.float32, np.int64)
    ctx = cuda.Context.create(0)
    with ctx:
        x = cuda.CuArray.zeros(N, np.float32)
        run(fill, x, np.float32(1), N)
        loaded = weakref.ref(cuda.cufunction(fill, tt).linked)
        np.testing.assert_array_equal(x.get(), np.ones(N, np.float32))
    dropped = weakref.ref(ctx)
    del ctx, x
    # Launch and look up elsewhere, so that the kernel's newest entries are another context's.
    y = cuda.CuArray.zeros(N, np.float32)
    run(fill, y, np.float32(2), N)
    cuda.cufunction(fill, tt)
    gc.collect()
    assert dropped() is None  # and, collected, it was destroyed
    assert loaded() is None
    np.testing.assert_array_equal(y.get(), np.full(N, 2, np.float32))


def test_a_host_kernel_keeps_its_context_alive():
    tt = (A[np.float32], np.float32, np.int64)
    ctx = cuda.Context.create(0)
    with ctx:
        hk = cuda.cufunction(fill, tt)
        x = cuda.CuArray.zeros(N, np.float32)
    held = weakref.ref(ctx)
    del ctx
    gc.collect()
    assert held() is hk.context
    with hk.context:
        hk(x, np.float32(3), N, grid=GRID, block=BLOCK)
        np.testing.assert_array_equal(x.get(), np.full(N, 3, np.float32))
    del x
    hk.context.destroy()


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
    with pytest.raises(TypeError, match=r"fast_math \(did you mean fastmath\?\)"):
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


# -- kernels shaped like real programs, run and checked against numpy -------------------------
#
# The kernels are test_cuda's (their PTX is checked there without a GPU); here each runs.

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from test_cuda import (  # noqa: E402
    FakeCAI,
    atomics,
    axpy_half,
    convolutionRowsKernel,
    matrix_mul,
    my_pow2,
    raw_cmul,
    reduce2,
    reduce7,
    reduceSinglePassMultiBlockCG,
    scalarProductKernel_intrinsics,
    scale_vec4,
    sgemm,
    transposeNoBankConflicts,
    vector_add,
)

RNG = np.random.default_rng(12)


def test_vector_add_nvrtc_runs():
    ha, hb = RNG.random(N, np.float32), RNG.random(N, np.float32)
    a, b, c = cuda.CuArray.from_numpy(ha), cuda.CuArray.from_numpy(hb), cuda.CuArray.zeros(N)
    run(vector_add, a, b, c, np.int32(N))
    np.testing.assert_array_equal(c.get(), ha + hb)


@pytest.mark.parametrize("index, block", [(np.int32, 16), (np.uint64, 32)])
def test_matrix_mul_nvrtc_runs_each_entry(index, block):
    n = 64
    ha, hb = RNG.random((n, n), np.float32), RNG.random((n, n), np.float32)
    a, b, c = cuda.CuArray.from_numpy(ha), cuda.CuArray.from_numpy(hb), cuda.CuArray.zeros((n, n))
    cuda.launch(
        matrix_mul, c, a, b, index(n), index(n), grid=(n // block, n // block), block=(block, block)
    )
    np.testing.assert_allclose(c.get(), ha @ hb, rtol=1e-4)


def test_simple_atomic_intrinsics_nvrtc_runs():
    threads = 64
    start = np.zeros(11, np.int32)
    start[4] = start[8] = np.int32(-1)  # min from the top, and from all ones
    out = cuda.CuArray.from_numpy(start)
    cuda.launch(atomics, out, grid=1, block=threads)
    got, t = out.get(), np.arange(threads, dtype=np.int64)
    assert got[0] == 10 * threads and got[1] == -10 * threads
    assert 0 <= got[2] < threads and got[3] == threads - 1 and got[4] == -1
    assert got[5] == threads % 18 and got[6] == 137 - (threads - 1)
    assert 0 <= got[7] < threads
    assert got[8] == np.bitwise_and.reduce((2 * t + 7).astype(np.int32)) & -1
    assert got[9] == -1 and got[10] == np.bitwise_xor.reduce(t.astype(np.int32))


def test_transpose_runs():
    w, h = 48, 32
    hi = RNG.random((h, w), np.float32)
    inp, out = cuda.CuArray.from_numpy(hi), cuda.CuArray.zeros((w, h))
    cuda.launch(
        transposeNoBankConflicts, out, inp, np.int32(w), np.int32(h), grid=(3, 2), block=(16, 16)
    )
    np.testing.assert_array_equal(out.get(), hi.T)


def test_fp16_scalar_product_runs():
    blocks, threads = 128, 128
    size = blocks * threads * 4
    ha = RNG.integers(0, 4, 2 * size).astype(np.float16)
    hb = RNG.integers(0, 2, 2 * size).astype(np.float16)
    a, b = cuda.CuArray.from_numpy(ha), cuda.CuArray.from_numpy(hb)
    results = cuda.CuArray.zeros(blocks, np.float32)
    cuda.launch(
        scalarProductKernel_intrinsics, a, b, results, np.uint64(size), grid=blocks, block=threads
    )
    expected = float(np.dot(ha.astype(np.float64), hb.astype(np.float64)))
    assert abs(float(results.get().sum()) - expected) <= 1e-3 * expected


def test_a_float16_scalar_is_passed_as_a_half():
    hx, hy = RNG.random(N).astype(np.float16), RNG.random(N).astype(np.float16)
    x, y = cuda.CuArray.from_numpy(hx), cuda.CuArray.from_numpy(hy)
    run(axpy_half, np.float16(0.5), x, y, np.int32(N))
    expected = np.float32(0.5) * hx.astype(np.float32) + hy.astype(np.float32)
    np.testing.assert_allclose(y.get().astype(np.float32), expected, rtol=0, atol=3e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_reduction_template_kernels_run(dtype):
    n, block = 4096, 256
    hx = (RNG.random(n) * 10).astype(dtype)
    x, partial = cuda.CuArray.from_numpy(hx), cuda.CuArray.zeros(n // block, dtype)
    item = np.dtype(dtype).itemsize
    cuda.launch(
        reduce2, x, partial, np.uint32(n), grid=n // block, block=block, shared_mem=block * item
    )
    np.testing.assert_allclose(partial.get().sum(), hx.sum(), rtol=1e-5)
    out = cuda.CuArray.zeros(8, dtype)
    cuda.launch(reduce7, x, out, np.uint32(n), grid=8, block=block, shared_mem=(block // 32) * item)
    np.testing.assert_allclose(out.get().sum(), hx.sum(), rtol=1e-5)


def test_reduction_multi_block_cg_runs_cooperatively_and_a_grid_too_large_is_refused():
    n, block = 1 << 16, 256
    hx = RNG.random(n, np.float32)
    x, out = cuda.CuArray.from_numpy(hx), cuda.CuArray.zeros(64, np.float32)
    tt = (A[np.float32], A[np.float32], np.uint32)
    hk = cuda.cufunction(reduceSinglePassMultiBlockCG, tt)
    most, per_sm, sms = cuda._driver.max_cooperative_blocks(hk.function, block, 32, hk.context)
    assert most == per_sm * sms > 0
    grid = min(64, most)
    cuda.launch(
        reduceSinglePassMultiBlockCG,
        x,
        out,
        np.uint32(n),
        grid=grid,
        block=block,
        shared_mem=32,
        cooperative=True,
    )
    np.testing.assert_allclose(out.get()[0], hx.sum(dtype=np.float64), rtol=1e-4)
    # the limits are the linked kernel's, kept with its function handle (no module dict
    # keyed on the handle's address, which another module could get later)
    assert hk.linked.cooperative == {(block, 32): (most, per_sm, sms)}
    assert not hasattr(cuda._driver, "_coop_limits")
    with pytest.raises(ValueError, match=r"cooperative launch of reduceSinglePassMultiBlockCG"):
        cuda.launch(
            reduceSinglePassMultiBlockCG,
            x,
            out,
            np.uint32(n),
            grid=most + 1,
            block=block,
            shared_mem=32,
            cooperative=True,
        )


def test_convolution_separable_sets_its_constant_table_and_runs():
    w, h, radius = 64, 8, 8
    taps = RNG.random(2 * radius + 1, np.float32)
    src = RNG.random((h, w), np.float32)
    tt = (A[np.float32], A[np.float32], np.int32, np.int32, np.int32)
    hk = cuda.cufunction(convolutionRowsKernel, tt)
    ptr, size = hk.get_global("c_Kernel")
    assert ptr and size == taps.nbytes
    hk.copy_to_global("c_Kernel", taps)
    np.testing.assert_array_equal(hk.copy_from_global("c_Kernel", np.float32), taps)
    with pytest.raises(ValueError, match="68 bytes"):
        hk.copy_to_global("c_Kernel", taps[:-1])
    with pytest.raises(
        cuda.CUDAError, match=r"no __constant__ or __device__ variable named 'c_K'.*c_Kernel"
    ):
        hk.get_global("c_K")
    d_src, d_dst = cuda.CuArray.from_numpy(src), cuda.CuArray.zeros((h, w))
    hk(d_dst, d_src, np.int32(w), np.int32(h), np.int32(w), grid=(w // 32, h // 4), block=(32, 4))
    padded = np.pad(src.astype(np.float64), ((0, 0), (radius, radius)))
    expected = np.zeros((h, w))
    for j in range(-radius, radius + 1):
        expected += taps[radius - j] * padded[:, radius + j : radius + j + w]
    np.testing.assert_allclose(d_dst.get(), expected, rtol=1e-5)


def test_raw_module_template_with_a_constant_table_and_a_device_counter():
    n = 300
    table = np.arange(100, dtype=np.float32) % 3
    for dtype in (np.int32, np.float32):
        hx = np.arange(n).astype(dtype)
        x = cuda.CuArray.from_numpy(hx)
        hk = cuda.cufunction(my_pow2, (A[dtype], np.int32))
        hk.copy_to_global("some_table", table)
        hk.copy_to_global("calls", np.int32(0))
        hk(x, np.int32(n), grid=3, block=128)
        hk(x, np.int32(0), grid=1, block=1)
        np.testing.assert_array_equal(x.get(), hx * hx * table[np.arange(n) % 100].astype(dtype))
        assert hk.copy_from_global("calls", np.int32).tolist() == [2]


def test_cupy_gemm_example_runs_with_its_tile_sizes_from_options():
    m = n = k = 128
    sizes = ("-DDIM_X=16", "-DDIM_Y=16", "-DBLK_M=64", "-DBLK_N=64", "-DBLK_K=8")
    ha, hb, hc = (
        RNG.random((m, k), np.float32),
        RNG.random((k, n), np.float32),
        RNG.random((m, n), np.float32),
    )
    a, b, c = (cuda.CuArray.from_numpy(v) for v in (ha, hb, hc))
    cuda.launch(
        sgemm,
        np.int32(m),
        np.int32(n),
        np.int32(k),
        np.float32(2),
        a,
        b,
        np.float32(0.5),
        c,
        grid=(n // 64, m // 64),
        block=(16, 16),
        options=sizes,
    )
    np.testing.assert_allclose(c.get(), 2 * ha @ hb + 0.5 * hc, rtol=1e-4)


def test_complex_headers_and_vector_types_run():
    ha = RNG.random(N) + 1j * RNG.random(N)
    hb = RNG.random(N) + 1j * RNG.random(N)
    a, b, out = (
        cuda.CuArray.from_numpy(ha),
        cuda.CuArray.from_numpy(hb),
        cuda.CuArray.zeros(N, np.complex128),
    )
    run(raw_cmul, a, b, out, np.int32(N))
    np.testing.assert_allclose(out.get(), ha * hb, rtol=1e-12)
    hv = RNG.random(4 * N, np.float32)
    v = cuda.CuArray.from_numpy(hv)
    run(scale_vec4, v, np.float32(2), np.int32(N))
    np.testing.assert_array_equal(v.get(), hv * 2)


def test_fortran_ordered_foreign_arrays_are_passed_as_their_pointer():
    shape = (8, 125)  # N elements, column-major
    ha = np.asfortranarray(RNG.random(shape, np.float32))
    hb = np.asfortranarray(RNG.random(shape, np.float32))
    flat_a = cuda.CuArray.from_numpy(ha.ravel(order="F"))
    flat_b = cuda.CuArray.from_numpy(hb.ravel(order="F"))
    out = cuda.CuArray.zeros(N)
    f_strides = (4, 4 * shape[0])
    fa = FakeCAI("<f4", shape=shape, strides=f_strides, ptr=flat_a.ptr)
    fb = FakeCAI("<f4", shape=shape, strides=f_strides, ptr=flat_b.ptr)
    run(vector_add, fa, fb, out, np.int32(N))
    np.testing.assert_array_equal(out.get(), (ha + hb).ravel(order="F"))


_DISK_PROGRAM = """
import json, numpy as np
from specializer.backends import cuda
from specializer.backends.cuda import _program

@cuda.kernel
def from_disk(x: cuda.Array[np.float32], n: np.int32) -> str:
    return '''#include <cooperative_groups.h>
    extern "C" __global__ void from_disk(float *x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        cooperative_groups::this_thread_block().sync();
        if (i < n) x[i] = 2.0f * i; }'''

x = cuda.CuArray.zeros(256)
cuda.launch(from_disk, x, np.int32(256), grid=2, block=128)
ok = bool((x.get() == 2 * np.arange(256, dtype=np.float32)).all())
print(json.dumps({"compiles": _program.nvrtc_compiles(), "ok": ok}))
"""


def test_a_second_process_loads_the_cubin_from_disk_and_runs_it(tmp_path):
    env = {**os.environ, "SPECIALIZER_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _DISK_PROGRAM], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    assert runs == [{"compiles": 1, "ok": True}, {"compiles": 0, "ok": True}]


SHARED_SOURCE = """
__device__ int shared_counter;
extern "C" __global__ void shared_inc(int *x) { atomicAdd(&shared_counter, 1); x[0] = 1; }
extern "C" __global__ void shared_read(int *x) { x[0] = shared_counter; }
"""


@cuda.kernel
def shared_inc(x: A[np.int32]) -> str:
    return SHARED_SOURCE


@cuda.kernel
def shared_read(x: A[np.int32]) -> str:
    return SHARED_SOURCE


def test_kernels_of_one_source_share_one_module_and_its_variables():
    from specializer.backends.cuda import _program

    x = cuda.CuArray.zeros(1, np.int32)
    n = _program.nvrtc_compiles()
    inc = cuda.cufunction(shared_inc, (A[np.int32],))
    read = cuda.cufunction(shared_read, (A[np.int32],))
    assert _program.nvrtc_compiles() <= n + 1
    assert inc.linked.module is read.linked.module
    for _ in range(3):
        inc(x, grid=2, block=32)
    read(x, grid=1, block=1)
    assert x.get()[0] == 3 * 64  # the counter the other kernel incremented


# -- foreign device arrays on the fast path ------------------------------------------------------


def _counting_misses(monkeypatch):
    """The front entries published from now on count their misses (launches they do not
    hold, which take the slow path)."""
    launcher = cuda._launch._launcher
    real, misses = launcher.miss, []

    def miss(f, args, opts, kw):
        misses.append(args)
        return real(f, args, opts, kw)

    monkeypatch.setattr(launcher, "miss", miss)
    return misses


def _foreign_fill():
    @cuda.kernel
    def foreign_fill(x: A[np.generic], v: np.generic, n: np.int64) -> str:
        t = cuda.ctype(x.dtype)
        return f"""extern "C" __global__ void foreign_fill({t} *x, {t} v, long long n) {{
            long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
            if (i < n) x[i] = v; }}"""

    return foreign_fill


def test_a_foreign_array_class_takes_the_fast_path_after_its_first_launch(monkeypatch):
    k = _foreign_fill()
    misses = _counting_misses(monkeypatch)
    own = cuda.CuArray.zeros(N, np.float32)
    run(k, FakeCAI("<f4", shape=(N,), ptr=own.ptr), np.float32(1), N)  # types the class
    for i in range(2, 6):
        run(k, FakeCAI("<f4", shape=(N,), ptr=own.ptr), np.float32(i), N)
        np.testing.assert_array_equal(own.get(), np.full(N, i, np.float32))
    assert misses == []  # every launch after the first hit the front entry
    other = cuda.CuArray.zeros(N, np.float64)  # another element type: the slow path, right
    run(k, FakeCAI("<f8", shape=(N,), ptr=other.ptr), np.float64(7), N)
    np.testing.assert_array_equal(other.get(), np.full(N, 7.0))
    assert len(misses) == 1


def test_cupy_and_torch_arrays_take_the_fast_path(monkeypatch):
    k = _foreign_fill()
    misses = _counting_misses(monkeypatch)
    ran = []
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        x = cp.zeros(N, dtype=cp.float32)
        for i in range(3):
            run(k, x, np.float32(i), N)
        np.testing.assert_array_equal(cp.asnumpy(x), np.full(N, 2, np.float32))
        ran.append("cupy")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        t = torch.zeros(N, device="cuda", dtype=torch.float32)
        for i in range(3):
            run(k, t, np.float32(i), N)
        cuda.synchronize()
        assert (t.cpu().numpy() == 2).all()
        ran.append("torch")
    if not ran:
        pytest.skip("neither CuPy nor PyTorch is installed")
    assert len(misses) <= len(ran) - 1  # at most the switch from one library's class


def test_cuda_core_buffers_views_and_dlpack_arrays_are_launched():
    pytest.importorskip("cuda.core")
    cp = pytest.importorskip("cupy")
    from cuda.core.utils import StridedMemoryView

    k = _foreign_fill()
    x = cp.zeros(N, dtype=cp.float32)
    view = getattr(StridedMemoryView, "from_dlpack", StridedMemoryView)(x, stream_ptr=-1)
    run(k, view, np.float32(3), N)
    np.testing.assert_array_equal(cp.asnumpy(x), np.full(N, 3, np.float32))

    class OnlyDLPack:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, *args, **kwargs):
            return self.a.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    for i in (4, 5):
        run(k, OnlyDLPack(x), np.float32(i), N)
        np.testing.assert_array_equal(cp.asnumpy(x), np.full(N, i, np.float32))

    from cuda.core import Device

    dev = Device()
    dev.set_current()
    buf = dev.allocate(N, stream=dev.default_stream)  # N bytes (newer cuda.core needs stream=)
    u8 = _foreign_fill()
    run(u8, buf, np.uint8(9), N)
    dev.sync()
    host = np.empty(N, np.uint8)
    cp.cuda.runtime.memcpy(host.ctypes.data, int(buf.handle), N, 2)  # device to host
    assert (host == 9).all()
