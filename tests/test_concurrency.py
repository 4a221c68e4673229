"""Concurrency: real threads and asyncio tasks using cached lookups while the world rises.

Every loop here is bounded in count and in time (well under a few seconds). Threads
never assert directly (a failed assert would only end that thread): they collect
failures, and the test asserts the list is empty once every thread has been joined.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import itertools
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from pybackend import kernel, run

from specializer import (
    GenericFunction,
    bump,
    cached_lookup,
    current,
    invoke_in_world,
    latest,
    specialize,
)
from specializer import compiler as compiler_module
from specializer import lookup as lookup_module
from specializer import world as world_module
from specializer.lookup import _entries as cell_entries  # (world, key, result) of a cell

TT = (np.float32,)
JOIN_S = 10.0  # generous: a thread still alive after this is a hang, reported as such

_fresh = itertools.count()


@contextmanager
def fast_thread_switching() -> Iterator[None]:
    """Switch threads far more often than by default, so that races actually interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class Failures:
    """Failures collected by threads, checked by the test after joining them."""

    def __init__(self) -> None:
        self._items: list[str] = []
        self._lock = threading.Lock()

    def add(self, msg: str) -> None:
        with self._lock:
            if len(self._items) < 20:
                self._items.append(msg)

    def guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                fn()
            except BaseException as e:  # report, never let a thread die silently
                self.add(f"{threading.current_thread().name}: {type(e).__name__}: {e}")

        return body

    def check(self) -> None:
        assert not self._items, "\n".join(self._items)


def start(*bodies: Callable[[], None], failures: Failures) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=failures.guard(b), name=f"t{i}", daemon=True)
        for i, b in enumerate(bodies)
    ]
    for t in threads:
        t.start()
    return threads


def join(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN_S)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {JOIN_S} s: {hung}"


def world_lookup(F, gf, key, calls: list[int] | None = None):
    """One call site: a cached lookup whose result is derived from (its world, the key)
    and the method the task's world dispatches to."""

    def lookup():
        if calls is not None:
            calls.append(1)
        return (current(), key, gf.methodinstance(TT).method)

    return cached_lookup(lookup, tuple, F, TT, key)


def _numbered_fn(i: int):
    def fn(x: np.number) -> str:
        return f"method {i}"

    return fn


KEYS = ["a", "b", "c", "d", "e", "f", 0, 1, 2, 1.0, 2.0, (1,)]


def test_pinned_and_unpinned_threads_get_results_of_their_own_key_and_world():
    n = next(_fresh)
    F = GenericFunction(f"conc_site_{n}")
    gf = GenericFunction(f"conc_gf_{n}")
    unrelated = GenericFunction(f"conc_unrelated_{n}")
    # Worlds for the pinned threads, each dispatching to a different method.
    pinned: list[tuple[int, object]] = []
    for i in range(4):
        m = gf.add_method(_numbered_fn(i), signature=(np.number,))
        bump()
        pinned.append((latest(), m))
    failures = Failures()
    stop = threading.Event()
    deadline = time.monotonic() + 1.5
    seen: list[tuple[int, object]] = []  # (world, method) of unpinned results, checked after
    seen_lock = threading.Lock()
    counts = [0] * 8

    def check(res, key, lo: int, hi: int, who: str) -> None:
        w, k, _method = res
        if not (lo <= w <= hi) or k != key or type(k) is not type(key):
            failures.add(f"{who}: key {key!r} in worlds {lo}..{hi} got ({w}, {k!r})")

    def writer() -> None:
        # real definitions (replacing and adding methods, unrelated ones) and bumps
        for i in itertools.count(10):
            if stop.is_set() or i > 400 or time.monotonic() > deadline:
                break
            r = i % 4
            if r == 0:
                gf.add_method(_numbered_fn(i), signature=(np.number,))
            elif r == 1:
                gf.add_method(_numbered_fn(i), signature=(np.floating,))
            elif r == 2:
                unrelated.add_method(_numbered_fn(i), signature=(np.number,))
            else:
                bump()
            time.sleep(0.001)

    def pinned_reader(slot: int, w: int, method) -> Callable[[], None]:
        rng = random.Random(slot)

        def burst() -> None:
            for _ in range(30):
                key = rng.choice(KEYS)
                res = world_lookup(F, gf, key)
                check(res, key, w, w, f"pinned to {w}")
                if res[2] is not method:
                    failures.add(f"pinned to {w}: dispatched to {res[2]!r}, not {method!r}")
                if current() != w:
                    failures.add(f"pinned to {w}: current() is {current()}")
                counts[slot] += 1

        def body() -> None:
            for _ in range(200):
                if time.monotonic() > deadline:
                    break
                invoke_in_world(w, burst)
                unpinned_burst(rng, slot, 5)  # the pin ends between bursts

        return body

    def unpinned_burst(rng: random.Random, slot: int, count: int) -> None:
        for _ in range(count):
            key = rng.choice(KEYS)
            lo = latest()
            res = world_lookup(F, gf, key)
            hi = latest()
            check(res, key, lo, hi, "unpinned")
            with seen_lock:
                seen.append((res[0], res[2]))
            counts[slot] += 1

    def unpinned_reader(slot: int) -> Callable[[], None]:
        rng = random.Random(100 + slot)

        def body() -> None:
            for _ in range(300):
                if time.monotonic() > deadline:
                    break
                unpinned_burst(rng, slot, 20)

        return body

    with fast_thread_switching():
        threads = start(
            writer,
            *(pinned_reader(i, w, m) for i, (w, m) in enumerate(pinned)),
            unpinned_reader(4),
            unpinned_reader(5),
            failures=failures,
        )
        try:
            join(threads)
        finally:
            stop.set()
    failures.check()
    # every unpinned result's method is what its world dispatches to (old worlds never change)
    wrong = [(w, m) for w, m in seen if gf.methodinstance(TT, world=w).method is not m]
    assert not wrong, wrong[:5]
    assert all(c > 0 for c in counts[:6]), counts
    assert len({w for w, _ in seen}) > 1  # the unpinned threads really saw the world rise


