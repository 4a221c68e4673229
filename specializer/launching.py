"""The launch path, written once for every back-end: ``launch``, the lookup that makes a
``HostKernel`` and its call, generated from the back-end's template (which extends
``templates/launch.py.j2``), over two pieces of cached state:

- a kernel's *launch cell*, one per kernel (or kernel instance type) and launcher: an
  immutable tuple of its newest entries, each (world, where, compiler kwargs, invoker),
  replaced whole by one store. ``launch`` reads the newest entry inline, as
  ``cached_lookup`` reads its cell; the kernel's cell function (its cell bound as a default)
  tries the others, then the slow path (:meth:`Launcher.miss`);
- a linked kernel's *invokers*, one per full concrete signature (captured and argument
  types), each a straight line that checks and sets every parameter by its kind and
  enqueues (pyopencl's ``enqueue_knl_*`` is the model).

A back-end implements the hooks of :class:`Launcher` (``docs/reference-backend.md``);
``tests/pybackend.py`` and ``docs/backend.md`` hold complete small ones.
"""

from __future__ import annotations

import ast
import inspect
import os
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import FunctionType
from typing import Any, ClassVar

import numpy as np

from . import codegen
from . import compiler as _compiler
from . import world as _world
from .host_kernels import HostKernel
from .invokers import Invokers, Kind, Missed, check_values
from .kernels import Definitions, Kernel, KernelInstance, LookupSite
from .locks import new_lock
from .lookup import forget_key
from .methods import MethodError
from .signatures import signature
from .suggest import unknown_keywords
from .types import WEAK, WeakScalar, type_name, weak_converter

__all__ = [
    "ENTRIES",
    "REQUIRED",
    "HostKernel",
    "Kind",
    "Launcher",
    "Missed",
    "forget",
    "signature",
    "use_device",
]

#: The default of a launch option the caller must give: a launch without it (or with a
#: misspelling, ``global_sise=``) reaches the slow path, which names it.
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "<required>"})()
#: How many entries a launch cell keeps: a kernel launched on this many wheres, compiler
#: kwarg sets or argument types in turn keeps hitting.
ENTRIES = 8
#: A cell's newest entry before any: no world is it.
_EMPTY = (object(), None, None, None)


