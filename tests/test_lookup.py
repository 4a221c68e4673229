import gc
import inspect
import traceback
import weakref

import numpy as np
import pytest
from pybackend import kernel, pyfunction, run

import specializer
from specializer import (
    GenericFunction,
    cached_lookup,
    compile_count,
    device_code,
    invoke_in_world,
    latest,
    precompile_output,
    specialize,
)
from specializer.codegen import render
from specializer.lookup import ENTRIES


class Counter:
    """A lookup that counts its calls and returns (n, key, world) as its result."""

    def __init__(self):
        self.calls = 0

    def __call__(self, key):
        self.calls += 1
        return (self.calls, key, specializer.current())


def make_site():
    """A fresh call site (a new code object) for each test."""
    counter = Counter()
    F = GenericFunction("site")
    ns = {}
    exec(
        "def call(key, counter, F, tt=()):\n"
        "    return cached_lookup(lambda: counter(key), tuple, F, tt, key)",
        {"cached_lookup": cached_lookup},
        ns,
    )
    return (lambda key, tt=(): ns["call"](key, counter, F, tt)), counter


def test_hit_returns_the_stored_result_without_running_lookup():
    call, c = make_site()
    r = call("k")
    assert call("k") is r and c.calls == 1


def test_lambda_written_in_one_place_is_one_site_however_often_created():
    call, c = make_site()
    for _ in range(5):
        call("k")
    assert c.calls == 1


def test_world_must_match_exactly():
    call, c = make_site()
    r = call("k")
    specializer.bump()
    r2 = call("k")
    assert c.calls == 2 and r2 != r and r2[2] == latest()


def test_lookup_in_an_older_world_keeps_hitting_alongside_the_new_one():
    call, c = make_site()
    old = latest()
    call("k")
    specializer.bump()
    call("k")
    assert c.calls == 2
    assert invoke_in_world(old, call, "k")[2] == old
    assert call("k")[2] == latest()
    assert c.calls == 2


def test_key_types_never_share_an_entry():
    call, c = make_site()
    a, b = call(1), call(1.0)
    assert c.calls == 2 and a[1] is not b[1]
    assert type(a[1]) is int and type(b[1]) is float
    assert call(1) is a and call(1.0) is b


def test_equal_keys_hit_like_a_dict():
    call, c = make_site()
    r = call(("ctx", ("-O2",)))
    assert call(("ctx", ("-O2",))) is r and c.calls == 1


def test_four_most_recent_results_are_kept_and_the_oldest_dropped():
    assert ENTRIES == 4
    call, c = make_site()
    for k in "abcd":
        call(k)
    for k in "dcba":
        call(k)
    assert c.calls == 4
    call("e")  # drops the oldest stored: "a"
    assert c.calls == 5
    for k in "bcde":
        call(k)
    assert c.calls == 5
    call("a")
    assert c.calls == 6


def test_exception_in_lookup_propagates_and_stores_nothing():
    F = GenericFunction("exc")
    calls = []

    def failing():
        calls.append(1)
        raise ValueError("boom")

    def call():
        return cached_lookup(failing, tuple, F, (), "k")

    for _ in range(2):
        with pytest.raises(ValueError, match="boom"):
            call()
    assert len(calls) == 2


def test_wrong_result_type_raises_and_is_not_stored():
    F = GenericFunction("wrongtype")
    calls = []

    def lookup():
        calls.append(1)
        return [1]

    for _ in range(2):
        with pytest.raises(TypeError, match="returned list, not tuple: nothing was stored"):
            cached_lookup(lookup, tuple, F, (), "k")
    assert len(calls) == 2


def test_key_whose_equality_raises_propagates_the_error():
    class Key:
        def __eq__(self, other):
            raise RuntimeError("no equality")

        __hash__ = object.__hash__

    F = GenericFunction("rawkey")

    def lookup():
        return (1,)

    def call(k):
        return cached_lookup(lookup, tuple, F, (), k)

    k1 = Key()
    assert call(k1) == (1,)
    assert call(k1) == (1,)  # `is` first: no == needed
    with pytest.raises(RuntimeError, match="no equality"):
        call(Key())


def test_specialize_returns_the_function_cached_lookup_uses():
    F = GenericFunction("spec_same")
    calls = []

    def lookup():
        calls.append(1)
        return ("r",)

    fn = specialize(lookup, tuple, F, (np.float32,), str)
    assert specialize(lookup.__code__, tuple, F, (np.float32,), str) is fn
    r = fn("k", lookup)
    assert cached_lookup(lookup, tuple, F, (np.float32,), "k") is r
    assert len(calls) == 1


