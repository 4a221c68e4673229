"""Build options from a method (SPEC section 8, "Programs"): a method returns
``KernelSource(source, options=(...))`` on both back-ends; options built from its types join
the program's key, and the launch's options are added after them. A str of options is split
by shell rules, as pyopencl splits it, for the key and the build alike.

OpenCL runs on PoCL's CPU device; CUDA compiles with NVRTC (no GPU needed).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import specializer
from specializer import compile_count

try:
    import pyopencl
    import pyopencl.array as cla

    from specializer.backends import opencl as cl
except ImportError:  # pragma: no cover - pyopencl is a test dependency
    pyopencl = None

try:
    from specializer.backends import cuda
    from specializer.backends.cuda import _program
except ImportError:  # pragma: no cover - the cuda extra is a test dependency
    cuda = None

needs_opencl = pytest.mark.skipif(pyopencl is None, reason="pyopencl is not installed")
needs_nvrtc = pytest.mark.skipif(cuda is None, reason="cuda-python is not installed")


# -- OpenCL ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_queue():
    """A queue in a new context on the default device: programs are built once per context,
    so a build counted here is this test's own."""
    device = cl.default_queue().device
    return pyopencl.CommandQueue(pyopencl.Context([device]))


@pytest.fixture
def builds(monkeypatch):
    """The options of each ``pyopencl.Program.build`` call (the back-end builds through it)."""
    calls = []
    real = pyopencl.Program.build

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("options", args[0] if args else None))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pyopencl.Program, "build", counting)
    return calls


def plain(queue, source, name, n, *args, options):
    """The same source built and launched with plain pyopencl."""
    program = pyopencl.Program(queue.context, source)
    pyopencl.Program.build(program, options=options)  # counted by ``builds``: callers drop it
    getattr(program, name)(queue, (n,), None, *args)


AXPY = """
__kernel void axpy_opts(__global T *y, __global const T *x, T a) {
    size_t i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}
"""


if pyopencl is not None:

    @cl.kernel
    def axpy_opts(y: cl.Array[np.floating], x: cl.Array[np.floating], a: np.floating) -> str:
        # one source for every element type: the type is a build option from the method
        return cl.KernelSource(AXPY, options=(f"-DT={cl.ctype(x.dtype)}",))


@needs_opencl
def test_options_from_a_generic_method_build_one_program_per_element_type(fresh_queue, builds):
    q = fresh_queue
    rng = np.random.default_rng(7)
    results = {}
    for dtype in (np.float32, np.float64):
        x_h = rng.standard_normal(257).astype(dtype)
        y_h = rng.standard_normal(257).astype(dtype)
        x, y = cla.to_device(q, x_h), cla.to_device(q, y_h)
        cl.launch(axpy_opts, y, x, dtype(2.5), global_size=x.size, queue=q)
        results[dtype] = y.get()
        # plain pyopencl, the same source and the same option: the same bytes
        ours = len(builds)
        y2 = cla.to_device(q, y_h)
        plain(
            q,
            AXPY,
            "axpy_opts",
            x.size,
            y2.data,
            x.data,
            dtype(2.5),
            options=[f"-DT={cl.ctype(dtype)}"],
        )
        del builds[ours:]
        assert results[dtype].tobytes() == y2.get().tobytes()
        np.testing.assert_allclose(results[dtype], 2.5 * x_h + y_h, rtol=1e-5, atol=1e-6)
    # the same text, two option sets: two programs, each with the method's option
    assert builds == [["-DT=float", "-cl-kernel-arg-info"], ["-DT=double", "-cl-kernel-arg-info"]]

    # the same types again: nothing compiles, nothing builds
    before = compile_count()
    for dtype in (np.float32, np.float64):
        x = cla.zeros(q, 8, dtype)
        cl.launch(axpy_opts, x, x, dtype(1), global_size=8, queue=q)
        cl.clfunction(axpy_opts, (cl.Array[dtype], cl.Array[dtype], dtype), queue=q)
    assert compile_count() == before and len(builds) == 2


AB = "__kernel void opts_ab(__global int *x) { x[get_global_id(0)] = A + B; }"


if pyopencl is not None:

    @cl.kernel
    def opts_ab(x: cl.Array[np.int32]) -> str:
        return cl.KernelSource(AB, options=("-DA=1",))