class Launcher:
    """A back-end's launch path. The hooks below, each with its default, are the interface
    (``docs/reference-backend.md``); everything else is the core's."""

    # its short name: the first part of its generated functions' names and of its messages
    name: ClassVar[str] = "backend"
    # its template, which extends launch.py.j2: the `where` and the invoker's blocks
    template: ClassVar[str] = "launch.py.j2"
    # its launch options in order, each with its default (REQUIRED: the caller gives it)
    options: ClassVar[Mapping[str, Any]] = {}
    # the compiler kwargs its key takes, each with what it takes (empty: any other keyword)
    compiler_kwargs: ClassVar[Mapping[str, str]] = {}
    # what messages call its lookup ("clfunction")
    lookup_name: ClassVar[str] = "the lookup"
    # what a fork means for it, said in the fork error (None: it is fork-safe)
    fork_consequence: ClassVar[str | None] = _world.FORK_CONSEQUENCE
    # its template's globals besides the core's (what the where and invoke blocks call)
    namespace: ClassVar[Mapping[str, Any]] = {}

    # the lookup key of a where and compiler kwargs, refusing kwargs it does not take
    def key(self, where: Any, kw: dict[str, Any]) -> Hashable:
        unknown = [k for k in kw if k not in self.compiler_kwargs]
        if unknown:
            raise self.keyword_error(unknown)
        return (where, tuple(sorted(kw.items()))) if kw else (where, ())

    # the uncached lookup: dispatch, compiled-code cache, the kernel linked for the key
    def uncached_lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        raise NotImplementedError(f"back-end {self.name!r} defines no uncached_lookup")

    # the kind of a parameter of argument type t, concrete type r (captured: from capture)
    def kind(self, t: type, r: type, captured: bool) -> Kind:
        if issubclass(t, WeakScalar):
            return Kind("weak", t.pytype, values={"convert": weak_converter(r)})
        if issubclass(t, np.generic):
            return Kind("value", t)
        raise TypeError(f"back-end {self.name!r}: no kind for argument type {type_name(t)}")

    # -- the core -------------------------------------------------------------------------

    def __init__(self, definitions: Definitions) -> None:
        self.definitions = definitions
        self.typeof = definitions.typeof
        self._lock = new_lock(reentrant=False)  # cells' stores, factories, the miss count
        #: how many launches took the slow path (tests count them to see launches hit)
        self.misses = 0
        #: each HostKernel call reads it: None, or in a fork of the device's user its check
        self.fork: list[Callable[[], None] | None] = [None]
        _world.declare_fork(f"specializer's {self.name} back-end", self.fork_consequence)
        self.attr = _take_attribute(self.name, definitions)
        #: the kernels with a launch cell of this launcher (forget() clears their entries)
        self._kernels: weakref.WeakSet[Any] = weakref.WeakSet()
        self.site = LookupSite(definitions, object, self.uncached_lookup)
        #: each signature's invoker, generated from the template (invokers.Invokers)
        self.invokers = Invokers(
            self, self.name, self.template, self.options, self.namespace, self.kind
        )
        core = {"_OPTIONS": tuple(self.options.values()), "_TASK": _world.task_cell}
        core |= {"_Missed": Missed, "_miss": self.miss, **self.namespace}
        host = {"_FORK": self.fork, "_refuse": self._refuse, "_mismatch": self.mismatch}
        host["_other_where"] = self._other_where
        made = {}
        for part, what, more in (
            ("launch", f"launch(f, *args, {', '.join(self.options)})", {}),
            ("cell", "a kernel's launch cell", {}),
            ("where", "the where of a lookup's launch options", {}),
            ("host", "a HostKernel's call", host),
        ):
            parts, params = self.part_params(part)
            made[part] = codegen.generate(
                self.template, parts, {**core, **more}, f"{self.name}: {what}", **params
            )
        _check_where(self, made["launch"])
        self.launch = made["launch"]
        self.where_of = made["where"]
        self.host_call = made["host"]
        self._cell_function = made["cell"]
        _launchers.add(self)  # made whole: forget() and a fork's child may reach it now

    def part_params(self, part: str) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The name parts and template parameters of a part of the launch path that is not an
        invoker (what ``tools/regen_generated.py`` renders for review too)."""
        params: dict[str, Any] = {"part": part, "options": list(self.options)}
        if part == "launch":
            params["attr"] = self.attr
        return (self.name, part), params

    def miss(
        self, f: Any, args: tuple[Any, ...], where: Any, kw: dict[str, Any], opts: tuple[Any, ...]
    ) -> Any:
        """A launch no entry of its kernel's cell took: check, type, look up, run the
        signature's invoker and keep an entry for the next launch."""
        F = self.definitions.kernel_type(f)
        self.definitions.own(F)
        self.check_fork()
        with self._lock():
            self.misses += 1
        w = _world.task_cell()[0]  # before the lookup: see _store
        error = _call_error(self, F, len(args), opts, kw)
        if error is not None:  # raised here: the fewest library frames above the user's line
            raise error
        if where is None:  # not cheap to find, or not found without the device: found now
            where, opts = self.where_of(*opts)
        tt = self.argtypes(args, F)
        linked = self._lookup(F, tt, self.key(where, kw))
        self.check_fork()  # again: a compile hook of the lookup may have forked
        invoke, kinds = self.invokers.of(linked, _instance(F), tt)
        check_values(kinds, where, _name_of(F), _values_of(f), args)
        try:
            r = invoke(f, args, *opts)
        except Missed:  # a value of a subclass of its guard's class: typed, so launched anyway
            return invoke(f, args, *opts, True)
        self._store(F, w, where, kw, invoke)
        return r

    def _store(self, F: Any, w: Any, where: Any, kw: dict[str, Any], invoke: Any) -> None:
        """Keep (w, where, kw, invoke) as the newest entry of ``F``'s cell, dropping the one
        it replaces and those of other worlds, which no launch reads again. Only in the world
        the lookup ran in and only while that is the latest: not in a pinned task, nor while a
        hook or precompile mode is on (w is None then), nor after a definition meanwhile."""
        if w is None or _world.task_cell()[0] is not w:
            return
        frozen_kw = _frozen(kw) if kw else None
        if frozen_kw is _UNFROZEN:  # a value of a type that may change in place: no entry
            return
        entry = (w, where, frozen_kw, invoke)
        with self._lock():
            cell = getattr(F, self.attr, None)
            if cell is None:
                cell = [_EMPTY, (), None]
                name = f"{self.name}_cell_{codegen.identifier(_name_of(F))}"
                # one function per kernel, its cell bound as a default: code made once
                code = self._cell_function
                cell[2] = FunctionType(code.__code__, code.__globals__, name, (cell,))
                setattr(F, self.attr, cell)
                self._kernels.add(F)
            _publish(cell, _with_entry((cell[0], *cell[1]), entry))

    def argtypes(self, args: tuple[Any, ...], F: Any = None) -> tuple[type, ...]:
        """``typeof`` of each argument; an error names its position (and the kernel ``F``)."""
        typeof = self.typeof
        try:
            return tuple(map(typeof, args))
        except (TypeError, ValueError):
            pass
        of = "" if F is None else f" of kernel {_name_of(F)}"
        out = []
        for i, a in enumerate(args):
            try:
                out.append(typeof(a))
            except (TypeError, ValueError) as e:
                raise type(e)(f"argument {i}{of} (counting launch arguments from 0): {e}") from None
        return tuple(out)

    def tt_of(self, tt: Any, what: str | None = None) -> tuple[type, ...]:
        """A lookup's argument types (``int``, ``float``, ``bool`` standing for their weak
        types); ``what`` names the function given them in errors."""
        what = self.lookup_name if what is None else what
        if isinstance(tt, type) or not isinstance(tt, (tuple, list)):
            raise TypeError(
                f"{what} takes a tuple of argument types (use typeof(value) for a "
                f"value's), got {tt!r}"
            )
        out = []
        for t in tt:
            if not isinstance(t, type):
                raise TypeError(
                    f"{what} takes argument types, not values: got a "
                    f"{type(t).__module__}.{type(t).__qualname__} in tt; pass typeof(value) "
                    "for a value's type"
                )
            out.append(WEAK.get(t, t))
        return tuple(out)

    def function(
        self,
        host_kernel: type[HostKernel],
        f: Any,
        tt: Any,
        options: Mapping[str, Any],
        kw: dict[str, Any],
    ) -> Any:
        """The lookup of ``f`` for types ``tt`` in the where the launch ``options`` select,
        as a new ``host_kernel`` around the cached lookup's result (``clfunction``)."""
        F = self.definitions.kernel_type(f)
        self.definitions.own(F)
        self.check_fork()
        if host_kernel.__call__ is not self.host_call:
            raise TypeError(
                f"back-end {self.name!r}: {host_kernel.__qualname__} does not call through "
                "its launcher: set `__call__ = <launcher>.host_call` in its class body"
            )
        tt = self.tt_of(tt)
        error = _count_error(F, len(tt), f"{self.lookup_name}'s tt")
        if error is not None:
            raise error
        where, opts = self.where_of(**options)
        linked = self._lookup(F, tt, self.key(where, kw))
        self.check_fork()  # again: a compile hook of the lookup may have forked
        invoke = self.invokers.of(linked, _instance(F), tt)[0]
        return host_kernel(f, tt, linked, where, invoke, dict(zip(self.options, opts)))

    def mismatch(self, hk: HostKernel, args: tuple[Any, ...], opts: tuple[Any, ...]) -> Any:
        """A HostKernel call whose arguments failed its invoker's guards: launch if they have
        the types it was looked up for after all (values of subclasses; a Python scalar where
        it takes the scalar's default type), else say which it takes. By types alone."""
        F = self.definitions.kernel_type(hk.f)
        tt = self.argtypes(args, F)
        if tt == hk.tt:
            return hk.invoke(hk.f, args, *opts, True)
        if len(tt) == len(hk.tt) and all(
            t is s or (issubclass(t, WeakScalar) and t.default is s) for t, s in zip(tt, hk.tt)
        ):
            return self.invokers.of(hk.linked, _instance(F), tt)[0](hk.f, args, *opts, True)
        raise TypeError(
            f"a HostKernel of {signature(hk.linked.name, hk.linked.tt)} was called with "
            f"arguments of types ({', '.join(map(type_name, tt))}), not the types it was looked "
            f"up for; look it up for those with {self.lookup_name}, or use launch(f, *args, "
            "...), which looks up what it is given"
        )

    def _lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        """The cached lookup; a user's error in it is raised without the library's frames
        between here and the method body's own."""
        try:
            return self.site.lookup(F, tt, key)
        except Exception as e:
            from_body, tb = _compiler.body_traceback(e)
            if from_body:  # with its own cause and context, as they were
                raise e.with_traceback(tb)  # noqa: B904
            if isinstance(e, (MethodError, _compiler.CompileError)) or _compiler.is_users_error(e):
                raise e.with_traceback(None) from e.__cause__
            raise

    def check_fork(self) -> None:
        """Record that this process uses the back-end's device, or raise the fork error in
        a fork of the process that did (:func:`use_device`)."""
        use_device(self.name)

    def _refuse(self, hk: HostKernel, kw: dict[str, Any]) -> None:
        """A HostKernel call given keywords that are not launch options, or made in a fork."""
        self.check_fork()
        if kw:
            compiler = ", ".join(self.compiler_kwargs) or "compiler options"
            raise TypeError(
                f"unknown keyword argument(s) "
                f"{unknown_keywords(kw, (*self.options, *self.compiler_kwargs))} for a "
                f"HostKernel call: its launch options are {', '.join(self.options)} "
                f"(compiler options, {compiler}, go to {self.lookup_name}, which looks the "
                "kernel up with them)"
            )

    def _other_where(self, hk: HostKernel, where: Any) -> ValueError:
        return ValueError(
            f"a HostKernel of {signature(hk.linked.name, hk.linked.tt)} was looked up in "
            f"{hk.where}, but called in {where}: look it up there with {self.lookup_name}, "
            "or use launch(f, *args, ...), which looks up where it launches"
        )

    def keyword_error(self, unknown: Iterable[str]) -> TypeError:
        """The error for keywords that are neither launch nor compiler options, with the
        nearest valid one (SPEC 8)."""
        kwargs = list(self.compiler_kwargs)
        compiler = (
            f"the compiler option is {kwargs[0]}={self.compiler_kwargs[kwargs[0]]}"
            if len(kwargs) == 1
            else f"compiler options are {', '.join(kwargs)}"
            if kwargs
            else "any other keyword is a compiler option"
        )
        names = unknown_keywords(unknown, (*self.options, *self.compiler_kwargs))
        return TypeError(
            f"unknown keyword argument(s) {names}: launch options are "
            f"{', '.join(self.options)}; {compiler}"
        )


