"""Stateful tests: random sequences of definitions, pins and lookups against naive models.

(a) :class:`DispatchAndCompileMachine` defines kernel methods over a small numpy type
lattice (adding, replacing and deleting), redefines device functions (callees, and a callee of a
callee), bumps the world, pins tasks to older worlds (nested) and looks kernels up. A
deliberately naive model (a list of (signature, fn-id, min_world, max_world) rows per
function, a world counter, dispatch by brute force) says what each step must see: the
method or the error, the output of the compiled kernel, and whether a compilation may run.

(b) :class:`CachedEqualsUncachedMachine` requires every ``cached_lookup`` result to equal what
the uncached lookup returns in the same state, through definitions, bumps, pins, keys of
several types (``1`` and ``1.0`` never share an entry), compile hooks and precompile-output
blocks, and predicts exactly when ``lookup()`` runs from a model of the 4-entry cell.

Worlds and method tables are process-global, so every example makes fresh functions.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from pinned import PinnedThread
from pybackend import CONFIG, typeof

import specializer
from specializer import (
    AmbiguityError,
    GenericFunction,
    MethodError,
    cached_lookup,
    compile_count,
    current,
    device_code,
    generating_output,
    invoke_in_world,
    invokelatest,
    latest,
    precompile_output,
    specialize,
)
from specializer.kernels import DeviceFunction, Kernel, uncached_lookup
from specializer.world import WORLD_MAX

#: The type lattice methods are defined over, and the concrete types lookups use.
#: (Abstract types are listed twice, so more methods apply to the lookups' types.)
LATTICE = (
    np.number,
    np.number,
    np.floating,
    np.floating,
    np.integer,
    np.float32,
    np.float64,
    np.int64,
)
SIGS = st.tuples(st.sampled_from(LATTICE), st.sampled_from(LATTICE))
TTS = st.sampled_from(
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.int64, np.float64),
        (np.float64, np.float64),
    ]
)
INF = math.inf
MAX_PINS = 4

_fresh = itertools.count()


def _event(value: str) -> None:
    """hypothesis.event, which records only from the test's own thread (a pinned lookup runs
    in a PinnedThread)."""
    if threading.current_thread() is threading.main_thread():
        event(value)


def _le(a: tuple[type, ...], b: tuple[type, ...]) -> bool:
    """``a <: b`` componentwise (the naive model's own subtype test)."""
    return len(a) == len(b) and all(issubclass(x, y) for x, y in zip(a, b))


# -- the naive reference model --------------------------------------------------------------


@dataclass
class Row:
    sig: tuple[type, ...]
    fid: int
    callees: tuple[str, ...]
    min_world: int
    max_world: float = INF


class NaiveWorld:
    """A world counter and, per function, a plain list of method rows. Dispatch by brute
    force: the applicable visible rows, the unique one below all others, else an error."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.rows: dict[str, list[Row]] = defaultdict(list)

    def define(self, name: str, sig: tuple[type, ...], fid: int, callees: tuple[str, ...]) -> None:
        self.world += 1
        for r in self.rows[name]:
            if r.sig == sig and r.max_world == INF:
                r.max_world = self.world - 1
        self.rows[name].append(Row(sig, fid, callees, self.world))

    def delete(self, name: str, sig: tuple[type, ...]) -> None:
        self.world += 1
        for r in self.rows[name]:
            if r.sig == sig and r.max_world == INF:
                r.max_world = self.world - 1

    def bump(self) -> None:
        self.world += 1

    def visible(self, name: str, w: int) -> list[Row]:
        return [r for r in self.rows[name] if r.min_world <= w <= r.max_world]

    def dispatch(self, name: str, tt: tuple[type, ...], w: int) -> Row | type[MethodError]:
        applicable = [r for r in self.visible(name, w) if _le(tt, r.sig)]
        if not applicable:
            return MethodError
        best = [r for r in applicable if all(_le(r.sig, o.sig) for o in applicable)]
        return best[0] if len(best) == 1 else AmbiguityError

    def deps(self, name: str, tt: tuple[type, ...], w: int) -> frozenset | type[MethodError]:
        """What compiled code for ``name(tt)`` in world ``w`` depends on: the kernel's method
        and every callee's (transitively), or the error the lookup raises."""
        row = self.dispatch(name, tt, w)
        if isinstance(row, type):
            return row
        out = {(name, row.fid)}
        todo = list(row.callees)
        while todo:
            c = todo.pop()
            crow = self.dispatch(c, (), w)
            if isinstance(crow, type):
                return MethodError
            if (c, crow.fid) not in out:
                out.add((c, crow.fid))
                todo.extend(crow.callees)
        return frozenset(out)

    def output(self, name: str, tt: tuple[type, ...], w: int) -> tuple:
        """What the kernel computes in world ``w`` (see ``kernel_body``)."""
        row = self.dispatch(name, tt, w)
        assert not isinstance(row, type)
        return (
            row.fid,
            tuple(t.__name__ for t in tt),
            tuple(self._callee_output(c, w) for c in row.callees),
        )

    def _callee_output(self, name: str, w: int) -> tuple:
        row = self.dispatch(name, (), w)
        assert not isinstance(row, type)
        return (row.fid, tuple(self._callee_output(c, w) for c in row.callees))


def kernel_body(name: str, fid: int, callees: tuple[str, ...]):
    """A kernel method's body: device source (Python, for the pybackend) returning its fid,
    the concrete argument types it was specialized to, and its callees' outputs."""
    calls = "".join(f"{c}(), " for c in callees)

    def body(*tt: type) -> str:
        names = tuple(t.__name__ for t in tt)
        return f"def {name}(a, b):\n    return ({fid}, {names!r}, ({calls}))\n"

    return body


def device_body(name: str, fid: int, callees: tuple[str, ...]):
    calls = "".join(f"{c}(), " for c in callees)

    def body() -> str:
        return f"def {name}():\n    return ({fid}, ({calls}))\n"

    return body


@dataclass
class Compiled:
    """A compilation the model saw: its world, its dependencies, whether the core had to
    trust it in its own world only (a dependency changed between that world and the latest),
    and the latest world when it was stored (from which on definitions end it)."""

    world: int
    deps: frozenset
    own_world_only: bool
    stored: int


def _pick_world(start: int, pick: int) -> int:
    """An existing world, mostly from this example's own (a few from before it)."""
    lo = max(1, start - 2)
    return lo + pick % (latest() - lo + 1)


# -- (a) dispatch and compiled code against the naive model ---------------------------------


class DispatchAndCompileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        n = next(_fresh)
        self.kernels = [f"k{i}_{n}" for i in range(2)]
        # d0 may call d1 and d2, d1 may call d2: d2 can be a callee of a callee.
        self.devices = [f"d{i}_{n}" for i in range(3)]
        self.gfs: dict[str, GenericFunction] = {k: Kernel(k, typeof) for k in self.kernels}
        self.gfs.update({d: DeviceFunction(d) for d in self.devices})
        self.model = NaiveWorld(latest())
        self.start = latest()
        self.methods: dict[int, object] = {}  # fid -> the core's Method
        self.fids = itertools.count()
        self.compiled: dict[tuple[str, tuple[type, ...]], list[Compiled]] = defaultdict(list)
        self.pins: list[tuple[int, PinnedThread]] = []
        self.recent: list[tuple[str, tuple[type, ...], str]] = []

    # -- helpers -----------------------------------------------------------------------------

    def _define(self, name: str, sig: tuple[type, ...], callees: tuple[str, ...], body) -> None:
        fid = next(self.fids)
        m = self.gfs[name].add_method(
            body(name, fid, callees), signature=sig, callees=[self.gfs[c] for c in callees]
        )
        self.model.define(name, sig, fid, callees)
        self.methods[fid] = m
        self._release()
        assert m.min_world == latest() == self.model.world

    def _world(self) -> int:
        return self.pins[-1][0] if self.pins else self.model.world

    def _run(self, fn, *args):
        """Run ``fn`` in the innermost pinned thread (or unpinned, here)."""
        return self.pins[-1][1].run(fn, *args) if self.pins else fn(*args)

    def _in_range(self, c: Compiled, k: str, tt: tuple[type, ...], w: int) -> bool:
        """Whether ``w`` is in compilation ``c``'s range (what the core keeps it for): from
        the newest definition of the methods it used on; up to its own world if the core
        trusted it there only, else until the first definition after it was stored that
        changed what it depends on (even where a later one dispatches as it did again)."""
        if w < max(self.methods[fid].min_world for _, fid in c.deps):
            return False
        if c.own_world_only:
            return w <= c.world
        return all(self.model.deps(k, tt, v) == c.deps for v in range(c.stored, w + 1))

    def _valid(self, c: Compiled, k: str, tt: tuple[type, ...], w: int) -> bool:
        """Whether compilation ``c`` is valid in ``w``: in its range, and ``w`` dispatches to
        the same methods (a lookup dispatches first, and the same methods make the same code,
        also where a method deleted since dispatched otherwise in between). Without deletions,
        every world of the range dispatches so."""
        return self._in_range(c, k, tt, w) and self.model.deps(k, tt, w) == c.deps

    def _covered(self, k: str, tt: tuple[type, ...], w: int, deps: frozenset) -> bool:
        """Whether a compilation the model saw (and the core still keeps) is valid in ``w``."""
        return any(c.deps == deps and self._valid(c, k, tt, w) for c in self.compiled[(k, tt)])

    def _release(self) -> None:
        """After each definition the core keeps only code valid in the latest world or in a
        world a live pin holds; the rest is released (and compiles again if needed)."""
        keep = {self.model.world, *(w for w, _ in self.pins)}
        for (k, tt), cs in self.compiled.items():
            cs[:] = [c for c in cs if any(self._in_range(c, k, tt, w) for w in keep)]

    def _check_lookup(self, k: str, tt: tuple[type, ...], ctx_key: str, w: int) -> None:
        """In a task whose world should be ``w``: dispatch, the visible methods, and the
        compiled kernel (its output and whether it compiled) all agree with the model."""
        assert current() == w
        gf = self.gfs[k]
        want = self.model.dispatch(k, tt, w)
        try:
            mi = gf.methodinstance(tt)
        except MethodError as e:
            assert type(e) is want, (e, want)
        else:
            assert not isinstance(want, type), (mi, want)
            assert mi.method is self.methods[want.fid] and mi.tt == tt
            assert mi.method.min_world == want.min_world
            assert mi.method.max_world == (WORLD_MAX if want.max_world == INF else want.max_world)
        assert {id(m) for m in gf.methods()} == {
            id(self.methods[r.fid]) for r in self.model.visible(k, w)
        }

        deps = self.model.deps(k, tt, w)
        before = compile_count()
        try:
            fn = uncached_lookup(gf, tt, CONFIG, ctx_key)  # machine (b) checks the cache
        except MethodError as e:
            assert type(e) is deps, (e, deps)
            assert compile_count() == before
            _event(f"kernel lookup: {type(e).__name__}")
            return
        assert not isinstance(deps, type), deps
        covered = self._covered(k, tt, w, deps)
        assert compile_count() - before == (0 if covered else 1), (
            f"compile count rose by {compile_count() - before}, model says "
            f"{'still valid' if covered else 'must compile'} in world {w}"
        )
        _event(
            f"kernel lookup: {'reused' if covered else 'compiled'}"
            f"{' in an older world' if w < self.model.world else ''}"
        )
        if not covered:
            changed = self.model.deps(k, tt, self.model.world) != deps
            self.compiled[(k, tt)].append(Compiled(w, deps, changed, self.model.world))
            if changed:
                _event("compiled in an older world whose code is no longer current")
        assert fn(*(t(1) for t in tt)) == self.model.output(k, tt, w)

    # -- definitions -------------------------------------------------------------------------

    @initialize(
        c1=st.booleans(),
        c0=st.sets(st.sampled_from((1, 2))),
        kc=st.lists(st.sets(st.integers(0, 2)), min_size=2, max_size=2),
    )
    def define_device_functions_and_fallback_kernels(
        self, c1: bool, c0: set[int], kc: list[set[int]]
    ) -> None:
        d0, d1, d2 = self.devices
        self._define(d2, (), (), device_body)
        self._define(d1, (), (d2,) if c1 else (), device_body)
        self._define(d0, (), tuple(self.devices[i] for i in sorted(c0)), device_body)
        for k, callees in zip(self.kernels, kc):
            self._define(
                k,
                (np.number, np.number),
                tuple(self.devices[i] for i in sorted(callees)),
                kernel_body,
            )

    @rule(k=st.integers(0, 1), sig=SIGS, callees=st.sets(st.integers(0, 2)))
    def define_kernel_method(self, k: int, sig, callees: set[int]) -> None:
        self._define(
            self.kernels[k], sig, tuple(self.devices[i] for i in sorted(callees)), kernel_body
        )

    @rule(k=st.integers(0, 1), pick=st.integers(0, 10**6), callees=st.sets(st.integers(0, 2)))
    def replace_kernel_method(self, k: int, pick: int, callees: set[int]) -> None:
        name = self.kernels[k]
        open_sigs = [r.sig for r in self.model.rows[name] if r.max_world == INF]
        if open_sigs:
            self._define(
                name,
                open_sigs[pick % len(open_sigs)],
                tuple(self.devices[i] for i in sorted(callees)),
                kernel_body,
            )

    @rule(k=st.integers(0, 1), pick=st.integers(0, 10**6))
    def delete_kernel_method(self, k: int, pick: int) -> None:
        name = self.kernels[k]
        open_sigs = [r.sig for r in self.model.rows[name] if r.max_world == INF]
        if open_sigs:
            sig = open_sigs[pick % len(open_sigs)]
            m = self.gfs[name].delete_method(sig)
            self.model.delete(name, sig)
            self._release()
            assert m.signature == sig and m.max_world == latest() - 1
            assert latest() == self.model.world

    @rule(
        k=st.integers(0, 1),
        a=st.sampled_from((np.floating, np.float32)),
        callees=st.sets(st.integers(0, 2)),
    )
    def define_a_crossed_pair(self, k: int, a: type, callees: set[int]) -> None:
        # (a, number) and (number, a): ambiguous for (float32, float32) until a method
        # more specific than both is defined
        cs = tuple(self.devices[i] for i in sorted(callees))
        self._define(self.kernels[k], (a, np.number), cs, kernel_body)
        self._define(self.kernels[k], (np.number, a), cs, kernel_body)

    @rule(d=st.integers(0, 2), callees=st.sets(st.integers(0, 2)))
    def redefine_device_function(self, d: int, callees: set[int]) -> None:
        self._define(
            self.devices[d],
            (),
            tuple(self.devices[i] for i in sorted(callees) if i > d),
            device_body,
        )

    @rule()
    def bump(self) -> None:
        assert specializer.bump() == self.model.world + 1
        self.model.bump()

    # -- pins ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.pins) < MAX_PINS)
    @rule(pick=st.integers(0, 10**6))
    def pin(self, pick: int) -> None:
        # A thread inside invoke_in_world: the pin lasts until it is told to return.
        w = _pick_world(self.start, pick)
        self.pins.append((w, PinnedThread(w)))

    @precondition(lambda self: self.pins)
    @rule()
    def unpin(self) -> None:
        self.pins.pop()[1].end()

    # -- lookups ---------------------------------------------------------------------------

    @rule(k=st.integers(0, 1), tt=TTS, ctx=st.sampled_from(("ctx0", "ctx1")))
    def lookup(self, k: int, tt, ctx: str) -> None:
        self.recent.append((self.kernels[k], tt, ctx))
        self._run(self._check_lookup, self.kernels[k], tt, ctx, self._world())

    @precondition(lambda self: self.recent)
    @rule(pick=st.integers(0, 10**6))
    def repeat_a_recent_lookup(self, pick: int) -> None:
        k, tt, ctx = self.recent[-1 - pick % min(3, len(self.recent))]
        self._run(self._check_lookup, k, tt, ctx, self._world())

    @rule(k=st.integers(0, 1), tt=TTS)
    def lookup_via_invokelatest(self, k: int, tt) -> None:
        self._run(invokelatest, self._check_lookup, self.kernels[k], tt, "ctx0", self.model.world)

    @rule(k=st.integers(0, 1), tt=TTS, p1=st.integers(0, 10**6), p2=st.integers(0, 10**6))
    def lookup_in_nested_pins(self, k: int, tt, p1: int, p2: int) -> None:
        w1, w2 = _pick_world(self.start, p1), _pick_world(self.start, p2)
        name = self.kernels[k]

        def outer() -> None:
            self._check_lookup(name, tt, "ctx0", w1)
            invoke_in_world(w2, self._check_lookup, name, tt, "ctx0", w2)
            self._check_lookup(name, tt, "ctx0", w1)

        self._run(invoke_in_world, w1, outer)

    @invariant()
    def world_counter_and_task_world_match_the_model(self) -> None:
        assert latest() == self.model.world
        assert self._run(current) == self._world()

    def teardown(self) -> None:
        while self.pins:
            self.unpin()


TestDispatchAndCompile = DispatchAndCompileMachine.TestCase
TestDispatchAndCompile.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- (b) every cached result equals the uncached lookup's -----------------------------------


class LookupFailed(Exception):
    pass


NAN = float("nan")

#: Key factories: keys of several types (1, 1.0 and True never share an entry; (1,) and
#: (1.0,) are one key as a dict sees them), enough ints to evict, NaN both as one object
#: (equal to itself by identity) and fresh each time (never equal to anything).
KEYS = st.sampled_from(
    [
        lambda: 1,
        lambda: 2,
        lambda: 3,
        lambda: 4,
        lambda: 5,
        lambda: 1.0,
        lambda: 2.0,
        lambda: True,
        lambda: "1",
        lambda: (1,),
        lambda: (1.0,),
        lambda: NAN,
        lambda: float("nan"),
    ]
)
MODES = st.sampled_from(["ok", "ok", "ok", "raise", "wrong_type", "bump"])


def kernel_site(m: CachedEqualsUncachedMachine, tt: tuple[type, ...], key, via_specialize):
    """A back-end's kernel lookup wrapped in cached_lookup (one call site)."""
    F = m.kernel

    def lookup():
        m.kernel_calls += 1
        return uncached_lookup(F, tt, CONFIG, key)

    if via_specialize:
        return specialize(lookup, object, F, tt, type(key))(key, lookup)
    return cached_lookup(lookup, object, F, tt, key)


def value_site(m: CachedEqualsUncachedMachine, key, mode: str, via_specialize: bool):
    """A lookup whose result is (its world, the key); it can fail, return a wrong type, or
    make a definition meanwhile."""

    def lookup():
        m.value_calls += 1
        if mode == "raise":
            raise LookupFailed(key)
        if mode == "wrong_type":
            return [current(), key]
        if mode == "bump":
            specializer.bump()
        return (current(), key)

    if via_specialize:
        return specialize(lookup, tuple, m.F, (), type(key))(key, lookup)
    return cached_lookup(lookup, tuple, m.F, (), key)


class CachedEqualsUncachedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        n = next(_fresh)
        self.kernel = Kernel(f"kb_{n}", typeof)
        self.device = DeviceFunction(f"db_{n}")
        self.unrelated = GenericFunction(f"unrelated_{n}")
        self.F = GenericFunction(f"value_{n}")  # the value site's F: fresh per example
        self.fids = itertools.count()
        self.start = latest()
        self.precompile_base = generating_output()
        self.kernel_calls = 0
        self.value_calls = 0
        # The model of each cell: (world, key) of its results, most recent first.
        self.cells: dict[tuple, list[tuple[int, object]]] = defaultdict(list)
        # ("pin", world, PinnedThread) | ("hook", cm, [count]) | ("precompile", cm, on),
        # innermost last
        self.frames: list[tuple] = []
        self.recent_kernel: list[tuple[tuple[type, ...], object]] = []
        self.recent_keys: list[object] = []

    # -- the model -------------------------------------------------------------------------

    def _world(self) -> int:
        pins = [f for f in self.frames if f[0] == "pin"]
        return pins[-1][1] if pins else latest()

    def _run(self, fn, *args):
        pins = [f for f in self.frames if f[0] == "pin"]
        return pins[-1][2].run(fn, *args) if pins else fn(*args)

    def _precompiling(self) -> bool:
        modes = [f[2] for f in self.frames if f[0] == "precompile"]
        return modes[-1] if modes else self.precompile_base

    def _hooks(self) -> list[list[int]]:
        return [f[2] for f in self.frames if f[0] == "hook"]

    def _bypass(self) -> bool:
        return bool(self._hooks()) or self._precompiling()

    def _runs(self, cell, w: int, key) -> bool:
        """Whether a call runs lookup(): always while bypassing, else unless the cell holds
        an entry of this world and a key equal to this one as a dict sees it."""
        return self._bypass() or not any(
            ew == w and (ek is key or ek == key) for ew, ek in self.cells[cell]
        )

    def _store(self, cell, w: int, key) -> None:
        """After a call that ran lookup() and succeeded (a hit reorders nothing)."""
        if self._bypass():
            return
        kept = [
            (ew, ek) for ew, ek in self.cells[cell] if not (ew == w and (ek is key or ek == key))
        ]
        self.cells[cell] = [(w, key), *kept][:4]

    # -- definitions -------------------------------------------------------------------------

    def _define_kernel_method(self, sig, calls_device: bool) -> None:
        callees = (self.device.name,) if calls_device else ()
        self.kernel.add_method(
            kernel_body(self.kernel.name, next(self.fids), callees),
            signature=sig,
            callees=[self.device] if calls_device else [],
        )

    def _redefine_device(self) -> None:
        self.device.add_method(device_body(self.device.name, next(self.fids), ()), signature=())

    @initialize(sig=SIGS, calls_device=st.booleans())
    def define_first_methods(self, sig, calls_device: bool) -> None:
        self._redefine_device()
        self._define_kernel_method((np.number, np.number), calls_device)
        self._define_kernel_method(sig, True)

    # One rule for every way the world rises, so that lookups often repeat in one world.
    @rule(
        what=st.sampled_from(["kernel", "device", "unrelated", "bump"]),
        sig=SIGS,
        calls_device=st.booleans(),
    )
    def raise_the_world(self, what: str, sig, calls_device: bool) -> None:
        before = latest()
        if what == "kernel":
            self._define_kernel_method(sig, calls_device)
        elif what == "device":
            self._redefine_device()
        elif what == "unrelated":
            self.unrelated.add_method(lambda *ts: "", signature=sig)
        else:
            specializer.bump()
        assert latest() == before + 1

    # -- frames: pins, compile hooks, precompile-output blocks ------------------------------

    @precondition(lambda self: len(self.frames) < 5)
    @rule(
        kind=st.sampled_from(["pin", "pin", "hook", "precompile"]),
        pick=st.integers(0, 10**6),
        on=st.booleans(),
    )
    def push_frame(self, kind: str, pick: int, on: bool) -> None:
        if kind == "pin":
            # A thread inside invoke_in_world: the pin lasts until it is told to return.
            w = _pick_world(self.start, pick)
            self.frames.append(("pin", w, PinnedThread(w)))
        elif kind == "hook":
            count = [0]

            def hook(job, artifact) -> None:
                assert artifact.source
                count[0] += 1

            cm = device_code(hook)
            cm.__enter__()
            self.frames.append(("hook", cm, count))
        else:
            cm = precompile_output(on)
            cm.__enter__()
            self.frames.append(("precompile", cm, on))

    @precondition(lambda self: self.frames)
    @rule()
    def pop_frame(self) -> None:
        kind, cm, extra = self.frames.pop()
        if kind == "pin":
            extra.end()  # the PinnedThread
        else:
            cm.__exit__(None, None, None)

    # -- lookups ---------------------------------------------------------------------------

    def _kernel_lookup(self, tt, key, via_specialize: bool) -> None:
        self.recent_kernel.append((tt, key))
        w = self._world()
        cell = ("kernel", tt, type(key))
        runs = self._runs(cell, w, key)
        calls = self.kernel_calls
        hooks_before = [c[0] for c in self._hooks()]

        def both():
            assert current() == w
            try:
                got = kernel_site(self, tt, key, via_specialize), None
            except MethodError as e:
                got = None, e
            try:
                want = uncached_lookup(self.kernel, tt, CONFIG, key), None
            except MethodError as e:
                want = None, e
            return got, want

        (got, got_err), (want, want_err) = self._run(both)
        assert self.kernel_calls - calls == (1 if runs else 0)
        _event(
            f"cached kernel lookup: {'ran lookup' if runs else 'hit'}"
            f"{', bypassed' if self._bypass() else ''}"
        )
        assert type(got_err) is type(want_err), (got_err, want_err)
        if got_err is not None:
            assert runs  # a hit cannot fail: it returns what succeeded in this world
            assert [c[0] for c in self._hooks()] == hooks_before
            return
        if w == latest():
            assert got is want
        else:
            # code for an older world that no pin held at a definition since was released:
            # the uncached lookup compiles it again (the same code), the cell keeps its own
            assert got is want or got.__code__ == want.__code__
        if runs:
            self._store(cell, w, key)
        # a hook sees both lookups (cached and uncached): it is never bypassed by a hit
        assert [c[0] for c in self._hooks()] == [n + 2 for n in hooks_before]

    def _value_lookup(self, key, mode: str, via_specialize: bool) -> None:
        self.recent_keys.append(key)
        w = self._world()
        cell = ("value", type(key))
        runs = self._runs(cell, w, key)
        calls, before = self.value_calls, latest()

        def call():
            assert current() == w
            try:
                return value_site(self, key, mode, via_specialize), None
            except (LookupFailed, TypeError) as e:
                return None, e

        got, err = self._run(call)
        assert self.value_calls - calls == (1 if runs else 0)
        _event(
            f"cached value lookup: {'ran lookup' if runs else 'hit'}"
            f"{', pinned' if any(f[0] == 'pin' for f in self.frames) else ''}"
        )
        assert latest() == before + (1 if runs and mode == "bump" else 0)
        if runs and mode == "raise":
            assert type(err) is LookupFailed  # propagated, nothing stored
        elif runs and mode == "wrong_type":
            assert type(err) is TypeError and "nothing was stored" in str(err)
        else:
            assert err is None
            # the uncached lookup in the same state (the call's world) gives the same value;
            # a key of another type never comes back from another type's entry
            assert got == (w, key) and type(got[1]) is type(key)
            if runs:
                self._store(cell, w, key)

    @rule(tt=TTS, key=KEYS, via_specialize=st.booleans())
    def kernel_lookup(self, tt, key, via_specialize: bool) -> None:
        self._kernel_lookup(tt, key(), via_specialize)

    @precondition(lambda self: self.recent_kernel)
    @rule(pick=st.integers(0, 10**6), via_specialize=st.booleans())
    def repeat_a_recent_kernel_lookup(self, pick: int, via_specialize: bool) -> None:
        self._kernel_lookup(
            *self.recent_kernel[-1 - pick % min(6, len(self.recent_kernel))], via_specialize
        )

    @rule(key=KEYS, mode=MODES, via_specialize=st.booleans())
    def value_lookup(self, key, mode: str, via_specialize: bool) -> None:
        self._value_lookup(key(), mode, via_specialize)

    @precondition(lambda self: self.recent_keys)
    @rule(pick=st.integers(0, 10**6), mode=MODES, via_specialize=st.booleans())
    def repeat_a_recent_value_lookup(self, pick: int, mode: str, via_specialize: bool) -> None:
        self._value_lookup(
            self.recent_keys[-1 - pick % min(6, len(self.recent_keys))], mode, via_specialize
        )

    @rule(key=KEYS)
    def identical_calls_in_a_row(self, key) -> None:
        key = key()
        w = self._world()
        cell = ("value", type(key))
        calls = self.value_calls
        first_runs = self._runs(cell, w, key)
        first = self._run(value_site, self, key, "ok", False)
        assert self.value_calls - calls == (1 if first_runs else 0)
        if first_runs:
            self._store(cell, w, key)
        second = self._run(value_site, self, key, "ok", False)
        assert first == second == (w, key)
        # nothing defined in between: the second call runs lookup exactly when a hook or
        # precompile-output mode is on (a pinned task still hits its own world's entry)
        assert self.value_calls - calls == (1 if first_runs else 0) + (1 if self._bypass() else 0)

    @rule(n=st.integers(1, 6), as_float=st.booleans())
    def cycle_through_keys_twice(self, n: int, as_float: bool) -> None:
        # n distinct keys, twice, in one world: the second pass hits every key while the
        # cell can hold all n (4 entries), and evicts each just before it is needed past that
        keys = [float(i) if as_float else i for i in range(100, 100 + n)]
        for key in keys + keys:
            self._value_lookup(key, "ok", False)

    @invariant()
    def modes_are_as_the_frames_say(self) -> None:
        assert generating_output() == self._precompiling()
        assert self._run(current) == self._world()

    def teardown(self) -> None:
        while self.frames:
            self.pop_frame()


TestCachedEqualsUncached = CachedEqualsUncachedMachine.TestCase
TestCachedEqualsUncached.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
