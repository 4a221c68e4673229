"""Equal dtypes are one array type whatever spelling came first (SPEC 8).

numpy has two classes for some equal dtypes (``np.longlong`` and ``np.int64`` on Linux,
``np.ulonglong`` and ``np.uint64``): ``np.dtype(np.longlong) == np.dtype(np.int64)`` and they
hash alike. An array of either is ``Array[np.int64]``, whichever was typed first, on both
back-ends. Which spelling a process meets first decides nothing, so the orders are run in
fresh interpreters.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from specializer.types import DeviceArray

pytestmark = pytest.mark.skipif(
    np.longlong is np.int64 or np.dtype(np.longlong) != np.dtype(np.int64),
    reason="np.longlong and np.int64 are not two classes of one dtype on this platform",
)


class Family(DeviceArray):
    pass


def test_equal_dtypes_are_one_array_type_in_any_family():
    assert Family[np.longlong] is Family[np.int64]
    assert Family[np.dtype("q")] is Family[np.dtype("l")] is Family[np.int64]
    assert Family[np.ulonglong] is Family[np.uint64]
    assert Family[np.longlong].eltype is np.int64
    assert repr(Family[np.longlong]) == "Family[np.int64]"
    assert Family[np.longlong].dtype == np.dtype(np.int64)
    assert issubclass(Family[np.longlong], Family[np.signedinteger])


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


OPENCL = """
    import numpy as np
    import pyopencl.array as cla
    from specializer.backends import opencl as cl

    q = cl.default_queue()
    first = cla.zeros(q, 4, np.{first})  # typed before anything of the other spelling
    print(cl.typeof(first), cl.ctype(cl.typeof(first).dtype))

    @cl.kernel
    def put(x: cl.Array[np.{annotated}], v: np.int64) -> str:
        body = "{{ x[get_global_id(0)] = v + get_global_id(0); }}"
        return f"__kernel void put(__global {{cl.ctype(x.dtype)}} *x, long v) " + body

    for n, dtype in enumerate((np.int64, np.longlong, np.{first})):
        x = cla.zeros(q, 4, dtype)
        cl.launch(put, x, np.int64(10 * n), global_size=4)
        print(cl.typeof(x), x.get().tolist())
"""


@pytest.mark.parametrize(
    ("first", "annotated"),
    [("longlong", "int64"), ("int64", "longlong"), ("longlong", "longlong")],
)
def test_an_array_of_either_spelling_launches_a_method_on_either_whichever_came_first(
    first, annotated
):
    pytest.importorskip("pyopencl")
    out = _run(OPENCL.format(first=first, annotated=annotated)).splitlines()
    assert out == [
        "Array[np.int64] long",
        "Array[np.int64] [0, 1, 2, 3]",
        "Array[np.int64] [10, 11, 12, 13]",
        "Array[np.int64] [20, 21, 22, 23]",
    ]


CUDA = """
    import numpy as np
    from specializer.backends import cuda

    class FakeCAI:
        def __init__(self, dtype):
            self.__cuda_array_interface__ = {{
                "shape": (4,), "typestr": np.dtype(dtype).str, "data": (0x7F0000001000, False),
                "strides": None, "version": 3,
            }}

    for dtype in (np.{first}, np.{second}):
        own = cuda.CuArray.wrap(0x7F0000001000, (4,), dtype)
        print(cuda.typeof(own), cuda.typeof(FakeCAI(dtype)), own.dtype == np.dtype(dtype))
    print(cuda.Array[np.longlong] is cuda.Array[np.int64])
"""


@pytest.mark.parametrize(("first", "second"), [("longlong", "int64"), ("int64", "longlong")])
def test_cuda_arrays_of_either_spelling_are_one_type_whichever_came_first(first, second):
    pytest.importorskip("cuda.bindings")
    out = _run(CUDA.format(first=first, second=second)).splitlines()
    assert out == ["Array[np.int64] Array[np.int64] True"] * 2 + ["True"]
