"""The launch path, written once for every back-end: ``launch``, the ``clfunction``-style
lookup and the ``HostKernel`` call, generated per signature from ``templates/entry.py.j2``.
The interface's reference is ``docs/reference-backend.md``; ``tests/pybackend.py`` is a
complete minimal back-end built on it.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from . import codegen
from . import compiler as _compiler
from . import launch_options as _options
from . import world as _world
from .entry_templates import check_backend, check_guard
from .front_entries import CHAIN as CHAIN
from .front_entries import Tried, alternate, guards_pass, new_entry
from .host_kernels import DeviceUse, HostKernel, HostKernelType
from .kernels import Definitions, Kernel, LookupSite
from .launch_options import call_error, count_error, frozen, keyword_error, signature
from .launch_options import captured_of as _captured
from .launch_options import name_of as _name
from .locks import new_lock
from .methods import MethodError
from .signatures import _is_weak
from .suggest import unknown_keywords
from .types import WEAK, type_name
from .where_tables import _TOKEN, _keep, forget, table_in

__all__ = [
    "NOTHING",
    "REQUIRED",
    "DeviceUse",
    "HostKernel",
    "HostKernelType",
    "Launcher",
    "forget",
    "signature",
    "table_in",
]


#: guards the attributes the launchers of this process have taken (Launcher._own_attrs)
_ATTRS_LOCK = new_lock(reentrant=False)
#: every launcher's front_attr and where_attr: each name is one launcher's, whatever its
#: definitions (names only: a launcher lives as long as its definitions' kernels do)
_TAKEN_ATTRS: frozenset[str] = frozenset()
#: how many times a miss asks a `where` block and ``resolve`` again, together, before it
#: calls their disagreement the back-end's (see Launcher._recognized)
_WHERE_TRIES = 8
#: the longest name of a generated entry (its def line fits in 100 columns, numbered)
_NAME_LIMIT = 88
#: a lifted compiler kwarg that was not given
NOTHING: Any = _options.NOTHING
#: the default of a "required" launch option: a launch that misspells one (``global_sise=``)
#: reaches the slow path, which names the misspelling
REQUIRED: Any = _options.REQUIRED


class Launcher:
    """A back-end's launch path. A back-end sets the attributes below and overrides
    ``uncached_lookup``, ``resolve``, ``resolve_where``, ``key``, ``guard_of`` and ``kinds``
    (and may override ``where_table`` and ``check_args``): the interface, each member with
    its default and what it is for, as docs/reference-backend.md lists it."""

    # -- what every back-end gives (no default) --
    #: its entry template, which extends ``entry.py.j2`` and fills its blocks
    template: ClassVar[str]
    #: its launch options, in order, and each one's default: "required", "none", "zero", "false"
    options: ClassVar[tuple[str, ...]]
    defaults: ClassVar[tuple[str, ...]]
    #: the attribute of a kernel (or kernel instance type) that holds its newest front entry
    front_attr: str
    #: the class of :meth:`uncached_lookup`'s results, the linked kernels (checked on a miss)
    V: ClassVar[type]

    # -- what a back-end may change --
    #: its short name: the first part of its generated functions' names, and of its errors
    name: ClassVar[str] = "backend"
    #: the variable its template's ``where`` block sets to the launch's where
    where_name: ClassVar[str] = "where"
    #: the key of each where's table in the where's own ``__dict__``; None: no where tables
    where_attr: str | None = None
    #: the compiler kwargs ``launch`` takes by name (each costs a launch that omits it)
    lifted: ClassVar[tuple[str, ...]] = ()
    #: every compiler kwarg's name, when all are known (then a miss names any other first)
    compiler_kwargs: ClassVar[tuple[str, ...]] = ()
    #: how an unknown keyword's message names the compiler options ("": compiler_kwargs)
    compiler_help: ClassVar[str] = ""
    #: every guard kind :meth:`guard_of` returns, and whether it checks the type's dtype
    guard_kinds: ClassVar[dict[str, bool]] = {"cls": False, "cls_dtype": True}
    #: the HostKernel subclass its lookup returns
    host_class: ClassVar[type[HostKernel]] = HostKernel
    #: what messages call its lookup ("clfunction")
    lookup_name: ClassVar[str] = "the lookup"
    #: what messages call its launch ("launch of kernel k is missing the launch option ...")
    launch_name: ClassVar[str] = "launch"
    #: what a fork means for it, in the fork error (``{launch}``: launch_name); None: fork-safe
    fork_consequence: ClassVar[str | None] = (
        "device contexts and queues do not survive fork, so a {launch} here would hang"
    )

    def __init__(self, definitions: Definitions) -> None:
        if hasattr(self, "link"):  # the name this method had: one name per idea now
            raise TypeError(
                f"back-end {self.name!r}: Launcher.link is now Launcher.uncached_lookup (the "
                "uncached lookup; a Backend's link links one artifact): rename the method"
            )
        self.definitions = definitions
        self.typeof = definitions.typeof
        check_backend(self)  # a back-end's mistake, refused now (entry_templates)
        self._own_attrs(definitions)
        _world.declare_fork(  # under the name check_fork gives world.check_fork
            f"specializer's {self.name} back-end",
            None
            if self.fork_consequence is None
            else self.fork_consequence.format(launch=self.launch_name),
        )
        self.other = self._make_other()
        self._misses = 0
        self._misses_lock = new_lock(reentrant=False)
        #: the generated launch path of each signature: code, bound to this launcher's globals
        #: (what its kinds() gives), so each launcher has its own
        self._factories: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._factories_lock = new_lock(reentrant=False)
        self.site = LookupSite(definitions, self.V, self.uncached_lookup)
        self.launch = codegen.generate(
            "launch.py.j2",
            (self.name, "launch"),
            {"_miss": self.miss, "_NOTHING": NOTHING, "_REQUIRED": REQUIRED},
            f"{self.name}: launch(f, *args, {', '.join(self.options)})",
            **self.launch_params(),
        )

    def _own_attrs(self, definitions: Definitions) -> None:
        """Take ``front_attr`` and ``where_attr``, numbered (``_2``...) where another launcher
        of this process has them, so two launchers never run each other's entries."""
        global _TAKEN_ATTRS
        with _ATTRS_LOCK():
            taken = _TAKEN_ATTRS
            front, where = _free_attrs(self.front_attr, self.where_attr, taken)
            _TAKEN_ATTRS = taken | {front} | ({where} if where else set())
            self.front_attr, self.where_attr = front, where
            definitions.kernel_attrs += (
                (front,) if _TOKEN in definitions.kernel_attrs else (front, _TOKEN)
            )
            definitions.kernel_slots(*definitions.kernel_attrs)

    def uncached_lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        """The uncached lookup of (F, tt) for ``key``; its result has a ``bound`` dict."""
        raise NotImplementedError

    def resolve(self, opts: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        """The where of a launch with options ``opts``, and ``opts`` with it filled in."""
        raise NotImplementedError

    def key(self, where: Any, kw: dict[str, Any]) -> tuple[Any, ...]:
        """The lookup key (a tuple) for ``where`` and compiler kwargs ``kw`` (refusing unknown
        ones, naming the launch options and the compiler options)."""
        raise NotImplementedError

    def kinds(
        self, tt: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int
    ) -> tuple[list[str], list[str], dict[str, Any]]:
        """For lookup types ``tt`` and their concrete types ``resolved`` (captured ones
        first): the guard of each launch argument, the kind of each parameter, and the
        template's other globals. Shared by every kernel of the signature: nothing in it may
        be one kernel's."""
        raise NotImplementedError

    def guard_of(self, t: type) -> tuple[str, type, Any]:
        """The guard of argument type ``t``: (guard kind, class, dtype or None)."""
        raise NotImplementedError

    # -- the core ---------------------------------------------------------------------------

    def argtypes(self, args: tuple[Any, ...], F: Any = None) -> tuple[type, ...]:
        """``typeof`` of each argument; an error names its position (and the kernel ``F``)."""
        typeof = self.typeof
        try:
            return tuple(map(typeof, args))
        except (TypeError, ValueError):
            pass
        of = "" if F is None else f" of kernel {_name(F)}"
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

    def bound(self, linked: Any, tt: tuple[type, ...], F: Any) -> tuple[Callable[..., Any], ...]:
        """``(run, front, host, where_of)`` for ``linked`` and ``tt``, made once: the slow
        path's launch, the maker of front entries, the maker of a HostKernel's call, and the
        `where` block; the first three bind the signature's one generated entry."""
        instance = not isinstance(F, Kernel)
        # keyed on this launcher too: what it holds calls this launcher's miss and reads its
        # globals (a linked kernel is shared by the launchers over one definitions)
        ident = (self.front_attr, tt, instance)
        b = linked.bound.get(ident)
        if b is None:
            captured = _captured(F)
            factory = self._factory(captured + tt, tuple(linked.tt), len(captured), instance)
            bind, host, where_of = factory(
                linked,
                functools.partial(self.mismatch, linked, tt),
                self.unknown,
                self.host_class.device_use.fork,
            )
            nothing = (NOTHING,) * len(self.lifted)
            # the slow path's binding (no world, no where) checks nothing but the count
            slow = bind(None, None, NOTHING, None, None, None, None, *nothing)

            def run(f: Any, args: tuple[Any, ...], *opts: Any) -> Any:
                return slow(f, args, *opts, *nothing, {})

            b = linked.bound.setdefault(
                ident, (run, functools.partial(bind, self.miss), host, where_of)
            )
        bound: tuple[Callable[..., Any], ...] = b
        return bound

    def _factory(
        self, full: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int, instance: bool
    ) -> Callable[..., Any]:
        ident = (full, resolved, ncaptured, instance)
        factory = self._factories.get(ident)
        if factory is not None:
            return factory
        with self._factories_lock():
            factory = self._factories.get(ident)
            if factory is None:
                parts, namespace, params = self.template_params(full, resolved, ncaptured, instance)
                factory = codegen.generate(
                    self.template,
                    parts,
                    namespace,
                    f"{self.name} launch path for ({', '.join(map(type_name, full))})",
                    **params,
                )
                self._factories[ident] = factory
        return factory

    def template_params(
        self, full: tuple[type, ...], resolved: tuple[type, ...], ncaptured: int, instance: bool
    ) -> tuple[tuple[str, ...], dict[str, Any], dict[str, Any]]:
        """The generated function's name parts, globals and template parameters for one
        signature (what ``tools/regen_generated.py`` renders for review too)."""
        guards, kinds, namespace = self.kinds(full, resolved, ncaptured)
        namespace = {
            "_TASK": _world.task_cell,
            "_ndarray": np.ndarray,
            "_REQUIRED": REQUIRED,
            "_NOTHING": NOTHING,
            **namespace,
        }
        declared = []
        for i, t in enumerate(full[ncaptured:], ncaptured):
            kind, cls, dtype = self.guard_of(t)
            check_guard(self, t, kind)
            declared.append((t, kind, cls, dtype))
            namespace[f"_C{i}"] = cls
            namespace[f"_D{i}"] = dtype
        namespace["_GUARDS"] = tuple(declared)  # what a miss checks its arguments against
        parts = (f"{self.name}_entry", *(type_name(t) for t in full))
        if instance:
            parts += (f"captured_{ncaptured}",)
        # short enough that `def <name>(`, numbered (__<n>), fits in 100 columns
        parts = (codegen.identifier(*parts, limit=_NAME_LIMIT),)
        return parts, namespace, self._params(guards, kinds, ncaptured, instance)

    def _params(
        self, guards: list[str], kinds: list[str], ncaptured: int, instance: bool
    ) -> dict[str, Any]:
        return {
            **self._option_params(),
            "captured": ncaptured,
            "instance": instance,
            "guards": guards,
            "kinds": kinds,
            "all_lifted": bool(self.lifted) and set(self.lifted) == set(self.compiler_kwargs),
            "where": self.where_name,
        }

    def launch_params(self) -> dict[str, Any]:
        """The template parameters of this back-end's ``launch`` (``launch.py.j2``); an entry's
        are the same without ``attr`` (so launchers' entries share a kept render)."""
        return {**self._option_params(), "attr": self.front_attr}

    def _option_params(self) -> dict[str, Any]:
        options, defaults, lifted = list(self.options), list(self.defaults), list(self.lifted)
        return {"options": options, "defaults": defaults, "lifted": lifted}

    def miss(self, f: Any, args: tuple[Any, ...], opts: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        """A launch its front entry does not hold: another entry of the kernel's chain, else
        the slow path (type, look up, publish a front entry, launch). ``opts``: the launch
        options, then the lifted compiler kwargs (``NOTHING`` where not given)."""
        F = self.definitions.kernel_type(f)
        n = len(self.options)
        given = opts[:n]
        w = _world.task_cell()[0]  # before the lookup: see _publish
        if kw.__class__ is Tried:  # the miss of an entry tried below: the slow path
            kw = dict(kw)
        elif w is not None:
            # an entry of this world was published in this process after its fork check,
            # for a kernel of ours: neither is checked again, as a hit checks neither
            entry = alternate(getattr(F, self.front_attr, None), w, opts[n:], kw)
            if entry is not None:
                return entry(f, args, *opts, Tried(kw))
        if not hasattr(F, self.front_attr):  # a kernel with an entry of ours is ours
            self.definitions.own(F)
        self.check_fork()
        for k, v in zip(self.lifted, opts[n:]):
            if v is not NOTHING:
                kw = {**kw, k: v}
        error = call_error(self, F, len(args), given, kw)
        if error is not None:  # raised here: the fewest library frames above the user's line
            raise error
        where, opts = self.resolve(given)  # the launch's one read of a default where
        self.check_args(where, f, args)
        tt = self.argtypes(args, F)
        key = self.key(where, kw)
        linked = self._lookup(F, tt, key)
        self.check_fork()  # again: a compile hook of the lookup may have forked
        with self._misses_lock():
            self._misses += 1
        run, front, _, where_of = self.bound(linked, tt, F)
        # published only if the arguments pass its guards: another class's (a subclass's)
        # would only push entries that hit out of the chain
        if guards_pass(self, args, front) and self._recognized(where, given, where_of):
            self._publish(F, w, where, kw, front)
        return run(f, args, *opts)

    @property
    def misses(self) -> int:
        """How many launches took the slow path: what a test counts to see launches hit."""
        return self._misses

    def check_args(self, where: Any, f: Any, args: tuple[Any, ...]) -> None:
        """What a miss checks of the arguments (and captured values) against the where,
        first; a front entry for that where and those types need not. Default: nothing."""

    def _recognized(self, where: Any, given: tuple[Any, ...], where_of: Callable[..., Any]) -> bool:
        """Whether the `where` block gives what :meth:`resolve` gave for ``given``. Another
        thread may change a default between the two reads: then both are asked again, and
        the back-end is refused only when they never agree (a racing launch publishes no
        entry)."""
        entry_where = where_of(*given)
        if entry_where is where:
            return True
        for _ in range(_WHERE_TRIES):
            if where_of(*given) is self.resolve(given)[0]:
                return False  # the default changed meanwhile: the block is right
        raise TypeError(
            f"back-end {self.name!r}: the `where` block of template {self.template!r} sets "
            f"{self.where_name} to {entry_where!r} for a launch whose where is {where!r} "
            "(Launcher.resolve): a front entry compares the two by identity, so every such "
            "launch would take the slow path. Make the block give what resolve gives (fill "
            "an option left to its default the same way)"
        )

    def _publish(self, F: Any, w: Any, where: Any, kw: dict[str, Any], front: Any) -> None:
        # Only for the world the lookup ran in, and only if that is still the latest world:
        # not in a pinned task, nor while a hook or precompile mode is on (w is None then, or
        # is by now), nor when a definition raised the world during the lookup.
        if w is not None and _world.task_cell()[0] == w:
            kw = frozen(kw)
            if kw is NOTHING:  # a value of a type that may change in place: no entry
                return
            lifted = tuple(kw.pop(k, NOTHING) for k in self.lifted)
            table = self.where_table(where)
            # chained to the kernel's newest entry where that is for this where and world
            # (front_entries: CHAIN, alternates)
            prev = getattr(F, self.front_attr, None)
            prev = getattr(prev, "__func__", prev)  # a kernel instance type's staticmethod
            F_ref = weakref.ref(F)
            entry = new_entry(front, prev, F_ref, self.other, w, where, kw, lifted)
            # A kernel holds its entry itself; a kernel instance type as a staticmethod, so
            # that reading it through an instance does not bind the instance to it.
            held = entry if isinstance(F, Kernel) else staticmethod(entry)  # callable too
            if table is not None:  # what makes the entry again, without the where (which a
                # table must not hold: a where's table may live beside it, not in it)
                _keep(table, F, (front, w, kw, F_ref, lifted))
            setattr(F, self.front_attr, held)

    def where_table(self, where: Any, make: bool = True) -> dict[Any, Any] | None:
        """The *where table* of ``where`` (what remakes a kernel's front entry for it, by
        kernel token), living exactly as long as the where. Default: a dict in the where's
        ``__dict__`` under ``where_attr``, made unless ``make`` is false; None where there is
        none. A back-end whose wheres cannot carry one overrides this."""
        name = self.where_attr
        d = None if name is None else getattr(where, "__dict__", None)
        return None if d is None or name is None else table_in(d, name, make)

    def _make_other(self) -> Callable[[Any, Any], Any]:
        """``other(F, where)``: ``F``'s front entry for ``where`` made again from the where's
        table, or None; it becomes the kernel's newest, so only the where launched on last is
        held."""
        attr, table_of, instance = self.front_attr, self.where_table, staticmethod

        def other(F: Any, where: Any) -> Any:
            try:
                kept = table_of(where, False)[F._specializer_token]  # type: ignore[index]
                front, w, kw, F_ref, lifted = kept
            except (KeyError, TypeError, AttributeError):  # no table, or never kept in one
                return None
            entry = front(w, where, kw, F_ref, other, None, *lifted)  # (new_entry's, unchained)
            entry.chain, entry.alternates = (w, where, kw, lifted, 0), ()
            setattr(F, attr, entry if isinstance(F, Kernel) else instance(entry))
            return entry

        return other

    def mismatch(
        self, linked: Any, looked: tuple[type, ...], f: Any, args: Any, opts: Any, kw: Any
    ) -> Any:
        """A HostKernel call whose arguments failed its guard: launch if they have the types
        it was ``looked`` up for after all (a numpy scalar subclass, an equal dtype, a Python
        scalar where it takes its default type), else say which it takes. By types alone."""
        F = self.definitions.kernel_type(f)
        tt = self.argtypes(args, F)
        if len(tt) == len(looked) and all(
            t is s or (_is_weak(t) and t.default is s) for t, s in zip(tt, looked)
        ):
            return self.bound(linked, tt, F)[0](f, args, *opts[: len(self.options)])
        raise TypeError(
            f"a HostKernel of {signature(linked.name, linked.tt)} was called with arguments of "
            f"types ({', '.join(map(type_name, tt))}), not the types it was looked up for; look "
            f"it up for those with {self.lookup_name}, or use launch(f, *args, ...), which "
            "looks up what it is given"
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
        """Record that this process uses the device, or raise the fork error in a fork of
        the process that did (SPEC 9). Called on a miss and a lookup, and by a back-end's
        queue, context and array helpers. The record is the ``host_class``'s, shared by the
        launchers of one back-end as they share the device."""
        pid = os.getpid()
        use = self.host_class.device_use
        if use.pid is None:
            use.pid = pid
            if hasattr(os, "register_at_fork"):  # (twice if two threads get here: harmless)
                os.register_at_fork(after_in_child=self._refuse_host_kernels)
        elif use.pid != pid:
            _world.check_fork(f"specializer's {self.name} back-end")

    def _refuse_host_kernels(self) -> None:
        """In a fork of this back-end's user, every HostKernel call raises the fork error:
        one store into the cell each call reads, nothing patched."""
        self.host_class.device_use.fork[0] = self.check_fork

    def unknown(self, kw: dict[str, Any]) -> None:
        """A HostKernel call given keywords that are not launch options: say which are."""
        compiler = ", ".join(self.compiler_kwargs) or "compiler options"
        raise TypeError(
            f"unknown keyword argument(s) "
            f"{unknown_keywords(kw, (*self.options, *self.compiler_kwargs))} for a HostKernel "
            f"call: its launch options are {', '.join(self.options)} (compiler options, "
            f"{compiler}, go to {self.lookup_name}, which looks the kernel up with them)"
        )

    def keyword_error(self, unknown: Iterable[str]) -> TypeError:
        """The error naming keywords that are neither launch nor compiler options, with the
        nearest valid one (SPEC 8); a back-end's ``key`` may raise it too."""
        return keyword_error(self, unknown)

    def function(self, f: Any, tt: Any, where_opt: Any, kw: dict[str, Any]) -> HostKernel:
        """The lookup of ``f`` for types ``tt`` in the where ``where_opt`` selects, as a new
        HostKernel around the cached lookup's result."""
        F = self.definitions.kernel_type(f)
        self.definitions.own(F)
        self.check_fork()
        tt = self.tt_of(tt)
        error = count_error(self, F, len(tt), f"{self.lookup_name}'s tt")
        if error is not None:
            raise error
        where = self.resolve_where(where_opt)
        linked = self._lookup(F, tt, self.key(where, kw))
        self.check_fork()  # again: a compile hook of the lookup may have forked
        call = self.bound(linked, tt, F)[2](f, where)
        hk: HostKernel = self.host_class.new(call, f, where, tt, linked)
        return hk

    def resolve_where(self, where_opt: Any) -> Any:
        """The where a lookup given ``where_opt`` (None: the default) is for."""
        raise NotImplementedError


def _free_attrs(front: str, where: str | None, taken: frozenset[str]) -> tuple[str, str | None]:
    """``front`` and ``where``, numbered (``_2``...) until no launcher has taken them."""
    n = 1
    f, w = front, where
    while f in taken or (w is not None and w in taken):
        n += 1
        f, w = f"{front}_{n}", None if where is None else f"{where}_{n}"
    return f, w
