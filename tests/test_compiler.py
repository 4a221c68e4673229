import gc
import weakref

import numpy as np
import pytest
from pinned import PinnedThread
from pybackend import BACKEND, CONFIG, device, kernel, run, typeof

import specializer
from specializer import (
    CompileError,
    compile_count,
    compiler,
    device_code,
    device_code_source,
    latest,
)
from specializer.compiler import CompilerJob, compile_and_link, forget_context
from specializer.kernels import DeviceFunction, Kernel, uncached_lookup


def uncached(f, *args, context="ctx0"):
    """A launch through the uncached lookup (no cached_lookup cell keeps a result)."""
    return uncached_lookup(f, tuple(typeof(a) for a in args), CONFIG, context)(*args)


def test_unrelated_definition_raises_the_world_but_recompiles_nothing():
    @kernel
    def plus1(x: np.number):
        return "def plus1(x): return x + 1"

    assert run(plus1, 1) == 2
    n = compile_count()

    @kernel
    def unrelated_cc(x: np.number):
        return "def unrelated_cc(x): return x"

    specializer.bump()
    assert run(plus1, 1) == 2
    assert compile_count() == n


def test_callee_redefinition_recompiles_dependents_transitively_and_nothing_else():
    @device
    def leaf_cc():
        return "def leaf_cc(v): return v * 2"

    @device(callees=[leaf_cc])
    def mid_cc():
        return "def mid_cc(v): return leaf_cc(v) + 1"

    @kernel(callees=[mid_cc])
    def top_cc(x: np.number):
        return "def top_cc(x): return mid_cc(x)"

    @kernel
    def independent_cc(x: np.number):
        return "def independent_cc(x): return -x"

    assert run(top_cc, 3) == 7 and run(independent_cc, 3) == -3
    n = compile_count()

    @device
    def leaf_cc():
        return "def leaf_cc(v): return v * 10"

    assert run(independent_cc, 3) == -3
    assert compile_count() == n  # not dependent: still valid
    assert run(top_cc, 3) == 31
    assert compile_count() == n + 1  # the dependent kernel, once
    assert run(top_cc, 3) == 31
    assert compile_count() == n + 1


def test_old_world_reuses_the_code_compiled_for_it_while_a_pin_holds_that_world():
    @device
    def sq_cc():
        return "def sq_cc(v): return v * v"

    @kernel(callees=[sq_cc])
    def app_cc(x: np.number):
        return "def app_cc(x): return sq_cc(x)"

    assert uncached(app_cc, 3) == 9
    old = latest()
    with PinnedThread(old) as pinned:  # holds world `old`

        @device
        def sq_cc():
            return "def sq_cc(v): return v * v * v"

        assert uncached(app_cc, 3) == 27
        n = compile_count()
        assert pinned.run(uncached, app_cc, 3) == 9
        assert specializer.invoke_in_world(old, uncached, app_cc, 3) == 9
        assert compile_count() == n


def test_an_older_world_whose_code_was_released_compiles_it_again():
    @device
    def sq_rel():
        return "def sq_rel(v): return v * v"

    @kernel(callees=[sq_rel])
    def app_rel(x: np.number):
        return "def app_rel(x): return sq_rel(x)"

    assert uncached(app_rel, 3) == 9
    old = latest()

    @device
    def sq_rel():
        return "def sq_rel(v): return v * v * v"

    n = compile_count()
    assert specializer.invoke_in_world(old, uncached, app_rel, 3) == 9  # no pin held `old`
    assert compile_count() == n + 1
    assert uncached(app_rel, 3) == 27 and compile_count() == n + 2


def _code(f, tt=(np.int64,)):
    """The live code instance of ``f(tt)`` in the latest world."""
    mi = f.methodinstance(tt)
    return next(ci for ci in mi.code[CONFIG._key] if ci.valid(latest()))


def test_redefining_a_kernel_releases_its_old_code_and_handles():
    def body(i):
        return lambda x: f"def rel_k(x): return x + {i}"

    rel_k = Kernel("rel_k", typeof)
    rel_k.add_method(body(0), signature=(np.number,))
    assert uncached(rel_k, 1) == 1
    ci = _code(rel_k)
    artifact, linked = weakref.ref(ci.artifact), weakref.ref(ci.linked["ctx0"][1])
    ci = None
    for i in range(1, 40):
        rel_k.add_method(body(i), signature=(np.number,))
        assert uncached(rel_k, 1) == 1 + i
    gc.collect()
    assert artifact() is None and linked() is None
    assert len({(ci.mi, ci.config) for ci in compiler.code_instances(rel_k)}) == 1