#: every launcher (forget() clears their cells; a fork's child refuses their HostKernels)
_launchers: weakref.WeakSet[Launcher] = weakref.WeakSet()
#: back-end name -> the process that used its device
_used: dict[str, int] = {}


def use_device(name: str) -> None:
    """Record that this process uses back-end ``name``'s device, or raise the fork error in a
    fork of the process that did (SPEC 9). Called on a miss and a lookup, and by a back-end's
    queue, context and array helpers."""
    pid = os.getpid()
    if _used.setdefault(name, pid) != pid:
        _world.check_fork(f"specializer's {name} back-end")


def _after_fork_in_child() -> None:
    # Every HostKernel of a back-end whose device the parent used raises the fork error: one
    # store into the cell each call reads, nothing patched.
    for launcher in list(_launchers):
        if launcher.name in _used:
            launcher.fork[0] = launcher.check_fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forget(part: Any) -> list[Any]:
    """A context (or the token ``part`` of lookup keys and wheres that stands for it) is gone
    for good: drop the launch cells' entries for it, the lookup results keyed by it and what
    was linked for it, and return the dropped linked kernels. Takes no lock (it runs from
    finalizers): each step is one store."""

    def names(x: Any) -> bool:
        return x is part or (x.__class__ is tuple and any(y is part for y in x))

    for launcher in list(_launchers):
        for F in list(launcher._kernels):
            cell = getattr(F, launcher.attr, None)
            if cell is not None and any(names(e[1]) for e in (cell[0], *cell[1])):
                _publish(cell, tuple(e for e in (cell[0], *cell[1]) if not names(e[1])))
    forget_key(part)
    dropped = _compiler.forget_context(part)
    for linked in dropped:
        invokers = getattr(linked, "invokers", None)
        if invokers is not None:
            invokers.clear()
    return dropped


