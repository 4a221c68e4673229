"""A definition's cost does not grow with history (SPEC 9, 10): what a definition publishes is
the live methods and the dispatch memo, never a copy of every earlier method, and an older
world still dispatches through the replaced methods, along each signature's chain.

Nothing here is timed: each test counts what a definition publishes or looks at, or checks
older-world dispatch against a scan of every method. ``tools/bench_history.py --definitions``
measures the cost itself.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from specializer import GenericFunction, MethodError, bump, latest
from specializer.methods import Method
from specializer.world import WORLD_MAX


def _published(gf: GenericFunction) -> int:
    """How many references the published table value holds: its methods, and its dispatch
    memo's signatures and ranges."""
    t = gf._table
    return len(t.live) + len(t.dispatch) + sum(len(e) for e in t.dispatch.values())


def _redefine(gf: GenericFunction, n: int, tag: str = "") -> None:
    for i in range(n):
        gf.add_method(lambda x, i=i: f"{tag}{i}", signature=(np.number,))
        gf.methodinstance((np.float32,))  # with the miss after it, as a launch does


def test_a_definition_publishes_what_it_touches_not_the_history():
    gf = GenericFunction("hist_publish")
    gf.add_method(lambda x: "int", signature=(np.integer,))
    gf.methodinstance((np.int32,))
    _redefine(gf, 10)
    early = _published(gf)
    _redefine(gf, 2_000)
    assert _published(gf) == early  # on main: the table held all 2,011 methods
    assert len(gf._table.live) == 2
    # the table value refers to no replaced method: they hang off the live one's chain
    held = gc.get_referents(*gc.get_referents(gf._table))
    assert sum(isinstance(m, Method) and m.max_world < WORLD_MAX for m in held) == 0
    assert len(gf._table.history) == 2_011  # reflection still sees every one


def test_a_definition_looks_at_no_replaced_method(monkeypatch):
    gf = GenericFunction("hist_look")
    _redefine(gf, 500)
    seen = []
    applies_weak = Method.applies_weak

    def counting(self, tt):
        seen.append(self)
        return applies_weak(self, tt)

    monkeypatch.setattr(Method, "applies_weak", counting)
    gf.add_method(lambda x: "again", signature=(np.number,))
    assert all(m.max_world == WORLD_MAX or m.min_world == latest() - 1 for m in seen)
    assert len(seen) <= 4


def test_an_older_world_dispatches_as_a_scan_of_every_method_says():
    """Every world of an interleaved history: the chain walk (with its jump pointers) finds
    the method a scan of the whole history finds, and the memo's range is right."""
    gf = GenericFunction("hist_worlds")
    first = latest() + 1
    for i in range(120):
        if i % 7 == 3:
            gf.add_method(lambda x, i=i: f"i32 {i}", signature=(np.int32,))
        elif i % 11 == 5:
            gf.add_method(lambda x, i=i: f"int {i}", signature=(np.integer,))
        else:
            gf.add_method(lambda x, i=i: f"num {i}", signature=(np.number,))
        if i % 13 == 0:
            bump()  # worlds no definition of gf made
    history = gf._table.history
    assert len(history) == 120
    for w in range(first - 1, latest() + 1):
        visible = [m for m in history if m.min_world <= w <= m.max_world]
        assert gf.methods(w) == visible
        for tt in ((np.int32,), (np.int64,), (np.float32,)):
            try:
                want = gf._select(tt, visible, w)
            except MethodError:
                with pytest.raises(MethodError):
                    gf.methodinstance(tt, w)
                continue
            assert gf.methodinstance(tt, w).method is want
            lo, hi = gf._table.dispatch_range(tt, w)
            assert lo <= w <= hi
            for v in (lo, hi if hi < WORLD_MAX else latest()):  # the same dispatch there
                seen = [m for m in history if m.min_world <= v <= m.max_world]
                assert gf._select(tt, seen, v) is want


def test_finding_a_worlds_method_takes_logarithmic_steps():
    """The chain of 4,000 replacements of one signature: every world's method is found in
    O(log n) steps (the jump pointers), counted by walking as ``_version`` walks."""
    from specializer.methods import _version

    gf = GenericFunction("hist_steps")
    _redefine(gf, 4_000)
    head = gf._table.live[0]
    chain = list(reversed(gf._table.history))
    assert chain[0] is head and head.depth == len(chain) - 1
    bound = 3 * math.ceil(math.log2(len(chain))) + 3
    for target in chain[::37]:
        w = target.min_world
        steps, n = 0, head
        while n.min_world > w:  # _version's walk, counted
            j = n.jump
            n = j if j.min_world > w else n.prior
            steps += 1
        assert n is target and _version(head, w)[0] is target
        assert steps <= bound, (steps, bound)