def test_kernel_launches_from_threads_pinned_to_different_worlds_run_their_worlds_code():
    name = f"conc_kernel_{next(_fresh)}"
    ns: dict = {"kernel": kernel, "np": np}
    defining = threading.Lock()  # the writer defines; definitions also come from setup

    def define(i: int) -> int:
        # Running a `def` again under @kernel replaces the method (same signature).
        with defining:
            exec(
                f"@kernel\ndef {name}(x: np.number):\n"
                f"    return 'def {name}(x):\\n    return ({i}, x)'\n",
                ns,
            )
            return latest()

    pinned = [(define(i), i) for i in range(3)]
    k = ns[name]
    failures = Failures()
    deadline = time.monotonic() + 1.0
    log: list[tuple[int, int]] = [(pinned[-1][0], 2)]  # (world defined, output) in order
    log_lock = threading.Lock()
    outputs: list[tuple[int, int, int]] = []  # (lo, hi, output) of unpinned launches

    def writer() -> None:
        for i in range(3, 200):
            if time.monotonic() > deadline:
                break
            w = define(i)
            with log_lock:
                log.append((w, i))
            time.sleep(0.002)

    def pinned_launcher(w: int, expect: int) -> Callable[[], None]:
        def burst() -> None:
            for j in range(20):
                got = run(k, np.float32(j))
                if got != (expect, np.float32(j)):
                    failures.add(f"pinned to {w}: got {got}, expected method {expect}")

        def body() -> None:
            for _ in range(100):
                if time.monotonic() > deadline:
                    break
                invoke_in_world(w, burst)

        return body

    def unpinned_launcher() -> None:
        for j in range(2000):
            if time.monotonic() > deadline:
                break
            lo = latest()
            got = run(k, j)
            hi = latest()
            if got[1] != j:
                failures.add(f"unpinned: launched with {j}, kernel saw {got[1]}")
            outputs.append((lo, hi, got[0]))

    with fast_thread_switching():
        join(
            start(
                writer,
                *(pinned_launcher(w, i) for w, i in pinned),
                unpinned_launcher,
                unpinned_launcher,
                failures=failures,
            )
        )
    failures.check()
    # An unpinned launch ran the code of a definition current at some world it could read.
    log.sort()
    for lo, hi, out in outputs:
        live = [
            i
            for j, (w, i) in enumerate(log)
            if w <= hi and (j + 1 == len(log) or log[j + 1][0] > lo)
        ]
        assert out in live, (lo, hi, out, log)


