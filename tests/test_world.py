import asyncio
import contextvars
import gc
import threading
import weakref

import numpy as np
import pytest

import specializer
from specializer import GenericFunction, bump, current, invoke_in_world, invokelatest, latest


def test_world_rises_by_one_on_each_definition_and_bump():
    gf = GenericFunction("rises")
    w0 = latest()

    @gf.method
    def rises(x: np.number):
        return 1

    assert latest() == w0 + 1
    assert bump() == w0 + 2 == latest()

    @gf.method
    def rises(x: np.number):  # replacement
        return 2

    assert latest() == w0 + 3


def test_current_is_latest_unless_pinned():
    assert current() == latest()
    w = latest()
    bump()
    assert invoke_in_world(w, current) == w
    assert current() == latest() == w + 1


def test_invoke_in_world_passes_arguments_and_restores_the_world():
    w = bump()
    bump()
    assert invoke_in_world(w, lambda a, b=0: (current(), a, b), 1, b=2) == (w, 1, 2)
    assert current() == latest()


def test_invokelatest_runs_in_the_latest_world_from_a_pinned_task():
    w = bump()
    bump()
    inner = invoke_in_world(w, lambda: (current(), invokelatest(current), current()))
    assert inner == (w, latest(), w)


def test_invoke_in_world_rejects_future_and_nonpositive_worlds():
    with pytest.raises(ValueError, match="in the future"):
        invoke_in_world(latest() + 1, current)
    with pytest.raises(ValueError, match="worlds start at 1"):
        invoke_in_world(0, current)
    with pytest.raises(TypeError, match="a world is an int"):
        invoke_in_world("3", current)
    assert current() == latest()


def test_pin_is_restored_when_the_function_raises():
    w = bump()
    bump()
    with pytest.raises(KeyError):
        invoke_in_world(w, lambda: {}["x"])
    assert current() == latest()


def test_asyncio_task_runs_in_its_creators_pinned_world_while_the_call_lasts():
    w = bump()
    bump()

    async def main():
        return await asyncio.get_running_loop().create_task(world_now())

    async def world_now():
        await asyncio.sleep(0)
        bump()  # the latest world moves on; the task stays in its creator's world
        return current()

    assert invoke_in_world(w, asyncio.run, main()) == w


def test_new_thread_starts_unpinned():
    w = bump()
    bump()
    seen = []

    def body():
        t = threading.Thread(target=lambda: seen.append(current()))
        t.start()
        t.join()

    invoke_in_world(w, body)
    assert seen == [latest()]


def test_nested_pins_unwind_in_order():
    w1 = bump()
    w2 = bump()
    bump()
    got = invoke_in_world(w2, lambda: (current(), invoke_in_world(w1, current), current()))
    assert got == (w2, w1, w2)


def test_world_numbers_are_exported_at_top_level():
    assert specializer.latest is latest and specializer.current is current


def _in_fork(body) -> dict:
    """Run ``body()`` in a forked child; return the dict it returns (or the error it raised)."""
    import json
    import os
    import warnings

    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads alive
        pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            out = body()
        except BaseException as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_misses_once_then_its_cached_lookups_hit():
    """A fork raises its own world, so nothing the parent cached is reused before a
    back-end's miss has checked the fork; after that one miss, the child's lookups hit."""
    from specializer import cached_lookup, world

    F = GenericFunction("forked_site")
    calls = []

    def site():
        return cached_lookup(lambda: calls.append(1) or (current(),), tuple, F, (), "k")

    site()
    assert site() == (latest(),) and len(calls) == 1 and not world.forked()
    parent_world = latest()

    def child():
        before = len(calls)
        results = [site() for _ in range(5)]
        try:
            world.check_fork("specializer's OpenCL back-end")
            raised = ""
        except RuntimeError as e:
            raised = str(e)
        return {
            "forked": world.forked(),
            "hot": world.hot_cell[0],
            "latest": latest(),
            "results": [list(r) for r in results],
            "lookups": len(calls) - before,
            "raised": raised,
        }

    got = _in_fork(child)
    assert got["forked"] is True and got["latest"] == parent_world + 1
    assert got["hot"] == got["latest"]  # the hot path is on in the child
    assert got["lookups"] == 1  # one miss (the child's own world), then hits
    assert got["results"] == [[parent_world + 1]] * 5
    msg = got["raised"]
    assert "forked" in msg and "specializer's OpenCL back-end" in msg
    assert "'spawn'" in msg and "multiprocessing.get_context('spawn')" in msg
    # the parent is untouched
    world.refresh()
    assert not world.forked() and world.hot_cell[0] == latest() == parent_world
    world.check_fork("anything")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_fork_while_another_thread_holds_the_world_lock_does_not_hang_the_child():
    from specializer import world

    holding, let_go = threading.Event(), threading.Event()

    def hold():
        with world.lock():
            holding.set()
            let_go.wait(10)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert holding.wait(10)
    try:
        got = _in_fork(lambda: {"bumped": bump() > 0, "defined": _define_in_child()})
    finally:
        let_go.set()
        t.join(10)
    assert got == {"bumped": True, "defined": True}


