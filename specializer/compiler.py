"""Compiler jobs, the compiled-code cache with world ranges, and compile hooks.

Code lives in its method instance (as in Julia), so a dropped kernel frees its code; a cache
entry keeps one open code instance plus at most one per pinned world (``docs/design.md``)."""

from __future__ import annotations

import contextlib
import itertools
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

from . import world as _world
from .backedges import on_invalidate, register_backedges
from .locks import new_lock
from .methods import GenericFunction, Method, MethodError, MethodInstance
from .signatures import signature

__all__ = [
    "Artifact",
    "Backend",
    "CodeInstance",
    "CompileError",
    "CompilerConfig",
    "CompilerJob",
    "compile_and_link",
    "compile_count",
    "compile_only",
    "device_code",
    "device_code_source",
    "forget_context",
]


class Artifact(Protocol):
    """What ``Backend.compile`` returns: anything with the device source it was built from."""

    @property
    def source(self) -> str: ...  # read-only: a frozen dataclass's field satisfies it


class CompileError(RuntimeError):
    """Device code that does not compile or build; the message names the kernel and has the log."""


class Backend(ABC):
    """The small interface each back-end implements (``docs/backend.md``)."""

    #: a short name for messages ("opencl", "cuda")
    name: str = "backend"

    @abstractmethod
    def compile(self, job: CompilerJob) -> Artifact:
        """Compile ``job`` (from ``job.device_sources()``) into an artifact with no context in
        it; raise :class:`CompileError`."""

    @abstractmethod
    def link(self, job: CompilerJob, artifact: Artifact, context: Hashable) -> Any:
        """Make ``artifact`` usable in ``context``; the result is cached per context."""

    def relink(self, job: CompilerJob, artifact: Artifact, context: Hashable, linked: Any) -> Any:
        """What to use in another world than ``linked`` was last checked in: ``linked`` (the
        default), or code built again where a file it depends on (an included header) changed."""
        return linked

    def recompile(self, job: CompilerJob, artifact: Artifact) -> Artifact:
        """What to use in another world than ``artifact`` was last checked in: ``artifact``
        (the default), or ``job`` compiled again where a file it was compiled from (an
        included header) changed; a new artifact is linked afresh. ``job.callees`` is unset."""
        return artifact


#: A dispatch compiled code depends on: (generic function, argument types, the method chosen).
Dependency = tuple[GenericFunction, tuple[type, ...], Method]

_config_keys: dict[tuple[int, Hashable], int] = {}
_next_config_key = itertools.count()  # a key is never given twice, whatever leaves the table
_config_lock = new_lock(reentrant=False)
#: the attribute of an error raised by a method body that holds its traceback from the body on
_BODY_TB = "_specializer_body_traceback"
#: the attribute that marks an error as the user's (users_error)
_USERS = "_specializer_users_error"
_E = TypeVar("_E", bound=BaseException)


class CompilerConfig:
    """A back-end and its (hashable) options: what besides the method instance decides the code."""

    __slots__ = ("_key", "backend", "options")

    def __init__(self, backend: Backend, options: Hashable = ()) -> None:
        self.backend = backend
        self.options = options
        # the code cache's key and the config's identity: a small int per (backend, options),
        # so a find hashes an int (while a config holds the backend, no other has its id)
        with _config_lock():
            self._key = _config_keys.setdefault((id(backend), options), next(_next_config_key))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CompilerConfig)
            and self._key == other._key
            and self.backend is other.backend
        )

    def __hash__(self) -> int:
        return self._key

    def __reduce__(self) -> tuple[Any, ...]:
        # the key is this process's: a copy or another process computes its own
        return CompilerConfig, (self.backend, self.options)

    def __repr__(self) -> str:
        return f"CompilerConfig({self.backend.name}, {self.options!r})"


