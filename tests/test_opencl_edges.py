"""The OpenCL back-end at its edges (issue 18): included headers are part of what keys built
code, and the arguments no peer checks are checked on the slow path (SPEC sections 3 and 8).

Real PoCL builds and launches throughout. Every kernel has a name of its own (``@cl.kernel``
adds a method to the kernel of that name in this module).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402
import pyopencl.cltypes as cltypes  # noqa: E402

from specializer import CompileError  # noqa: E402
from specializer.backends import opencl as cl  # noqa: E402

F32 = cl.Array[np.float32]


@pytest.fixture(scope="module")
def queue():
    return cl.default_queue()


def zeros(queue, n=8, dtype=np.float32):
    return cla.zeros(queue, n, dtype)


# -- included headers are part of the key (SPEC 3) -------------------------------------------

# Rodinia's SRAD includes main.h through -I<dir>; its NUMBER_THREADS sizes the work.
SRAD_SOURCE = """#include "main.h"
__kernel void srad_like(__global float *out) {
    size_t i = get_global_id(0);
    if (i < NUMBER_THREADS) out[i] = FILL;
}"""


def write_header(directory, threads, fill):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "main.h"), "w") as f:
        f.write(f"#define NUMBER_THREADS {threads}\n#define FILL {fill}f\n")


def define_srad_like():
    """Run the kernel's def (again): a redefinition raises the world."""

    @cl.kernel
    def srad_like(out: F32) -> str:
        return SRAD_SOURCE

    return srad_like


def test_an_edited_header_is_built_when_the_kernel_is_redefined(queue, tmp_path):
    include = str(tmp_path / "include")
    write_header(include, 256, 1.5)
    out = zeros(queue, 256)
    cl.launch(define_srad_like(), out, global_size=256, options=(f"-I{include}",))
    assert out.get().tolist() == [1.5] * 256

    write_header(include, 128, 2.5)  # the user edits the header, then runs the def again
    out = zeros(queue, 256)
    cl.launch(define_srad_like(), out, global_size=256, options=(f"-I{include}",))
    assert out.get().tolist() == [2.5] * 128 + [0.0] * 128

    # and a separate "-I dir" spelling builds the same header
    write_header(include, 64, 3.5)
    out = zeros(queue, 256)
    cl.launch(define_srad_like(), out, global_size=256, options=("-I", include))
    assert out.get().tolist() == [3.5] * 64 + [0.0] * 192


def test_a_header_edited_without_a_redefinition_keeps_the_code_of_the_world(queue, tmp_path):
    include = str(tmp_path / "include")
    write_header(include, 8, 1.0)
    k = define_srad_like()
    out = zeros(queue, 8)
    cl.launch(k, out, global_size=8, options=(f"-I{include}",))
    write_header(include, 8, 2.0)  # editing a header changes no world (SPEC 3)
    cl.launch(k, out, global_size=8, options=(f"-I{include}",))
    assert out.get().tolist() == [1.0] * 8


def test_an_edited_header_is_built_after_a_bump(queue, tmp_path):
    from specializer import bump, compile_count

    include = str(tmp_path / "include")
    write_header(include, 8, 1.0)
    k = define_srad_like()
    out = zeros(queue, 8)
    cl.launch(k, out, global_size=8, options=(f"-I{include}",))
    write_header(include, 4, 2.0)
    bump()  # the user tells the library of a change it cannot see
    out = zeros(queue, 8)
    cl.launch(k, out, global_size=8, options=(f"-I{include}",))
    assert out.get().tolist() == [2.0] * 4 + [0.0] * 4
    n = compile_count()
    bump()  # nothing changed: the same program, nothing compiled or built
    cl.launch(k, out, global_size=8, options=(f"-I{include}",))
    assert compile_count() == n and out.get().tolist() == [2.0] * 4 + [0.0] * 4


def test_two_projects_with_the_same_relative_include_dir_never_share_code(
    queue, tmp_path, monkeypatch
):
    results = []
    for project, (threads, fill) in (("a", (4, 1.0)), ("b", (6, 2.0)), ("a", (4, 1.0))):
        write_header(str(tmp_path / project / "include"), threads, fill)
        monkeypatch.chdir(tmp_path / project)
        out = zeros(queue, 8)
        cl.launch(define_srad_like(), out, global_size=8, options=("-Iinclude",))
        results.append(out.get().tolist())
    assert results == [
        [1.0] * 4 + [0.0] * 4,
        [2.0] * 6 + [0.0] * 2,
        [1.0] * 4 + [0.0] * 4,
    ]


