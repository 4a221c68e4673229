"""Methods defined under ``from __future__ import annotations`` (annotations are strings)."""

from __future__ import annotations

import numpy as np
from pybackend import kernel, run

from specializer import GenericFunction


def test_string_annotations_may_name_the_defining_functions_locals():
    Scalar = np.floating
    gf = GenericFunction("local_ann")

    @gf.method
    def local_ann(x: Scalar):
        return 0

    assert gf.methodinstance((np.float32,)).method.signature == (np.floating,)


def test_kernel_with_local_annotation_through_a_back_end_decorator():
    Num = np.number

    @kernel
    def local_kernel(x: Num, y: Num):
        return "def local_kernel(x, y): return x * y"

    assert local_kernel.methodinstance((np.int64, np.int64)).method.signature == (Num, Num)
    assert run(local_kernel, 3, 4) == 12


def test_callee_form_of_the_decorator_also_sees_locals():
    T = np.int64
    gf = GenericFunction("local_callees")

    @gf.method(callees=[])
    def local_callees(x: T):
        return 0

    assert gf.methodinstance((np.int64,)).method.signature == (np.int64,)
