"""What real pyopencl programs pass, run through the OpenCL back-end on PoCL.

Each test does what a public program does (pyopencl's examples and tests, the HandsOnOpenCL
exercises), with a kernel written here in the same shape: parameters declared in plain OpenCL C
(``const int N``, ``__local float *tile``, ``float4 v``, ``image2d_t img``) and methods annotated
with the matching argument types (SPEC section 8). Every result is checked against numpy and
against the same kernel source built and called with plain pyopencl (the bytes must be equal).

Every kernel has a name of its own: ``@cl.kernel`` adds a method to the kernel of that name in
this module.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402
import pyopencl.cltypes as cltypes  # noqa: E402
import pyopencl.tools  # noqa: E402

import specializer  # noqa: E402
from specializer import AmbiguityError, CompileError, compile_count, invoke_in_world  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

MF = pyopencl.mem_flags
_BUILD = pyopencl.Program.build  # plain pyopencl's builds, not counted by the builds fixture


@pytest.fixture(scope="module")
def queue():
    return cl.default_queue()


@pytest.fixture
def fresh_queue():
    """A queue in a new context on the same device: programs are built once per context, so
    a build counted here is this test's own."""
    device = cl.default_queue().device
    return pyopencl.CommandQueue(pyopencl.Context([device]))


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


def to_buffer(ctx, host, flags=MF.READ_WRITE):
    return pyopencl.Buffer(ctx, flags | MF.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(host))


def read(queue, buf, like):
    out = np.empty_like(like)
    pyopencl.enqueue_copy(queue, out, buf)
    return out


def plain(queue, source, name, global_size, local_size, *args, options=(), **kwargs):
    """The same source built and called with plain pyopencl, as the public programs do."""
    program = plain_program(queue, source, options)
    knl = _plain_kernels.get((program, name))
    if knl is None:
        knl = _plain_kernels[program, name] = pyopencl.Kernel(program, name)
    return knl(queue, global_size, local_size, *args, **kwargs)


_plain_programs = {}
_plain_kernels = {}


def plain_program(queue, source, options=()):
    key = (queue.context, source, tuple(options))
    program = _plain_programs.get(key)
    if program is None:
        program = _BUILD(pyopencl.Program(queue.context, source), options=list(options))
        _plain_programs[key] = program
    return program