def test_redefining_a_callee_releases_the_dependents_old_code():
    def leaf(i):
        return lambda: f"def rel_leaf(v): return v * {i}"

    rel_leaf = DeviceFunction("rel_leaf")
    rel_leaf.add_method(leaf(1), signature=())

    @kernel(callees=[rel_leaf])
    def rel_top(x: np.number):
        return "def rel_top(x): return rel_leaf(x)"

    assert uncached(rel_top, 2) == 2
    first = weakref.ref(_code(rel_top).artifact)
    for i in range(2, 30):
        rel_leaf.add_method(leaf(i), signature=())
        assert uncached(rel_top, 2) == 2 * i
    gc.collect()
    assert first() is None
    # one code instance, not one per redefinition
    assert len(compiler.code_instances(rel_top)) == 1


def test_a_live_pin_keeps_its_worlds_code_until_the_pin_ends():
    @kernel
    def pin_keep(x: np.number):
        return "def pin_keep(x): return 'old'"

    assert uncached(pin_keep, 1) == "old"
    old = latest()
    artifact = weakref.ref(_code(pin_keep).artifact)
    pinned = PinnedThread(old)

    @kernel
    def pin_keep(x: np.number):
        return "def pin_keep(x): return 'new'"

    assert uncached(pin_keep, 1) == "new"
    gc.collect()
    assert artifact() is not None  # the pinned world can still use it
    n = compile_count()
    assert pinned.run(uncached, pin_keep, 1) == "old" and compile_count() == n
    pinned.end()
    assert old not in specializer.world.pinned_worlds()
    specializer.GenericFunction("pin_keep_unrelated").add_method(lambda: "", signature=())
    gc.collect()
    assert artifact() is None  # released by the next definition


def test_code_compiled_for_a_pinned_older_world_is_released_when_the_pin_ends():
    @kernel
    def pin_old(x: np.number):
        return "def pin_old(x): return 'old'"

    old = latest()

    @kernel
    def pin_old(x: np.number):
        return "def pin_old(x): return 'new'"

    pinned = PinnedThread(old)
    assert pinned.run(uncached, pin_old, 1) == "old"  # compiled now, for `old` only
    (ci,) = compiler.code_instances(pin_old)
    assert ci.max_world == old
    artifact = weakref.ref(ci.artifact)
    ci = None
    specializer.bump()
    specializer.GenericFunction("pin_old_unrelated").add_method(lambda: "", signature=())
    gc.collect()
    assert artifact() is not None
    pinned.end()
    specializer.GenericFunction("pin_old_unrelated").add_method(lambda: "", signature=())
    gc.collect()
    assert artifact() is None


def test_more_specific_method_is_compiled_while_the_old_code_stays_valid_for_its_world():
    @kernel
    def which_cc(x: np.number):
        return "def which_cc(x): return 'number'"

    assert run(which_cc, 1) == "number"
    old = latest()

    @kernel
    def which_cc(x: np.int64):
        return "def which_cc(x): return 'int64'"

    assert run(which_cc, 1) == "int64"
    assert run(which_cc, 1.0) == "number"
    assert specializer.invoke_in_world(old, run, which_cc, 1) == "number"


def test_compile_error_stores_nothing_and_a_fixed_redefinition_works_at_once():
    @kernel
    def broken_cc(x: np.number):
        return "def broken_cc(x) return x"

    with pytest.raises(CompileError, match="broken_cc"):
        run(broken_cc, 1)

    @kernel
    def broken_cc(x: np.number):
        return "def broken_cc(x): return x * 3"

    assert run(broken_cc, 2) == 6


def test_link_failure_stores_nothing():
    @kernel
    def nolink_cc(x: np.number):
        return "def other_name(x): return x"

    n = compile_count()
    for _ in range(2):
        with pytest.raises(KeyError):
            run(nolink_cc, 1)
    assert compile_count() == n + 2  # the failed code was not kept
    assert nolink_cc.backedges() == []  # nor anything that points at it


def test_method_body_must_return_source():
    @kernel
    def nosource_cc(x: np.number):
        return 42

    with pytest.raises(TypeError, match="must return device source"):
        run(nosource_cc, 1)