class CompilerJob:
    """What to compile: a method instance, a config, and the world it is compiled in."""

    __slots__ = ("_sources", "callees", "config", "method_options", "mi", "world")

    def __init__(self, mi: MethodInstance, config: CompilerConfig, world: int) -> None:
        self.mi = mi
        self.config = config
        self.world = world
        self.callees: tuple[MethodInstance, ...] = ()  # set by the cache, dependencies first
        #: the options the methods' sources gave (``KernelSource(options=...)``, the callees'
        #: first) as its code was compiled: set by the cache before the compile hooks run
        self.method_options: tuple[Any, ...] = ()
        self._sources: list[str] | None = None

    @property
    def name(self) -> str:
        """The kernel's name (its generic function's)."""
        return self.mi.method.gf.name

    def device_sources(self) -> list[str]:
        """Each callee's source (dependencies first), then the kernel's (each body is called
        once per job)."""
        if self._sources is None:
            self._sources = [_generate(mi) for mi in (*self.callees, self.mi)]
        return list(self._sources)

    def __repr__(self) -> str:
        return f"CompilerJob({self.mi!r}, {self.config!r}, world={self.world})"


def _generate(mi: MethodInstance) -> str:
    """Call ``mi``'s method body: its error keeps its traceback from the body on and gains a
    note naming the method; a body returning no str is a TypeError saying what to return."""
    try:
        src = mi.method.fn(*mi.tt)
    except Exception as e:
        tb = e.__traceback__
        _mark(e, _BODY_TB, tb.tb_next if tb is not None else None)
        note = f"(raised by the body of {_where(mi)} as it generated device source)"
        if hasattr(e, "add_note"):  # 3.11+
            e.add_note(note)
        else:  # 3.10: PEP 678's attribute, which pytest and the exceptiongroup backport print
            with contextlib.suppress(AttributeError):
                e.__notes__ = [*getattr(e, "__notes__", ()), note]  # type: ignore[attr-defined]
        raise
    if not isinstance(src, str):
        got = "None" if src is None else f"a {type(src).__name__}"
        error = TypeError(
            f"the body of {_where(mi)} returned {got}: it must return device source (a str) "
            f"that defines {mi.method.gf.name}; end every path through it with "
            "`return <source>`"
        )
        _mark(error, _BODY_TB, None)
        raise error
    return src


def _where(mi: MethodInstance) -> str:
    """``method f(T...) (file:line)`` (``, called for f(t...),`` where the types differ)."""
    m = mi.method
    code = getattr(m.fn, "__code__", None)
    at = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    where = f"method {signature(m.gf.name, m.signature)}{at}"
    if tuple(mi.tt) != tuple(m.signature):
        where += f", called for {signature(m.gf.name, mi.tt)},"
    return where


def _mark(e: BaseException, attr: str, value: Any) -> None:
    with contextlib.suppress(AttributeError):  # an exception type that takes no attributes
        setattr(e, attr, value)


def users_error(e: _E) -> _E:
    """Mark ``e``, raised as a back-end compiles or links, as the user's error (annotations vs.
    the body's source): a launch or lookup raises it without the library's frames between."""
    _mark(e, _USERS, True)
    return e


def is_users_error(e: BaseException) -> bool:
    """Whether ``e`` was marked with :func:`users_error`."""
    return _USERS in getattr(e, "__dict__", ())


def body_traceback(e: BaseException) -> tuple[bool, Any]:
    """``(True, tb)`` for an error raised by (or about) a method body generating device source,
    ``tb`` its traceback from the body on (or None), so a launch re-raises it from there."""
    if _BODY_TB in getattr(e, "__dict__", ()):
        return True, e.__dict__[_BODY_TB]
    return False, None


