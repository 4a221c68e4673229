"""A user's script in the documented style, for the OpenCL back-end: ``mypy --strict`` and
``pyright`` check it with no error code turned off (tests/test_typing.py), and it runs."""

from typing import Annotated

import numpy as np
import pyopencl as pcl
import pyopencl.array as cla

from specializer.backends import opencl as cl

# A struct layout is a value: ``Annotated`` carries it where a type checker wants a type.
PAIR = np.dtype([("x", np.float32), ("n", np.int32)])


@cl.device
def square() -> str:  # a device function: redefining it recompiles
    return "float square(float v) { return v * v; }"  # exactly the kernels that use it


@cl.kernel(callees=[square])
def apply(x: cl.Array[np.float32]) -> str:
    return """__kernel void apply(__global float *x) {
                  size_t i = get_global_id(0); x[i] = square(x[i]); }"""


@cl.kernel  # generic: one method for every real element type
def fill(x: cl.Array[np.number], v: np.number) -> str:
    return f"""__kernel void fill(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                   x[get_global_id(0)] = v; }}"""


@cl.kernel
def scale(x: cl.Array[np.floating], tmp: cl.LocalMemory, by: np.floating) -> str:
    t = cl.ctype(x.dtype)
    assert x.dtype.kind == "f"
    return cl.KernelSource(
        f"""__kernel void scale(__global {t} *x, __local {t} *tmp, {cl.ctype(by)} by) {{
               size_t i = get_global_id(0), l = get_local_id(0);
               tmp[l] = x[i] * by; x[i] = tmp[l]; }}""",
        options=("-DUNUSED=1",),
    )


@cl.kernel
def raw(b: cl.Buffer, n: np.int32) -> str:
    return """__kernel void raw(__global int *b, int n) {
                  size_t i = get_global_id(0); if (i < n) b[i] = (int)i; }"""


@cl.kernel
def pairs(p: Annotated[cl.Array[np.void], PAIR], s: Annotated[cl.Struct, PAIR]) -> str:
    fields = ", ".join(sorted(p.dtype.fields or {}))
    assert fields == "n, x" and s.dtype == PAIR
    return """typedef struct { float x; int n; } pair;
              __kernel void pairs(__global pair *p, pair s) { p[get_global_id(0)] = s; }"""


def main() -> None:
    queue: pcl.CommandQueue = cl.default_queue()
    x = cla.zeros(queue, 1024, np.float32)
    event: pcl.Event = cl.launch(fill, x, np.float32(3), global_size=x.size)
    event.wait()
    cl.launch(apply, x, global_size=x.size)
    assert (x.get() == 9).all()
    cl.launch(scale, x, pcl.LocalMemory(4 * 64), np.float32(2), global_size=1024, local_size=64)
    assert (x.get() == 18).all()

    n = cla.zeros(queue, 4, np.int32)
    cl.launch(fill, n, 7, global_size=4, queue=queue, options=("-DX=1",))
    assert (n.get() == 7).all()

    buf = pcl.Buffer(queue.context, pcl.mem_flags.READ_WRITE, size=16)
    cl.launch(raw, buf, np.int32(4), global_size=4)

    p = cla.zeros(queue, 2, PAIR)
    s = np.zeros((), PAIR)[()]
    s["x"], s["n"] = 1.5, 2
    cl.launch(pairs, p, s, global_size=2)
    assert p.get()["n"].tolist() == [2, 2]

    hk: cl.HostKernel = cl.clfunction(fill, (cl.Array[np.float32], np.float32), queue)
    hk(x, np.float32(1), global_size=x.size)
    assert (x.get() == 1).all()
    offset = cl.capture(fill, cla.zeros(queue, 8, np.float32))
    cl.launch(offset, np.float32(5), global_size=8)


if __name__ == "__main__":
    main()
