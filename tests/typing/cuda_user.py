"""A user's script in the documented style, for the CUDA back-end: ``mypy --strict`` and
``pyright`` check it with no error code turned off (tests/test_typing.py). Defining the
kernels needs no GPU; ``main()`` launches them (with a GPU)."""

from typing import Annotated

import numpy as np

from specializer.backends import cuda

PAIR = np.dtype([("x", np.float32), ("n", np.int32)])


@cuda.device
def square() -> str:
    return "__device__ float square(float v) { return v * v; }"


@cuda.kernel(callees=[square])
def apply(x: cuda.Array[np.float32], n: np.int64) -> str:
    return """extern "C" __global__ void apply(float *x, long long n) {
                  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                  if (i < n) x[i] = square(x[i]); }"""


@cuda.kernel
def fill(x: cuda.Array[np.number], v: np.number, n: np.int64) -> str:
    return f"""extern "C" __global__ void fill({cuda.ctype(x.dtype)} *x,
                                               {cuda.ctype(v)} v, long long n) {{
                   long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
                   if (i < n) x[i] = v; }}"""


@cuda.kernel
def scale(x: cuda.Array[np.floating], by: np.floating) -> cuda.KernelSource:
    t = cuda.ctype(x.dtype)
    assert x.dtype.kind == "f"
    return cuda.KernelSource(
        f"""extern "C" __global__ void scale({t} *x, {t} by) {{ x[threadIdx.x] *= by; }}""",
        options=("-DUNUSED=1",),
    )


@cuda.kernel
def pairs(p: Annotated[cuda.Array[np.void], PAIR], s: Annotated[cuda.Struct, PAIR]) -> str:
    assert p.dtype == PAIR and s.dtype == PAIR
    return """struct pair { float x; int n; };
              extern "C" __global__ void pairs(pair *p, pair s) { p[threadIdx.x] = s; }"""


def main() -> None:
    x = cuda.CuArray.zeros(1024, np.float32)
    cuda.launch(fill, x, np.float32(3), x.size, grid=4, block=256)
    cuda.launch(apply, x, x.size, grid=4, block=256, stream=cuda.Stream(), fastmath=True)
    cuda.launch(scale, x, np.float32(2), grid=1, block=(256, 1, 1), shared_mem=0)
    cuda.synchronize()
    assert (x.get()[:256] == 18).all()
    hk: cuda.HostKernel = cuda.cufunction(fill, (cuda.Array[np.float32], np.float32, np.int64))
    hk(x, np.float32(1), x.size, grid=4, block=256)
    cuda.synchronize()
    assert (x.get() == 1).all()


if __name__ == "__main__":
    main()
