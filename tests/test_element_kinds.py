"""Element kinds of the kernel's own parameters (SPEC 8): an array's elements against what a
pointer parameter points at, a vector's parts by kind and count, typedef and struct names the
program defines. Checked on the slow path, before anything is enqueued.

OpenCL: real PoCL builds with kernel argument info. CUDA: NVRTC only (no GPU), where the
mangled name of a C++ entry declares its pointers' element types.
"""

import numpy as np
import pytest

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402
import pyopencl.cltypes as cltypes  # noqa: E402

from specializer.backends import opencl as cl  # noqa: E402

I32 = cl.Array[np.int32]
F32 = cl.Array[np.float32]


@pytest.fixture(scope="module")
def queue():
    return cl.default_queue()


def refused(launch, kernel, param, declared, given, why):
    """Run ``launch``, which must be refused naming the kernel, the parameter and both types."""
    with pytest.raises(TypeError) as e:
        launch()
    message = str(e.value)
    assert message.startswith(f"kernel {kernel}(")
    assert f"parameter {param} is declared {declared!r} in the kernel source" in message
    assert f"the method's signature gives it {given}" in message
    assert why in message
    assert message.endswith("nothing was launched")


# -- arrays against pointer parameters -----------------------------------------------------------


@cl.kernel
def int_array_float_pointer(x: I32) -> str:
    return """__kernel void int_array_float_pointer(__global float *x) {
        x[get_global_id(0)] = 1.0f; }"""


def test_an_int32_array_for_a_float_pointer_is_refused_and_nothing_is_written(queue):
    x = cla.zeros(queue, 4, np.int32)
    refused(
        lambda: cl.launch(int_array_float_pointer, x, global_size=4),
        "int_array_float_pointer",
        "0 (x)",
        "__global float*",
        "Array[np.int32]",
        "the array's elements are int, the parameter's are float",
    )
    assert x.get().tolist() == [0, 0, 0, 0]


@cl.kernel
def float4_array_int4_pointer(x: cl.Array[cltypes.float4]) -> str:
    return """__kernel void float4_array_int4_pointer(__global int4 *x) {
        x[get_global_id(0)] = (int4)(7); }"""


def test_a_float4_array_for_an_int4_pointer_is_refused(queue):
    x = cla.zeros(queue, 2, cltypes.float4)
    refused(
        lambda: cl.launch(float4_array_int4_pointer, x, global_size=2),
        "float4_array_int4_pointer",
        "0 (x)",
        "__global int4*",
        f"Array[{cltypes.float4}]",
        "the array's elements are float4, the parameter's are int4",
    )
    assert x.get().tolist() == [(0.0,) * 4] * 2


@cl.kernel
def float2_array_double2_pointer(x: cl.Array[cltypes.float2]) -> str:
    return """__kernel void float2_array_double2_pointer(__global const double2 *restrict x) {
        }"""


def test_a_float2_array_for_a_const_restrict_double2_pointer_is_refused(queue):
    x = cla.zeros(queue, 2, cltypes.float2)
    refused(
        lambda: cl.launch(float2_array_double2_pointer, x, global_size=1),
        "float2_array_double2_pointer",
        "0 (x)",
        "__global double2*",
        f"Array[{cltypes.float2}]",
        "the array's elements are float2, the parameter's are double2",
    )


@cl.kernel
def macro_typedef_pointer(x: I32) -> str:
    return """#define REAL float
    typedef REAL real_t;
    __kernel void macro_typedef_pointer(__global real_t *x) { x[0] = 1.0f; }"""


@cl.kernel
def conditional_typedef_pointer(x: I32) -> str:
    return """#ifdef USE_DOUBLE
    typedef double real;
    #else
    typedef float real;
    #endif
    __kernel void conditional_typedef_pointer(__global real *x) { x[0] = 1.0f; }"""


@cl.kernel
def typedef_pointer(x: I32) -> str:
    return """typedef float real;  // a typedef of a scalar, read from the source
    __kernel void typedef_pointer(__global real *x) { x[get_global_id(0)] = 1.0f; }"""


def test_a_typedef_pointer_is_checked_where_the_source_defines_it_plainly(queue):
    x = cla.zeros(queue, 4, np.int32)
    refused(
        lambda: cl.launch(typedef_pointer, x, global_size=4),
        "typedef_pointer",
        "0 (x)",
        "__global real*",
        "Array[np.int32]",
        "the array's elements are int, the parameter's are float",
    )
    assert x.get().tolist() == [0, 0, 0, 0]
    # documented: a name made by a macro, or defined twice differently under #if, is taken
    # as it is (OpenCL C cannot be read without its preprocessor)
    for k in (macro_typedef_pointer, conditional_typedef_pointer):
        x = cla.zeros(queue, 1, np.int32)
        cl.launch(k, x, global_size=1)
        assert x.get().tolist() == [0x3F800000]