def test_a_relative_include_dir_is_resolved_against_the_current_directory(
    queue, tmp_path, monkeypatch
):
    # PoCL compiles elsewhere than the current directory: the -I it is given is absolute
    write_header(str(tmp_path / "proj" / "include"), 3, 4.0)
    monkeypatch.chdir(tmp_path / "proj")
    out = zeros(queue, 4)
    cl.launch(define_srad_like(), out, global_size=4, options=("-I", "include"))
    assert out.get().tolist() == [4.0, 4.0, 4.0, 0.0]


SCRIPT = textwrap.dedent(
    """
    import numpy as np, pyopencl.array as cla
    from specializer.backends import opencl as cl

    @cl.kernel
    def srad_like(out: cl.Array[np.float32]) -> str:
        return '''{source}'''

    q = cl.default_queue()
    out = cla.zeros(q, 8, np.float32)
    cl.launch(srad_like, out, global_size=8, options=("-Iinclude",))
    print(out.get().tolist())
    """
)


def run_project(directory):
    script = SCRIPT.format(source=SRAD_SOURCE)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_edited_header_is_built_by_the_next_process_and_projects_stay_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_header(str(a / "include"), 2, 1.0)
    write_header(str(b / "include"), 5, 7.0)
    assert run_project(a) == str([1.0] * 2 + [0.0] * 6)
    assert run_project(b) == str([7.0] * 5 + [0.0] * 3)
    write_header(str(a / "include"), 3, 9.0)
    assert run_project(a) == str([9.0] * 3 + [0.0] * 5)
    assert run_project(b) == str([7.0] * 5 + [0.0] * 3)


def test_a_source_with_a_nul_character_is_a_compile_error(queue):
    @cl.kernel
    def with_nul(x: F32) -> str:
        return "__kernel void with_nul(__global float *x) {\n x[0] = 1.0f;\0 x[1] = 2.0f; }"

    x = zeros(queue, 4)
    with pytest.raises(
        CompileError,
        match=r"the source of OpenCL kernel with_nul\(Array\[np\.float32\]\) has a NUL "
        r"character on its line 2",
    ):
        cl.launch(with_nul, x, global_size=1)
    assert x.get().tolist() == [0, 0, 0, 0]


# -- arguments (SPEC 8) ----------------------------------------------------------------------

POINT = np.dtype([("x", np.float32), ("y", np.int32)])


@cl.kernel
def read_point(out: F32, p: cl.Struct) -> str:
    return """typedef struct { float x; int y; } point;
    __kernel void read_point(__global float *out, point p) { out[0] = p.x; out[1] = p.y; }"""


def test_a_struct_by_value_with_big_endian_fields_is_refused_naming_the_argument(queue):
    out = zeros(queue, 2)
    big = np.array((1.5, 7), dtype=POINT.newbyteorder(">"))[()]
    with pytest.raises(
        ValueError,
        match=r"argument 1 of kernel read_point .*a struct by value of dtype .* non-native "
        r"byte order \(field 'x'\)",
    ):
        cl.launch(read_point, out, big, global_size=1)
    nested = np.dtype([("x", np.float32), ("y", ">i4", (1,))])  # numpy's isnative says True
    assert nested.isnative
    with pytest.raises(ValueError, match=r"non-native byte order \(field 'y'\)"):
        cl.launch(read_point, out, np.zeros((), nested), global_size=1)
    assert out.get().tolist() == [0, 0]
    cl.launch(read_point, out, big.astype(big.dtype.newbyteorder("=")), global_size=1)
    assert out.get().tolist() == [1.5, 7.0]


