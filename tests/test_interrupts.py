"""A KeyboardInterrupt at any point leaves world state as if the operation happened whole or
not at all (SPEC 9).

CPython raises an asynchronous exception (a signal handler's ``KeyboardInterrupt``, one
``PyThreadState_SetAsyncExc`` sets) only where its eval loop checks for pending work: a
Python function's entry, a backward jump, and just after a call returns (in 3.10 a Python
callee's too); never inside a C function, and not between other bytecodes. :class:`Injector`
raises a ``KeyboardInterrupt`` at exactly those points, found with ``sys.settrace`` (function
entries, opcode events of backward jumps, and on 3.10 returns into a call) and
``sys.setprofile`` (the return of each C function called from Python), on CPython 3.10 to
3.13 (see ``_INJECTOR_MODEL`` for how their points differ). Each test runs an
operation once per such point, n = 0, 1, 2, ..., each time with fresh state and the interrupt
at the n-th point, until the operation completes with none left; after each run it checks
every invariant of the world state, and that what follows (a launch, a lookup in a pinned
world, a later definition) sees a whole operation or none.
"""

from __future__ import annotations

import contextvars
import dis
import gc
import inspect
import itertools
import random
import signal
import sys
import time

import numpy as np
import pytest
from pybackend import CONFIG, typeof

from specializer import (
    cached_lookup,
    compile_count,
    current,
    device_code,
    device_code_source,
    generating_output,
    invoke_in_world,
    latest,
    precompile_output,
)
from specializer import world as world_module
from specializer.kernels import DeviceFunction, Kernel, uncached_lookup
from specializer.world import WORLD_MAX, hot_cell

_fresh = itertools.count()
_OLD = sys.version_info < (3, 11)
_CALLS = {name for name in dis.opmap if name.startswith("CALL")}
_GENERATOR = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _backward(code, offset: int) -> bool:
    name = dis.opname[code.co_code[offset]]
    if "BACKWARD" in name:
        return "NO_INTERRUPT" not in name
    if name == "JUMP_ABSOLUTE":  # 3.10's loops: a backward jump checks for pending work
        return code.co_code[offset + 1] * 2 <= offset
    return False


class Injected(KeyboardInterrupt):
    """The interrupt the injector raises (a KeyboardInterrupt: nothing may treat it as less)."""