class CodeInstance:
    """Compiled code for (method instance, config), valid in ``[min_world, max_world]``."""

    __slots__ = (
        "__weakref__",
        "artifact",
        "checked",
        "config",
        "linked",
        "max_world",
        "method_options",
        "mi",
        "min_world",
    )

    def __init__(
        self,
        mi: MethodInstance,
        config: CompilerConfig,
        artifact: Artifact,
        min_world: int,
        checked: int = 0,
    ) -> None:
        self.mi = mi
        self.config = config
        self.artifact = artifact
        self.min_world = min_world
        self.max_world = _world.WORLD_MAX
        #: the world ``artifact`` was compiled or last checked in (Backend.recompile)
        self.checked = checked
        #: the options its methods' sources gave (CompilerJob.method_options)
        self.method_options: tuple[Any, ...] = ()
        #: context -> (the world it was linked or last checked in, what link returned)
        self.linked: dict[Hashable, tuple[int, Any]] = {}

    def valid(self, world: int) -> bool:
        return self.min_world <= world <= self.max_world

    def __repr__(self) -> str:
        hi = "" if self.max_world >= _world.WORLD_MAX else self.max_world
        return f"<CodeInstance {self.mi!r} worlds {self.min_world}..{hi}>"


_Registry = dict[int, weakref.ref[CodeInstance]]
#: Every code instance kept, for :func:`forget_context`, by id; weak references with no callback
#: (one would run in a definition's sweep, where an interrupt is lost), pruned when doubled.
_live: _Registry = {}
_live_mark = 64
#: Closed code instances a live pin's world may still use, for :func:`_sweep` (weakly, by id).
_retained: _Registry = {}
_cache_lock = new_lock()
_compiles = 0


def compile_count() -> int:
    """How many compilations have run in this process."""
    return _compiles


def _dependencies(job: CompilerJob) -> list[Dependency]:
    """Every dispatch the job's code depends on (its callees' too); sets ``job.callees``."""
    deps = [(job.mi.method.gf, job.mi.tt, job.mi.method)]
    order: list[MethodInstance] = []
    seen: set[int] = set()

    def visit(method: Method, path: tuple[GenericFunction, ...]) -> None:
        for gf in method.callees:
            if any(g is gf for g in path):  # by object: two libraries may each have a helper
                names = " -> ".join(g.name for g in (*path, gf))
                raise CompileError(f"device functions call each other in a cycle: {names}")
            if id(gf) in seen:
                continue
            seen.add(id(gf))
            try:
                cmi = gf.methodinstance((), job.world)
            except MethodError:
                sig = signature(method.gf.name, method.signature)
                why = (
                    f"(its method was deleted with {gf.name}.delete_method). Define {gf.name} again"
                    if not gf.methods(job.world)  # else methods taking arguments: no callee
                    else f"taking no arguments: a callee is a device function. Define {gf.name} "
                    "with the back-end's device decorator"
                )
                raise CompileError(
                    f"kernel {job.name} cannot be compiled: {sig} calls device function "
                    f"{gf.name} (in its callees=), which has no method in world {job.world} "
                    f"{why}, or define the caller again without it in callees="
                ) from None
            deps.append((gf, (), cmi.method))
            visit(cmi.method, (*path, gf))
            order.append(cmi)

    visit(job.mi.method, (job.mi.method.gf,))
    job.callees = tuple(order)
    return deps


def _same_names_note(job: CompilerJob) -> str:
    """For a failed build: a note on each name that device functions of several modules share."""
    by_name: dict[str, list[GenericFunction]] = {}
    for mi in job.callees:
        by_name.setdefault(mi.method.gf.name, []).append(mi.method.gf)
    return "".join(
        f"\nnote: device functions {' and '.join(f'{g.name} of {g.__module__}' for g in gfs)} "
        f"are compiled into kernel {job.name} together: if their sources define the same C "
        "name, rename one of them"
        for gfs in by_name.values()
        if len(gfs) > 1
    )


