"""The core's HostKernel class: a functools.partial subclass with the vectorcall path."""

from __future__ import annotations

import functools
import sys

import pytest

from specializer import launching
from specializer.backends import opencl as cl

HAVE_VECTORCALL = 1 << 11  # Py_TPFLAGS_HAVE_VECTORCALL

cpython = pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="the vectorcall flag is CPython's"
)


def _record(*args, **kwargs):
    return args, kwargs


@cpython
def test_every_back_ends_host_kernel_class_has_the_vectorcall_path():
    # On 3.10 and 3.11 a class statement does not give a subclass of partial the flag;
    # without it each HostKernel call builds and unpacks an argument tuple and a dict.
    for cls in (launching.HostKernel, cl.HostKernel):
        assert cls.__flags__ & HAVE_VECTORCALL, cls


@cpython
def test_a_new_subclass_gets_it_and_calls_like_a_partial():
    class Mine(launching.HostKernel):
        pass

    assert Mine.__flags__ & HAVE_VECTORCALL
    hk = functools.partial.__new__(Mine, _record, "f", "where")
    assert hk(1, 2, global_size=3) == (("f", "where", 1, 2), {"global_size": 3})
    assert hk() == (("f", "where"), {})
    assert isinstance(hk, launching.HostKernel)


def test_a_subclass_that_defines_call_keeps_its_own():
    class Own(launching.HostKernel):
        def __call__(self, *args, **kwargs):
            return "own", args, kwargs

    class Below(Own):
        pass

    for cls in (Own, Below):
        hk = functools.partial.__new__(cls, _record, "f")
        assert hk(1, x=2) == ("own", (1,), {"x": 2})