def _forked_beside_a_block(kind: str, child) -> dict:
    """``child()`` in a fork made while another thread of this process is parked inside a
    ``with precompile_output():`` or ``with device_code(cb):`` block; the hook's calls are
    added to its answer as ``hooked``."""
    from specializer import device_code, precompile_output

    hooked: list[str] = []
    inside, leave = threading.Event(), threading.Event()

    def other():
        block = (
            precompile_output()
            if kind == "precompile"
            else device_code(lambda job, artifact: hooked.append(job.name))
        )
        with block:
            inside.set()
            leave.wait(30)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(30)
        assert specializer.world.bypassing()  # the block is on in this process
        got = _in_fork(lambda: {**child(), "hooked": list(hooked)})
    finally:
        leave.set()
        t.join()
    assert not specializer.world.bypassing()
    return got


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["precompile", "hook"])
def test_a_forked_child_is_in_no_block_another_thread_of_its_parent_entered(kind):
    """The thread inside the block is not in the child: its mode is not, nor its hook."""
    from specializer import generating_output
    from specializer import world as world_module

    k, _w, run = _old_and_new(f"forked_beside_{kind}")

    def child():
        return {
            "generating": generating_output(),
            "hooks": len(world_module.hooks()),
            "bypassing": world_module.bypassing(),
            "stores": _cached_site_hits_again(),
            "ran": run(k, 1),
        }

    got = _forked_beside_a_block(kind, child)
    assert got == {
        "generating": False,
        "hooks": 0,
        "bypassing": False,
        "stores": True,  # a cached lookup stores, then hits
        "ran": "new",
        "hooked": [],  # the parent's hook, of a thread the child does not have: never called
    }


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kind", ["precompile", "hook"])
def test_a_block_of_the_forking_thread_stays_on_in_the_child_until_its_with_statement_ends(kind):
    """The forking thread is in the child: its block still rules there, and its with
    statement ends it there as in the parent, without an error."""
    import json
    import os
    import warnings

    from specializer import device_code, generating_output, precompile_output
    from specializer import world as world_module

    k, _w, run = _old_and_new(f"forking_in_{kind}")
    hooked: list[str] = []
    block = (
        precompile_output()
        if kind == "precompile"
        else device_code(lambda job, artifact: hooked.append(job.name))
    )
    got: dict = {}
    pid = -1
    r, w = os.pipe()
    try:
        with block:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads alive
                pid = os.fork()
            if pid == 0:
                run(k, 1)
                got["inside"] = [generating_output(), len(world_module.hooks()), hooked]
        if pid == 0:
            got["after"] = [generating_output(), world_module.bypassing(), block.active()]
            got["stores"] = _cached_site_hits_again()
    except BaseException as e:
        got["error"] = f"{type(e).__name__}: {e}"
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        os.write(w, json.dumps(got).encode())
        os._exit(0)
    os.close(w)
    assert pid > 0, got
    with os.fdopen(r, "rb") as f:
        got = json.loads(f.read())
    os.waitpid(pid, 0)
    assert got == {
        "inside": [
            kind == "precompile",
            int(kind == "hook"),
            [f"forking_in_{kind}"] * (kind == "hook"),
        ],
        "after": [False, False, False],
        "stores": True,
    }


def _define_in_child() -> bool:
    gf = GenericFunction("defined_in_fork")
    gf.add_method(lambda x: 0, signature=(np.number,))
    return gf.methodinstance((np.float32,)).method.fn(0) == 0


def test_device_code_source_decides_from_how_its_own_block_ended():
    """Inside an ``except`` handler (an exception handled outside the block), a block that
    looked up nothing still raises its error; one that raises (a bare re-raise too) keeps
    its own exception."""
    from specializer import device_code_source

    try:
        raise ValueError("handled outside the block")
    except ValueError:
        with pytest.raises(RuntimeError, match="no kernel was looked up"), device_code_source():
            pass
        with pytest.raises(ValueError, match="handled outside"), device_code_source():
            raise
    with pytest.raises(KeyError), device_code_source():
        raise KeyError("own")