def test_an_array_of_a_struct_with_a_big_endian_subarray_field_is_refused(queue):
    dtype = np.dtype([("v", ">f4", (2,))])
    with pytest.raises(ValueError, match=r"an array of dtype .* \(field 'v'\)"):
        cl.typeof(cla.zeros(queue, 2, dtype))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"global_size": 2**64}, r"global_size \(18446744073709551616,\) is out of range"),
        ({"global_size": (2**64,)}, r"global_size \(18446744073709551616,\) is out of range"),
        ({"global_size": (4, 2**64)}, r"global_size \(4, 18446744073709551616\) is out of"),
        (
            {"global_size": 4, "global_offset": 2**64},
            r"global_offset \(18446744073709551616,\) is out of range",
        ),
        (
            {"global_size": 2**64, "local_size": 2**64},
            r"global_size \(18446744073709551616,\) is out of range",
        ),
    ],
)
def test_a_work_size_past_size_t_is_a_value_error_naming_it(queue, options, message):
    x = zeros(queue, 4)
    for _ in range(2):  # the slow path, then a launch through the front entry
        with pytest.raises(ValueError, match=message):
            cl.launch(add_one, x, **options)
        cl.launch(add_one, x, global_size=4)
    assert x.get().tolist() == [2, 2, 2, 2]


def test_a_local_size_past_size_t_is_a_value_error_naming_it(queue):
    x = zeros(queue, 4)
    with pytest.raises(ValueError, match=r"local_size \(18446744073709551616,\) is out of"):
        cl.launch(add_one, x, global_size=4, local_size=(2**64,))
    hk = cl.clfunction(add_one, (F32,))
    with pytest.raises(
        ValueError,
        match=r"^kernel add_one\(Array\[np.float32\]\): global_size "
        r"\(18446744073709551616,\) is out of",
    ):
        hk(x, global_size=2**64)
    assert x.get().tolist() == [0, 0, 0, 0]


@cl.kernel
def add_one(x: F32) -> str:
    return "__kernel void add_one(__global float *x) { x[get_global_id(0)] += 1.0f; }"


@cl.kernel
def add_one_buffer(x: cl.Buffer) -> str:
    return "__kernel void add_one_buffer(__global float *x) { x[get_global_id(0)] += 1.0f; }"


@cl.kernel
def copy_first(dst: F32, src: F32) -> str:
    return "__kernel void copy_first(__global float *d, __global float *s) { d[0] = s[0]; }"


def test_an_array_of_another_context_than_the_queues_is_refused_on_the_slow_path(queue):
    other = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    foreign = cla.to_device(other, np.full(4, 5, np.float32))
    dst = zeros(queue, 4)
    with pytest.raises(
        ValueError,
        match=r"argument 1 of kernel copy_first \(counting launch arguments from 0\) is an "
        r"array of <pyopencl\.Context .*, but the queue is in <pyopencl\.Context",
    ):
        cl.launch(copy_first, dst, foreign, global_size=1)
    with pytest.raises(ValueError, match=r"argument 0 of kernel add_one_buffer .* is a Buffer of"):
        cl.launch(add_one_buffer, foreign.base_data, global_size=1, queue=queue)
    assert dst.get().tolist() == [0, 0, 0, 0]
    assert foreign.get().tolist() == [5, 5, 5, 5]
    # the same arrays on their own queues launch
    cl.launch(copy_first, dst, cla.to_device(queue, np.full(4, 6, np.float32)), global_size=1)
    assert dst.get().tolist() == [6, 0, 0, 0]
    cl.launch(add_one, foreign, global_size=4, queue=other)
    assert foreign.get().tolist() == [6, 6, 6, 6]


def test_an_array_of_another_context_is_refused_on_the_fast_path_too(queue):
    # After a launch with arrays of the queue's context, the front entry takes arrays of the
    # same type: a new one must still be checked for its context (it was not: the kernel
    # wrote the other context's buffer).
    other = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    dst = zeros(queue, 4)
    cl.launch(copy_first, dst, cla.to_device(queue, np.full(4, 6, np.float32)), global_size=1)
    assert dst.get().tolist() == [6, 0, 0, 0]
    foreign = cla.to_device(other, np.full(4, 5, np.float32))
    with pytest.raises(
        ValueError,
        match=r"the array for parameter 1 \(s\) of kernel copy_first\(.*\) is an array of "
        r"<pyopencl\.Context .*, but the kernel runs in <pyopencl\.Context",
    ):
        cl.launch(copy_first, dst, foreign, global_size=1)
    assert dst.get().tolist() == [6, 0, 0, 0] and foreign.get().tolist() == [5, 5, 5, 5]