def same_bytes(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# -- pyopencl examples/transpose.py: a __local tile, raw buffers, unsigned sizes -------------

BLOCK = 16
TRANSPOSE = f"""
#define BLOCK_SIZE {BLOCK}

__kernel __attribute__((reqd_work_group_size(BLOCK_SIZE, BLOCK_SIZE, 1)))
void transpose_tile(__global float *a_t, __global const float *a,
                    unsigned a_width, unsigned a_height, __local float *a_local)
{{
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int gx = get_group_id(0) * BLOCK_SIZE, gy = get_group_id(1) * BLOCK_SIZE;
    /* one tile of a, read along its rows */
    a_local[ly * BLOCK_SIZE + lx] = a[(gy + ly) * a_width + gx + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    /* written along the rows of a_t: the tile's columns */
    a_t[(gx + ly) * a_height + gy + lx] = a_local[lx * BLOCK_SIZE + ly];
}}
"""


@cl.kernel
def transpose_tile(
    a_t: cl.Buffer, a: cl.Buffer, a_width: np.uint32, a_height: np.uint32, a_local: cl.LocalMemory
) -> str:
    return TRANSPOSE


@cl.kernel
def transpose_tile(
    a_t: cl.Array[np.float32],
    a: cl.Array[np.float32],
    a_width: np.uint32,
    a_height: np.uint32,
    a_local: cl.LocalMemory,
) -> str:
    return TRANSPOSE


def test_transpose_with_a_local_tile_as_examples_transpose_does(fresh_queue, builds):
    queue, ctx = fresh_queue, fresh_queue.context
    h, w = 48, 64
    src = np.random.default_rng(1).random((h, w), dtype=np.float32)
    a_buf = to_buffer(ctx, src, MF.READ_ONLY)
    a_t_buf = pyopencl.Buffer(ctx, MF.WRITE_ONLY, size=src.nbytes)
    local = pyopencl.LocalMemory(4 * BLOCK * (BLOCK + 1))
    cl.launch(
        transpose_tile,
        a_t_buf,
        a_buf,
        np.uint32(w),
        np.uint32(h),
        local,
        global_size=(w, h),
        local_size=(BLOCK, BLOCK),
        queue=queue,
    ).wait()
    got = read(queue, a_t_buf, src.T.copy())
    np.testing.assert_array_equal(got, src.T)

    # the same kernel on pyopencl arrays, with Python ints into the unsigned parameters: the
    # second method returns the same source, so the program built above is reused
    a_dev = cla.to_device(queue, src)
    a_t_dev = cla.empty(queue, (w, h), np.float32)
    cl.launch(
        transpose_tile,
        a_t_dev,
        a_dev,
        w,
        h,
        pyopencl.LocalMemory(4 * BLOCK * BLOCK),
        global_size=(w, h),
        local_size=(BLOCK, BLOCK),
        queue=queue,
    )
    same_bytes(a_t_dev.get(), got)
    assert len(builds) == 1
    assert [opts for source, opts, _ in cl._program._programs[ctx] if source == TRANSPOSE] == [()]

    ref_buf = pyopencl.Buffer(ctx, MF.WRITE_ONLY, size=src.nbytes)
    plain(
        queue,
        TRANSPOSE,
        "transpose_tile",
        (w, h),
        (BLOCK, BLOCK),
        ref_buf,
        a_buf,
        np.uint32(w),
        np.uint32(h),
        local,
    )
    same_bytes(got, read(queue, ref_buf, got))


# -- pyopencl examples/median-filter.py: raw buffers, sizes read from int buffers ------------

MEDIAN = """
void sort3(int *a, int *b, int *c)
{
    int t;
    if (*a > *b) { t = *a; *a = *b; *b = t; }
    if (*b > *c) { t = *b; *b = *c; *c = t; }
    if (*a > *b) { t = *a; *a = *b; *b = t; }
}

__kernel void median_filter(__global float *img, __global float *result,
                            __global int *width, __global int *height)
{
    const int w = *width, h = *height;
    const int x = get_global_id(1), y = get_global_id(0);
    const int i = w * y + x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) { result[i] = img[i]; return; }
    int p00 = img[i - w - 1], p01 = img[i - w], p02 = img[i - w + 1];
    int p10 = img[i - 1],     p11 = img[i],     p12 = img[i + 1];
    int p20 = img[i + w - 1], p21 = img[i + w], p22 = img[i + w + 1];
    sort3(&p00, &p01, &p02); sort3(&p10, &p11, &p12); sort3(&p20, &p21, &p22);
    sort3(&p00, &p10, &p20); sort3(&p01, &p11, &p21); sort3(&p02, &p12, &p22);
    sort3(&p02, &p11, &p20);  /* the median of nine: the middle of the anti-diagonal */
    result[i] = p11;
}
"""


@cl.kernel
def median_filter(img: cl.Buffer, result: cl.Buffer, width: cl.Buffer, height: cl.Buffer) -> str:
    return MEDIAN


def test_median_filter_on_raw_buffers_as_examples_median_filter_does(queue):
    ctx = queue.context
    rng = np.random.default_rng(2)
    img = (rng.random((24, 40)) * 255).astype(np.float32)
    img_g = to_buffer(ctx, img, MF.READ_ONLY)
    result_g = pyopencl.Buffer(ctx, MF.WRITE_ONLY, img.nbytes)
    width_g = to_buffer(ctx, np.int32(img.shape[1]), MF.READ_ONLY)
    height_g = to_buffer(ctx, np.int32(img.shape[0]), MF.READ_ONLY)
    cl.launch(median_filter, img_g, result_g, width_g, height_g, global_size=img.shape)
    got = read(queue, result_g, img)

    windows = np.lib.stride_tricks.sliding_window_view(img.astype(np.int32), (3, 3))
    want = img.copy()
    want[1:-1, 1:-1] = np.median(windows.reshape(*windows.shape[:2], 9), axis=-1)
    np.testing.assert_array_equal(got, want)

    ref_g = pyopencl.Buffer(ctx, MF.WRITE_ONLY, img.nbytes)
    plain(queue, MEDIAN, "median_filter", img.shape, None, img_g, ref_g, width_g, height_g)
    same_bytes(got, read(queue, ref_g, img))


# -- pyopencl examples/demo.py: three raw buffers, a shape tuple as the global size ----------

DEMO_SUM = """
__kernel void demo_sum(__global const float *a_g, __global const float *b_g,
                       __global float *res_g)
{
    int gid = get_global_id(0);
    res_g[gid] = a_g[gid] + b_g[gid];
}
"""


@cl.kernel
def demo_sum(a_g: cl.Buffer, b_g: cl.Buffer, res_g: cl.Buffer) -> str:
    return DEMO_SUM


def test_vector_sum_on_raw_buffers_as_examples_demo_does(queue):
    ctx = queue.context
    rng = np.random.default_rng(3)
    a_np = rng.random(50000, dtype=np.float32)
    b_np = rng.random(50000, dtype=np.float32)
    a_g = to_buffer(ctx, a_np, MF.READ_ONLY)
    b_g = to_buffer(ctx, b_np, MF.READ_ONLY)
    res_g = pyopencl.Buffer(ctx, MF.WRITE_ONLY, a_np.nbytes)
    evt = cl.launch(demo_sum, a_g, b_g, res_g, global_size=a_np.shape, local_size=None)
    assert isinstance(evt, pyopencl.Event)
    got = read(queue, res_g, a_np)
    same_bytes(got, a_np + b_np)

    # "use this Kernel object for repeated calls": the HostKernel
    knl = cl.clfunction(demo_sum, (cl.Buffer, cl.Buffer, cl.Buffer))
    for _ in range(3):
        knl(b_g, b_g, res_g, global_size=a_np.shape)
    same_bytes(read(queue, res_g, a_np), b_np + b_np)

    ref_g = pyopencl.Buffer(ctx, MF.WRITE_ONLY, a_np.nbytes)
    plain(queue, DEMO_SUM, "demo_sum", a_np.shape, None, a_g, b_g, ref_g)
    same_bytes(got, read(queue, ref_g, a_np))


# -- pyopencl examples/n-body.py: one program of several kernels, -D options, MyFloat -------

NBODY = """
#define TFP32 0
#define TFP64 1
#if TYPE == TFP32
#define MYFLOAT4 float4
#define MYFLOAT float
#else
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define MYFLOAT4 double4
#define MYFLOAT double
#endif

uint next_state(uint *s)
{
    uint x = *s;
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    return *s = x;
}
#define UNIT(s) ((MYFLOAT)next_state(s) * (MYFLOAT)2.3283064365386963e-10)

__kernel void nbody_splutter(__global MYFLOAT4 *clDataX, MYFLOAT box, uint seed_z, uint seed_w)
{
    int gid = get_global_id(0);
    uint s = seed_z + (uint)gid * seed_w;
    MYFLOAT4 p;
    p.s0 = box * (UNIT(&s) - (MYFLOAT)0.5);
    p.s1 = box * (UNIT(&s) - (MYFLOAT)0.5);
    p.s2 = box * (UNIT(&s) - (MYFLOAT)0.5);
    p.s3 = (MYFLOAT)0;
    clDataX[gid] = p;
}

__kernel void nbody_center_of_mass(__global MYFLOAT4 *clDataX, __global MYFLOAT4 *clCoM,
                                   int Size)
{
    MYFLOAT4 c = clDataX[0];
    for (int i = 1; i < Size; i++) c += clDataX[i];
    clCoM[0] = c / (MYFLOAT)Size;
}

__kernel void nbody_stress(__global MYFLOAT4 *clDataX, __global MYFLOAT4 *clDataV,
                           __global MYFLOAT4 *clCoM, MYFLOAT velocity)
{
    int gid = get_global_id(0);
    MYFLOAT4 r = clDataX[gid] - clCoM[0];
    clDataV[gid] = velocity * (MYFLOAT4)(-r.s1, r.s0, (MYFLOAT)0, (MYFLOAT)0);
}

__kernel void nbody_kick(__global MYFLOAT4 *clDataX, __global MYFLOAT4 *clDataV, MYFLOAT h)
{
    int gid = get_global_id(0);
    MYFLOAT4 x = clDataX[gid], a = (MYFLOAT4)0;
    for (int i = 0; i < get_global_size(0); i++) {
        if (i == gid) continue;
        MYFLOAT4 d = clDataX[i] - x;
        MYFLOAT r = sqrt(d.s0 * d.s0 + d.s1 * d.s1 + d.s2 * d.s2);
        a += d / (r * r * r);
    }
    clDataV[gid] += h * a;
}

__kernel void nbody_drift(__global MYFLOAT4 *clDataX, __global MYFLOAT4 *clDataV, MYFLOAT h)
{
    int gid = get_global_id(0);
    clDataX[gid] += h * clDataV[gid];
}

__kernel void nbody_kinetic(__global MYFLOAT4 *clDataV, __global MYFLOAT *clKinetic)
{
    int gid = get_global_id(0);
    MYFLOAT4 v = clDataV[gid];
    clKinetic[gid] = (MYFLOAT)0.5 * (v.s0 * v.s0 + v.s1 * v.s1 + v.s2 * v.s2);
}
"""

NBODY_KERNELS = ("splutter", "center_of_mass", "stress", "kick", "drift", "kinetic")


def nbody_options(fp64):
    # the shape of n-body.py's BuildOptions, as a tuple
    return ("-cl-mad-enable", "-cl-fast-relaxed-math", "-DTRNG=0", f"-DTYPE={int(fp64)}")


# One method per precision of every kernel, each returning the one source: the build option
# -DTYPE picks float or double, the annotation says which the method takes.
for _float in (np.float64, np.float32):

    @cl.kernel
    def nbody_splutter(
        clDataX: cl.Buffer, box: _float, seed_z: np.uint32, seed_w: np.uint32
    ) -> str:
        return NBODY

    @cl.kernel
    def nbody_center_of_mass(clDataX: cl.Buffer, clCoM: cl.Buffer, Size: np.int32) -> str:
        return NBODY

    @cl.kernel
    def nbody_stress(
        clDataX: cl.Buffer, clDataV: cl.Buffer, clCoM: cl.Buffer, velocity: _float
    ) -> str:
        return NBODY

    @cl.kernel
    def nbody_kick(clDataX: cl.Buffer, clDataV: cl.Buffer, h: _float) -> str:
        return NBODY

    @cl.kernel
    def nbody_drift(clDataX: cl.Buffer, clDataV: cl.Buffer, h: _float) -> str:
        return NBODY

    @cl.kernel
    def nbody_kinetic(clDataV: cl.Buffer, clKinetic: cl.Buffer) -> str:
        return NBODY


def nbody_numpy(n, dtype, box, seed_z, seed_w, velocity, step, steps):
    s = np.uint32(seed_z) + np.arange(n, dtype=np.uint32) * np.uint32(seed_w)
    x = np.zeros((n, 4), dtype)
    for c in range(3):
        s ^= s << np.uint32(13)
        s ^= s >> np.uint32(17)
        s ^= s << np.uint32(5)
        x[:, c] = box * (s.astype(dtype) * dtype(2.3283064365386963e-10) - dtype(0.5))
    com = x.mean(axis=0)
    r = x - com
    v = np.zeros_like(x)
    v[:, 0], v[:, 1] = -velocity * r[:, 1], velocity * r[:, 0]
    for _ in range(steps):
        d = x[None, :, :3] - x[:, None, :3]
        dist = np.sqrt((d**2).sum(-1))
        np.fill_diagonal(dist, np.inf)
        v[:, :3] += step * (d / dist[..., None] ** 3).sum(axis=1)
        x += step * v
    return x, v, 0.5 * (v[:, :3] ** 2).sum(-1), com


def run_nbody(queue, launch, n, dtype, box, velocity, step, steps):
    """n-body.py's sequence of launches, through ``launch(name, global_size, *args)``."""
    ctx = queue.context
    size = np.dtype(dtype).itemsize
    x_g = pyopencl.Buffer(ctx, MF.READ_WRITE, 4 * n * size)
    v_g = pyopencl.Buffer(ctx, MF.READ_WRITE, 4 * n * size)
    com_g = pyopencl.Buffer(ctx, MF.READ_WRITE, 4 * size)
    kin_g = pyopencl.Buffer(ctx, MF.READ_WRITE, n * size)
    launch("splutter", (n, 1), x_g, box, np.uint32(19710211), np.uint32(20081010))
    launch("center_of_mass", (1, 1), x_g, com_g, np.int32(n))
    launch("stress", (n, 1), x_g, v_g, com_g, velocity)
    for _ in range(steps):
        launch("kick", (n, 1), x_g, v_g, step)
        launch("drift", (n, 1), x_g, v_g, step)
    launch("kinetic", (n, 1), v_g, kin_g)
    out = [np.empty((n, 4), dtype), np.empty((n, 4), dtype), np.empty(n, dtype)]
    out.append(np.empty(4, dtype))
    for host, buf in zip(out, (x_g, v_g, kin_g, com_g)):
        pyopencl.enqueue_copy(queue, host, buf)
    return out


def nbody_round(queue, builds, fp64, myfloat, velocity, n=64, steps=3):
    """One run of the n-body program in one precision: ours, numpy's and plain pyopencl's."""
    options = nbody_options(fp64)
    dtype = np.float64 if fp64 else np.float32
    args = (myfloat(8.0), velocity, myfloat(1.0 / 64))
    kernels = {name: globals()[f"nbody_{name}"] for name in NBODY_KERNELS}

    def ours(name, global_size, *a):
        cl.launch(kernels[name], *a, global_size=global_size, queue=queue, options=options)

    before, built = compile_count(), len(builds)
    got = run_nbody(queue, ours, n, dtype, *args, steps)
    assert compile_count() - before == len(NBODY_KERNELS)
    assert len(builds) - built == 1  # one build of the program, for all its kernels
    assert builds[-1] == [*options, "-cl-kernel-arg-info"]  # for the parameter check

    # launched again: nothing compiles, nothing builds
    before, built = compile_count(), len(builds)
    again = run_nbody(queue, ours, n, dtype, *args, steps)
    assert (compile_count(), len(builds)) == (before, built)
    for a, b in zip(got, again):
        same_bytes(a, b)

    want = nbody_numpy(n, dtype, 8.0, 19710211, 20081010, 0.25, 1.0 / 64, steps)
    tol = 1e-9 if fp64 else 2e-3
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

    program = plain_program(queue, NBODY, options)
    plain_kernels = {k: pyopencl.Kernel(program, f"nbody_{k}") for k in NBODY_KERNELS}

    def theirs(name, global_size, *a):
        a = tuple(dtype(v) if isinstance(v, float) else v for v in a)
        plain_kernels[name](queue, global_size, None, *a)

    for a, b in zip(got, run_nbody(queue, theirs, n, dtype, *args, steps)):
        same_bytes(a, b)


def test_nbody_one_program_of_several_kernels_with_build_options(fresh_queue, builds):
    class MyFloat(np.float64):
        pass

    class MyFloat32(np.float32):
        pass

    assert cl.typeof(MyFloat(1.0)) is np.float64
    assert cl.typeof(MyFloat32(1.0)) is np.float32
    # FP64: MyFloat values, and a Python float into a double parameter (the weak default)
    nbody_round(fresh_queue, builds, True, MyFloat, 0.25)
    # FP32 (-DTYPE=0): the program's MyFloat is an np.float32 subclass
    nbody_round(fresh_queue, builds, False, MyFloat32, MyFloat32(0.25))

    # one program per (context, source, options, headers): two option sets, two programs
    table = cl._program._programs[fresh_queue.context]
    assert sorted(opts for source, opts, _ in table if source == NBODY) == sorted(
        [nbody_options(True), nbody_options(False)]
    )


# -- pyopencl examples/image_filters_using_image2d_t.py: images, a sampler, float4 by value,
#    and a __local reduction, four kernels of one program --------------------------------

IMAGES = """
__kernel void img_gray_scale(read_only image2d_t src, write_only image2d_t dest,
                             const sampler_t sampler)
{
    int2 pos = (int2)(get_global_id(0), get_global_id(1));
    uint4 p = read_imageui(src, sampler, pos);
    uint g = (p.x * 299 + p.y * 587 + p.z * 114) / 1000;
    write_imageui(dest, pos, (uint4)(g, g, g, 255));
}

__kernel void img_brightness(read_only image2d_t src, write_only image2d_t dest,
                             const sampler_t sampler, const float scalar,
                             const float4 mean_intensity)
{
    int2 pos = (int2)(get_global_id(0), get_global_id(1));
    float4 p = convert_float4(read_imageui(src, sampler, pos));
    uint4 q = convert_uint4_sat(scalar * (p - mean_intensity) + mean_intensity);
    write_imageui(dest, pos, min(q, (uint4)255));
}

__kernel void img_reduce_sum(__global const int *in, __global int *reduce, __local int *buffer)
{
    uint lid = get_local_id(0), gs = get_local_size(0);
    buffer[lid] = in[get_global_id(0)];
    for (uint s = gs / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) buffer[lid] += buffer[lid + s];
    }
    if (lid == 0) reduce[get_group_id(0)] = buffer[0];
}

__kernel void img_gaussian_blur(read_only image2d_t src, write_only image2d_t dest,
                                const sampler_t sampler, read_only image2d_t gauss_kernel,
                                const short dim)
{
    int2 pos = (int2)(get_global_id(0), get_global_id(1));
    float4 acc = (float4)(0.0f);
    for (int j = 0; j < dim; j++)
        for (int i = 0; i < dim; i++)
            acc += read_imagef(src, sampler, pos + (int2)(i - dim / 2, j - dim / 2))
                   * read_imagef(gauss_kernel, sampler, (int2)(i, j));
    write_imagef(dest, pos, acc);
}
"""


@cl.kernel
def img_gray_scale(src: cl.Image, dest: cl.Image, sampler: cl.Sampler) -> str:
    return IMAGES


@cl.kernel
def img_brightness(
    src: cl.Image,
    dest: cl.Image,
    sampler: cl.Sampler,
    scalar: np.float32,
    mean_intensity: cl.Struct[cltypes.float4],
) -> str:
    return IMAGES


@cl.kernel
def img_reduce_sum(inp: cl.Buffer, reduce: cl.Buffer, buffer: cl.LocalMemory) -> str:
    return IMAGES


@cl.kernel
def img_gaussian_blur(
    src: cl.Image, dest: cl.Image, sampler: cl.Sampler, gauss_kernel: cl.Image, dim: np.int16
) -> str:
    return IMAGES


def read_image(queue, image, like):
    out = np.empty_like(like)
    pyopencl.enqueue_copy(queue, out, image, origin=(0, 0), region=(like.shape[1], like.shape[0]))
    return out


def test_image_filters_with_image2d_t_and_a_sampler(fresh_queue, builds):
    queue, ctx = fresh_queue, fresh_queue.context
    rng = np.random.default_rng(5)
    h, w, n_threads = 24, 32, 64
    image = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    src = pyopencl.image_from_array(ctx, image, 4)
    rgba8 = pyopencl.ImageFormat(pyopencl.channel_order.RGBA, pyopencl.channel_type.UNSIGNED_INT8)
    dest = pyopencl.create_image(ctx, MF.WRITE_ONLY, rgba8, (w, h))
    sampler = pyopencl.Sampler(
        ctx, False, pyopencl.addressing_mode.CLAMP_TO_EDGE, pyopencl.filter_mode.NEAREST
    )
    assert (cl.typeof(src), cl.typeof(sampler)) == (cl.Image, cl.Sampler)

    # gray scale
    cl.launch(img_gray_scale, src, dest, sampler, global_size=(w, h), queue=queue)
    gray = read_image(queue, dest, image)
    p = image.astype(np.uint32)
    g = ((p[..., 0] * 299 + p[..., 1] * 587 + p[..., 2] * 114) // 1000).astype(np.uint8)
    np.testing.assert_array_equal(gray[..., :3], np.stack([g, g, g], -1))
    assert (gray[..., 3] == 255).all()
    ref = pyopencl.create_image(ctx, MF.WRITE_ONLY, rgba8, (w, h))
    plain(queue, IMAGES, "img_gray_scale", (w, h), None, src, ref, sampler)
    same_bytes(gray, read_image(queue, ref, image))

    # the mean of each channel with the __local reduction, as sum_arr does
    sums = []
    for c in range(3):
        channel = image[..., c].ravel().astype(np.int32)
        arr_buf = to_buffer(ctx, channel, MF.READ_ONLY)
        part = np.zeros(channel.size // n_threads, np.int32)
        part_buf = pyopencl.Buffer(ctx, MF.READ_WRITE, part.nbytes)
        local_buf = pyopencl.LocalMemory(4 * n_threads)
        cl.launch(
            img_reduce_sum,
            arr_buf,
            part_buf,
            local_buf,
            global_size=(channel.size,),
            local_size=(n_threads,),
            queue=queue,
        ).wait()
        part = read(queue, part_buf, part)
        np.testing.assert_array_equal(part, channel.reshape(-1, n_threads).sum(axis=1))
        ref_buf = pyopencl.Buffer(ctx, MF.READ_WRITE, part.nbytes)
        plain(
            queue,
            IMAGES,
            "img_reduce_sum",
            (channel.size,),
            (n_threads,),
            arr_buf,
            ref_buf,
            local_buf,
        )
        same_bytes(part, read(queue, ref_buf, part))
        sums.append(part.sum())
    mean = np.array([*(np.array(sums) / (h * w)), 255.0], np.float32)

    # brightness: a Python float into `const float scalar`, a float4 by value
    scale = 1.5
    mean4 = cltypes.make_float4(*mean)
    cl.launch(img_brightness, src, dest, sampler, scale, mean4, global_size=(w, h), queue=queue)
    bright = read_image(queue, dest, image)
    want = np.float32(scale) * (image.astype(np.float32) - mean) + mean
    want = np.clip(np.trunc(want), 0, 255)
    assert np.abs(bright.astype(np.float32) - want).max() <= 1
    plain(
        queue,
        IMAGES,
        "img_brightness",
        (w, h),
        None,
        src,
        ref,
        sampler,
        np.float32(scale),
        mean4,
    )
    same_bytes(bright, read_image(queue, ref, image))

    # gaussian blur of a float image with read_imagef/write_imagef, the weights an image too
    dim = 5
    fimage = rng.random((h, w, 4), dtype=np.float32)
    x = np.linspace(-(dim // 2), dim // 2, dim) / np.sqrt(2)
    weights = np.exp(-(x[:, None] ** 2) - x[None, :] ** 2)
    weights = np.repeat((weights / weights.sum()).astype(np.float32)[..., None], 4, axis=-1)
    fsrc = pyopencl.image_from_array(ctx, fimage, 4)
    gauss = pyopencl.image_from_array(ctx, np.ascontiguousarray(weights), 4)
    rgbaf = pyopencl.ImageFormat(pyopencl.channel_order.RGBA, pyopencl.channel_type.FLOAT)
    fdest = pyopencl.create_image(ctx, MF.WRITE_ONLY, rgbaf, (w, h))
    args = (fsrc, fdest, sampler, gauss)
    cl.launch(img_gaussian_blur, *args, np.short(dim), global_size=(w, h), queue=queue)
    blurred = read_image(queue, fdest, fimage)
    padded = np.pad(fimage, ((dim // 2,) * 2, (dim // 2,) * 2, (0, 0)), mode="edge")
    want = sum(padded[j : j + h, i : i + w] * weights[j, i] for j in range(dim) for i in range(dim))
    np.testing.assert_allclose(blurred, want, rtol=1e-5, atol=1e-6)
    # a Python int into `const short dim`
    cl.launch(img_gaussian_blur, *args, dim, global_size=(w, h), queue=queue)
    same_bytes(read_image(queue, fdest, fimage), blurred)
    fref = pyopencl.create_image(ctx, MF.WRITE_ONLY, rgbaf, (w, h))
    plain(
        queue,
        IMAGES,
        "img_gaussian_blur",
        (w, h),
        None,
        fsrc,
        fref,
        sampler,
        gauss,
        np.short(dim),
    )
    same_bytes(blurred, read_image(queue, fref, fimage))

    # four kernels of one source: one build
    assert len(builds) == 1


# -- pyopencl test/test_wrapper.py: test_vector_args, a float4 by value ----------------------

SET_VEC = """
__kernel void set_vec(float4 x, __global float4 *dest)
{ dest[get_global_id(0)] = x; }
"""


@cl.kernel
def set_vec(x: cl.Struct[cltypes.float4], dest: cl.Buffer) -> str:
    return SET_VEC


@cl.kernel
def set_vec(x: cl.Struct[cltypes.float4], dest: cl.Array[cltypes.float4]) -> str:
    return SET_VEC


def test_float4_by_value_as_test_vector_args_does(queue):
    ctx = queue.context
    x = cltypes.make_float4(1, 2, 3, 4)
    assert isinstance(x, np.ndarray) and x.shape == ()  # a 0-d array of the struct
    assert cl.typeof(x) is cl.Struct[cltypes.float4] is cl.typeof(x[()])
    dest = np.empty(50000, cltypes.float4)
    dest_buf = to_buffer(ctx, dest)
    cl.launch(set_vec, x, dest_buf, global_size=dest.shape)
    got = read(queue, dest_buf, dest)
    assert (got == x).all()

    # an np.void scalar of the same dtype, into a pyopencl array of float4 (Array[float4])
    y = cltypes.make_float4(-1.5, 0.25, 1e30, -0.0)[()]
    assert isinstance(y, np.void)
    dest_dev = cla.zeros(queue, 1000, cltypes.float4)
    assert cl.typeof(dest_dev) is cl.Array[cltypes.float4]
    cl.launch(set_vec, y, dest_dev, global_size=dest_dev.shape)
    assert (dest_dev.get() == y).all()
    # the two forms of one struct type alternate on one signature
    dest_buf2 = to_buffer(ctx, dest[:64])
    for v in (x, y, x, cltypes.make_float4(5, 6, 7, 8)[()]):
        cl.launch(set_vec, v, dest_buf2, global_size=64)
        assert (read(queue, dest_buf2, dest[:64]) == v).all()
    # a struct by value is set on every launch: the same 0-d array, changed in place, is seen
    cl.launch(set_vec, x, dest_buf2, global_size=64)
    x["x"] = 7
    cl.launch(set_vec, x, dest_buf2, global_size=64)
    assert (read(queue, dest_buf2, dest[:64])["x"] == 7).all()

    ref_buf = pyopencl.Buffer(ctx, MF.READ_WRITE, dest.nbytes)
    plain(queue, SET_VEC, "set_vec", dest.shape, None, cltypes.make_float4(1, 2, 3, 4), ref_buf)
    same_bytes(got, read(queue, ref_buf, dest))


# Struct arrays keep their whole dtype: a generic method writes the struct's declaration from
# it, and two layouts are two methods.
PARTICLE = np.dtype([("id", np.int32), ("mass", np.float32), ("pos", np.float32, 2)])
PAIR = np.dtype([("lo", np.int16), ("hi", np.int16)])


def c_struct(dtype, name):
    ctypes = {np.dtype(np.int32): "int", np.dtype(np.float32): "float", np.dtype(np.int16): "short"}
    fields = []
    for field, (ft, _) in dtype.fields.items():
        if ft.subdtype is not None:
            fields.append(f"{ctypes[ft.subdtype[0]]} {field}[{ft.shape[0]}];")
        else:
            fields.append(f"{ctypes[ft]} {field};")
    return f"typedef struct {{ {' '.join(fields)} }} {name};"


@cl.kernel
def struct_fill(dest: cl.Array[np.void], v: cl.Struct) -> str:
    assert dest.dtype == v.dtype
    return f"""{c_struct(dest.dtype, "rec_t")}
__kernel void struct_fill(__global rec_t *dest, rec_t v)
{{ dest[get_global_id(0)] = v; }}"""


@cl.kernel
def struct_touch(x: cl.Array[PARTICLE]) -> str:
    return f"""{c_struct(PARTICLE, "particle_t")}
__kernel void struct_touch(__global particle_t *x)
{{ int i = get_global_id(0); x[i].mass *= 2.0f; x[i].pos[1] = x[i].id; }}"""


@cl.kernel
def struct_touch(x: cl.Array[PAIR]) -> str:
    return f"""{c_struct(PAIR, "pair_t")}
__kernel void struct_touch(__global pair_t *x)
{{ int i = get_global_id(0); short t = x[i].lo; x[i].lo = x[i].hi; x[i].hi = t; }}"""


@pytest.mark.slow
def test_struct_arrays_keep_their_dtype(queue):
    assert cl.typeof(cla.zeros(queue, 2, PARTICLE)) is cl.Array[PARTICLE]
    assert cl.Array[PARTICLE] is not cl.Array[PAIR]
    assert issubclass(cl.Array[PARTICLE], cl.Array[np.void])

    v = np.zeros((), PARTICLE)
    v["id"], v["mass"], v["pos"] = 3, 0.5, (1.0, -2.0)
    x = cla.zeros(queue, 16, PARTICLE)
    cl.launch(struct_fill, x, v, global_size=x.size)
    assert (x.get() == v).all()

    pairs = np.zeros(8, PAIR)
    pairs["lo"], pairs["hi"] = np.arange(8), -np.arange(8)
    p_dev = cla.to_device(queue, pairs)
    cl.launch(struct_fill, p_dev, pairs[5], global_size=8)  # np.void of PAIR
    assert (p_dev.get() == pairs[5]).all()

    # both layouts' methods stay: each array dispatches to its own
    host = np.zeros(8, PARTICLE)
    host["id"], host["mass"] = np.arange(8), np.arange(8) / 4
    xs = cla.to_device(queue, host)
    cl.launch(struct_touch, xs, global_size=8)
    p_dev = cla.to_device(queue, pairs)
    cl.launch(struct_touch, p_dev, global_size=8)
    got, swapped = xs.get(), p_dev.get()
    np.testing.assert_array_equal(got["mass"], host["mass"] * 2)
    np.testing.assert_array_equal(got["pos"][:, 1], host["id"])
    np.testing.assert_array_equal(swapped["lo"], pairs["hi"])
    np.testing.assert_array_equal(swapped["hi"], pairs["lo"])

    ref = cla.to_device(queue, host)
    source = cl.clfunction(struct_touch, (cl.Array[PARTICLE],)).linked.source
    plain(queue, source, "struct_touch", (8,), None, ref.data)
    same_bytes(got, ref.get())


# -- a __local reduction, with the local size (and the LocalMemory) changing ----------------

LOCAL_SUM = """
__kernel void local_sum(__global const float *x, __global float *partial,
                        __local float *scratch, const int n)
{
    const int lid = get_local_id(0), gid = get_global_id(0);
    scratch[lid] = gid < n ? x[gid] : 0.0f;
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) scratch[lid] += scratch[lid + s];
    }
    if (lid == 0) partial[get_group_id(0)] = scratch[0];
}
"""


@cl.kernel
def local_sum(
    x: cl.Array[np.float32], partial: cl.Array[np.float32], scratch: cl.LocalMemory, n: np.int32
) -> str:
    return LOCAL_SUM


def test_local_memory_reduction(queue):
    n = 1000
    host = np.random.default_rng(6).random(n, dtype=np.float32)
    x = cla.to_device(queue, host)
    for group in (32, 64, 32):
        groups = -(-n // group)
        partial = cla.zeros(queue, groups, np.float32)
        scratch = pyopencl.LocalMemory(4 * group)
        cl.launch(local_sum, x, partial, scratch, n, global_size=groups * group, local_size=group)
        got = partial.get()
        padded = np.zeros(groups * group, np.float32)
        padded[:n] = host
        np.testing.assert_allclose(got, padded.reshape(groups, group).sum(axis=1), rtol=1e-5)
        ref = cla.zeros(queue, groups, np.float32)
        plain(
            queue,
            LOCAL_SUM,
            "local_sum",
            (groups * group,),
            (group,),
            x.data,
            ref.data,
            scratch,
            np.int32(n),
        )
        same_bytes(got, ref.get())


# -- pyopencl test/test_wrapper.py: test_global_offset and wait_for ------------------------

OFFSET_MULT = """
__kernel void offset_mult(__global float *a)
{ a[get_global_id(0)] *= 2; }
"""


@cl.kernel
def offset_mult(a: cl.Buffer) -> str:
    return OFFSET_MULT


def test_global_offset_as_test_global_offset_does(queue):
    ctx = queue.context
    n, step = 50, 10
    a = np.random.default_rng(42).random(n, dtype=np.float32)
    a_buf = to_buffer(ctx, a)
    for ofs in range(0, n, step):
        cl.launch(offset_mult, a_buf, global_size=(step,), global_offset=(ofs,))
    got = read(queue, a_buf, a)
    same_bytes(got, 2 * a)

    # and on a HostKernel call, an int offset
    knl = cl.clfunction(offset_mult, (cl.Buffer,))
    for ofs in range(0, n, step):
        knl(a_buf, global_size=step, global_offset=ofs)
    got = read(queue, a_buf, a)
    same_bytes(got, 4 * a)

    ref_buf = to_buffer(ctx, a)
    for _ in range(2):
        for ofs in range(0, n, step):
            plain(queue, OFFSET_MULT, "offset_mult", (step,), None, ref_buf, global_offset=(ofs,))
    same_bytes(got, read(queue, ref_buf, a))


def test_wait_for_a_user_event(queue):
    ctx = queue.context
    a = np.arange(64, dtype=np.float32)
    a_buf = to_buffer(ctx, a)
    knl = cl.clfunction(offset_mult, (cl.Buffer,))
    for launch in (
        lambda wait_for: cl.launch(offset_mult, a_buf, global_size=a.shape, wait_for=wait_for),
        lambda wait_for: knl(a_buf, global_size=a.shape, wait_for=wait_for),
    ):
        gate = pyopencl.UserEvent(ctx)
        evt = launch([gate])
        time.sleep(0.05)
        assert evt.command_execution_status != pyopencl.command_execution_status.COMPLETE
        gate.set_status(pyopencl.command_execution_status.COMPLETE)
        evt.wait()
        # and an event of a launch as the next one's wait_for
        evt2 = launch([evt])
        evt2.wait()
    same_bytes(read(queue, a_buf, a), 16 * a)


def test_one_event_as_wait_for_is_refused_naming_wait_for_and_the_kernel(queue):
    ctx = queue.context
    a = np.arange(64, dtype=np.float32)
    a_buf = to_buffer(ctx, a)
    knl = cl.clfunction(offset_mult, (cl.Buffer,))
    evt = cl.launch(offset_mult, a_buf, global_size=a.shape, queue=queue)
    for launch in (
        lambda wait_for: cl.launch(
            offset_mult, a_buf, global_size=a.shape, wait_for=wait_for, queue=queue
        ),
        lambda wait_for: knl(a_buf, global_size=a.shape, wait_for=wait_for),
    ):
        with pytest.raises(
            TypeError, match=r"wait_for= of kernel offset_mult.*\(for one event, pass \[event\]\)"
        ):
            launch(evt)
        with pytest.raises(TypeError, match=r"wait_for= of kernel offset_mult.*got 3"):
            launch(3)
        launch([evt]).wait()  # the pool's kernel object was given back: the next launch runs
    same_bytes(read(queue, a_buf, a), 8 * a)


# -- HandsOnOpenCL Exercise 8: blocked matrix multiply with two __local tiles -------------

MMUL = """
#define blksz 16

__kernel void mmul_block(const unsigned int N,
                         __global const float *restrict A,
                         __global const float *restrict B,
                         __global float *restrict C,
                         __local float *restrict Awrk,
                         __local float *restrict Bwrk)
{
    const int col = get_global_id(0), row = get_global_id(1);
    const int lc = get_local_id(0), lr = get_local_id(1);
    float acc = 0.0f;
    for (int kb = 0; kb < N / blksz; kb++) {
        Awrk[lr * blksz + lc] = A[row * N + kb * blksz + lc];
        Bwrk[lr * blksz + lc] = B[(kb * blksz + lr) * N + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < blksz; k++)
            acc += Awrk[lr * blksz + k] * Bwrk[k * blksz + lc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    C[row * N + col] = acc;
}
"""


@cl.kernel
def mmul_block(
    N: np.uint32,
    A: cl.Buffer,
    B: cl.Buffer,
    C: cl.Buffer,
    Awrk: cl.LocalMemory,
    Bwrk: cl.LocalMemory,
) -> str:
    return MMUL


@pytest.mark.slow
def test_blocked_matrix_multiply_with_local_tiles(queue):
    ctx = queue.context
    N, blocksize = 64, 16
    rng = np.random.default_rng(8)
    h_A = rng.random((N, N), dtype=np.float32)
    h_B = rng.random((N, N), dtype=np.float32)
    d_a = to_buffer(ctx, h_A, MF.READ_ONLY)
    d_b = to_buffer(ctx, h_B, MF.READ_ONLY)
    d_c = pyopencl.Buffer(ctx, MF.WRITE_ONLY, h_A.nbytes)
    A_block = pyopencl.LocalMemory(4 * blocksize * blocksize)
    B_block = pyopencl.LocalMemory(4 * blocksize * blocksize)
    # the exercise's set_scalar_arg_dtypes, then mmul(queue, (N, N), (bs, bs), N, ...): here the
    # HostKernel, looked up with int for the Python int N
    mmul = cl.clfunction(
        mmul_block,
        (int, cl.Buffer, cl.Buffer, cl.Buffer, cl.LocalMemory, cl.LocalMemory),
    )
    mmul(N, d_a, d_b, d_c, A_block, B_block, global_size=(N, N), local_size=(blocksize,) * 2)
    got = read(queue, d_c, h_A)
    np.testing.assert_allclose(got, h_A @ h_B, rtol=1e-5)
    # launch with a Python int too: the same kernel
    d_c2 = pyopencl.Buffer(ctx, MF.WRITE_ONLY, h_A.nbytes)
    cl.launch(
        mmul_block,
        N,
        d_a,
        d_b,
        d_c2,
        A_block,
        B_block,
        global_size=(N, N),
        local_size=(blocksize, blocksize),
    )
    same_bytes(got, read(queue, d_c2, h_A))

    ref = pyopencl.Buffer(ctx, MF.WRITE_ONLY, h_A.nbytes)
    plain(
        queue,
        MMUL,
        "mmul_block",
        (N, N),
        (blocksize, blocksize),
        np.uint32(N),
        d_a,
        d_b,
        ref,
        A_block,
        B_block,
    )
    same_bytes(got, read(queue, ref, h_A))


# -- HandsOnOpenCL Exercise 9: pi, partial sums in __local memory ---------------------------

PI = """
void reduce(__local float *, __global float *);

__kernel void pi_sums(const int niters, const float step_size,
                      __local float *local_sums, __global float *partial_sums)
{
    int num_wrk_items = get_local_size(0);
    int local_id = get_local_id(0);
    int group_id = get_group_id(0);
    float x, accum = 0.0f;
    int istart = (group_id * num_wrk_items + local_id) * niters;
    for (int i = istart; i < istart + niters; i++) {
        x = (i + 0.5f) * step_size;
        accum += 4.0f / (1.0f + x * x);
    }
    local_sums[local_id] = accum;
    barrier(CLK_LOCAL_MEM_FENCE);
    reduce(local_sums, partial_sums);
}

void reduce(__local float *local_sums, __global float *partial_sums)
{
    if (get_local_id(0) == 0) {
        float sum = 0.0f;
        for (int i = 0; i < get_local_size(0); i++) sum += local_sums[i];
        partial_sums[get_group_id(0)] = sum;
    }
}
"""


@cl.kernel
def pi_sums(
    niters: np.int32, step_size: np.float32, local_sums: cl.LocalMemory, partial_sums: cl.Buffer
) -> str:
    return PI


def test_pi_with_partial_sums_in_local_memory(queue):
    ctx = queue.context
    niters, work_group_size, nwork_groups = 256, 64, 32
    nsteps = work_group_size * niters * nwork_groups
    step_size = 1.0 / nsteps  # a Python float into `const float step_size`
    h_psum = np.empty(nwork_groups, np.float32)
    d_partial_sums = pyopencl.Buffer(ctx, MF.WRITE_ONLY, h_psum.nbytes)
    localmem = pyopencl.LocalMemory(np.dtype(np.float32).itemsize * work_group_size)
    cl.launch(
        pi_sums,
        niters,
        step_size,
        localmem,
        d_partial_sums,
        global_size=(nwork_groups * work_group_size,),
        local_size=(work_group_size,),
    )
    got = read(queue, d_partial_sums, h_psum)
    x = (np.arange(nsteps) + 0.5) * np.float32(step_size)
    want = (4.0 / (1.0 + x * x)).reshape(nwork_groups, -1).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert abs(got.sum() * step_size - np.pi) < 1e-4

    ref = pyopencl.Buffer(ctx, MF.WRITE_ONLY, h_psum.nbytes)
    plain(
        queue,
        PI,
        "pi_sums",
        (nwork_groups * work_group_size,),
        (work_group_size,),
        np.int32(niters),
        np.float32(step_size),
        localmem,
        ref,
    )
    same_bytes(got, read(queue, ref, h_psum))


# -- HandsOnOpenCL Exercise 13: game of life, a block with a halo in __local memory ----------

LIFE = """
#define ALIVE 1
#define DEAD  0

__kernel void life_step(__global const char *tick, __global char *tock,
                        const unsigned int nx, const unsigned int ny, __local char *block)
{
    const int w = nx, h = ny;
    const int x = get_global_id(0), y = get_global_id(1);
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int bw = get_local_size(0) + 2, bh = get_local_size(1) + 2;
    const int x0 = get_group_id(0) * get_local_size(0) - 1;
    const int y0 = get_group_id(1) * get_local_size(1) - 1;
    for (int j = ly; j < bh; j += get_local_size(1))
        for (int i = lx; i < bw; i += get_local_size(0))
            block[j * bw + i] = tick[((y0 + j + h) % h) * w + (x0 + i + w) % w];
    barrier(CLK_LOCAL_MEM_FENCE);
    int neighbours = 0;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++)
            if ((dx || dy) && block[(ly + 1 + dy) * bw + lx + 1 + dx] == ALIVE) neighbours++;
    const char me = block[(ly + 1) * bw + lx + 1];
    tock[y * w + x] = (neighbours == 3 || (me == ALIVE && neighbours == 2)) ? ALIVE : DEAD;
}
"""


@cl.kernel
def life_step(
    tick: cl.Buffer, tock: cl.Buffer, nx: np.uint32, ny: np.uint32, block: cl.LocalMemory
) -> str:
    return LIFE


def life_numpy(board):
    n = sum(
        np.roll(np.roll(board, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dx or dy
    )
    return ((n == 3) | ((board == 1) & (n == 2))).astype(np.int8)


def test_game_of_life_with_a_local_halo(queue):
    ctx = queue.context
    nx, ny, bx, by, iterations = 32, 24, 8, 8, 12
    board = np.zeros((ny, nx), np.int8)
    board[1, 2] = board[2, 3] = board[3, 1:4] = 1  # a glider, which crosses a block edge
    board[10, 20:23] = 1  # a blinker
    board[ny - 1, [nx - 1, 0, 1]] = 1  # a blinker across the wrap
    localmem = pyopencl.LocalMemory(np.dtype(np.int8).itemsize * (bx + 2) * (by + 2))

    def run(step):
        tick, tock = to_buffer(ctx, board), to_buffer(ctx, np.zeros_like(board))
        for _ in range(iterations):
            step(tick, tock)
            tick, tock = tock, tick  # the buffers swap places each step
        return read(queue, tick, board)

    got = run(
        lambda tick, tock: cl.launch(
            life_step, tick, tock, nx, ny, localmem, global_size=(nx, ny), local_size=(bx, by)
        )
    )
    want = board
    for _ in range(iterations):
        want = life_numpy(want)
    same_bytes(got, want)

    program = plain_program(queue, LIFE)
    knl = pyopencl.Kernel(program, "life_step")
    knl.set_scalar_arg_dtypes([None, None, np.uint32, np.uint32, None])
    ref = run(lambda tick, tock: knl(queue, (nx, ny), (bx, by), tick, tock, nx, ny, localmem))
    same_bytes(got, ref)


# -- numpy scalar subclasses and F-contiguous arrays ----------------------------------------

AXPY64 = """
__kernel void axpy64(__global double *y, __global const double *x, const double a)
{ int i = get_global_id(0); y[i] += a * x[i]; }
"""


@cl.kernel
def axpy64(y: cl.Array[np.float64], x: cl.Array[np.float64], a: np.float64) -> str:
    return AXPY64


def test_numpy_scalar_subclasses_and_f_contiguous_arrays(queue):
    class MyFloat(np.float64):
        pass

    host_x = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    host_y = np.asfortranarray(np.ones((3, 4)))
    x, y = cla.to_device(queue, host_x), cla.to_device(queue, host_y)
    assert x.flags.f_contiguous and not x.flags.c_contiguous
    cl.launch(axpy64, y, x, MyFloat(0.5), global_size=x.size)
    got = y.get()
    np.testing.assert_array_equal(got, host_y + 0.5 * host_x)
    cl.launch(axpy64, y, x, 0.5, global_size=x.size)  # a Python float, a double parameter
    np.testing.assert_array_equal(y.get(), host_y + host_x)

    ref = cla.to_device(queue, host_y)
    plain(queue, AXPY64, "axpy64", (x.size,), None, ref.data, x.data, MyFloat(0.5))
    same_bytes(got, ref.get())


# -- weak Python scalars: overflow, ambiguity, a later np.int64 method ----------------------

WEAK_STORE = """
__kernel void weak_store(__global long *out, const int v, const uint u, const float f)
{ out[get_global_id(0)] = v + (long)u + (long)f; }
"""


@cl.kernel
def weak_store(out: cl.Buffer, v: np.int32, u: np.uint32, f: np.float32) -> str:
    return WEAK_STORE


@pytest.mark.parametrize(
    "args, where",
    [
        ((2**31, 0, 0.0), r"2147483648 does not fit np\.int32 .*parameter 1 \(v\)"),
        ((-(2**31) - 1, 0, 0.0), r"does not fit np\.int32 .*parameter 1 \(v\)"),
        ((0, -1, 0.0), r"-1 does not fit np\.uint32 .*parameter 2 \(u\)"),
        ((0, 2**32, 0.0), r"4294967296 does not fit np\.uint32 .*parameter 2 \(u\)"),
        ((0, 0, 1e300), r"does not fit np\.float32.*parameter 3 \(f\)"),
    ],
)
def test_weak_scalar_out_of_range_names_kernel_parameter_and_type(queue, args, where):
    out = np.zeros(4, np.int64)
    out_buf = to_buffer(queue.context, out)
    cl.launch(weak_store, out_buf, 1, 2, 3.0, global_size=4).wait()  # warm: the hit path
    out_buf = to_buffer(queue.context, out)
    for _ in range(2):  # and the same again: nothing of the failed launch was stored
        with pytest.raises(OverflowError, match=where + r" of kernel weak_store\("):
            cl.launch(weak_store, out_buf, *args, global_size=4)
    queue.finish()
    same_bytes(read(queue, out_buf, out), out)  # nothing was enqueued
    cl.launch(weak_store, out_buf, 2**31 - 1, 2**32 - 1, -2.5, global_size=4)
    want = np.full(4, 2**31 - 1 + 2**32 - 1 - 2, np.int64)
    same_bytes(read(queue, out_buf, out), want)
    ref = to_buffer(queue.context, out)
    plain(
        queue,
        WEAK_STORE,
        "weak_store",
        (4,),
        None,
        ref,
        np.int32(2**31 - 1),
        np.uint32(2**32 - 1),
        np.float32(-2.5),
    )
    same_bytes(read(queue, ref, out), want)


def test_weak_scalar_out_of_range_on_a_host_kernel_call(queue):
    out_buf = to_buffer(queue.context, np.zeros(4, np.int64))
    knl = cl.clfunction(weak_store, (cl.Buffer, int, int, float))
    assert knl.linked.tt == (cl.Buffer, np.int32, np.uint32, np.float32)
    with pytest.raises(OverflowError, match=r"parameter 1 \(v\) of kernel weak_store"):
        knl(out_buf, 2**40, 0, 0.0, global_size=4)
    knl(out_buf, 1, 1, 1.0, global_size=4)
    same_bytes(read(queue, out_buf, np.zeros(4, np.int64)), np.full(4, 3, np.int64))


@cl.kernel
def weak_pick(out: cl.Array[np.int32], v: np.int32) -> str:
    return """__kernel void weak_pick(__global int *out, const int v)
              { out[get_global_id(0)] = v; }"""


@cl.kernel
def weak_pick(out: cl.Array[np.int32], v: np.uint8) -> str:
    return """__kernel void weak_pick(__global int *out, const uchar v)
              { out[get_global_id(0)] = 1000 + v; }"""


def test_weak_int_between_int32_and_uint8_methods_is_ambiguous(queue):
    out = cla.zeros(queue, 4, np.int32)
    with pytest.raises(AmbiguityError, match=r"weak_pick.*np\.int32.*np\.uint8"):
        cl.launch(weak_pick, out, 5, global_size=4)
    # numpy scalars are exact: each takes its own method
    cl.launch(weak_pick, out, np.int32(5), global_size=4)
    assert (out.get() == 5).all()
    cl.launch(weak_pick, out, np.uint8(5), global_size=4)
    assert (out.get() == 1005).all()
    with pytest.raises(AmbiguityError):
        cl.clfunction(weak_pick, (cl.Array[np.int32], int))


@cl.kernel
def weak_takeover(out: cl.Array[np.int64], v: np.int32) -> str:
    return """__kernel void weak_takeover(__global long *out, const int v)
              { out[get_global_id(0)] = v; }"""


def define_weak_takeover_int64():
    def weak_takeover(out: cl.Array[np.int64], v: np.int64) -> str:
        return """__kernel void weak_takeover(__global long *out, const long v)
                  { out[get_global_id(0)] = v + 1; }"""

    weak_takeover.__qualname__ = "weak_takeover"  # a method of the module-level kernel
    return cl.kernel(weak_takeover)


def test_a_later_int64_method_takes_python_ints_in_the_new_world_only(queue):
    out = cla.zeros(queue, 4, np.int64)
    cl.launch(weak_takeover, out, 7, global_size=4)
    assert (out.get() == 7).all()
    with pytest.raises(OverflowError, match=r"parameter 1 \(v\) of kernel weak_takeover"):
        cl.launch(weak_takeover, out, 2**40, global_size=4)
    old = specializer.latest()
    assert define_weak_takeover_int64() is weak_takeover
    cl.launch(weak_takeover, out, 2**40, global_size=4)
    assert (out.get() == 2**40 + 1).all()
    cl.launch(weak_takeover, out, 7, global_size=4)
    assert (out.get() == 8).all()
    assert cl.clfunction(weak_takeover, (cl.Array[np.int64], int)).linked.tt[1] is np.int64
    # the older world keeps the np.int32 method for a Python int
    invoke_in_world(old, cl.launch, weak_takeover, out, 7, global_size=4)
    assert (out.get() == 7).all()
    old_knl = invoke_in_world(old, cl.clfunction, weak_takeover, (cl.Array[np.int64], int))
    assert old_knl.linked.tt[1] is np.int32
    # an explicit np.int32 takes the np.int32 method in either world
    cl.launch(weak_takeover, out, np.int32(9), global_size=4)
    assert (out.get() == 9).all()


@cl.kernel
def weak_flag(out: cl.Array[np.int32], flag: np.bool_, scale: np.int8) -> str:
    return """__kernel void weak_flag(__global int *out, const uchar flag, const char scale)
              { out[get_global_id(0)] = flag ? scale : -1; }"""


def test_weak_bool_and_small_ints_take_the_declared_types(queue):
    out = cla.zeros(queue, 4, np.int32)
    for flag, scale, want in ((True, -7, -7), (False, 100, -1), (np.bool_(True), 127, 127)):
        cl.launch(weak_flag, out, flag, scale, global_size=4)
        assert (out.get() == want).all()
    knl = cl.clfunction(weak_flag, (cl.Array[np.int32], bool, int))
    assert knl.linked.tt == (cl.Array[np.int32], np.bool_, np.int8)
    with pytest.raises(OverflowError, match=r"128 does not fit np\.int8 .*parameter 2 \(scale\)"):
        cl.launch(weak_flag, out, True, 128, global_size=4)
    ref = cla.zeros(queue, 4, np.int32)
    source = knl.linked.source
    plain(queue, source, "weak_flag", (4,), None, ref.data, np.uint8(1), np.int8(127))
    same_bytes(out.get(), ref.get())


def test_numpy_scalars_stay_exact(queue):
    out = cla.zeros(queue, 4, np.int64)
    with pytest.raises(specializer.MethodError, match=r"weak_store\(.*np\.int64"):
        cl.launch(weak_store, out.data, np.int64(1), 0, 0.0, global_size=4)


# -- argument errors that name the kernel and the parameter ---------------------------------


@cl.kernel
def order_probe(x: cl.Array[np.float32], n: np.int32) -> str:
    return """__kernel void order_probe(__global float *x, const int n)
              { int i = get_global_id(0); if (i < n) x[i] += 1.0f; }"""


def test_non_native_byte_order_array_is_refused_naming_the_argument(queue):
    swapped = np.arange(8, dtype=np.float32).astype(np.dtype(np.float32).newbyteorder())
    x = cla.to_device(queue, swapped)
    with pytest.raises(ValueError, match=r"argument 0.*non-native byte order"):
        cl.launch(order_probe, x, 8, global_size=8)
    assert x.get().tobytes() == swapped.tobytes()
    ok = cla.to_device(queue, swapped.astype(swapped.dtype.newbyteorder("=")))
    cl.launch(order_probe, ok, 8, global_size=8)
    np.testing.assert_array_equal(ok.get(), np.arange(8) + 1)


def test_non_contiguous_and_offset_arrays_are_refused_naming_the_parameter(queue):
    x = cla.zeros(queue, 16, np.float32)
    cl.launch(order_probe, x, 16, global_size=16)  # warm: the hit path checks them too
    with pytest.raises(ValueError, match=r"parameter 0 \(x\) of kernel order_probe.*contiguous"):
        cl.launch(order_probe, x[::2], 8, global_size=8)
    with pytest.raises(ValueError, match=r"parameter 0 \(x\) of kernel order_probe.*view"):
        cl.launch(order_probe, x[4:], 12, global_size=12)
    queue.finish()
    assert (x.get() == 1).all()


@cl.kernel
def double_param(x: cl.Array[np.float32], a: np.float32) -> str:
    return """__kernel void double_param(__global float *x, const double a)
              { x[get_global_id(0)] = a; }"""


def test_float_annotation_against_a_double_parameter_names_kernel_and_parameter(queue):
    x = cla.zeros(queue, 4, np.float32)
    # found from the kernel's argument info when it is linked, before anything is set
    want = (
        r"kernel double_param\(Array\[np\.float32\], np\.float32\): parameter 1 \(a\) is "
        r"declared 'double' in the kernel source, but the method's signature gives it "
        r"np\.float32 \(OpenCL C float\): they differ in size \(4 and 8 bytes\)"
    )
    for value in (np.float32(2), 2.0, np.float32(3)):
        with pytest.raises(TypeError, match=want):
            cl.launch(double_param, x, value, global_size=4)
    with pytest.raises(TypeError, match=want):
        cl.clfunction(double_param, (cl.Array[np.float32], np.float32))
    queue.finish()
    assert (x.get() == 0).all()


@cl.kernel
def too_few(x: cl.Array[np.float32]) -> str:
    return """__kernel void too_few(__global float *x, const int n)
              { x[get_global_id(0)] = n; }"""


@cl.kernel
def too_many(x: cl.Array[np.float32], n: np.int32, v: np.float32) -> str:
    return """__kernel void too_many(__global float *x, const int n)
              { x[get_global_id(0)] = n; }"""


def test_kernel_parameter_count_differing_from_the_signature(queue):
    x = cla.zeros(queue, 4, np.float32)
    with pytest.raises(CompileError, match=r"too_few takes 2 parameter\(s\).*too_few\(.*has 1"):
        cl.launch(too_few, x, global_size=4)
    with pytest.raises(CompileError, match=r"too_many takes 2 parameter\(s\).*has 3"):
        cl.launch(too_many, x, 1, np.float32(1), global_size=4)
    with pytest.raises(CompileError, match=r"takes 2 parameter\(s\).*has 1"):
        cl.clfunction(too_few, (cl.Array[np.float32],))


def test_values_of_other_kinds_are_refused_naming_the_type(queue):
    x = cla.zeros(queue, 4, np.float32)
    with pytest.raises(TypeError, match=r"numpy\.ndarray.*pyopencl\.Buffer.*LocalMemory"):
        cl.launch(order_probe, np.zeros(4, np.float32), 4, global_size=4)
    with pytest.raises(TypeError, match=r"builtins\.str"):
        cl.launch(order_probe, x, "4", global_size=4)
    with pytest.raises(TypeError, match=r"kernel argument type, not a value"):
        cl.LocalMemory(16)


def test_a_pooled_buffer_is_a_raw_buffer(queue):
    pool = pyopencl.tools.MemoryPool(pyopencl.tools.ImmediateAllocator(queue))
    a = np.arange(50, dtype=np.float32)
    pooled = pool.allocate(a.nbytes)
    pyopencl.enqueue_copy(queue, pooled, a)
    assert cl.typeof(pooled) is cl.Buffer
    cl.launch(offset_mult, pooled, global_size=a.shape)
    same_bytes(read(queue, pooled, a), 2 * a)


# -- work sizes, checked before anything is enqueued ----------------------------------------


@cl.kernel
def size_probe(x: cl.Buffer) -> str:
    return """__kernel void size_probe(__global int *x)
              { x[get_global_id(0)] = 1; }"""


BAD_SIZES = [
    ({"global_size": -1}, ValueError, r"global_size must be positive"),
    ({"global_size": 0}, ValueError, r"global_size must be positive"),
    ({"global_size": (8, 0)}, ValueError, r"global_size must be positive"),
    ({"global_size": (8, -2)}, ValueError, r"global_size must be positive"),
    ({"global_size": 8.0}, TypeError, r"global_size is an int or a tuple"),
    ({"global_size": (8.0,)}, TypeError, r"global_size is an int or a tuple"),
    ({"global_size": "8"}, TypeError, r"global_size is an int or a tuple"),
    ({"global_size": ("8",)}, TypeError, r"global_size is an int or a tuple"),
    ({"global_size": True}, TypeError, r"global_size is an int or a tuple"),
    ({"global_size": None}, TypeError, r"global_size"),
    ({"global_size": ()}, ValueError, r"global_size has 0 dimensions"),
    ({"global_size": (2, 2, 2, 1)}, ValueError, r"global_size has 4 dimensions"),
    ({"global_size": 8, "local_size": -1}, ValueError, r"local_size must be positive"),
    ({"global_size": 8, "local_size": 0}, ValueError, r"local_size must be positive"),
    ({"global_size": (8,), "local_size": (0,)}, ValueError, r"local_size must be positive"),
    ({"global_size": 8, "local_size": 2.0}, TypeError, r"local_size is an int or a tuple"),
    ({"global_size": (8,), "local_size": (2.0,)}, TypeError, r"local_size is an int or a tuple"),
    ({"global_size": 8, "local_size": "2"}, TypeError, r"local_size is an int or a tuple"),
    ({"global_size": 8, "local_size": (1, 1, 1, 1)}, ValueError, r"local_size has 4 dimensions"),
    ({"global_size": 8, "local_size": 16}, ValueError, r"local_size \(16,\) is larger"),
    ({"global_size": (4, 2), "local_size": (2, 4)}, ValueError, r"local_size \(2, 4\) is larger"),
    ({"global_size": (4, 2), "local_size": (2,)}, ValueError, r"local_size \(2,\) has 1 dim"),
    ({"global_size": 8, "global_offset": -1}, ValueError, r"global_offset must be non-negative"),
    ({"global_size": 8, "global_offset": 1.0}, TypeError, r"global_offset is an int or a tuple"),
    ({"global_size": (4, 2), "global_offset": (1,)}, ValueError, r"global_offset \(1,\) has 1"),
]


@pytest.mark.parametrize(
    "sizes, error, message",
    BAD_SIZES,
    ids=[",".join(f"{k}={v!r}" for k, v in sizes.items()) for sizes, _, _ in BAD_SIZES],
)
def test_bad_work_sizes_name_the_parameter_before_anything_is_enqueued(
    queue, sizes, error, message
):
    zeros = np.zeros(16, np.int32)
    x = to_buffer(queue.context, zeros)
    knl = cl.clfunction(size_probe, (cl.Buffer,))
    launches = (
        lambda: cl.launch(size_probe, x, **sizes),  # the hit path (the lookup is held)
        lambda: knl(x, **sizes),  # a HostKernel call
        lambda: cl.launch(size_probe, x, queue=queue, options=("-DPROBE",), **sizes),  # a miss
    )
    for launch in launches:
        with pytest.raises(error, match=message):
            launch()
    queue.finish()
    same_bytes(read(queue, x, zeros), zeros)


def test_good_work_sizes_of_every_form(queue):
    zeros = np.zeros(16, np.int32)
    for sizes in (
        {"global_size": 16},
        {"global_size": np.int64(16)},
        {"global_size": (16,), "local_size": (4,)},
        {"global_size": [16], "local_size": 8},
        {"global_size": (16, 1, 1), "local_size": (16, 1, 1)},
        {"global_size": 8, "global_offset": 8},
    ):
        x = to_buffer(queue.context, zeros)
        cl.launch(size_probe, x, **sizes).wait()
        got = read(queue, x, zeros)
        start = sizes.get("global_offset", 0)
        assert (got[start:] == 1).all() and (got[:start] == 0).all(), sizes


# -- launch options ----------------------------------------------------------------------


def test_unknown_launch_keyword_lists_launch_and_compiler_options(queue):
    x = to_buffer(queue.context, np.zeros(4, np.int32))
    with pytest.raises(TypeError, match=r"unknown keyword.*global_offset, wait_for.*options="):
        cl.launch(size_probe, x, global_size=4, globl_offset=1)


QUOTED = "__kernel void quoted_options(__global int *x) { x[get_global_id(0)] = VAL + W; }"


@cl.kernel
def quoted_options(x: cl.Buffer) -> str:
    return QUOTED


def test_a_str_of_options_is_split_by_shell_rules_as_pyopencl_splits_it(fresh_queue, builds):
    options = "-DVAL='1+2' -DW=1"  # VAL is 1+2, not the character constant '1+2'
    x = to_buffer(fresh_queue.context, np.zeros(4, np.int32))
    cl.launch(quoted_options, x, global_size=4, queue=fresh_queue, options=options)
    got = read(fresh_queue, x, np.zeros(4, np.int32))
    y = to_buffer(fresh_queue.context, np.zeros(4, np.int32))
    _BUILD(pyopencl.Program(fresh_queue.context, QUOTED), options=options).quoted_options(
        fresh_queue, (4,), None, y
    )
    same_bytes(got, read(fresh_queue, y, got))
    assert got.tolist() == [4, 4, 4, 4]
    assert builds == [["-DVAL=1+2", "-DW=1", "-cl-kernel-arg-info"]]
    # the key is the split options: the same options as a tuple are the same program
    cl.launch(quoted_options, x, global_size=4, queue=fresh_queue, options=("-DVAL=1+2", "-DW=1"))
    assert len(builds) == 1
    with pytest.raises(ValueError, match=r"options=\"-DVAL='1\+2 -DW=1\" do not split"):
        cl.launch(quoted_options, x, global_size=4, queue=fresh_queue, options="-DVAL='1+2 -DW=1")


def test_unknown_keyword_on_a_host_kernel_call_lists_the_launch_options(queue):
    x = to_buffer(queue.context, np.zeros(4, np.int32))
    knl = cl.clfunction(size_probe, (cl.Buffer,))
    with pytest.raises(TypeError, match=r"global_size.*local_size.*global_offset.*wait_for"):
        knl(x, global_size=4, globl_offset=1)