def test_each_context_gets_its_own_link_of_one_compilation():
    @kernel
    def ctx_cc(x: np.number):
        return "def ctx_cc(x): return (context, x)"

    n, links = compile_count(), BACKEND.links
    assert run(ctx_cc, 1, context="a") == ("a", 1)
    assert run(ctx_cc, 1, context="b") == ("b", 1)
    assert compile_count() == n + 1 and BACKEND.links == links + 2


def test_compile_hooks_see_kernels_compiled_before_the_block():
    @kernel
    def hooked_cc(x: np.number):
        return "def hooked_cc(x): return x"

    run(hooked_cc, 1)
    n = compile_count()
    seen = []
    with device_code(lambda job, artifact: seen.append((job.name, artifact.source))):
        run(hooked_cc, 1)
        run(hooked_cc, 2)
    assert seen == [("hooked_cc", "def hooked_cc(x): return x")] * 2
    assert compile_count() == n
    run(hooked_cc, 1)
    assert len(seen) == 2  # the hook is gone after the block


def test_device_code_source_collects_callee_and_kernel_source():
    @device
    def helper_src():
        return "def helper_src(v): return v"

    @kernel(callees=[helper_src])
    def with_src(x: np.number):
        return "def with_src(x): return helper_src(x)"

    run(with_src, 1)
    with device_code_source() as sources:
        run(with_src, 1)
    assert sources == ["def helper_src(v): return v\ndef with_src(x): return helper_src(x)"]


def test_device_code_source_without_a_lookup_raises_a_clear_error():
    with pytest.raises(RuntimeError, match="no kernel was looked up"), device_code_source():
        pass


def test_device_code_source_does_not_mask_the_blocks_own_error():
    with pytest.raises(ZeroDivisionError), device_code_source():
        1 / 0  # noqa: B018


def test_callee_cycle_is_a_compile_error():
    @device
    def cyc_a():
        return ""

    @device(callees=[cyc_a])
    def cyc_b():
        return ""

    @device(callees=[cyc_b])
    def cyc_a():
        return ""

    @kernel(callees=[cyc_a])
    def cyc_k(x: np.number):
        return ""

    with pytest.raises(CompileError, match="cycle"):
        run(cyc_k, 1)


def _in_module(module):
    """Decorate the function as if its def ran in ``module`` (a library of that name)."""

    def mark(fn):
        fn.__module__ = module
        return fn

    return mark


def test_two_libraries_device_functions_of_one_name_are_two_functions_not_a_cycle():
    @device
    @_in_module("lib_a")
    def helper():
        return "def helper_a(v): return v + 1"

    lib_a_helper = helper

    @device(callees=[lib_a_helper])
    @_in_module("lib_b")
    def helper():  # another library's helper, calling lib_a's
        return "def helper_b(v): return helper_a(v) * 10"

    assert helper is not lib_a_helper

    @kernel(callees=[helper])
    def uses_both(x: np.number):
        return "def uses_both(x): return helper_b(x)"

    assert run(uses_both, 2) == 30
    # a real cycle is still one, named by the functions on it
    with pytest.raises(CompileError, match=r"cycle: cyc_k2 -> cyc_d -> cyc_d$"):

        @device
        def cyc_d():
            return ""

        @device(callees=[cyc_d])
        def cyc_d():  # the same device function, now calling itself
            return ""

        @kernel(callees=[cyc_d])
        def cyc_k2(x: np.number):
            return ""

        run(cyc_k2, 1)


def test_compile_and_link_caches_per_method_instance_config_and_world_range():
    @kernel
    def direct_cc(x: np.number):
        return "def direct_cc(x): return x"

    mi = direct_cc.methodinstance((np.int64,))
    ci1, f1 = compile_and_link(CompilerJob(mi, CONFIG, latest()), "ctx")
    specializer.bump()
    ci2, f2 = compile_and_link(CompilerJob(mi, CONFIG, latest()), "ctx")
    assert ci1 is ci2 and f1 is f2 and ci1.valid(latest())
    assert ci1.min_world == mi.method.min_world


def test_a_copied_or_unpickled_config_is_keyed_anew():
    import copy
    import pickle

    from pybackend import PyBackend

    backend = PyBackend()
    config = compiler.CompilerConfig(backend, ("b",))
    others = [compiler.CompilerConfig(backend, (o,)) for o in ("zzz", "other")]
    assert copy.copy(config) == config and hash(copy.copy(config)) == hash(config)
    deep = copy.deepcopy(config)  # another backend object: never the same config
    assert deep != config and deep.backend is not backend and deep.options == ("b",)
    loaded = pickle.loads(pickle.dumps(config))
    assert loaded != config and all(loaded != o and hash(loaded) != hash(o) for o in others)
    assert loaded == compiler.CompilerConfig(loaded.backend, ("b",))