def _compile(job: CompilerJob) -> tuple[CodeInstance, list[Dependency]]:
    global _compiles
    with _world.lock():
        deps = _dependencies(job)
    try:
        artifact = job.config.backend.compile(job)  # raises: nothing is stored
    except CompileError as e:
        e.args = (f"{e.args[0] if e.args else ''}{_same_names_note(job)}", *e.args[1:])
        raise
    _compiles += 1
    min_world = max(m.min_world for _, _, m in deps)
    ci = CodeInstance(job.mi, job.config, artifact, min_world, job.world)
    ci.method_options = tuple(o for s in job._sources or () for o in getattr(s, "options", ()))
    return ci, deps


def _tracked(registry: _Registry, prune: bool = False) -> list[CodeInstance]:
    """The live code instances of ``registry``; ``prune`` (world lock held) drops the rest."""
    alive = []
    for key, ref in registry.copy().items():
        ci = ref()
        if ci is not None:
            alive.append(ci)
        elif prune:
            registry.pop(key, None)
    return alive


def code_instances(gf: GenericFunction) -> list[CodeInstance]:
    """Every code instance the cache keeps for ``gf``'s methods (reflection and tests)."""
    return [
        ci
        for m in gf._table.history
        for mi in list(m._instances.values())
        for cis in list(mi.code.values())
        for ci in cis
    ]


def _store(job: CompilerJob, ci: CodeInstance, deps: list[Dependency]) -> None:
    """Keep ``ci`` with backedges on every dispatch it used, registered before the one store
    that publishes it, so no interrupt leaves code in the cache that no definition could end."""
    mi, key = job.mi, job.config._key
    with _world.lock():
        # A definition since the job's world ran before these edges existed: if it changed a
        # dispatch, the code holds in its own world only (no edges: its range is closed).
        latest = _world.latest()
        if latest != job.world and any(gf.dispatches_to(tt, latest) is not m for gf, tt, m in deps):
            ci.max_world = job.world
            _retained[id(ci)] = weakref.ref(ci)  # released once no pin needs it
        else:
            register_backedges(ci, deps)
        _live[id(ci)] = weakref.ref(ci)
        global _live_mark
        if len(_live) >= _live_mark:  # doubled since the last pruning: prune again
            _live_mark = 2 * max(64, len(_tracked(_live, prune=True)))
        mi.code[key] = (ci, *mi.code.get(key, ()))  # the one publishing store


def _find(job: CompilerJob) -> CodeInstance | None:
    return next((ci for ci in job.mi.code.get(job.config._key, ()) if ci.valid(job.world)), None)


def _check(job: CompilerJob, ci: CodeInstance) -> None:
    """``ci``'s artifact as the back-end would compile it in ``job.world``, checked once per
    world (an edited header, SPEC 3); a new one drops what was linked of the old one first,
    so an interrupt between the stores leaves the old artifact to be linked and checked."""
    if ci.checked != job.world:
        artifact = job.config.backend.recompile(job, ci.artifact)  # raises: nothing changes
        if artifact is not ci.artifact:
            ci.linked = {}
            ci.artifact = artifact
        ci.checked = job.world


def _sweep(ended: list[Any], after: bool) -> None:
    """A definition's part in the cache (world lock held): before, record the code instances
    ``ended`` in ``_retained``; after its world is published, drop each recorded one no live
    pin can use. An interrupt between the two leaves the record to the next sweep."""
    if not after:
        for ci in ended:
            if isinstance(ci, CodeInstance):
                _retained[id(ci)] = weakref.ref(ci)
        return
    pinned = _world.pinned_worlds()
    latest = _world.latest()
    for ci in _tracked(_retained, prune=True):
        if ci.max_world < latest:  # closed (unless its definition was undone)
            if any(ci.valid(w) for w in pinned):
                continue
            code, key = ci.mi.code, ci.config._key
            kept = tuple(c for c in code.get(key, ()) if c is not ci)
            if kept:
                code[key] = kept
            else:
                code.pop(key, None)
        _retained.pop(id(ci), None)  # after the cache lets it go: a record never outlives less


on_invalidate(_sweep)


def _release_for_dead_pins() -> None:
    """A pin died: release the closed code kept for it (no lock while none is kept)."""
    if _retained:
        with _world.lock():
            _sweep([], True)


