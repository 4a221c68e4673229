"""The core's HostKernel class: a functools.partial subclass, called through public means."""

from __future__ import annotations

import functools
import sys

import pytest

from specializer import launching
from specializer.backends import opencl as cl

HAVE_VECTORCALL = 1 << 11  # Py_TPFLAGS_HAVE_VECTORCALL, as type.__flags__ shows it


def _record(*args, **kwargs):
    return args, kwargs


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info < (3, 12),
    reason="CPython 3.12 and later give a subclass of partial the vectorcall path",
)
def test_every_back_ends_host_kernel_class_has_the_vectorcall_path_on_312_and_later():
    # None of them may define __call__: that would take the path away.
    for cls in (launching.HostKernel, cl.HostKernel):
        assert cls.__flags__ & HAVE_VECTORCALL, cls


def test_host_kernel_classes_keep_the_type_flags_python_gave_them():
    # Nothing writes into a type object: each class has the flags of a class statement.
    class Mine(launching.HostKernel):
        pass

    plain = type("Plain", (functools.partial,), {}).__flags__ & HAVE_VECTORCALL
    for cls in (launching.HostKernel, cl.HostKernel, Mine):
        assert cls.__flags__ & HAVE_VECTORCALL == plain, cls


def test_a_new_subclass_calls_like_a_partial():
    class Mine(launching.HostKernel):
        pass

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