def test_a_captured_array_of_another_context_is_refused_naming_it(queue):
    other = pyopencl.CommandQueue(pyopencl.Context([queue.device]))
    foreign = cla.to_device(other, np.full(4, 5, np.float32))
    k = copy_first.capture(foreign)
    with pytest.raises(ValueError, match=r"^captured value 0 of kernel copy_first is an array"):
        cl.launch(k, zeros(queue, 4), global_size=1)


# -- the kernel's own parameter types (SPEC 8) ----------------------------------------------


@cl.kernel
def int_param(x: cl.Array[np.int32], v: np.number) -> str:
    return "__kernel void int_param(__global int *x, int v) { x[get_global_id(0)] = v; }"


def test_a_float32_for_an_int_parameter_is_a_type_error_before_anything_is_enqueued(queue):
    x = zeros(queue, 4, np.int32)
    message = (
        r"kernel int_param\(Array\[np\.int32\], np\.float32\): parameter 1 \(v\) is declared "
        r"'int' in the kernel source, but the method's signature gives it np\.float32 "
        r"\(OpenCL C float\): the argument is of a floating-point type, the parameter is not"
    )
    with pytest.raises(TypeError, match=message):
        cl.launch(int_param, x, np.float32(1.5), global_size=4)
    with pytest.raises(TypeError, match=message):
        cl.clfunction(int_param, (cl.Array[np.int32], np.float32))
    with pytest.raises(TypeError, match=r"parameter 1 \(v\) is declared 'int'.* differ in size"):
        cl.launch(int_param, x, np.int64(1), global_size=4)
    assert x.get().tolist() == [0, 0, 0, 0]
    cl.launch(int_param, x, np.int32(3), global_size=4)
    cl.launch(int_param, x, np.uint32(4), global_size=2)  # signedness is not refused
    assert x.get().tolist() == [4, 4, 3, 3]


@cl.kernel
def wrong_pointer(x: F32, v: np.float32) -> str:
    return "__kernel void wrong_pointer(float v, __global float *x) { x[0] = v; }"


def test_a_buffer_for_a_value_parameter_and_a_value_for_a_pointer_are_refused(queue):
    with pytest.raises(
        TypeError,
        match=r"parameter 0 \(v\) is declared 'float' .* gives it Array\[np\.float32\]: a "
        r"buffer is a __global pointer",
    ):
        cl.launch(wrong_pointer, zeros(queue, 4), np.float32(1), global_size=1)


@cl.kernel
def local_as_global(x: F32, scratch: cl.LocalMemory) -> str:
    return """__kernel void local_as_global(__global float *x, __global float *s) {
        x[0] = 1.0f; }"""


def test_local_memory_for_a_global_pointer_is_refused(queue):
    with pytest.raises(
        TypeError,
        match=r"parameter 1 \(s\) is declared '__global float\*'.* gives it LocalMemory: "
        r"local memory is a __local pointer",
    ):
        cl.launch(local_as_global, zeros(queue, 4), pyopencl.LocalMemory(16), global_size=1)


@cl.kernel
def many_kinds(
    out: F32,
    buf: cl.Buffer,
    scratch: cl.LocalMemory,
    f4: cl.Struct,
    p: cl.Struct,
    n: np.uint64,
    c: np.int8,
    b: np.bool_,
    d: np.float64,
    u2: cl.Struct,
    img: cl.Image,
    smp: cl.Sampler,
) -> str:
    return """
    typedef struct { float x; int y; } point;
    typedef float real_t;
    __kernel void many_kinds(__global float *out, __constant float *buf, __local float *scratch,
                             float4 f4, point p, ulong n, char c, uchar b, double d,
                             uint2 u2, __read_only image2d_t img, sampler_t smp) {
        scratch[0] = buf[1];
        barrier(CLK_LOCAL_MEM_FENCE);
        float4 px = read_imagef(img, smp, (int2)(0, 0));
        out[0] = f4.x + f4.w; out[1] = p.x + p.y; out[2] = sizeof(n);
        out[3] = (float)n; out[4] = c; out[5] = b; out[6] = (float)d; out[7] = u2.y;
        out[8] = scratch[0]; out[9] = px.x;
    }"""