@cl.kernel
def typedef_vector_pointer(x: cl.Array[cltypes.int4]) -> str:
    return """typedef float4 vec_t;
    typedef vec_t pos_t;
    __kernel void typedef_vector_pointer(__global pos_t *x) { x[0] = (float4)(1.0f); }"""


def test_a_typedef_of_a_typedef_of_a_vector_is_checked(queue):
    x = cla.zeros(queue, 1, cltypes.int4)
    refused(
        lambda: cl.launch(typedef_vector_pointer, x, global_size=1),
        "typedef_vector_pointer",
        "0 (x)",
        "__global pos_t*",
        f"Array[{cltypes.int4}]",
        "the array's elements are int4, the parameter's are float4",
    )
    assert x.get().tolist() == [(0, 0, 0, 0)]


POINT = np.dtype([("x", np.float32), ("y", np.int32)])
POINT_SOURCE = "typedef struct { float x; int y; } point;\n"


@cl.kernel
def struct_pointer(x: F32) -> str:
    return (
        POINT_SOURCE
        + """__kernel void struct_pointer(__global point *p) {
        p[get_global_id(0)].y = 3; }"""
    )


def test_a_float_array_for_a_struct_pointer_of_mixed_fields_is_refused(queue):
    x = cla.zeros(queue, 4, np.float32)
    refused(
        lambda: cl.launch(struct_pointer, x, global_size=2),
        "struct_pointer",
        "0 (p)",
        "__global point*",
        "Array[np.float32]",
        "the array's elements are float, the parameter's are a struct of mixed fields (8 bytes)",
    )
    assert x.get().tolist() == [0, 0, 0, 0]


PADDED = np.dtype([("c", np.int8), ("d", np.float64)])  # 9 bytes; C lays it out in 16


@cl.kernel
def padded_struct_pointer(x: cl.Array[PADDED]) -> str:
    return """struct padded { char c; double d; };
    __kernel void padded_struct_pointer(__global struct padded *p) { p[0].c = 1; }"""


def test_an_unaligned_struct_dtype_for_a_struct_pointer_is_refused_by_size(queue):
    x = cla.zeros(queue, 2, PADDED)
    refused(
        lambda: cl.launch(padded_struct_pointer, x, global_size=1),
        "padded_struct_pointer",
        "0 (p)",
        "__global struct padded*",
        f"Array[{PADDED}]",
        "the array's elements are a struct of mixed fields (9 bytes), the parameter's are "
        "a struct of mixed fields (16 bytes)",
    )
    assert x.get()["c"].tolist() == [0, 0]


# -- vectors and structs by value ---------------------------------------------------------------


@cl.kernel
def by_value_float2(out: F32, v: np.generic) -> str:
    return """__kernel void by_value_float2(__global float *out, float2 v) {
        out[0] = v.x; out[1] = v.y; }"""


@pytest.mark.parametrize(
    ("value", "given", "why"),
    [
        (
            np.float64(1),
            "np.float64 (OpenCL C double)",
            "the argument holds double, the parameter float2",
        ),
        (np.int64(1), "np.int64 (OpenCL C long)", "the argument holds long, the parameter float2"),
    ],
)
def test_a_scalar_of_the_vectors_size_for_a_float2_is_refused(queue, value, given, why):
    out = cla.zeros(queue, 2, np.float32)
    refused(
        lambda: cl.launch(by_value_float2, out, value, global_size=1),
        "by_value_float2",
        "1 (v)",
        "float2",
        given,
        why,
    )
    assert out.get().tolist() == [0, 0]


@cl.kernel
def by_value_vectors(out: F32, a: cl.Struct, b: cl.Struct) -> str:
    return """__kernel void by_value_vectors(__global float *out, int4 a, double2 b) {
        out[0] = a.x; out[1] = b.y; }"""