class Injector:
    """Raise :class:`Injected` at the ``at``-th point (counting from 0) where CPython could
    raise an asynchronous exception while ``run`` runs ``op``; ``None``: count them only."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.seen = 0
        self.fired = False
        self.armed = False

    def _land(self) -> None:
        if not self.armed or self.fired:
            return
        if self.seen == self.at:
            self.fired = True
            raise Injected(f"injected at point {self.seen}")
        self.seen += 1

    def _trace(self, frame, event, arg):
        # On every event: 3.13 does not start opcode events for a frame whose
        # f_trace_opcodes was set at its "call" event, only from its next event on.
        frame.f_trace_opcodes = True
        if event == "call":
            # A generator's frame is "called" again when it is closed (a throw into it, which
            # checks for nothing); its loops' backward jumps are points all the same.
            if not frame.f_code.co_flags & _GENERATOR:
                self._land()
        elif event == "opcode":
            if _backward(frame.f_code, frame.f_lasti):
                self._land()
        elif event == "return" and _OLD and not frame.f_code.co_flags & _GENERATOR:
            # 3.10 checks in the caller just after a Python callee returns into its call. A
            # generator returns (or yields) to whatever resumed it (a for loop, C code, its
            # finalizer), not into a call: the check comes after that, where it is counted.
            caller = frame.f_back
            if (
                caller is not None
                and caller.f_lasti >= 0
                and dis.opname[caller.f_code.co_code[caller.f_lasti]] in _CALLS
            ):
                self._land()
        return self._trace

    def _profile(self, frame, event, arg):
        if event == "c_return":
            del arg  # the C function (a bound method may hold a context): a real handler's
            self._land()  # frame holds no such thing

    def run(self, op, *args):
        gc.disable()  # a collection would run finalizers, whose interrupts CPython swallows
        sys.settrace(self._trace)
        sys.setprofile(self._profile)
        try:
            self.armed = True
            return op(*args)
        finally:
            self.armed = False
            sys.setprofile(None)
            sys.settrace(None)
            gc.enable()


def interrupt_everywhere(setup, op, check, limit: int = 20_000) -> int:
    """For n = 0, 1, ...: ``state = setup()``, run ``op(state)`` interrupted at its n-th point,
    then ``check(state, interrupted)``; until ``op`` runs to its end with no point left.
    Returns how many points there were."""
    for n in range(limit):
        state = setup()
        inj = Injector(n)
        try:
            inj.run(op, state)
        except Injected:
            assert inj.fired
        else:
            assert not inj.fired, "the interrupt was swallowed"
        check(state, inj.fired)
        if not inj.fired:
            assert n > 0, "the operation passed no point where an interrupt could land"
            return n
    raise AssertionError(f"more than {limit} points")


def _settle() -> None:
    """What the next raiser of the world does first (undo a definition an interrupt stopped
    before its world was published), and what the next slow path does (set the hot world
    again if a publication was stopped between its stores)."""
    with world_module.lock():
        world_module.undo_in_flight()
    world_module.refresh()


def _end_blocks_left(interrupted: bool) -> None:
    """No block is left active, wherever the interrupt landed: an interrupt at the entry of a
    block's ``__exit__`` (before its first line) stops the exit, but the block ends with its
    with statement all the same (SPEC 9); the state may still name it, dead, until the next
    slow path publishes it again."""
    assert world_module._blocks(world_module.snapshot) == []
    assert world_module.hooks() == []


def _world_invariants() -> None:
    """What holds between operations, whatever was interrupted: the hot world is the latest
    or off; with no pin, hook or block left it comes back; no pin, hook or block is left."""
    assert hot_cell[0] in (None, latest())
    _settle()
    assert world_module._task.get() is hot_cell  # unpinned
    assert world_module.pins() == 0, world_module._pins
    assert world_module.hooks() == []
    assert not generating_output()
    assert hot_cell[0] == latest() == current()
    assert not world_module._lock()._is_owned(), "the world lock was left held"


def uncached(f, *args, context="ctx"):
    return uncached_lookup(f, tuple(typeof(a) for a in args), CONFIG, context)(*args)


# -- definitions ---------------------------------------------------------------------------


class Program:
    """A kernel calling a device function, compiled, plus an unrelated function."""

    def __init__(self) -> None:
        n = next(_fresh)
        self.leaf_name = f"ki_leaf_{n}"
        self.leaf = DeviceFunction(self.leaf_name)
        self.leaf.add_method(self.leaf_body(1), signature=())
        self.k = Kernel(f"ki_k_{n}", typeof)
        self.k.add_method(self.kernel_body("number"), signature=(np.number,), callees=[self.leaf])
        assert uncached(self.k, 2) == ("number", 2)
        assert uncached(self.k, np.float32(2)) == ("number", 2)
        self.w0 = latest()
        self.ci = self._code((np.int64,))
        self.leaf_method = self.leaf.methods()[0]
        self.k_method = self.k.methods()[0]
        self.history = (len(self.leaf._table.history), len(self.k._table.history))

    def leaf_body(self, factor: int):
        return lambda: f"def {self.leaf_name}(v): return v * {factor}"

    def kernel_body(self, tag: str):
        return lambda *ts: f"def {self.k.name}(x): return ({tag!r}, {self.leaf_name}(x))"

    def _code(self, tt):
        mi = self.k.methodinstance(tt)
        (ci,) = mi.code[CONFIG._key]
        return ci


def _dispatch_is_brute_force(gf, tt, w) -> None:
    """The dispatch cache says what a scan of every method visible in ``w`` says."""
    visible = [m for m in gf._table.history if m.min_world <= w <= m.max_world]
    try:
        want = gf._select(tt, visible, w)
    except Exception as e:  # MethodError, AmbiguityError
        want = type(e)
    try:
        got = gf.methodinstance(tt, w).method
    except Exception as e:
        got = type(e)
    assert got is want, (gf, tt, w, got, want)


def callee_redefinition():
    """A device function redefined while a kernel compiled against it is cached."""

    def op(p: Program) -> None:
        p.leaf.add_method(p.leaf_body(10), signature=())

    def check(p: Program, interrupted: bool) -> None:
        _settle()
        happened = latest() == p.w0 + 1
        assert latest() in (p.w0, p.w0 + 1)
        assert happened or interrupted
        methods = p.leaf.methods()
        assert len(methods) == 1
        assert len(p.leaf._table.history) == p.history[0] + happened
        if happened:
            assert methods[0] is not p.leaf_method and p.leaf_method.max_world == p.w0
            assert p.ci.max_world == p.w0  # the kernel's code depended on the old callee
            # (its edges may still be registered if the interrupt came after the world was
            # published: harmless, as a later definition closing it again changes nothing)
        else:
            assert methods[0] is p.leaf_method and p.leaf_method.max_world == WORLD_MAX
            assert p.ci.max_world == WORLD_MAX
            assert p.ci in [e for _, _, e in p.k.backedges()]
            assert p.ci in [e for _, _, e in p.leaf.backedges()]
        for w in (p.w0 - 1, p.w0, latest()):
            _dispatch_is_brute_force(p.leaf, (), w)
            _dispatch_is_brute_force(p.k, (np.int64,), w)
        _world_invariants()
        # What follows sees the whole definition or none: never the old callee after it.
        assert uncached(p.k, 2) == ("number", 20 if happened else 2)
        assert invoke_in_world(p.w0, uncached, p.k, 2) == ("number", 2)
        p.leaf.add_method(p.leaf_body(100), signature=())  # a later definition works
        assert uncached(p.k, 2) == ("number", 200)
        _world_invariants()

    return Program, op, check


def more_specific_method():
    """A more specific kernel method, with dispatch cached for both signatures."""

    def op(p: Program) -> None:
        p.k.add_method(p.kernel_body("int64"), signature=(np.int64,), callees=[p.leaf])

    def check(p: Program, interrupted: bool) -> None:
        _settle()
        happened = latest() == p.w0 + 1
        assert latest() in (p.w0, p.w0 + 1) and (happened or interrupted)
        assert len(p.k.methods()) == 1 + happened
        assert p.k_method.max_world == WORLD_MAX  # not replaced: another signature
        assert p.ci.max_world == (p.w0 if happened else WORLD_MAX)
        for tt in ((np.int64,), (np.float32,)):
            for w in (p.w0, latest()):
                _dispatch_is_brute_force(p.k, tt, w)
        _world_invariants()
        assert uncached(p.k, 2) == ("int64" if happened else "number", 2)
        assert uncached(p.k, np.float32(2)) == ("number", 2)
        assert invoke_in_world(p.w0, uncached, p.k, 2) == ("number", 2)
        _world_invariants()

    return Program, op, check


def replacement():
    """A kernel method replaced."""

    def op(p: Program) -> None:
        p.k.add_method(p.kernel_body("again"), signature=(np.number,), callees=[p.leaf])

    def check(p: Program, interrupted: bool) -> None:
        _settle()
        happened = latest() == p.w0 + 1
        assert latest() in (p.w0, p.w0 + 1) and (happened or interrupted)
        (m,) = p.k.methods()
        assert (m is not p.k_method) == happened
        assert p.k_method.max_world == (p.w0 if happened else WORLD_MAX)
        _dispatch_is_brute_force(p.k, (np.int64,), latest())
        _world_invariants()
        assert uncached(p.k, 2) == ("again" if happened else "number", 2)
        _world_invariants()

    return Program, op, check


def replacement_then_another():
    """A kernel method replaced, interrupted anywhere, then replaced again at once (no other
    operation between): the second definition sees the first whole or not at all, never a
    half of it that an undo would later take back."""

    def op(p: Program) -> None:
        p.k.add_method(p.kernel_body("again"), signature=(np.number,), callees=[p.leaf])

    def check(p: Program, interrupted: bool) -> None:
        happened = latest() == p.w0 + 1
        p.k.add_method(p.kernel_body("third"), signature=(np.number,), callees=[p.leaf])
        assert len(p.k.methods()) == 1
        assert latest() == p.w0 + 1 + happened
        assert uncached(p.k, 2) == ("third", 2)
        assert invoke_in_world(p.w0, uncached, p.k, 2) == ("number", 2)
        if happened:
            assert invoke_in_world(p.w0 + 1, uncached, p.k, 2) == ("again", 2)
        history = [x for x in p.k._table.history if x.min_world <= latest()]
        assert len(history) == p.history[1] + 1 + happened
        _world_invariants()

    return Program, op, check


class ProgramWithInt64(Program):
    """A :class:`Program` whose kernel has a second, more specific method, compiled."""

    def __init__(self) -> None:
        super().__init__()
        self.k.add_method(self.kernel_body("int64"), signature=(np.int64,), callees=[self.leaf])
        assert uncached(self.k, 2) == ("int64", 2)
        self.w0 = latest()
        self.ci = self._code((np.int64,))
        (self.k_method, self.int64_method) = self.k.methods()
        self.history = (len(self.leaf._table.history), len(self.k._table.history))


def deletion():
    """The more specific kernel method deleted (``delete_method``), then defined again."""

    def op(p: ProgramWithInt64) -> None:
        p.k.delete_method((np.int64,))

    def check(p: ProgramWithInt64, interrupted: bool) -> None:
        _settle()
        happened = latest() == p.w0 + 1
        assert latest() in (p.w0, p.w0 + 1) and (happened or interrupted)
        assert p.k.methods() == ([p.k_method] if happened else [p.k_method, p.int64_method])
        assert p.int64_method.max_world == (p.w0 if happened else WORLD_MAX)
        assert p.ci.max_world == (p.w0 if happened else WORLD_MAX)
        assert len(p.k._table.history) == p.history[1]  # deleted, never erased
        for tt in ((np.int64,), (np.float32,)):
            for w in (p.w0, latest()):
                _dispatch_is_brute_force(p.k, tt, w)
        _world_invariants()
        assert uncached(p.k, 2) == ("number" if happened else "int64", 2)
        assert invoke_in_world(p.w0, uncached, p.k, 2) == ("int64", 2)
        # defined again (continuing the deleted method's chain): every world as it was
        p.k.add_method(p.kernel_body("again"), signature=(np.int64,), callees=[p.leaf])
        assert uncached(p.k, 2) == ("again", 2)
        assert invoke_in_world(p.w0, uncached, p.k, 2) == ("int64", 2)
        if happened:
            assert invoke_in_world(p.w0 + 1, uncached, p.k, 2) == ("number", 2)
        for w in (p.w0, p.w0 + 1, latest()):
            _dispatch_is_brute_force(p.k, (np.int64,), w)
        _world_invariants()

    return ProgramWithInt64, op, check


def bump():
    """``bump()``."""

    def setup():
        return latest()

    def check(w0: int, interrupted: bool) -> None:
        assert latest() in (w0, w0 + 1)
        _world_invariants()

    return setup, lambda w0: world_module.bump(), check


# -- pins --------------------------------------------------------------------------------


def pin():
    """``invoke_in_world``; then a cached lookup pinned to that world gets its own entry."""

    def setup():
        gf = Kernel(f"ki_pin_{next(_fresh)}", typeof)
        gf.add_method(lambda *ts: "", signature=(np.number,))
        old = latest()
        world_module.bump()
        return old

    def op(old: int) -> None:
        assert invoke_in_world(old, current) == old

    def check(old: int, interrupted: bool) -> None:
        _world_invariants()
        # a cached lookup pinned to `old` gets old's entry, never the latest world's
        F = Kernel("ki_pin_site", typeof)

        def site():
            return cached_lookup(lambda: (current(),), tuple, F, (), "k")

        assert site() == (latest(),)
        assert invoke_in_world(old, site) == (old,)
        assert site() == (latest(),)
        _world_invariants()

    return setup, op, check


def copied_context():
    """A context copied inside ``invoke_in_world`` keeps the pin for its whole life, and no
    pin is left once it is dropped (SPEC 1, 9), whatever was interrupted."""

    def setup():
        return [latest()]

    def op(state: list) -> None:
        state.append(invoke_in_world(state[0], contextvars.copy_context))

    def check(state: list, interrupted: bool) -> None:
        if len(state) == 2:
            world_module.bump()
            assert state[1].run(current) == state[0] != latest()
            assert world_module.pinned_worlds() == frozenset({state[0]})
            del state[1]
        assert world_module.pinned_worlds() == frozenset()
        _world_invariants()

    return setup, op, check


# -- with-blocks: compile hooks and precompile blocks ----------------------------------------


def compile_hook_block():
    """``with device_code(cb):`` around a lookup."""

    def setup():
        p = Program()
        p.seen = []
        return p

    def op(p: Program) -> None:
        with device_code(lambda job, artifact: p.seen.append(job.name)):
            uncached(p.k, 2)

    def check(p: Program, interrupted: bool) -> None:
        _end_blocks_left(interrupted)
        assert p.seen in ([], [p.k.name])
        _world_invariants()
        n, count = len(p.seen), compile_count()
        assert uncached(p.k, 2) == ("number", 2)
        assert len(p.seen) == n and compile_count() == count  # the hook is gone

    return setup, op, check


def device_code_source_block():
    """``with device_code_source() as sources:`` around a lookup."""

    def setup():
        p = Program()
        p.got = []
        return p

    def op(p: Program) -> None:
        with device_code_source() as sources:
            uncached(p.k, 2)
        p.got.append(sources)

    def check(p: Program, interrupted: bool) -> None:
        _end_blocks_left(interrupted)
        if p.got:
            assert len(p.got[0]) == 1 and p.k.name in p.got[0][0]
        _world_invariants()

    return setup, op, check


def _switch_left_by_an_interrupt_before_its_block(interrupted: bool) -> None:
    """``precompile_output(flag)`` switches the mode as it is called (a build script's
    toggle); an interrupt after the call and before its with statement's block began leaves
    that switch, as a plain call's, and no block. Hand the mode back to the environment."""
    if generating_output():
        assert interrupted
        assert world_module.snapshot.blocks == ()
    world_module.switch_precompile(None)