def test_racing_misses_may_both_run_the_lookup_but_store_only_whole_entries_of_their_own():
    F = GenericFunction(f"race_site_{next(_fresh)}")
    runs: list[tuple[int, str]] = []
    runs_lock = threading.Lock()

    def call(key: str):
        def lookup():
            with runs_lock:
                runs.append((current(), key))
            time.sleep(0.002)  # widen the window between the miss and the store
            return (current(), key, object())

        return cached_lookup(lookup, tuple, F, (), key)

    fn = specialize(_site_code(call), tuple, F, (), str)  # the function `call` uses
    failures = Failures()
    deadline = time.monotonic() + 1.5
    w = latest()
    rounds = 0
    with fast_thread_switching():
        for r in range(40):
            if time.monotonic() > deadline:
                break
            rounds += 1
            keys = [f"r{r}-same"] * 4 + [f"r{r}-k{i}" for i in range(4)]
            barrier = threading.Barrier(len(keys))
            results: dict[int, tuple] = {}

            def racer(i: int, key: str, results=results, barrier=barrier) -> Callable[[], None]:
                def body() -> None:
                    barrier.wait(JOIN_S)
                    results[i] = call(key)
                    again = call(key)  # a hit, or a miss racing another thread's store
                    if again[:2] != (w, key):
                        failures.add(f"second call for {key!r} got {again!r}")

                return body

            join(start(*(racer(i, key) for i, key in enumerate(keys)), failures=failures))
            for i, key in enumerate(keys):
                res = results.get(i)
                if res is None or res[0] != w or res[1] != key:
                    failures.add(f"round {r}: key {key!r} got {res!r}")
            # whatever was stored is whole and belongs to its own world and key
            for ew, ek, er in cell_entries(fn.__defaults__[0]):
                if er[0] != ew or er[1] != ek or ew != w:
                    failures.add(f"round {r}: torn or foreign entry ({ew}, {ek!r}, {er!r})")
    failures.check()
    assert latest() == w, "nothing may define while this test runs"
    distinct = {k for _, k in runs}
    assert len(distinct) == 5 * rounds  # every distinct key ran its lookup at least once
    assert len(runs) <= 16 * rounds  # and no call ran it more than once
    # The keys the cell holds hit now: no lookup runs.
    before = len(runs)
    stored = [k for _, k, _ in cell_entries(fn.__defaults__[0])]
    assert len(stored) == 4  # each round stored at least 5 distinct keys: the cell is full
    for key in stored:
        assert call(key)[:2] == (w, key)
    assert len(runs) == before


def _site_code(call):
    """The code object of the lambda-like ``lookup`` defined inside ``call``: its site."""
    return next(
        c for c in call.__code__.co_consts if hasattr(c, "co_name") and c.co_name == "lookup"
    )


def test_asyncio_task_that_outlives_its_pinned_call_keeps_its_world():
    """SPEC 1 and 9: a task created inside a pinned call keeps that world for its whole life,
    also after the call returned and the world rose (Julia 1.8 #41449)."""
    n = next(_fresh)
    F = GenericFunction(f"async_site_{n}")
    gf = GenericFunction(f"async_gf_{n}")
    old_method = gf.add_method(_numbered_fn(0), signature=(np.number,))
    old = latest()
    pins_before = world_module.pins()

    async def in_task() -> tuple:
        await asyncio.sleep(0)  # runs after invoke_in_world has returned
        return (current(), gf.methodinstance(TT).method, world_lookup(F, gf, "k"))

    async def main() -> tuple:
        task = invoke_in_world(old, lambda: asyncio.get_running_loop().create_task(in_task()))
        assert current() == latest()  # the creator itself is unpinned again
        assert world_module.pins() == pins_before + 1  # the task holds the pin
        # the latest world moves on, with a more specific method; the task keeps its own
        gf.add_method(_numbered_fn(1), signature=(np.float32,))
        bump()
        mine = world_lookup(F, gf, "k")
        return await task, mine

    (w, method, res), mine = asyncio.run(main())
    assert w == old and method is old_method
    assert res[:2] == (old, "k") and mine[:2] == (latest(), "k")
    gc.collect()
    assert world_module.pins() == pins_before


def test_new_thread_starts_unpinned_even_when_started_by_a_pinned_task():
    F = GenericFunction(f"thread_site_{next(_fresh)}")
    gf = GenericFunction(f"thread_gf_{next(_fresh)}")
    gf.add_method(_numbered_fn(0), signature=(np.number,))
    old = latest()
    bump()
    seen: dict[str, tuple] = {}

    def body() -> None:
        plain = threading.Thread(
            target=lambda: seen.__setitem__("plain", (current(), world_lookup(F, gf, "k")))
        )
        # a thread that runs in a copy of the pinned context is pinned: the explicit way
        ctx = contextvars.copy_context()
        carried = threading.Thread(
            target=lambda: ctx.run(
                lambda: seen.__setitem__("carried", (current(), world_lookup(F, gf, "k")))
            )
        )
        plain.start()
        carried.start()
        plain.join(JOIN_S)
        carried.join(JOIN_S)

    invoke_in_world(old, body)
    now = latest()
    assert seen["plain"][0] == now and seen["plain"][1][:2] == (now, "k")
    assert seen["carried"][0] == old and seen["carried"][1][:2] == (old, "k")


