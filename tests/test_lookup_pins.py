"""Pins and the lookup's hit (SPEC 1, 4, 9, 10 "the world by value"): a pinned task hits on the
fast path, by value; a pin or a miss in another thread changes nothing an unpinned hit does.

"The slow path" is counted where it starts: every call that the generated function does not
answer runs ``_miss``, whose first act is ``specializer.world.settle()``."""

import asyncio
import contextvars
import threading

import pytest

import specializer
from specializer import (
    GenericFunction,
    bump,
    cached_lookup,
    current,
    device_code,
    invoke_in_world,
    latest,
    specialize,
)
from specializer import world as world_module

JOIN_S = 10


@pytest.fixture
def slow_paths(monkeypatch):
    """The threads (``threading.get_ident()``) of every slow path taken, in order."""
    seen: list[int] = []
    settle = world_module.settle

    def counted():
        seen.append(threading.get_ident())
        settle()

    monkeypatch.setattr(world_module, "settle", counted)
    return seen


def _site(name: str):
    """A fresh specialized lookup and a lookup that counts its calls and returns its world."""
    F = GenericFunction(name)
    calls: list[int] = []

    def lookup():
        calls.append(current())
        return (current(),)

    return specialize(lookup, tuple, F, (), str), lookup, calls


def _world_above_256() -> int:
    """The latest world, raised above 256 first: int objects above 256 are not shared, so an
    equal world given as another int is another object."""
    while latest() <= 256:
        bump()
    return latest()


def test_an_unpinned_hit_takes_no_slow_path_while_another_thread_is_pinned_or_missing(
    slow_paths,
):
    fn, lookup, calls = _site("beside_pins")
    old = latest()
    bump()
    assert fn("k", lookup) == (latest(),) and len(calls) == 1  # stored, unpinned
    parked, release = threading.Event(), threading.Event()
    missing, done = threading.Event(), threading.Event()

    def park():
        parked.set()
        release.wait(JOIN_S)

    other, _, _ = _site("the_other_threads_miss")

    def miss_slowly():  # a miss: its lookup runs pinned, and waits inside
        missing.set()
        done.wait(JOIN_S)
        return (current(),)

    threads = [
        threading.Thread(target=invoke_in_world, args=(old, park)),
        threading.Thread(target=other, args=("k", miss_slowly)),
    ]
    for t in threads:
        t.start()
    try:
        assert parked.wait(JOIN_S) and missing.wait(JOIN_S)
        assert specializer.world.pins() == 2  # the parked call's pin, the miss's
        me = threading.get_ident()
        before = slow_paths.count(me)
        assert [fn("k", lookup) for _ in range(100)] == [(latest(),)] * 100
        assert slow_paths.count(me) == before and len(calls) == 1
        assert world_module.task_cell() is world_module.hot_cell  # what this task reads
        assert world_module.hot_cell == [latest(), latest()]
    finally:
        release.set()
        done.set()
        for t in threads:
            t.join(JOIN_S)


def test_a_pinned_context_hits_an_entry_stored_under_an_equal_world_without_the_slow_path(
    slow_paths,
):
    fn, lookup, calls = _site("pinned_by_value")
    old = _world_above_256()
    assert fn("k", lookup) == (old,) and len(calls) == 1  # stored under latest()'s object
    bump()
    equal = int(str(old))
    ctx = invoke_in_world(equal, contextvars.copy_context)
    assert ctx.run(current) == old and ctx.run(current) is not old  # another int object
    me = threading.get_ident()
    assert ctx.run(fn, "k", lookup) == (old,)  # its first lookup sets its cell (a slow path)
    before = slow_paths.count(me)
    assert [ctx.run(fn, "k", lookup) for _ in range(50)] == [(old,)] * 50
    assert slow_paths.count(me) == before and len(calls) == 1  # hits, by value
    assert [fn("k", lookup) for _ in range(3)] == [(latest(),)] * 3  # unpinned: a miss, once
    assert len(calls) == 2 and ctx.run(fn, "k", lookup) == (old,)  # both kept


def test_cached_lookup_in_a_pinned_context_hits_its_own_worlds_entry():
    F = GenericFunction("cached_lookup_pinned")
    calls: list[int] = []

    def site():
        return cached_lookup(lambda: calls.append(1) or (current(),), tuple, F, (), "k")

    old = latest()
    assert site() == (old,)
    bump()
    ctx = invoke_in_world(old, contextvars.copy_context)
    assert [ctx.run(site) for _ in range(5)] == [(old,)] * 5 and len(calls) == 1
    assert [site() for _ in range(5)] == [(latest(),)] * 5 and len(calls) == 2
    assert [ctx.run(site) for _ in range(5)] == [(old,)] * 5 and len(calls) == 2