#: guards _taken: the kernel attributes the launchers of this process hold their cells in
_ATTRS_LOCK = new_lock(reentrant=False)
_taken: set[str] = set()


def _take_attribute(name: str, definitions: Definitions) -> str:
    """The attribute of kernels a new launcher keeps its cells in, numbered where another
    launcher has it (two launchers never run each other's entries), with a slot in the
    definitions' kernels."""
    base = f"_specializer_{codegen.identifier(name)}_cell"
    with _ATTRS_LOCK():
        attr = _free_attribute(base)
        _taken.add(attr)
        definitions.kernel_attrs += (attr,)
        definitions.kernel_slots(*definitions.kernel_attrs)
    return attr


def _free_attribute(base: str) -> str:
    """``base``, numbered (``_2``...) until no launcher has taken it."""
    attr, n = base, 1
    while attr in _taken:
        n += 1
        attr = f"{base}_{n}"
    return attr


def _publish(cell: list[Any], entries: tuple[Any, ...]) -> None:
    """Make ``entries`` (newest first) the cell's: the older ones first, then the newest, so
    a launch between the two stores sees an entry twice at worst, never a foreign one."""
    cell[1] = entries[1:]
    cell[0] = entries[0] if entries else _EMPTY


def _with_entry(entries: tuple[Any, ...], entry: tuple[Any, ...]) -> tuple[Any, ...]:
    """``entries`` with ``entry`` in front, without those of other worlds (no launch reads
    them again) and the one it replaces (the same where, kwargs and invoker), at most
    :data:`ENTRIES`."""
    w, where, kw, invoke = entry
    kept = [
        e for e in entries if e[0] is w and not (e[1] is where and e[2] == kw and e[3] is invoke)
    ]
    return (entry, *kept)[:ENTRIES]


