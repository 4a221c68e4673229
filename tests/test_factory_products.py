"""A kernel factory's products are freed once dropped, with their compiled code (SPEC 9):
nothing the core keeps (the lookup index, the compiled-code cache, backedges on a
module-level device function they call) holds a kernel, a kernel instance type or a captured
value alive.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
from pybackend import CONFIG, device, kernel, py, pyfunction, run

from specializer import compiler, lookup, specialize
from specializer.kernels import uncached_lookup

N = 300


@device
def fp_leaf():
    return "def fp_leaf(v): return v + 1"


def _product(n):
    """A kernel factory: each call defines a kernel of its own, closing over ``n`` and
    calling the module-level device function ``fp_leaf``."""

    @kernel(callees=[fp_leaf])
    def fp_k(x: np.number):
        return f"def fp_k(x): return fp_leaf(x) * {n}"

    return fp_k


def _code_of(name):
    """The code instances alive for kernels named ``name`` (what the compiled-code cache
    keeps for them)."""
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, compiler.CodeInstance) and o.mi.method.gf.name == name
    ]


def _open_edges(gf):
    return len(gf.backedges())


def _index():
    return len(lookup._specializations)


def _lookup_site(F, tt):
    return uncached_lookup(F, tt, CONFIG, "fp-ctx")


def test_products_looked_up_and_dropped_are_freed_with_their_code():
    gc.collect()
    index, edges = _index(), _open_edges(fp_leaf)
    products = [_product(i) for i in range(N)]
    for i, k in enumerate(products):
        assert run(k, 2) == 3 * i  # cached_lookup (pyfunction), compiled and linked
        fn = specialize(_lookup_site, object, k, (np.int64,), str)  # and specialize
        assert fn("fp-ctx", lambda k=k: _lookup_site(k, (np.int64,)))(2) == 3 * i
    refs = [weakref.ref(k) for k in products]
    assert len(_code_of("fp_k")) == N  # each product's code, kept while it lives
    assert _open_edges(fp_leaf) == edges + N
    del products, k, fn
    gc.collect()
    assert sum(r() is not None for r in refs) == 0  # on main: all of them alive
    assert _code_of("fp_k") == []
    assert _index() == index
    assert _open_edges(fp_leaf) == edges  # the callee keeps nothing of its callers
    # the device function they called still works, and still ends its callers' code
    k = _product(5)
    assert run(k, 1) == 10
    fp_leaf.add_method(lambda: "def fp_leaf(v): return v + 2", signature=())
    assert run(k, 1) == 15


def _cap_product(n, big):
    """A factory whose product closes over a large array and is launched as a kernel
    instance (a captured value: its type is ``F``)."""

    @kernel
    def fp_cap(c: np.float32, x: np.number):
        return f"def fp_cap(c, x): return c * x + {n} + {len(big)}"

    return fp_cap


def test_kernel_instance_types_and_captured_values_are_freed():
    gc.collect()
    index = _index()
    refs, values = [], []
    for i in range(50):
        big = np.full(1 << 12, i, np.float32)
        k = _cap_product(i, big)
        inst = k.capture(np.float32(2))
        assert pyfunction(inst, (np.int64,))(*inst.values, 3) == 6 + i + 4096
        assert run(inst, 3) == 6 + i + 4096
        refs += [weakref.ref(k), weakref.ref(type(inst))]
        values.append(weakref.ref(big))
    del k, inst, big
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    assert sum(r() is not None for r in values) == 0
    assert _code_of("fp_cap") == []
    assert _index() == index


def _launched_product(n):
    @py.kernel
    def fp_launched(x: py.Array[np.float32]) -> str:
        return f"def fp_launched(i, x): x[i] = {n}"

    return fp_launched


def test_products_launched_through_the_launch_path_and_dropped_are_freed():
    """End to end: launches through ``specializer.launching`` (the py back-end: front entries,
    the lookup site, linked kernels' bound launch paths)."""
    gc.collect()
    index = _index()
    refs = []
    for i in range(100):
        k = _launched_product(i)
        x = np.zeros(3, np.float32)
        for _ in range(2):  # the miss, then the front entry
            py.launch(k, x, size=3)
        assert x.tolist() == [i] * 3
        refs.append(weakref.ref(k))
    del k
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    assert _code_of("fp_launched") == []
    assert _index() == index


def test_a_kernel_instance_type_is_not_subclassed():
    """Its launch cells are its own (class attributes): a subclass would find its base's."""
    import pytest

    inst = _product(1).capture(np.int64(2))
    with pytest.raises(TypeError, match="kernel instance type"):
        type("Sub", (type(inst),), {})


class _Plain:
    """An ``F`` that is not a generic function: filed by ``id``, weakly."""


def _at_one_site(F, value):
    from specializer import cached_lookup

    return cached_lookup(lambda: (value,), tuple, F, (np.int64,), "k")


def test_an_f_without_a_table_of_its_own_is_held_weakly_too():
    gc.collect()
    index = _index()
    refs = []
    for i in range(20):
        F = _Plain()
        assert _at_one_site(F, i) == (i,)
        assert _at_one_site(F, -1) == (i,)  # a hit
        refs.append(weakref.ref(F))
    del F
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
    assert _index() == index
    # one that takes no weak reference is kept, and still found
    assert _at_one_site("fp-str-F", "s") == ("s",)
    assert _at_one_site("fp-str-F", "t") == ("s",)
