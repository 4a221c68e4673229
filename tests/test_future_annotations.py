"""Methods defined under ``from __future__ import annotations`` (annotations are strings): they
are evaluated in the module, and with the names passed as ``localns`` (no frame is read to find
the defining function's locals, SPEC 10)."""

from __future__ import annotations

import numpy as np
import pytest
from pybackend import kernel, run

from specializer import GenericFunction


def test_string_annotations_may_name_the_defining_functions_locals_passed_as_localns():
    Scalar = np.floating
    gf = GenericFunction("local_ann")

    @gf.method(localns=locals())
    def local_ann(x: Scalar):
        return 0

    assert gf.methodinstance((np.float32,)).method.signature == (np.floating,)


def test_kernel_with_local_annotation_through_a_back_end_decorator():
    Num = np.number

    @kernel(localns=locals())
    def local_kernel(x: Num, y: Num):
        return "def local_kernel(x, y): return x * y"

    assert local_kernel.methodinstance((np.int64, np.int64)).method.signature == (Num, Num)
    assert run(local_kernel, 3, 4) == 12


def test_callee_form_of_the_decorator_also_takes_localns():
    T = np.int64
    gf = GenericFunction("local_callees")

    @gf.method(callees=[], localns=locals())
    def local_callees(x: T):
        return 0

    assert gf.methodinstance((np.int64,)).method.signature == (np.int64,)


def test_a_local_name_without_localns_says_how_to_pass_it():
    Local = np.float32
    gf = GenericFunction("no_localns")
    with pytest.raises(TypeError) as e:

        @gf.method
        def no_localns(x: Local):
            return 0

    message = str(e.value)
    assert "cannot evaluate the annotations of" in message and "'Local' is not defined" in message
    assert "define the type at module level" in message and "localns=locals()" in message
    assert gf.methods() == []
    with pytest.raises(
        TypeError, match=r"localns \(the names string annotations of .*\) is a dict"
    ):
        gf.method(lambda x: 0, localns=["Local"])