def _check_where(launcher: Launcher, launch: Callable[..., Any]) -> None:
    """Refuse a template whose `where` block sets no `where`: every launch would fail."""
    tree = ast.parse(inspect.getsource(launch))
    if not any(
        isinstance(n, ast.Name) and n.id == "where" and isinstance(n.ctx, ast.Store)
        for n in ast.walk(tree)
    ):
        raise TypeError(
            f"back-end {launcher.name!r}: the `where` block of template {launcher.template!r} "
            "assigns nothing to `where`, which a launch looks its kernel's entries up by: set "
            "it in the block, e.g. `where = <the where option, or its default when None>`"
        )


def _name_of(F: Any) -> str:
    return str(F.name if isinstance(F, Kernel) else F.kernel.name)


def _instance(F: Any) -> tuple[type, ...] | None:
    """A kernel instance type's captured types; None for a kernel."""
    return None if isinstance(F, Kernel) else tuple(F.captured)


def _values_of(f: Any) -> tuple[Any, ...]:
    return tuple(f.values) if isinstance(f, KernelInstance) else ()


def _call_error(
    launcher: Launcher, F: Any, nargs: int, opts: tuple[Any, ...], kw: dict[str, Any]
) -> TypeError | None:
    """What a miss checks before anything is typed (SPEC 8): known keywords, the required
    launch options given, a method taking this many arguments; None if all is well."""
    if launcher.compiler_kwargs:
        unknown = [k for k in kw if k not in launcher.compiler_kwargs]
        if unknown:
            return launcher.keyword_error(unknown)
    for option, v in zip(launcher.options, opts):
        if v is REQUIRED:
            return TypeError(
                f"launch of kernel {_name_of(F)} is missing the required launch option "
                f"{option}=: launch options are {', '.join(launcher.options)}"
            )
    return _count_error(F, nargs, "launch")


def _count_error(F: Any, nargs: int, what: str) -> MethodError | None:
    """A MethodError when no method of the kernel in the task's world takes ``nargs``
    arguments after ``F``'s captured values; else None."""
    kernel = F if isinstance(F, Kernel) else F.kernel
    ncaptured = len(_instance(F) or ())
    methods = kernel.methods()
    counts = sorted({len(m.signature) for m in methods})
    if not counts or ncaptured + nargs in counts:
        return None
    wanted = [c - ncaptured for c in counts if c >= ncaptured]
    takes = " or ".join(map(str, wanted)) if wanted else "none"
    listing = "; ".join(signature(kernel.name, m.signature) for m in methods)
    captured = (
        f" after its {ncaptured} captured value(s) (its methods count them)" if ncaptured else ""
    )
    return MethodError(
        f"kernel {kernel.name} takes {takes} argument(s){captured}, but the {what} gave "
        f"{nargs}: methods visible in world {_world.current()}: {listing}. Pass one "
        f"argument per parameter, or define a method of {kernel.name} with "
        f"{ncaptured + nargs} parameter(s)"
    )


#: values that cannot change: an entry compares one by identity, then by value
_ATOMS = frozenset({str, bytes, int, float, complex, bool, type(None), frozenset})
#: a compiler kwarg of a type that may change in place: a launch given one keeps no entry
_UNFROZEN: Any = object()


def _frozen(v: Any) -> Any:
    """A compiler kwarg's value as an entry keeps it: the value itself when immutable, a
    private copy of a list, tuple or dict (so a list edited in place does not hit), or
    ``_UNFROZEN`` for any other type."""
    cls = v.__class__
    if cls in _ATOMS or isinstance(v, (np.number, np.bool_)):
        return v
    if cls is dict:
        out = {k: _frozen(x) for k, x in v.items()}
        return _UNFROZEN if any(x is _UNFROZEN for x in out.values()) else out
    if cls is list or cls is tuple:
        items = [_frozen(x) for x in v]
        if any(x is _UNFROZEN for x in items):
            return _UNFROZEN
        if cls is tuple and all(x is y for x, y in zip(items, v)):
            return v  # immutable all through: kept as given, so a constant hits by identity
        return cls(items)
    return _UNFROZEN