def precompile_blocks():
    """Nested precompile blocks, one with an explicit argument."""

    def setup():
        return []

    def op(seen: list) -> None:
        with precompile_output():
            seen.append(generating_output())
            with precompile_output(False):
                seen.append(generating_output())
            seen.append(generating_output())

    def check(seen: list, interrupted: bool) -> None:
        _end_blocks_left(interrupted)
        assert seen == [True, False, True][: len(seen)]
        _switch_left_by_an_interrupt_before_its_block(interrupted)
        _world_invariants()

    return setup, op, check


def precompile_block_with_argument():
    """``with precompile_output(True):``: the mode is on inside and as it was after, and an
    interrupt anywhere (also between the construction and the block's start) leaves it off."""

    def op(seen: list) -> None:
        with precompile_output(True):
            seen.append(generating_output())
        seen.append(generating_output())

    def check(seen: list, interrupted: bool) -> None:
        _end_blocks_left(interrupted)
        assert seen == [True, False][: len(seen)]
        _switch_left_by_an_interrupt_before_its_block(interrupted)
        _world_invariants()

    return list, op, check


def outright_switch():
    """``precompile_output(True)``."""

    def op(state) -> None:
        precompile_output(True)

    def check(state, interrupted: bool) -> None:
        on = generating_output()
        assert on or interrupted
        precompile_output(False)
        _world_invariants()

    return lambda: None, op, check