def test_a_float4_for_an_int4_or_a_double2_by_value_is_refused(queue):
    out = cla.zeros(queue, 2, np.float32)
    f4, i4 = cltypes.make_float4(1, 2, 3, 4), cltypes.make_int4(1, 2, 3, 4)
    d2 = cltypes.make_double2(1, 2)
    refused(
        lambda: cl.launch(by_value_vectors, out, f4, d2, global_size=1),
        "by_value_vectors",
        "1 (a)",
        "int4",
        f"Struct[{cltypes.float4}]",
        "the argument holds float4, the parameter int4",
    )
    refused(
        lambda: cl.launch(by_value_vectors, out, i4, f4, global_size=1),
        "by_value_vectors",
        "2 (b)",
        "double2",
        f"Struct[{cltypes.float4}]",
        "the argument holds float4, the parameter double2",
    )
    assert out.get().tolist() == [0, 0]
    cl.launch(by_value_vectors, out, i4, d2, global_size=1)
    assert out.get().tolist() == [1, 2]


BY_VALUE_STRUCT = (
    POINT_SOURCE
    + """__kernel void by_value_struct(__global float *out,
    point p) { out[0] = p.x; out[1] = p.y; }"""
)


@cl.kernel
def by_value_struct(out: F32, p: np.generic) -> str:
    return BY_VALUE_STRUCT


@cl.kernel
def by_value_struct(out: F32, p: cl.Struct) -> str:  # a second method
    return BY_VALUE_STRUCT


def test_a_scalar_of_a_structs_size_for_a_struct_by_value_is_refused(queue):
    out = cla.zeros(queue, 2, np.float32)
    refused(
        lambda: cl.launch(by_value_struct, out, np.int64(1), global_size=1),
        "by_value_struct",
        "1 (p)",
        "point",
        "np.int64 (OpenCL C long)",
        "the argument holds long, the parameter a struct of mixed fields (8 bytes)",
    )
    assert out.get().tolist() == [0, 0]
    cl.launch(by_value_struct, out, np.array((1.5, 2), POINT)[()], global_size=1)
    assert out.get().tolist() == [1.5, 2]


# -- what is not known is not refused; real programs launch -----------------------------------


PAIR = np.dtype([("a", np.float32), ("b", np.float32)])
ALIGNED = np.dtype([("c", np.int8), ("d", np.float64)], align=True)


@cl.kernel
def real_program(
    out: F32,
    flat: F32,
    u: cl.Array[np.uint32],
    s: I32,
    sizes: cl.Array[np.uint64],
    bytes_: cl.Array[np.uint8],
    chars: cl.Array[np.int8],
    halves: cl.Array[np.float16],
    anything: I32,
    z: cl.Array[np.complex64],
    pairs: cl.Array[PAIR],
    padded: cl.Array[ALIGNED],
    v: cl.Struct,
    p: cl.Struct,
    n: np.uint32,
) -> str:
    return """
    /* typedefs and structs as real programs write them */
    typedef float real;
    typedef unsigned int uint_t;
    typedef struct { float a, b; } pair_t;
    typedef struct padded { char c; double d; } padded_t;
    typedef float4 vec_t;
    __kernel void real_program(__global real *restrict out, __global const float4 *flat,
                               __global uint_t *u, __global unsigned int *s,
                               __global size_t *sizes, __global uchar *bytes_,
                               __global const char *chars, __global half *halves,
                               __global void *anything, __global float2 *z,
                               __global pair_t *pairs, __global struct padded *padded,
                               vec_t v, pair_t p, const uint n) {
        out[0] = flat[1].y;                      /* a float array read as float4s */
        out[1] = u[0] + s[0];
        out[2] = sizes[0] + bytes_[0] + chars[0];
        out[3] = vload_half(0, halves);
        out[4] = ((__global int *)anything)[0];
        out[5] = z[0].y;
        out[6] = pairs[1].a + pairs[1].b;
        out[7] = padded[0].d;
        out[8] = v.w + p.b + n;
    }"""


def test_programs_with_typedefs_unsigned_const_and_void_pointers_launch(queue):
    def dev(values, dtype):
        return cla.to_device(queue, np.array(values, dtype))

    out = cla.zeros(queue, 9, np.float32)
    pairs = np.zeros(2, PAIR)
    pairs[1] = (1.25, 2.5)
    padded = np.zeros(1, ALIGNED)
    padded[0]["d"] = 6.5
    cl.launch(
        real_program,
        out,
        dev(np.arange(8), np.float32),
        dev([3], np.uint32),
        dev([4], np.int32),
        dev([5], np.uint64),
        dev([6], np.uint8),
        dev([-7], np.int8),
        dev([0.5], np.float16),
        dev([9], np.int32),
        dev([1 + 2j], np.complex64),
        cla.to_device(queue, pairs),
        cla.to_device(queue, padded),
        cltypes.make_float4(0, 0, 0, 1),
        np.array((0, 2), PAIR)[()],
        np.uint32(4),
        global_size=1,
    )
    assert out.get().tolist() == [5, 7, 4, 0.5, 9, 2, 3.75, 6.5, 7]