_world.on_unpinned.append(_release_for_dead_pins)


def compile_and_link(job: CompilerJob, context: Hashable) -> tuple[CodeInstance, Any]:
    """The compiled-code cache: the code instance valid in ``job.world`` and its linked form for
    ``context``, each made on a miss; code that fails either is not kept. Hooks see every call.
    One re-entrant lock covers the cache, like CUDA.jl's ``cufunction_lock``: back-ends and hooks
    need not be thread-safe and may look kernels up; hits take no lock."""
    with _cache_lock():  # straight-line (its loops are in called functions): see world
        deps = None
        ci = _find(job)
        if ci is None:
            ci, deps = _compile(job)
        else:
            _check(job, ci)
        if _world.snapshot.blocks:  # a block of some kind is active
            _run_hooks(job, ci)
        linked = _linked(job, ci, context)
        if deps is not None:
            _store(job, ci, deps)
    return ci, linked


def _linked(job: CompilerJob, ci: CodeInstance, context: Hashable) -> Any:
    """``ci`` linked for ``context`` (on a miss), or relinked in another world than last."""
    entry = ci.linked.get(context)
    if entry is None:
        linked = job.config.backend.link(job, ci.artifact, context)  # raises: nothing stored
    elif entry[0] != job.world:
        linked = job.config.backend.relink(job, ci.artifact, context, entry[1])
    else:
        return entry[1]
    ci.linked[context] = (job.world, linked)
    return linked


def forget_context(context: Hashable) -> list[Any]:
    """``context`` is gone for good (a back-end's context, or the token it keys one by): drop
    what was linked for it from every code instance (the code stays) and return it, so a
    back-end may break its cycles now. Safe from a finalizer in any thread: it takes no lock
    (each ``dict.pop`` is atomic, and nothing links for a context that is gone)."""
    dropped = []
    for ci in _tracked(_live):
        entry = ci.linked.pop(context, None)
        if entry is not None:
            dropped.append(entry[1])
    return dropped


def compile_only(job: CompilerJob) -> CodeInstance:
    """The code instance valid in ``job.world``, compiled and kept on a miss, linked nowhere:
    the reflection entry (a back-end's ``code_ptx``). Compile hooks see it."""
    with _cache_lock():
        ci = _find(job)
        if ci is None:
            ci, deps = _compile(job)
            _store(job, ci, deps)
        else:
            _check(job, ci)
        _run_hooks(job, ci)
    return ci


def _run_hooks(job: CompilerJob, ci: CodeInstance) -> None:
    job.method_options = ci.method_options
    for hook in _world.hooks():
        hook(job, ci.artifact)


class device_code(_world.Block):
    """``with device_code(callback):`` calls ``callback(job, artifact)`` for every kernel
    looked up inside the block, also ones compiled before it. While any hook is active,
    cached lookups neither hit nor store. Blocks nest and overlap across threads."""

    kind = "hook"

    def __init__(self, callback: Callable[[CompilerJob, Artifact], Any]) -> None:
        if not callable(callback):
            raise TypeError(f"device_code takes a callback(job, artifact), got {callback!r}")
        super().__init__(callback)

    def __enter__(self) -> None:
        self._begin()


class device_code_source(_world.Block):
    """``with device_code_source() as sources:`` collects the device source of each kernel
    looked up inside the block; a block that looked up none raises when it ends."""

    kind = "hook"

    def __init__(self) -> None:
        sources: list[str] = []
        self.sources = sources
        super().__init__(lambda job, artifact: sources.append(artifact.source))

    def __enter__(self) -> list[str]:
        self._begin()
        return self.sources

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end()
        if exc_type is None and not self.sources:
            raise RuntimeError(
                "device_code_source(): no kernel was looked up inside the block; "
                "launch a kernel (or call its lookup) inside `with device_code_source() as s:`"
            )