CASES = [
    callee_redefinition,
    more_specific_method,
    replacement,
    replacement_then_another,
    deletion,
    bump,
    pin,
    copied_context,
    compile_hook_block,
    device_code_source_block,
    precompile_blocks,
    precompile_block_with_argument,
    outright_switch,
]


# The injector models where CPython 3.10 to 3.13 check for pending asynchronous exceptions.
# A backward jump's point is taken at the jump instruction itself: 3.13 checks there, before
# jumping, and its compiler leaves some such jumps out of the exception table (see
# world._Locked); 3.11 and 3.12 check as they jump, with the exception at the loop's head, so
# for them the point is at least as strict. On 3.10 a Python callee's return into a call is a
# point too (not a generator's: it returns to whatever resumed it). The real timer signals
# below test every version as it is.
_INJECTOR_MODEL = pytest.mark.skipif(
    not (3, 10) <= sys.version_info[:2] <= (3, 13),
    reason="the injector models CPython 3.10 to 3.13's checks for pending asynchronous "
    "exceptions; another version's points are not modelled",
)


@_INJECTOR_MODEL
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_interrupted_anywhere_it_is_whole_or_not_at_all(case):
    """Every point where an interrupt can land in the operation, one run each."""
    assert interrupt_everywhere(*case()) >= 2


