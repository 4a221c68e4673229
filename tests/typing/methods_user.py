"""A user's script with several methods of one kernel, in the typed style: the first through
``@cl.kernel``, the others through ``@fill.method`` on a ``def _`` (as
``functools.singledispatch``'s ``register``), so no name is defined twice. ``mypy --strict``
and ``pyright`` accept it with no error code turned off (tests/test_typing.py), and it runs."""

import numpy as np
import pyopencl.array as cla

from specializer.backends import opencl as cl


@cl.device
def square() -> str:  # a device function (callee)
    return "float square(float v) { return v * v; }"


@cl.kernel  # generic: one method for every element type
def fill(x: cl.Array[np.number], v: np.number) -> str:
    return f"""__kernel void fill(__global {cl.ctype(x.dtype)} *x, {cl.ctype(v)} v) {{
                   x[get_global_id(0)] = v; }}"""


@fill.method(callees=[square])  # more specific, with a callee: float32 arrays get v squared
def _(x: cl.Array[np.float32], v: np.float32) -> str:
    return """__kernel void fill(__global float *x, float v) {
                  x[get_global_id(0)] = square(v); }"""


@fill.method  # a second method through @fill.method: int16 arrays get v + 1
def _(x: cl.Array[np.int16], v: np.int16) -> str:
    return cl.KernelSource(
        """__kernel void fill(__global short *x, short v) {
               x[get_global_id(0)] = v + ONE; }""",
        options=("-DONE=1",),
    )


@square.method  # a device function has one method: this replaces it (cubes)
def _() -> str:
    return "float square(float v) { return v * v * v; }"


def main() -> None:
    queue = cl.default_queue()
    x = cla.zeros(queue, 16, np.float32)
    y = cla.zeros(queue, 16, np.int16)
    z = cla.zeros(queue, 16, np.int32)
    cl.launch(fill, x, np.float32(2), global_size=x.size)
    cl.launch(fill, y, np.int16(2), global_size=y.size)
    cl.launch(fill, z, np.int32(2), global_size=z.size)
    assert (x.get() == 8).all() and (y.get() == 3).all() and (z.get() == 2).all()
    signatures: list[tuple[type, ...]] = [m.signature for m in fill.methods()]
    assert len(signatures) == 3

    # a method taken back: int16 arrays take the generic method again
    fill.delete_method((cl.Array[np.int16], np.int16))
    cl.launch(fill, y, np.int16(2), global_size=y.size)
    assert (y.get() == 2).all()


if __name__ == "__main__":
    main()