def test_code_of_compiles_once_links_nowhere_and_is_seen_by_hooks():
    from specializer.kernels import code_of

    @kernel
    def reflected_cc(x: np.number):
        return "def reflected_cc(x): return x"

    n, links = compile_count(), BACKEND.links
    art = code_of(reflected_cc, (np.int64,), CONFIG)
    assert art.source == "def reflected_cc(x): return x"
    assert code_of(reflected_cc, (np.int64,), CONFIG) is art
    assert compile_count() == n + 1 and BACKEND.links == links
    seen = []
    with device_code(lambda job, artifact: seen.append(artifact)):
        code_of(reflected_cc, (np.int64,), CONFIG)
    assert seen == [art]
    assert run(reflected_cc, 5) == 5 and compile_count() == n + 1  # the launch reuses the code


def test_backedge_tables_do_not_grow_with_redefinitions():
    def leaf_body(i):
        return lambda: f"def grow_leaf(v): return v + {i}"

    from specializer.kernels import DeviceFunction

    grow_leaf = DeviceFunction("grow_leaf")
    grow_leaf.add_method(leaf_body(0), signature=())

    @kernel(callees=[grow_leaf])
    def grow_k(x: np.number):
        return "def grow_k(x): return grow_leaf(x)"

    for i in range(50):
        grow_leaf.add_method(leaf_body(i), signature=())
        assert run(grow_k, 1) == 1 + i
    # one live code instance: one edge on the kernel's dispatch and one on the callee's
    assert len(grow_k.backedges()) == 1
    assert len(grow_leaf.backedges()) == 1


def test_forget_context_drops_what_was_linked_for_it_and_keeps_the_code():
    @kernel
    def forget_cc(x: np.number):
        return "def forget_cc(x): return x"

    mi = forget_cc.methodinstance((np.int64,))
    ci, handle = compile_and_link(CompilerJob(mi, CONFIG, latest()), "gone")
    _, other = compile_and_link(CompilerJob(mi, CONFIG, latest()), "kept")
    n = compile_count()
    assert forget_context("gone") == [handle]
    assert "gone" not in ci.linked and ci.linked["kept"][1] is other
    assert forget_context("gone") == []
    ci2, again = compile_and_link(CompilerJob(mi, CONFIG, latest()), "gone")
    assert ci2 is ci and compile_count() == n  # linked again, not compiled again
    assert again is not handle


def test_code_a_changed_file_decides_is_compiled_again_once_per_new_world_and_linked_afresh():
    # Backend.recompile (SPEC 3): a back-end whose artifact depends on a file (an included
    # header, here a list) is asked once per world whether the code still holds; a new
    # artifact is what code_of returns and what every context links afresh. The same world
    # keeps its code; so does the default (PyBackend), which recompiles nothing.
    from pybackend import PyBackend

    from specializer.kernels import code_of

    header = ["1"]
    asked = []

    class HeaderBackend(PyBackend):
        def compile(self, job):
            artifact = super().compile(job)
            return type(artifact)(artifact.source, artifact.code), header[0]

        def recompile(self, job, artifact):
            asked.append(job.world)
            return artifact if artifact[1] == header[0] else self.compile(job)

        def link(self, job, artifact, context):
            return super().link(job, artifact[0], context), artifact[1]

    config = compiler.CompilerConfig(HeaderBackend())

    @kernel
    def headed_cc(x: np.number):
        return "def headed_cc(x): return x"

    mi = headed_cc.methodinstance((np.int64,))
    n = compile_count()

    def linked(context):
        return compile_and_link(CompilerJob(mi, config, latest()), context)[1][1]

    assert code_of(headed_cc, (np.int64,), config)[1] == "1"
    assert linked("ctx0") == linked("ctx1") == "1" and asked == []  # compiled in this world
    header[0] = "2"
    assert linked("ctx0") == "1" and code_of(headed_cc, (np.int64,), config)[1] == "1"
    specializer.bump()
    assert code_of(headed_cc, (np.int64,), config)[1] == "2" and asked == [latest()]
    assert linked("ctx0") == linked("ctx1") == "2" and asked == [latest()]  # once a world
    assert compile_count() == n + 1  # one compilation: the back-end's own recompile aside
    specializer.bump()
    assert linked("ctx1") == "2" and asked == [latest() - 1, latest()]