@_INJECTOR_MODEL
def test_the_injector_lands_only_where_cpython_checks_for_pending_work():
    class Plain:
        pass

    def straight_line(o):
        o.a = 1
        o.b = 2
        return o

    def calls(o):
        o.a = len("x")
        return o

    def loop(o):
        for _ in range(3):
            o.a = 0
        return o

    counts = []
    for fn in (straight_line, calls, loop):
        inj = Injector(None)
        inj.run(fn, Plain())
        counts.append(inj.seen)
    # the entry, then nothing between the two stores; a C call's return; each backward jump
    # (and the C calls range() and iter(): the loop's set-up); on 3.10 also the return of the
    # operation itself into the injector's call of it
    assert counts[0] == 1 + _OLD and counts[1] == 2 + _OLD and counts[2] >= 4


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_real_timer_signals_at_random_points_leave_nothing_behind():
    """What the injector models, with real signals: a timer at a random moment of each
    operation raises KeyboardInterrupt from its handler, wherever CPython runs it."""
    rnd = random.Random(1)
    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt("timer")

    old_handler = signal.signal(signal.SIGALRM, handler)
    interrupts, runs, deadline = 0, 0, time.monotonic() + 20
    durations = {}
    gc.collect()
    gc.disable()  # a collection's callbacks and finalizers would swallow the interrupt
    try:
        while interrupts < 2000 and time.monotonic() < deadline:
            case = CASES[runs % len(CASES)]
            runs += 1
            setup, op, check = case()
            state = setup()
            delay = rnd.random() * durations.get(case, 1e-3)
            interrupted = False
            t = time.perf_counter()
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
                op(state)
                armed[0] = False  # before the timer is stopped: a late signal does nothing
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                interrupted = True
                interrupts += 1
            else:
                durations[case] = time.perf_counter() - t
            check(state, interrupted)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        gc.enable()
    assert interrupts >= min(200, runs // 4), (interrupts, runs)
    # The world lock must not be left held by an interrupted operation. (Released here if it
    # is, so that no later test waits on it.)
    lock, held = world_module._lock(), 0
    while lock._is_owned():
        lock.release()
        held += 1
    assert not held, f"an interrupted operation left the world lock held ({held} levels)"


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("case", [callee_redefinition, bump, compile_hook_block])
def test_an_interrupt_while_waiting_for_the_world_lock_changes_nothing(case):
    """Another thread holds the world lock; the operation waits for it and is interrupted
    there (a lock's wait lets a signal handler run), then the lock is let go."""
    import threading

    setup, op, check = case()
    state = setup()
    holding, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with world_module.lock():
            holding.set()
            let_go.wait(10)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert holding.wait(10)
    w = latest()
    old = signal.signal(signal.SIGALRM, _raise_interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            op(state)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        let_go.set()
        t.join(10)
    assert latest() == w  # the interrupt came while it waited: nothing happened
    check(state, True)


_LOOP_ITEMS = list(range(300))


def _interrupt_at_random(run, tries, after):
    """Run ``run`` ``tries`` times, each with a real timer signal at a random moment of it
    (raising KeyboardInterrupt once), and ``after()`` after each, interrupted or not; returns
    how many runs were interrupted."""
    rnd = random.Random(3)
    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt("timer")

    old = signal.signal(signal.SIGALRM, handler)
    interrupts = 0
    gc.collect()
    gc.disable()  # a collection's callbacks (hypothesis keeps one) would swallow the interrupt
    try:
        for _ in range(tries):
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, 1e-6 + rnd.random() * 3e-5)
                run()
                run()
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                interrupts += 1
            after()
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        gc.enable()
    return interrupts


def _loop_in_a_hook_block() -> int:
    with device_code(lambda job, artifact: None):  # the same loop as under the world lock
        x = 0
        for m in _LOOP_ITEMS:
            if m == 3:
                x = m
    return x


def _loop_in_a_precompile_block() -> int:
    with precompile_output():
        x = 0
        for m in _LOOP_ITEMS:
            if m == 3:
                x = m
    return x


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("run", [_loop_in_a_hook_block, _loop_in_a_precompile_block])
def test_a_real_signal_anywhere_in_a_block_leaves_it_ended_or_still_active(run):
    """The same for a compile-hook block and a precompile block, with real signals: the
    block ends with its with statement, also where the signal stopped the exit itself (at
    the entry of ``__exit__``, or on 3.13 at the loop's uncovered backward jump, CPython
    gh-130279): nothing is left on, and the next slow path brings the hot path back."""

    def check():
        assert world_module._blocks(world_module.snapshot) == []
        assert not generating_output() and world_module.hooks() == []
        world_module.refresh()  # what the next slow path does
        assert world_module.snapshot.blocks == () and hot_cell[0] == latest()

    interrupts = _interrupt_at_random(run, 2000, check)
    assert interrupts >= 300, interrupts


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt("timer")


@pytest.fixture(autouse=True)
def _clean_world():
    _world_invariants()
    yield
    _world_invariants()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_random_interrupts_while_defining_pinning_hooking_and_launching_leave_nothing():
    """A short run of tools/stress_interrupts.py: after each real interrupt no hook is called
    after its block, precompile mode is as before, cached lookups hit again, the hot path is
    back in this thread and another, no pin is left and dispatch is whole or not at all."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    try:
        from stress_interrupts import Stress
    finally:
        sys.path.pop(0)
    stress = Stress(seed=5)
    survived = stress.run(300, seconds=20)
    assert stress.problems == []
    assert survived >= 100, survived


@_INJECTOR_MODEL
def test_an_interrupt_anywhere_in_a_pinned_call_leaves_no_pin_in_its_kept_traceback():
    """No frame of the library holds a pin in a local (SPEC 9): an exception kept from an
    interrupt anywhere in ``invoke_in_world`` (and in ``current()`` inside it) keeps none."""
    w = latest()
    world_module.bump()
    for n in itertools.count():
        inj = Injector(n)
        kept = None
        try:
            inj.run(invoke_in_world, w, current)
        except Injected as e:
            kept = e  # its traceback holds the frames of the library it passed
        gc.collect()
        assert world_module.pins() == 0 and world_module.pinned_worlds() == frozenset(), n
        if kept is None:
            assert n > 3
            break
        assert kept.__traceback__ is not None