def test_device_code_source_entered_through_an_exit_stack_in_an_except_clause_raises():
    """Its ``__exit__`` receives the block's own exception (none here), whatever is being
    handled around it."""
    import contextlib

    from specializer import device_code_source

    try:
        raise ValueError("handled outside the block")
    except ValueError:
        with (
            pytest.raises(RuntimeError, match="no kernel was looked up"),
            contextlib.ExitStack() as stack,
        ):
            stack.enter_context(device_code_source())


def test_a_pin_does_not_outlive_its_call_even_in_a_kept_traceback():
    """A stored exception (sys.last_traceback in a REPL, a notebook's) holds the frames of
    the call, not the pin: the hot path comes back."""
    from specializer import world

    def fail():
        assert world.pins() == 1 and current() == 1
        raise KeyError("in the pinned call")

    bump()
    try:
        invoke_in_world(1, fail)
    except KeyError as e:
        kept = e  # keeps e.__traceback__ and every frame in it
    assert world.pins() == 0
    world.refresh()
    assert world.hot_cell[0] == latest()
    assert kept.__traceback__ is not None


def test_precompile_output_switches_at_once_and_a_block_restores_on_exit():
    from specializer import generating_output, precompile_output

    assert not generating_output()
    p = precompile_output(True)
    assert generating_output()  # at once, before any with
    with p:
        assert generating_output()
    assert not generating_output()  # its block restored the mode before it
    with precompile_output(True):
        with precompile_output(False):
            assert not generating_output()
        assert generating_output()
    assert not generating_output()


def test_blocks_are_ordinary_context_managers():
    import io

    from specializer import device_code, device_code_source, precompile_output

    for block in (device_code(lambda j, a: None), device_code_source(), precompile_output(False)):
        assert not isinstance(block, io.IOBase)
        assert not hasattr(block, "readline") and not hasattr(block, "fileno")
        if isinstance(block, precompile_output):
            block.__exit__(None, None, None)


def test_a_precompile_block_without_a_flag_changes_nothing_until_it_is_entered():
    """SPEC 6: an interrupt between the call and the with statement leaves the mode as it was."""
    from specializer import generating_output, precompile_output

    block = precompile_output()
    assert not generating_output()  # made, not entered: nothing changed
    with block:
        assert generating_output()
    assert not generating_output()
    del block  # a block made and dropped unentered changes nothing either
    precompile_output()
    assert not generating_output()


def test_a_precompile_switch_takes_effect_at_once_and_its_block_restores_the_previous():
    from specializer import generating_output, precompile_output

    a = precompile_output(True)
    assert generating_output()  # a build script's toggle: at once
    with precompile_output(False):
        assert not generating_output()
    assert generating_output()  # restored on exit
    with a:
        pass
    assert not generating_output()  # a's exit restores the mode before a was made


def test_plain_precompile_switches_keep_no_state_per_switch():
    from specializer import generating_output, precompile_output, world

    for i in range(1000):
        precompile_output(i % 2 == 0)
    assert not generating_output()  # the last one, until switched again
    assert world.snapshot.switch is False and world.snapshot.blocks == ()
    precompile_output(None).__exit__(None, None, None)  # hand the mode back to the environment


def test_a_stored_exception_from_a_pinned_call_keeps_no_pin():
    w = bump()
    bump()

    def fails():
        raise ValueError(f"in world {current()}")

    try:
        invoke_in_world(w, fails)
    except ValueError as e:
        kept = e  # its traceback holds the frames, and so the context, of the pinned call
    assert str(kept) == f"in world {w}"
    assert specializer.world.pins() == 0 and specializer.world.pinned_worlds() == frozenset()
    assert current() == latest()


# -- a pin lives as long as a context that can run code in it (SPEC 1, 9) -------------------


def _old_and_new(name: str):
    """A kernel of the pure-Python back-end defined twice, never looked up yet: returns it
    (its latest method returns 'new') and the world in which it returned 'old', the world
    risen since."""
    from pybackend import kernel, run

    ns: dict = {}
    for which in ("old", "new"):
        exec(
            f"@kernel\ndef {name}(x: np.number):\n    return \"def {name}(x): return '{which}'\"",
            {"kernel": kernel, "np": np},
            ns,
        )
        if which == "old":
            w = latest()
    return ns[name], w, run