def test_specialize_rejects_bad_arguments():
    F = GenericFunction("badspec")
    with pytest.raises(TypeError, match="code object"):
        specialize(42, tuple, F, (), str)
    with pytest.raises(TypeError, match="V is the class"):
        specialize(lambda: 0, "tuple", F, (), str)
    with pytest.raises(TypeError, match="tuple of argument types"):
        specialize(lambda: 0, tuple, F, (1,), str)
    with pytest.raises(TypeError, match="hashable"):
        specialize(lambda: 0, tuple, F, [np.int64], str)
    with pytest.raises(TypeError, match="hashable"):
        cached_lookup(lambda: (1,), tuple, F, [np.int64], "k")
    with pytest.raises(TypeError, match="code object"):
        cached_lookup(print, tuple, F, (), "k")


def test_compile_hook_bypasses_the_cache_so_it_sees_every_lookup():
    call, c = make_site()
    call("k")
    with device_code(lambda job, artifact: None):
        call("k")
        call("k")
    assert c.calls == 3
    call("k")  # the entry from before the block is still there
    assert c.calls == 3


def test_nothing_is_stored_while_a_hook_is_active():
    call, c = make_site()
    with device_code(lambda job, artifact: None):
        call("fresh")
    call("fresh")
    assert c.calls == 2


def test_precompile_mode_stores_nothing_and_every_call_runs_lookup():
    call, c = make_site()
    with precompile_output():
        assert specializer.generating_output()
        call("k")
        call("k")
    assert not specializer.generating_output()
    assert c.calls == 2
    call("k")
    call("k")
    assert c.calls == 3


def test_lookup_runs_pinned_to_the_world_the_call_read():
    F = GenericFunction("pinned_miss")
    seen = []

    def lookup():
        specializer.bump()  # a definition made meanwhile
        seen.append(specializer.current())
        return (specializer.current(),)

    w = latest()
    r = cached_lookup(lookup, tuple, F, (), "k")
    assert seen == [w] and r == (w,)
    # stored under w, which is no longer the latest: the next call misses
    cached_lookup(lookup, tuple, F, (), "k")
    assert len(seen) == 2


def test_more_specific_method_is_seen_after_definition():
    @kernel
    def msm(x: np.number):
        return "def msm(x): return 'number'"

    assert run(msm, 1) == "number"
    assert run(msm, 1) == "number"

    @kernel
    def msm(x: np.int64):
        return "def msm(x): return 'int64'"

    assert run(msm, 1) == "int64"


def test_captured_values_come_from_each_launch():
    @kernel
    def scaled(a: np.number, x: np.number):
        return "def scaled(a, x): return a * x"

    assert run(scaled.capture(2), 5) == 10
    n = compile_count()
    assert run(scaled.capture(3), 5) == 15  # same type: a hit, but the values are this launch's
    assert compile_count() == n


def test_cache_does_not_keep_a_kernel_instance_alive():
    @kernel
    def held(a: np.number, x: np.number):
        return "def held(a, x): return a + x"

    inst = held.capture(np.float64(1.5))
    ref = weakref.ref(inst)
    assert run(inst, 1.0) == 2.5
    assert pyfunction(inst, (np.float64,)) is pyfunction(held.capture(0.0), (np.float64,))
    del inst
    gc.collect()
    assert ref() is None


def test_generated_function_has_a_sanitized_deterministic_name_and_real_source():
    F = GenericFunction('evil"name\nimport os; os._exit(3)#')

    class Weird:
        pass

    Weird.__name__ = "Weird'); raise SystemExit('"
    fn = specialize(lambda: 0, tuple, F, (np.float32,), Weird)
    assert fn.__name__.isidentifier()
    assert fn.__name__.startswith("lookup_lambda_evil_name_import_os_os_exit_3_float32_Weird")
    # the source is the template rendered with that name and nothing else
    assert inspect.getsource(fn) == render("lookup.py.j2", name=fn.__name__, entries=ENTRIES)
    assert fn(Weird(), lambda: ("ok",)) == ("ok",)


def test_key_with_code_in_its_repr_is_never_exec_d():
    F = GenericFunction("keyrepr")

    class Key(str):
        def __repr__(self):
            return "__import__('os')._exit(7)"

    k = Key("x")
    assert cached_lookup(lambda: ("v",), tuple, F, (), k) == ("v",)
    assert cached_lookup(lambda: ("v",), tuple, F, (), k) == ("v",)


def test_generated_sources_lists_each_function_with_its_specialization():
    F = GenericFunction("listed")
    fn = specialize(lambda: 0, tuple, F, (np.int64,), str)
    entry = next(g for g in specializer.generated_sources() if g.name == fn.__name__)
    assert entry.source == inspect.getsource(fn)
    assert "listed(np.int64)" in entry.specialization and "key str" in entry.specialization
    assert entry.template == "lookup.py.j2"


def test_traceback_points_into_the_generated_lines():
    F = GenericFunction("tb")

    class Key:
        def __eq__(self, other):
            raise ArithmeticError("in key ==")

        __hash__ = object.__hash__

    fn = specialize(lambda: 0, tuple, F, (), Key)
    fn(Key(), lambda: ("x",))
    try:
        fn(Key(), lambda: ("x",))
    except ArithmeticError as e:
        frames = traceback.extract_tb(e.__traceback__)
    frame = next(f for f in frames if f.name == fn.__name__)
    assert frame.line == "if k is key or k == key:"  # the newest entry's key, by value