def test_hit_takes_no_lock_while_another_thread_holds_the_miss_lock():
    F = GenericFunction(f"nolock_site_{next(_fresh)}")
    gf = GenericFunction(f"nolock_gf_{next(_fresh)}")
    gf.add_method(_numbered_fn(0), signature=(np.number,))
    calls: list[int] = []
    first = world_lookup(F, gf, "k", calls)
    old = latest()
    pinned_first = invoke_in_world(old, world_lookup, F, gf, "k", calls)
    assert len(calls) == 1 and pinned_first is first

    failures = Failures()
    held, release = threading.Event(), threading.Event()
    hits_done = threading.Event()
    miss_result: list[tuple] = []
    miss_calls: list[int] = []

    def holder() -> None:
        with lookup_module._lock(), compiler_module._cache_lock():  # the stores', the cache's
            held.set()
            release.wait(JOIN_S)

    def hitter() -> None:
        held.wait(JOIN_S)

        def hits() -> None:
            for _ in range(1000):
                if world_lookup(F, gf, "k", calls) is not first:
                    failures.add(f"hit in world {current()} returned another result")

        hits()  # unpinned
        invoke_in_world(old, hits)  # pinned: the slow path, through the entries, no lock
        hits_done.set()

    def misser() -> None:
        held.wait(JOIN_S)
        miss_result.append(world_lookup(F, gf, "other", miss_calls))

    with fast_thread_switching():
        threads = start(holder, hitter, misser, failures=failures)
        try:
            assert hits_done.wait(5.0), "a hit blocked while the miss lock was held"
            assert len(calls) == 1  # every one of those calls was a hit
            # the lock held is the one a miss stores under: the miss ran its lookup and waits
            until = time.monotonic() + 5.0
            while not miss_calls and time.monotonic() < until:
                time.sleep(0.01)
            time.sleep(0.1)
            assert threads[2].is_alive() and not miss_result and len(miss_calls) == 1
        finally:
            release.set()
            join(threads)
    failures.check()
    assert miss_result[0][:2] == (old, "other") and len(miss_calls) == 1


def site_with_a_definition_meanwhile(F, gf, key, during: Callable[[], None], calls: list[int]):
    """A call site whose lookup first lets another thread define something."""

    def lookup():
        calls.append(1)
        during()
        return (current(), key, gf.methodinstance(TT).method)

    return cached_lookup(lookup, tuple, F, TT, key)


def test_definition_by_another_thread_during_a_miss_is_never_filed_under_the_older_world():
    n = next(_fresh)
    F = GenericFunction(f"meanwhile_site_{n}")
    gf = GenericFunction(f"meanwhile_gf_{n}")
    m0 = gf.add_method(_numbered_fn(0), signature=(np.number,))
    w = latest()
    calls: list[int] = []
    defined: list[object] = []

    def define_in_another_thread() -> None:
        t = threading.Thread(
            target=lambda: defined.append(gf.add_method(_numbered_fn(1), signature=(np.float32,)))
        )
        t.start()
        t.join(JOIN_S)
        assert latest() == w + 1  # the definition happened while this lookup ran

    r = site_with_a_definition_meanwhile(F, gf, "k", define_in_another_thread, calls)
    # the call read world w once: the lookup ran in w and its result is filed under w
    assert r == (w, "k", m0) and len(calls) == 1
    same = invoke_in_world(w, site_with_a_definition_meanwhile, F, gf, "k", lambda: None, calls)
    assert same is r and len(calls) == 1  # a task in world w hits that entry
    newer = site_with_a_definition_meanwhile(F, gf, "k", lambda: None, calls)
    assert newer == (w + 1, "k", defined[0]) and len(calls) == 2