@pytest.mark.parametrize("make", ["ensure_future", "create_task"])
def test_a_task_made_in_a_pinned_call_keeps_its_world_after_the_call_and_a_rise(make):
    """Julia 1.8 (#41449): a task keeps the world it was created in for its whole life."""
    k, w, run = _old_and_new(f"task_keeps_{make}")

    async def later():
        await asyncio.sleep(0)
        bump()  # the world rises while the task runs, too
        return current(), run(k, 1)

    async def main():
        loop = asyncio.get_running_loop()
        spawn = asyncio.ensure_future if make == "ensure_future" else loop.create_task
        task = invoke_in_world(w, spawn, later())
        assert current() == latest()  # the creator is unpinned again
        await asyncio.sleep(0.01)
        return await task

    assert latest() > w
    assert asyncio.run(main()) == (w, "old")
    gc.collect()
    assert specializer.world.pinned_worlds() == frozenset()


def test_a_context_copied_in_a_pinned_call_and_run_later_keeps_its_world():
    k, w, run = _old_and_new("copied_context_keeps")
    ctx = invoke_in_world(w, contextvars.copy_context)
    bump()
    assert ctx.run(lambda: (current(), run(k, 1))) == (w, "old")
    assert w in specializer.world.pinned_worlds()
    assert current() == latest() and run(k, 1) == "new"
    del ctx
    gc.collect()
    assert specializer.world.pinned_worlds() == frozenset()


def test_a_callback_registered_in_a_pinned_call_runs_in_its_world_after_it():
    w = bump()
    bump()
    seen = []

    async def main():
        loop = asyncio.get_running_loop()
        invoke_in_world(w, lambda: loop.call_soon(lambda: seen.append(current())))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert seen == [w]


def test_an_async_generator_stepped_by_a_pinned_task_runs_in_its_world():
    k, w, run = _old_and_new("agen_keeps")

    async def agen():
        for _ in range(3):
            await asyncio.sleep(0)
            yield current(), run(k, 1)

    async def consume():
        return [x async for x in agen()]

    async def main():
        task = invoke_in_world(w, asyncio.ensure_future, consume())
        bump()
        return await task

    assert asyncio.run(main()) == [(w, "old")] * 3


def test_a_plain_generator_runs_in_the_context_of_whoever_resumes_it():
    """PEP 567: a generator has no context of its own."""
    k, w, run = _old_and_new("gen_resumer")

    def gen():
        while True:
            yield current(), run(k, 1)

    g = invoke_in_world(w, lambda: (g := gen(), next(g))[0])  # made and stepped inside
    assert next(g) == (latest(), "new")
    assert invoke_in_world(w, next, g) == (w, "old")


def test_a_thread_started_in_a_pinned_call_is_unpinned_also_after_the_call():
    w = bump()
    bump()
    go, seen = threading.Event(), []

    def body():
        go.wait(10)
        seen.append(current())

    t = invoke_in_world(w, lambda: (t := threading.Thread(target=body), t.start())[0])
    bump()
    go.set()
    t.join(10)
    assert seen == [latest()]


def test_what_was_dropped_keeps_no_pin_and_the_code_kept_for_it_is_released():
    """A finished task, a context, a stored exception and its traceback, each dropped: no
    pin is left and the code kept for the pinned world goes (at the next slow path)."""
    from pybackend import CONFIG

    from specializer import compiler

    k, w, run = _old_and_new("dropped_pins")

    def ci_of_world(world):
        return [
            c
            for c in compiler.code_instances(k)
            if c.min_world <= world <= c.max_world and c.config == CONFIG
        ]

    async def fails():
        await asyncio.sleep(0)
        raise RuntimeError(current(), run(k, 1))

    async def main():
        task = invoke_in_world(w, asyncio.ensure_future, fails())
        try:
            await task
        except RuntimeError as e:
            return e, task

    kept, task = asyncio.run(main())
    assert kept.args == (w, "old")
    ctx = invoke_in_world(w, contextvars.copy_context)
    try:
        invoke_in_world(w, lambda: 1 / 0)
    except ZeroDivisionError as e:
        stored = e
    bump()  # a definition's sweep: the old world's code is kept while a pin may need it
    (ci,) = ci_of_world(w)
    artifact = weakref.ref(ci.artifact)
    del ci
    gc.collect()
    assert w in specializer.world.pinned_worlds() and artifact() is not None
    del task, kept, ctx
    assert stored.__traceback__ is not None
    gc.collect()
    assert specializer.world.pinned_worlds() == frozenset() and specializer.world.pins() == 0
    run(_old_and_new("dropped_pins_other")[0], 1)  # any slow path releases it
    gc.collect()
    assert artifact() is None and ci_of_world(w) == []
    assert run(k, 1) == "new"
    assert invoke_in_world(w, run, k, 1) == "old"  # an older world compiles it again