# -- CUDA: C++ entries, through their mangled names (NVRTC, no GPU) ------------------------------


@pytest.fixture
def cuda(monkeypatch, tmp_path):
    pytest.importorskip("cuda.bindings")
    from specializer.backends import cuda

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    return cuda


def test_a_cplusplus_entry_taking_float_pointer_refuses_an_int32_array_extern_c_not(cuda):
    @cuda.kernel
    def cxx_float_pointer(x: cuda.Array[np.number]) -> str:
        return "__global__ void cxx_float_pointer(float *x) { x[threadIdx.x] = 1.0f; }"

    assert cuda.code_ptx(cxx_float_pointer, (cuda.Array[np.float32],), arch="sm_90")
    with pytest.raises(TypeError) as e:
        cuda.code_ptx(cxx_float_pointer, (cuda.Array[np.int32],), arch="sm_90")
    assert str(e.value) == (
        "argument 0 of kernel cxx_float_pointer (counting from 0, captured values first) is a "
        "Array[np.int32] (elements: 4-byte int), but the kernel's parameter 0 is a float* "
        "(elements: 4-byte float; its entry _Z17cxx_float_pointerPf): pass an array of the "
        "parameter's element type, or declare the method's parameter as it"
    )

    # documented in docs/limitations.md: an extern "C" name says nothing of the pointer types
    @cuda.kernel
    def c_float_pointer(x: cuda.Array[np.int32]) -> str:
        return 'extern "C" __global__ void c_float_pointer(float *x) { x[0] = 1.0f; }'

    assert cuda.code_ptx(c_float_pointer, (cuda.Array[np.int32],), arch="sm_90")


TEMPLATES = """#include <cuda_fp16.h>
struct S { double a; int b; };
template <typename T> __global__ void scale(const T *__restrict__ x, T *y, float4 *v, S *s,
                                            void *any) {}
"""


def test_a_template_entry_is_checked_through_its_template_arguments(cuda):
    G = cuda.Array[np.generic]

    @cuda.kernel
    def scale(x: G, y: G, v: G, s: G, a: G) -> str:
        return cuda.KernelSource(TEMPLATES, entry=f"scale<{cuda.ctype(x.dtype)}>")

    A = cuda.Array
    ok = (A[np.float32], A[np.float32], A[np.float32], A[np.uint8], A[np.int16])
    assert cuda.code_ptx(scale, ok, arch="sm_90")  # float4* takes floats; S*, void* anything
    half = (A[np.float16], A[np.float16], A[np.float32], A[np.float64], A[np.int8])
    assert cuda.code_ptx(scale, half, arch="sm_90")
    with pytest.raises(TypeError, match=r"argument 1 .* Array\[np\.int32\] .* is a float\*"):
        cuda.code_ptx(scale, (A[np.float32], A[np.int32], *ok[2:]), arch="sm_90")
    with pytest.raises(TypeError, match=r"argument 2 .* Array\[np\.float64\] .* is a float4\*"):
        cuda.code_ptx(scale, (A[np.float32], A[np.float32], A[np.float64], *ok[3:]), arch="sm_90")


@pytest.mark.parametrize(
    ("mangled", "params"),
    [
        ("_Z1kPf", ["float*"]),
        ("_Z2k0v", []),
        ("_Z1kPKfS_PiPKiS2_", ["float const*", "float const", "int*", "int const*", "int const"]),
        ("_ZN2ns2nkEPNS_1AES1_PfPKf", ["ns::A*", "ns::A*", "float*", "float const*"]),
        ("_Z7reduce2IfEvPT_S1_l", ["float*", "float*", "long"]),
        (
            "_Z2tkIdLin3EEvPKT_PS0_PfP1SS6_S0_",
            ["double const*", "double*", "float*", "S*", "S*", "double"],
        ),
        ("_Z2tuIfN2ns1AEEvPT0_PT_S2_S4_", ["ns::A*", "float*", "ns::A", "float"]),
        ("_Z1kSt", None),  # std:: names are not read: unchecked
        ("k", None),  # extern "C"
    ],
)
def test_mangled_names_give_the_parameter_types_as_cplusplus_spells_them(mangled, params):
    pytest.importorskip("cuda.bindings")
    from specializer.backends.cuda import _cxx

    assert _cxx.mangled_parameters(mangled) == params