def test_compile_hooks_in_several_threads_may_look_kernels_up_themselves():
    # A hook that also compiles the kernel for another config (say, code for a second device),
    # called from two threads at once: the cache's one re-entrant lock lets both finish; locks
    # per job would deadlock here, each thread holding one job and waiting for the other's.
    from pybackend import PyBackend
    from pybackend import typeof as py_typeof

    from specializer import CompilerConfig, compile_count
    from specializer.compiler import device_code
    from specializer.kernels import Definitions, code_of, uncached_lookup

    backend = PyBackend()
    c1, c2 = CompilerConfig(backend, ("one",)), CompilerConfig(backend, ("two",))
    other = {c1: c2, c2: c1}
    defs = Definitions(py_typeof)

    @defs.kernel
    def hooked(x: np.int64) -> str:
        return "def hooked(x):\n    return x + 1\n"

    inside = threading.local()
    barrier = threading.Barrier(2)
    seen: list[object] = []

    def hook(job, artifact) -> None:
        seen.append(job.config)
        if getattr(inside, "hook", False):
            return
        inside.hook = True
        try:
            try:
                barrier.wait(0.2)  # both threads in their hooks, if the cache allowed it
            except threading.BrokenBarrierError:
                pass
            code_of(hooked, job.mi.tt, other[job.config])
        finally:
            inside.hook = False

    results: dict[object, int] = {}
    failures = Failures()
    before = compile_count()

    def lookup_in(config):
        def body() -> None:
            results[config] = uncached_lookup(hooked, (np.int64,), config, "ctx")(1)

        return body

    with device_code(hook):
        join(start(lookup_in(c1), lookup_in(c2), failures=failures))
    failures.check()
    assert results == {c1: 2, c2: 2}
    assert compile_count() - before == 2  # each config compiled once
    assert seen.count(c1) == 2 and seen.count(c2) == 2


def _in_thread(fn: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_overlapping_precompile_blocks_in_two_threads_are_counted():
    from specializer import generating_output, precompile_output

    assert not generating_output()
    a_in, b_in, a_out, b_out = (threading.Event() for _ in range(4))
    seen: dict[str, bool] = {}

    def a() -> None:
        with precompile_output():
            a_in.set()
            b_in.wait(JOIN_S)
        seen["a after its block, b's still on"] = generating_output()
        a_out.set()

    def b() -> None:
        a_in.wait(JOIN_S)
        with precompile_output():
            b_in.set()
            a_out.wait(JOIN_S)
            seen["b inside, a's block over"] = generating_output()
        b_out.set()

    threads = [_in_thread(a), _in_thread(b)]
    for t in threads:
        t.join(JOIN_S)
    assert b_out.is_set()
    assert seen == {"a after its block, b's still on": True, "b inside, a's block over": True}
    assert not generating_output()  # off for good after both
    world_module.refresh()
    assert world_module.hot_cell[0] == latest()


def test_precompile_blocks_from_many_threads_in_any_order_end_with_the_mode_off():
    from specializer import generating_output, precompile_output

    failures = Failures()
    go = threading.Barrier(8)

    def body(i: int) -> None:
        rnd = random.Random(i)
        go.wait(JOIN_S)
        for _ in range(200):
            if rnd.random() < 0.3:
                # A block that turns the mode off is, while it lasts, the innermost block of
                # every thread: inside any block only the end state below can be claimed.
                with precompile_output(False):
                    time.sleep(0)
            else:
                with precompile_output():
                    time.sleep(0)

    with fast_thread_switching():
        join(start(*(lambda i=i: body(i) for i in range(8)), failures=failures))
    failures.check()
    assert not generating_output()


def test_explicit_switches_and_blocks_keep_working():
    from specializer import generating_output, precompile_output

    assert not generating_output()
    precompile_output(True)
    try:
        assert generating_output()
        with precompile_output(False):
            assert not generating_output()
        assert generating_output()  # the switch from before the block is back
    finally:
        precompile_output(False)
    assert not generating_output()
    with precompile_output(True):
        assert generating_output()
    assert not generating_output()  # the argument's switch lasted until the block began


def test_compile_hooks_in_overlapping_blocks_of_two_threads_each_count():
    from specializer import device_code

    a_in, b_in, a_out = (threading.Event() for _ in range(3))
    seen: dict[str, int] = {}

    def a() -> None:
        with device_code(lambda job, art: None):
            a_in.set()
            b_in.wait(JOIN_S)
        a_out.set()

    def b() -> None:
        a_in.wait(JOIN_S)
        with device_code(lambda job, art: None):
            b_in.set()
            a_out.wait(JOIN_S)
            seen["hooks inside b after a ended"] = len(world_module.hooks())
        seen["hooks after both"] = len(world_module.hooks())

    threads = [_in_thread(a), _in_thread(b)]
    for t in threads:
        t.join(JOIN_S)
    assert seen == {"hooks inside b after a ended": 1, "hooks after both": 0}
    assert not world_module.bypassing()