def test_every_kind_of_parameter_that_matches_is_not_refused(queue):
    out = zeros(queue, 10)
    buf = cla.to_device(queue, np.array([0, 42], np.float32))
    fmt = pyopencl.ImageFormat(pyopencl.channel_order.R, pyopencl.channel_type.FLOAT)
    img = pyopencl.image_from_array(queue.context, np.full((2, 2), 8.0, np.float32), 1)
    assert img.format.channel_order == fmt.channel_order
    smp = pyopencl.Sampler(
        queue.context, False, pyopencl.addressing_mode.CLAMP, pyopencl.filter_mode.NEAREST
    )
    cl.launch(
        many_kinds,
        out,
        buf.base_data,
        pyopencl.LocalMemory(16),
        cltypes.make_float4(1, 2, 3, 4),
        np.array((1.5, 2), POINT)[()],
        np.uint64(9),
        np.int8(-3),
        np.bool_(True),
        np.float64(6.25),
        cltypes.make_uint2(0, 5),
        img,
        smp,
        global_size=1,
    )
    assert out.get().tolist() == [5, 3.5, 8, 9, -3, 1, 6.25, 5, 42, 8]


@cl.kernel
def vector_param(out: F32, v: np.float32) -> str:
    return "__kernel void vector_param(__global float *out, float4 v) { out[0] = v.x; }"


def test_a_scalar_for_a_vector_parameter_of_another_size_is_refused(queue):
    with pytest.raises(
        TypeError,
        match=r"parameter 1 \(v\) is declared 'float4' .* np\.float32 \(OpenCL C float\): "
        r"they differ in size \(4 and 16 bytes\)",
    ):
        cl.launch(vector_param, zeros(queue, 1), np.float32(1), global_size=1)


@cl.kernel
def typedef_param(out: F32, v: np.int32) -> str:
    return """#define REAL float
    typedef REAL real_t;
    __kernel void typedef_param(__global float *out, real_t v) { out[0] = v; }"""


def test_a_typedef_of_a_name_the_source_does_not_define_is_not_checked(queue):
    # only clear mismatches are refused: REAL is a macro, real_t's type is not looked into
    out = zeros(queue, 1)
    cl.launch(typedef_param, out, np.int32(0x3F800000), global_size=1)
    assert out.get().tolist() == [1.0]


def test_a_python_int_is_checked_as_the_type_it_takes(queue):
    x = zeros(queue, 4, np.int32)
    with pytest.raises(
        TypeError,
        match=r"kernel int_param\(Array\[np\.int32\], np\.int64\): parameter 1 \(v\) is "
        r"declared 'int'.*: they differ in size \(8 and 4 bytes\)",
    ):
        cl.launch(int_param, x, 7, global_size=4)  # np.number: a Python int is np.int64
    assert x.get().tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize(
    ("name", "address", "t"),
    [
        ("half", "PRIVATE", np.float16),  # a half parameter needs cl_khr_fp16 to be built
        ("size_t", "PRIVATE", np.uint64),
        ("float3", "PRIVATE", cl.Struct[cltypes.float3]),
        ("unsigned int", "PRIVATE", np.int32),
        ("cfloat_t", "PRIVATE", np.complex64),
        ("float2", "PRIVATE", np.complex64),
        ("struct foo*", "GLOBAL", cl.Buffer),
        ("image3d_t", "GLOBAL", cl.Image),
    ],
)
def test_parameter_kinds_that_match_are_not_refused(name, address, t):
    q = getattr(pyopencl.kernel_arg_address_qualifier, address)
    assert cl._cdecl._param_mismatch(t, *cl._cdecl._param_kind(name, q, 64)) is None


def test_the_parameter_check_runs_once_per_linked_kernel_and_never_on_a_hit(queue, monkeypatch):
    @cl.kernel
    def checked_once(x: F32, v: np.float32) -> str:
        return "__kernel void checked_once(__global float *x, float v) { x[0] += v; }"

    calls = []
    real = cl._program.check_params
    monkeypatch.setattr(cl._program, "check_params", lambda *a: calls.append(a[0]) or real(*a))
    x = zeros(queue, 1)
    hk = cl.clfunction(checked_once, (F32, np.float32))
    for _ in range(3):
        cl.launch(checked_once, x, np.float32(1), global_size=1)
        hk(x, np.float32(1), global_size=1)
    assert x.get().tolist() == [6.0]
    assert len(calls) == 1
