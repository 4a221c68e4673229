"""What every back-end needs is written once in the core (SPEC 10): the decorators with their
typing, ``KernelSource`` with its options, and the signature every message spells."""

from __future__ import annotations

import numpy as np
import pytest

from specializer import sources
from specializer.kernels import Definitions, DeviceFunction, Kernel
from specializer.signatures import signature
from specializer.types import Weak


def test_each_back_ends_decorators_are_the_cores_with_their_own_docstrings():
    cl = pytest.importorskip("specializer.backends.opencl")
    cuda = pytest.importorskip("specializer.backends.cuda")
    for name in ("kernel", "device"):
        mine, theirs = getattr(cl, name), getattr(cuda, name)
        assert mine.__code__ is theirs.__code__  # one implementation
        assert (mine.__module__, mine.__name__) == ("specializer.backends.opencl", name)
        assert (theirs.__module__, theirs.__name__) == ("specializer.backends.cuda", name)
    assert "OpenCL C" in cl.kernel.__doc__ and "OpenCL C" not in cuda.kernel.__doc__
    assert "__global__" in cuda.kernel.__doc__ and "LocalMemory" not in cuda.kernel.__doc__
    # what the core says once, both say
    for doc in (cl.kernel.__doc__, cuda.kernel.__doc__):
        assert doc.startswith("``@kernel`` or ``@kernel(callees=[device_fn, ...])``")
        assert "delete_method" in doc


def test_a_back_ends_definitions_make_kernels_and_device_functions_with_its_label():
    defs = Definitions(lambda v: type(v), "mine.backend", kernel_doc="Takes numpy scalars.")
    assert defs.kernel.__doc__.endswith("Takes numpy scalars.")

    @defs.device
    def helper() -> str:
        return "helper source"

    @defs.kernel(callees=[helper])
    def k(v: np.float32) -> str:
        return "kernel source"

    assert isinstance(helper, DeviceFunction) and isinstance(k, Kernel)
    (method,) = k.methods()
    assert (method.signature, method.callees) == ((np.float32,), (helper,))
    with pytest.raises(TypeError, match=r"^@backend\.kernel got unknown keyword argument\(s\) "):
        defs.kernel(calees=[helper])


def test_kernel_source_options_split_once_for_every_back_end():
    class Mine(sources.KernelSource):
        __slots__ = ()
        BACKEND, OPTIONS, OPTION = "Mine", "my options", "one of my options"

    s = Mine("src", options="-DA='1 2' -DB")
    assert (str(s), s.options) == ("src", ("-DA=1 2", "-DB"))
    assert Mine("src", options=["-DX"]).options == ("-DX",)
    with pytest.raises(TypeError, match=r"KernelSource options= are my options, a str or a"):
        Mine("src", options=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="do not split as shell words"):
        Mine("src", options="-DA='1")
    assert sources.split_options("-a -b", "options=", "x") == ("-a", "-b")


def test_every_message_spells_a_signature_one_way():
    assert signature("fill", (np.float32, Weak[int])) == "fill(np.float32, Weak[int])"
    assert signature("k", ()) == "k()"