def test_a_task_made_in_a_pinned_call_hits_its_worlds_entries_after_the_call(slow_paths):
    """The task keeps the pin (SPEC 9: a pin lives in every context that holds it), and its
    lookups hit on the fast path after the call returned and the world rose."""
    fn, lookup, calls = _site("task_hits")
    old = latest()
    assert fn("k", lookup) == (old,)
    bump()

    async def later():
        await asyncio.sleep(0)
        bump()  # the world rises while the task runs
        first = fn("k", lookup)
        n = len(slow_paths)
        rest = [fn("k", lookup) for _ in range(20)]
        return first, rest, len(slow_paths) - n

    async def main():
        task = invoke_in_world(old, asyncio.ensure_future, later())
        assert current() == latest()  # the creator is unpinned
        return await task

    first, rest, slow = asyncio.run(main())
    assert first == (old,) and rest == [(old,)] * 20 and slow == 0 and len(calls) == 1


def test_a_hook_sees_every_lookup_of_a_pinned_context_that_hit_before():
    """A compile hook turns hits off in pinned contexts too, though their cells held a world."""
    fn, lookup, calls = _site("pinned_under_a_hook")
    old = latest()
    bump()
    ctx = invoke_in_world(old, contextvars.copy_context)
    assert [ctx.run(fn, "k", lookup) for _ in range(3)] == [(old,)] * 3 and len(calls) == 1
    entered, leave = threading.Event(), threading.Event()

    def hooked():  # the block in another thread: process-wide, it bypasses here too
        with device_code(lambda job, artifact: None):
            entered.set()
            leave.wait(JOIN_S)

    t = threading.Thread(target=hooked)
    t.start()
    try:
        assert entered.wait(JOIN_S)
        assert [ctx.run(fn, "k", lookup) for _ in range(3)] == [(old,)] * 3
        assert len(calls) == 4  # every one ran its lookup
    finally:
        leave.set()
        t.join(JOIN_S)
    assert [ctx.run(fn, "k", lookup) for _ in range(3)] == [(old,)] * 3
    assert len(calls) == 4  # hits again: nothing was stored meanwhile, the old entry stays


def test_a_pin_made_while_a_hook_is_active_does_not_hit_until_the_hook_ends():
    fn, lookup, calls = _site("pinned_inside_a_hook")
    old = latest()
    assert fn("k", lookup) == (old,)
    bump()
    with device_code(lambda job, artifact: None):
        ctx = invoke_in_world(old, contextvars.copy_context)
        assert [ctx.run(fn, "k", lookup) for _ in range(3)] == [(old,)] * 3
        assert len(calls) == 4
    assert [ctx.run(fn, "k", lookup) for _ in range(3)] == [(old,)] * 3 and len(calls) == 4


def test_a_pinned_task_reads_an_exact_list_as_an_unpinned_one_does():
    # CPython specializes subscripts of exact lists only: a subclass made every pinned hit
    # slower (tools/bench_lookup.py: the pinned hit by value at most 1.15x the plain hit).
    assert type(world_module.task_cell()) is list
    w = latest()
    bump()
    cell = invoke_in_world(w, world_module.task_cell)
    assert type(cell) is list and cell is not world_module.hot_cell
    assert cell[0] is None and cell[2] == w  # launches take the slow path; its world


def test_a_pins_cell_kept_after_its_call_keeps_no_pin_in_force():
    """A pin lives as long as a context that can run code in it: its cell, kept by whoever
    took it, is not such a context; a context copied in the call is."""
    import gc

    fn, lookup, calls = _site("kept_cell")
    w = latest()
    bump()
    before = world_module.pins()
    kept_cell, ctx = invoke_in_world(
        w, lambda: (world_module.task_cell(), contextvars.copy_context())
    )
    assert world_module.pins() == before + 1 and w in world_module.pinned_worlds()
    assert ctx.run(fn, "k", lookup) == (w,) and ctx.run(fn, "k", lookup) == (w,)
    assert len(calls) == 1  # a miss, then a hit through the kept context's cell
    del ctx
    gc.collect()
    assert world_module.pins() == before and w not in world_module.pinned_worlds()
    assert kept_cell[2] == w  # still there, holding nothing in force


def test_a_context_made_unpinned_inside_a_pinned_call_keeps_no_pin():
    # invokelatest runs unpinned: a context copied there neither reads the pinned world nor
    # keeps the pin in force after the pinned call
    import gc

    from specializer import invokelatest

    w = latest()
    bump()
    before = world_module.pins()
    ctx = invoke_in_world(w, invokelatest, contextvars.copy_context)
    gc.collect()
    assert world_module.pins() == before and w not in world_module.pinned_worlds()
    assert ctx.run(current) == latest() and ctx.run(world_module.task_cell) is world_module.hot_cell