@needs_opencl
def test_launch_options_are_added_after_the_methods(fresh_queue, builds):
    q = fresh_queue
    x = cla.zeros(q, 4, np.int32)
    cl.launch(opts_ab, x, global_size=4, queue=q, options=("-DB=2",))
    assert x.get().tolist() == [3] * 4  # A from the method, B from the launch
    assert builds == [["-DA=1", "-DB=2", "-cl-kernel-arg-info"]]
    # other launch options: another program; the same ones again: none
    cl.launch(opts_ab, x, global_size=4, queue=q, options="-DB=5")
    assert x.get().tolist() == [6] * 4
    hk = cl.clfunction(opts_ab, (cl.Array[np.int32],), queue=q, options=("-DB=2",))
    hk(x, global_size=4)
    assert x.get().tolist() == [3] * 4
    assert len(builds) == 2


QUOTED = """
__kernel void opts_quoted_str(__global int *x) { x[get_global_id(0)] = VAL + W; }
__kernel void opts_quoted_tuple(__global int *x) { x[get_global_id(0)] = VAL * W; }
"""


if pyopencl is not None:

    @cl.kernel
    def opts_quoted_str(x: cl.Array[np.int32]) -> str:
        return cl.KernelSource(QUOTED, options="-DVAL='1+2' -DW=2")  # VAL is 1+2

    @cl.kernel
    def opts_quoted_tuple(x: cl.Array[np.int32]) -> str:
        return cl.KernelSource(QUOTED, options=("-DVAL=1+2", "-DW=2"))


@needs_opencl
def test_a_str_of_method_options_is_split_by_shell_rules(fresh_queue, builds):
    q = fresh_queue
    assert cl.KernelSource(QUOTED, options="-DVAL='1+2' -DW=2").options == ("-DVAL=1+2", "-DW=2")
    x = cla.zeros(q, 4, np.int32)
    cl.launch(opts_quoted_str, x, global_size=4, queue=q)
    assert x.get().tolist() == [5] * 4  # 1+2 + 2: not a character constant
    # the key is the split options: the same options as a tuple are the same program
    cl.launch(opts_quoted_tuple, x, global_size=4, queue=q)
    assert x.get().tolist() == [5] * 4  # 1+2*2: VAL is pasted as text, as pyopencl pastes it
    assert builds == [["-DVAL=1+2", "-DW=2", "-cl-kernel-arg-info"]]
    y = cla.zeros(q, 4, np.int32)
    plain(q, QUOTED, "opts_quoted_str", 4, y.data, options="-DVAL='1+2' -DW=2")
    assert y.get().tolist() == [5] * 4
    with pytest.raises(ValueError, match=r"KernelSource options=\"-DVAL='1\+2\" do not split"):
        cl.KernelSource(QUOTED, options="-DVAL='1+2")


@needs_opencl
def test_a_non_str_option_is_a_type_error_naming_the_method(fresh_queue):
    q = fresh_queue

    @cl.kernel
    def opts_bad(x: cl.Array[np.integer]) -> str:
        src = "__kernel void opts_bad(__global int *x) { x[0] = A; }"
        return cl.KernelSource(src, options=("-DA=1", 3))

    x = cla.zeros(q, 1, np.int32)
    before = compile_count()
    with pytest.raises(TypeError) as e:
        cl.launch(opts_bad, x, global_size=1, queue=q)
    msg = str(e.value)
    assert "opts_bad(Array[np.integer])" in msg and "opts_bad(Array[np.int32])" in msg
    assert "3 (int) is not a build option" in msg
    assert compile_count() == before  # nothing cached: a fixed definition works at once

    @cl.kernel
    def opts_bad(x: cl.Array[np.integer]) -> str:
        src = "__kernel void opts_bad(__global int *x) { x[0] = A; }"
        return cl.KernelSource(src, options=("-DA=1", "-DB=3"))

    cl.launch(opts_bad, x, global_size=1, queue=q)
    assert x.get().tolist() == [1]
    with pytest.raises(TypeError, match="KernelSource options= are OpenCL build options"):
        cl.KernelSource("x", options=3)
    with pytest.raises(TypeError, match="KernelSource takes the source as a str"):
        cl.KernelSource(b"x")


if pyopencl is not None:

    @cl.device
    def opts_scale() -> str:
        # a device function's options apply to the whole program, before the kernel's
        return cl.KernelSource("int scaled(int v) { return v * SCALE; }", options=("-DSCALE=3",))

    @cl.kernel(callees=[opts_scale])
    def opts_with_callee(x: cl.Array[np.int32]) -> str:
        src = (
            "__kernel void opts_with_callee(__global int *x) { x[get_global_id(0)] = scaled(OFF); }"
        )
        return cl.KernelSource(src, options="-DOFF=2")