CELL = """
def launch(F, key):
    return cached_lookup(lambda: Result(key), Result, F, (), key)
"""


class Result:
    def __init__(self, key):
        self.key = key


def _collect():
    """Two collections: the first frees the cell (a function and its globals are a cycle),
    whose code's weak reference then releases the site's functions, freed by the second."""
    gc.collect()
    gc.collect()


def _run_cell(F, key):
    """What a notebook cell does: compile and run source that defines a function with a
    cached lookup in it, and call it. Returns a weak reference to the cached result."""
    ns = {"cached_lookup": cached_lookup, "Result": Result}
    exec(compile(CELL, "<cell>", "exec"), ns)
    r = ns["launch"](F, key)
    assert ns["launch"](F, key) is r  # the second call hits
    return weakref.ref(r)


def test_results_of_a_site_whose_code_is_gone_are_released():
    from specializer import lookup as lookup_module

    F = GenericFunction("cell_site")
    gc.collect()
    before = (len(lookup_module._specializations), len(lookup_module._sites))
    ref = _run_cell(F, "k")
    _collect()
    assert ref() is None  # the cell's function, its code, and so its site are gone
    assert (len(lookup_module._specializations), len(lookup_module._sites)) == before


def test_re_running_a_cell_keeps_memory_bounded_and_names_unique():
    from specializer import codegen
    from specializer import lookup as lookup_module

    F = GenericFunction("rerun_site")
    gc.collect()
    before = len(lookup_module._specializations)
    refs = [_run_cell(F, i) for i in range(300)]
    _collect()
    assert all(r() is None for r in refs)
    assert len(lookup_module._specializations) == before
    names = [g.name for g in specializer.generated_sources() if "rerun_site" in g.name]
    assert len(names) == len(set(names))  # names are never reused, released or not
    live = len(codegen._generated)
    assert len(specializer.generated_sources()) <= live + codegen.RELEASED_KEPT


def test_generated_names_take_a_counter_per_base_name():
    from specializer import codegen

    F = GenericFunction("counted_name")
    fns = [specialize(compile("lambda: 0", "<c>", "eval"), tuple, F, (), int) for _ in range(3)]
    base = fns[0].__name__
    assert [f.__name__ for f in fns] == [base, f"{base}__2", f"{base}__3"]
    assert codegen._counts[base] == 3
    assert "__" not in base  # so no base name is ever another's numbered name


def test_forget_key_drops_the_results_kept_for_a_key_part_and_nothing_else():
    from specializer.lookup import forget_key

    class Token:  # what a back-end keys a context by
        pass

    call, c = make_site()
    gone, kept = Token(), Token()
    r_gone = call((gone, ()))
    r_plain = call(gone)
    r_kept = call((kept, ()))
    assert c.calls == 3
    alive = weakref.ref(gone)
    forget_key(gone)
    del gone, r_gone, r_plain
    gc.collect()
    assert alive() is None  # no cell keeps the key (or its results)
    assert call((kept, ())) is r_kept and c.calls == 3  # another key still hits


def test_a_specialized_lookup_called_with_a_key_of_another_type_is_a_type_error():
    F = GenericFunction("keytyped")
    fn = specialize(lambda: 0, tuple, F, (np.int64,), str)
    calls = []
    with pytest.raises(TypeError) as e:
        fn(3, lambda: calls.append(1) or ("r",))
    assert calls == []  # nothing looked up, nothing stored
    assert "was called with a key of type int: it takes keys of type str" in str(e.value)
    assert "keytyped(np.int64)" in str(e.value)
    assert fn("k", lambda: ("r",)) == ("r",)

    class Named(str):
        pass

    assert fn(Named("n"), lambda: ("sub",)) == ("sub",)  # an instance of the key type


def test_an_equal_f_that_is_another_object_hits_and_makes_one_specialization():
    """F is a key as a dict sees it: an F built anew on each call (a str, a tuple, which take
    no weak reference) finds the entry of an equal one, and no function is made per call."""
    from specializer import lookup as lookup_module

    runs = []

    def site(i):
        F = "".join(["equal_", "f"])  # a new str object each call
        return cached_lookup(lambda: runs.append(i) or i, int, F, (), 5)

    before = len(lookup_module._specializations)
    assert [site(i) for i in range(50)] == [0] * 50
    assert runs == [0]
    assert len(lookup_module._specializations) == before + 1

    def tuple_site(n):
        return cached_lookup(lambda: n, int, ("f", n // 100), (), 0)  # equal tuples, built anew

    assert [tuple_site(n) for n in (1, 2, 3)] == [1, 1, 1]