def test_an_unpinned_threads_hits_stay_hits_while_another_task_holds_a_pin():
    from specializer import cached_lookup

    w = bump()
    bump()
    ctx = invoke_in_world(w, contextvars.copy_context)  # a pin held for the whole test
    F = GenericFunction("hits_beside_a_pin")
    calls = []

    def site():
        return cached_lookup(lambda: calls.append(1) or (current(),), tuple, F, (), "k")

    out = []
    t = threading.Thread(target=lambda: out.extend(site() for _ in range(50)))
    t.start()
    t.join(10)
    assert out == [(latest(),)] * 50 and len(calls) == 1
    assert specializer.world.hot_cell[0] == latest()
    assert ctx.run(site) == (w,) and len(calls) == 2  # the pinned context's own lookup
    assert [site() for _ in range(10)] == [(latest(),)] * 10 and len(calls) == 2
    del ctx


def test_code_kept_for_a_dead_pin_is_released_also_when_a_new_pin_forgot_it_first():
    """A pin made (or pinned_worlds() read) after another died drops the dead entry; the
    code kept for the dead one is still released by the next slow path."""
    from specializer import compiler

    k, w, run = _old_and_new("forgotten_first")
    ctx = invoke_in_world(w, contextvars.copy_context)
    assert ctx.run(run, k, 1) == "old"
    bump()
    (ci,) = [c for c in compiler._tracked(compiler._retained) if c.mi.method.gf is k]
    artifact = weakref.ref(ci.artifact)
    del ci
    del ctx
    gc.collect()
    assert invoke_in_world(latest(), specializer.world.pinned_worlds) == frozenset({latest()})
    run(_old_and_new("forgotten_first_other")[0], 1)  # a slow path
    gc.collect()
    assert artifact() is None


# -- a block ends when its with statement is gone (SPEC 9) ----------------------------------


def _cached_site_hits_again() -> bool:
    """A cached lookup takes one slow path, then hits; the hot path is back."""
    from specializer import cached_lookup

    F = GenericFunction("after_a_dead_block")
    calls = []

    def site():
        return cached_lookup(lambda: calls.append(1) or (current(),), tuple, F, (), "k")

    site()
    n = len(calls)
    site()
    return len(calls) == n and specializer.world.hot_cell[0] == latest()


def test_a_hook_block_whose_exit_never_ran_ends_with_its_object():
    """As when an interrupt lands at the first instruction of ``__exit__``: the with
    statement is gone, its object with it, and so is the block."""
    from specializer import device_code
    from specializer import world as world_module

    seen = []
    block = device_code(lambda job, artifact: seen.append(job.name))
    block.__enter__()
    assert world_module.hooks() and world_module.hot_cell[0] is None
    del block
    gc.collect()
    assert world_module.hooks() == [] and not world_module.bypassing()
    assert _cached_site_hits_again()  # one slow path brings the hot path back
    k, _w, run = _old_and_new("after_dead_hook")
    run(k, 1)
    assert seen == []


def test_a_precompile_block_whose_exit_never_ran_leaves_the_mode_as_before():
    from specializer import generating_output, precompile_output

    for flag in (None, True, False):
        block = precompile_output(flag) if flag is not None else precompile_output()
        block.__enter__()
        assert generating_output() is (flag is not False)
        del block
        gc.collect()
        assert not generating_output()
        assert _cached_site_hits_again()


def test_blocks_entered_in_two_threads_each_end_with_their_object():
    from specializer import device_code
    from specializer import world as world_module

    ready, go, done = threading.Event(), threading.Event(), threading.Event()

    def other():
        with device_code(lambda job, artifact: None):
            ready.set()
            go.wait(10)
        done.set()

    t = threading.Thread(target=other)
    t.start()
    assert ready.wait(10)
    mine = device_code(lambda job, artifact: None)
    mine.__enter__()
    assert len(world_module.hooks()) == 2
    del mine
    gc.collect()
    assert len(world_module.hooks()) == 1  # the other thread's block is still on
    go.set()
    t.join(10)
    assert done.is_set() and world_module.hooks() == []
    assert _cached_site_hits_again()


def test_a_block_entered_twice_refuses_the_second_and_stays_active():
    """Each with-block needs its own object: entering an active one again is refused, and
    the refusal does not end the block it refers to."""
    calls = []
    h = specializer.device_code(lambda job, artifact: calls.append(job))
    with h:
        with pytest.raises(RuntimeError, match="has begun already"), h:
            pass
        assert h.active() and specializer.world.bypassing()
    assert not h.active() and not specializer.world.bypassing()