@needs_opencl
def test_a_callees_options_join_the_kernels(fresh_queue, builds):
    q = fresh_queue
    x = cla.zeros(q, 2, np.int32)
    cl.launch(opts_with_callee, x, global_size=2, queue=q, options=["-DUNUSED=1"])
    assert x.get().tolist() == [6, 6]
    assert builds == [["-DSCALE=3", "-DOFF=2", "-DUNUSED=1", "-cl-kernel-arg-info"]]
    assert "KernelSource" in cl.__all__
    s = cl.KernelSource("k", options="-DA=1")
    assert isinstance(s, str) and s == "k"
    assert repr(s) == "KernelSource('k', options=('-DA=1',))"


# -- CUDA (NVRTC, no GPU) ----------------------------------------------------------------------

ARCH = "sm_90"
CU = """
extern "C" __global__ void opts_cu(ELEM *x) { x[threadIdx.x] *= (ELEM)(A + B); }
"""


@pytest.fixture
def nvrtc_cache(tmp_path, monkeypatch):
    """An empty disk cache of this test's own, and the count of NVRTC compilations."""
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    start = _program.nvrtc_compiles()
    return lambda: _program.nvrtc_compiles() - start


@needs_nvrtc
def test_cuda_options_from_the_method_reach_nvrtc_and_every_key(nvrtc_cache):
    def define(a):
        @cuda.kernel
        def opts_cu(x: cuda.Array[np.floating]) -> str:
            return cuda.KernelSource(CU, options=(f"-DELEM={cuda.ctype(x.dtype)}", f"-DA={a}"))

        return opts_cu

    def ptx(k, dtype, **kw):
        return cuda.code_ptx(k, (cuda.Array[dtype],), arch=ARCH, **kw)

    k = define(1)
    p32 = ptx(k, np.float32, options=("-DB=1000",))
    # ELEM and A from the method, B from the launch: a float multiply by 1001.0f
    assert re.search(r"\bmul(\.\w+)*\.f32\b.*0f447A4000", p32, re.I)
    p64 = ptx(k, np.float64, options=("-DB=1000",))
    assert re.search(r"\bmul(\.\w+)*\.f64\b.*0d408F480000000000", p64, re.I)
    assert nvrtc_cache() == 2  # one compilation per option set

    # another kernel (the factory's next product) returning the same source and options: its
    # code is compiled, and the NVRTC program is shared (in this process, then from the disk)
    k = define(1)
    assert ptx(k, np.float32, options=("-DB=1000",)) == p32
    _program._programs.clear()
    k = define(1)
    assert ptx(k, np.float64, options=("-DB=1000",)) == p64
    assert nvrtc_cache() == 2
    # another option from the method: another key, in memory and on disk
    k = define(2)
    assert re.search(r"0f447A8000", ptx(k, np.float32, options=("-DB=1000",)), re.I)  # 1002.0f
    assert nvrtc_cache() == 3


@needs_nvrtc
def test_cuda_method_options_come_before_the_compiler_kwargs(nvrtc_cache):
    seen = []

    @cuda.kernel
    def opts_cu(x: cuda.Array[np.float32]) -> str:
        return cuda.KernelSource(CU, options="-DELEM=float '-DA=(2+3)'")

    def record(job, artifact):
        seen.append(artifact.options)

    with specializer.device_code(record):
        cuda.code_ptx(opts_cu, (cuda.Array[np.float32],), arch=ARCH, options="-DB=4", fastmath=True)
    (options,) = seen
    assert options[:5] == (
        f"--gpu-architecture={ARCH}",
        "-DELEM=float",
        "-DA=(2+3)",
        "--use_fast_math",
        "-DB=4",
    )
    s = cuda.KernelSource("x", entry="k", options="-DA=1 -DB")
    assert s.options == ("-DA=1", "-DB")
    assert repr(s) == "KernelSource('x', entry='k', options=('-DA=1', '-DB'))"


@needs_nvrtc
def test_cuda_a_non_str_option_is_a_type_error_naming_the_method(nvrtc_cache):
    @cuda.kernel
    def opts_cu_bad(x: cuda.Array[np.floating]) -> str:
        return cuda.KernelSource(CU, options=("-DELEM=float", None))

    with pytest.raises(TypeError) as e:
        cuda.code_ptx(opts_cu_bad, (cuda.Array[np.float32],), arch=ARCH)
    msg = str(e.value)
    assert "opts_cu_bad(Array[np.floating])" in msg and "opts_cu_bad(Array[np.float32])" in msg
    assert "None (NoneType) is not an NVRTC option" in msg
    assert nvrtc_cache() == 0
    with pytest.raises(TypeError, match="KernelSource options= are NVRTC option strings"):
        cuda.KernelSource("x", options=b"-DA=1")
