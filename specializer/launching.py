"""The launch path, written once for every back-end: ``launch``, the ``clfunction``-style
lookup and the ``HostKernel`` call, generated per signature from ``templates/entry.py.j2``.

This docstring is the back-end interface's one reference: every member of :class:`Launcher`
and every template block. ``tests/pybackend.py`` (with ``tests/templates/python_entry.py.j2``)
is a complete minimal back-end built on it, and the README has a shorter one.

What a back-end supplies (class attributes and methods of its :class:`Launcher` subclass)
------------------------------------------------------------------------------------------

- ``name``: its short name, the first part of its generated functions' names and of errors.
- ``template``: its template, which extends ``entry.py.j2`` and fills the blocks below. A
  template outside this package's ``templates/`` is found once its directory is given to
  :func:`specializer.codegen.add_template_dir`.
- ``options`` and ``defaults``: its launch options, in order, as ``launch`` and a HostKernel
  call take them, and each one's default, one of ``"required"`` (the caller must give it),
  ``"none"``, ``"zero"``, ``"false"`` (it defaults to ``None``, ``0``, ``False``). The
  generated signatures default a required option to :data:`REQUIRED`, so that a misspelled
  one reaches the miss, which names it (and refuses a required option left out); a front
  entry or a HostKernel call given none sees ``REQUIRED``, which the ``launch`` block's own
  check of that option must refuse (OpenCL's work-size check does, naming the option).
- ``where_name``: the variable the template's ``where`` block sets to the launch's *where*,
  the thing a front entry is published for (a queue, a context key); default ``"where"``. It
  may be an option's name (OpenCL's ``queue``); the block must assign it either way.
- ``front_attr``: the attribute of a kernel (or kernel instance type) that holds its newest
  front entry for this back-end (a kernel without one takes the slow path, which checks that
  the kernel is this back-end's).
- ``where_attr`` (optional): the key of the where table in a where's own ``__dict__`` (see
  "Cached state"); ``None`` (the default): each kernel keeps only its newest front entry.
  :meth:`Launcher.where_table` may be overridden instead (the table it gives must be this
  launcher's own: CUDA's keeps one per ``front_attr`` in its context key, with
  :func:`table_in`). A
  launcher whose names another launcher of this process has taken (another instance of the
  class, a subclass, or another back-end's launcher that asked for the same names) keeps
  its entries under both names numbered (``_2``, ``_3``...), and what the core binds to a
  linked kernel is keyed on ``front_attr`` too: two launchers never run each other's code,
  and a kernel of other definitions takes the slow path, which refuses it by name.
  They share the cached lookup's results where their ``link`` is the same function (its
  code is the call site): a subclass whose results differ must say how in its ``key``.
- ``V``: the class of the lookup's result (checked on a miss); ``host_class``: the
  :class:`HostKernel` subclass it returns; ``lookup_name``: its lookup's name for messages
  (``"clfunction"``).
- ``lifted`` and ``compiler_kwargs`` (optional): the compiler kwargs ``launch`` takes by name
  (so a launch with them costs what one without does), and all of them, when all are known
  (then a miss refuses any other keyword first, naming the nearest option: SPEC 8;
  ``compiler_help`` words the compiler options in that message).
  A lifted kwarg the caller did not give is :data:`NOTHING` in the launch path and absent
  from what :meth:`Launcher.key` receives: ``key`` gets the compiler kwargs the caller gave,
  lifted or not, as one dict.
- :meth:`Launcher.link` ``(F, tt, key)``: the uncached lookup (usually
  :func:`specializer.kernels.uncached_lookup`; the core has checked that ``F`` is this
  back-end's). Its result, the *linked kernel*, has ``name`` (the kernel's), ``tt`` (the
  method instance's concrete types, captured ones first) and ``bound``, a dict the core fills;
  anything a launch needs of one kernel (a handle, a pool, names for messages) comes from it,
  since the generated code is shared by every kernel of a signature.
- :meth:`Launcher.resolve` ``(opts)``: given the launch options alone (in ``options``
  order, no compiler kwargs), the where of a launch and the options with one left to its
  default filled in (a launch reads a default, a queue or context, only here: once);
  :meth:`Launcher.resolve_where` ``(where_opt)``: the same for a
  lookup; :meth:`Launcher.key` ``(where, kw)``: the lookup key, a tuple, for a where and
  compiler kwargs, comparing by value (it refuses unknown kwargs, naming the launch options
  and the compiler options); :meth:`Launcher.check_args` ``(where, f, args)`` (optional):
  what the slow path checks of the arguments against that where (OpenCL: their contexts).
- :meth:`Launcher.guard_of` ``(t)`` and :meth:`Launcher.kinds` ``(tt, resolved, ncaptured)``:
  each argument type's *guard* (what tells on the fast path that a value has that type: its
  class, and dtype) and each parameter's *kind* (how the template sets it), with the globals
  the template needs. Python ``int``, ``float`` and ``bool`` have the weak types of
  :mod:`specializer.types`: dispatch resolves each to the concrete type the method declares
  (``resolved``), and the template converts the value to it on every launch, with a range
  check: :func:`specializer.types.weak_converter` ``(T)`` gives ``convert(value, linked, i)``,
  which raises the core's ``OverflowError`` naming the kernel, the parameter and the type
  (:func:`~specializer.types.weak_range` gives the range, for a back-end that checks inline).
- ``typeof(value)``, given to its :class:`~specializer.kernels.Definitions`: a Python
  ``int``, ``float`` or ``bool`` to its weak type (``specializer.types.WEAK[type(value)]``),
  an instance of a subclass of one (an ``IntEnum``) through
  :func:`specializer.types.weak_type`, asked after the back-end's own types.

The launcher gives the definitions' kernels a slot for its ``front_attr``
(:meth:`~specializer.kernels.Definitions.kernel_slots`, called by the core when the launcher
is made: a back-end does not call it).

Template blocks (each rendered at the indentation shown; ``entry.py.j2`` renders them)
----------------------------------------------------------------------------------------

- ``setup`` (4 spaces, in the factory, once per linked kernel): locals the other blocks use,
  read from ``linked`` (``fn = linked.fn``).
- ``where`` (8, in a front entry, before anything is compared): assign ``where_name`` the
  where of this launch, resolving an option left to its default. Required: a block that
  assigns nothing to it is refused when the back-end is made.
- ``call_where`` (8, in a HostKernel call, where ``where`` is the HostKernel's): resolve the
  where option against it (default to it; refuse or check another); may be empty.
- ``unguarded`` (8, in the slow path's launch only, before ``launch``; may be empty): what a
  guard does to a launch argument on the fast path, done here for arguments no guard saw
  (the ``array`` guard puts a device array's pointer in its place; CUDA's block does the
  same for ``a<captured>``..``a<n-1>``), so that ``launch`` gets the same values on every path.
- ``launch`` (8, in the slow path's launch, a front entry and a HostKernel call): set the
  arguments ``a0``..``a<n-1>`` (captured values first, which no guard sees) and enqueue,
  with the launch options as locals; its value is the launch's.

A template receives names, counts and kinds, never values: ``captured``, ``instance``,
``guards``, ``kinds``, ``options``, ``defaults``, ``lifted``, ``all_lifted``, ``where``; the
guard's classes and dtypes are globals ``_C<i>``/``_D<i>``, ``_TASK()[0]`` is the task's
world, and the rest are the globals :meth:`Launcher.kinds` returns. The ``guard`` block
renders the guards (``templates/guards.j2`` has the core's kinds; ``Launcher.guard_kinds``
declares every kind a back-end's :meth:`Launcher.guard_of` returns, and ``docs/backend.md``
lists them). A back-end's mistake is refused when it is made (:class:`Launcher` renders its
template then): a ``defaults`` value outside the four, a render that does not compile (named
by template, block and line), a ``where`` block that assigns nothing to ``where_name``, a
declared guard kind the template does not render. On the first launch that shows it: a ``where``
block that does not give what :meth:`Launcher.resolve` gives, an undeclared guard kind, and a
class-only guard for an array or struct type.

What the core gives a back-end
------------------------------

- ``launcher.launch``: the generated ``launch(f, *args, <options>, **compiler_kwargs)``;
- ``launcher.function(f, tt, where_opt, kw)``: the lookup as a HostKernel (its
  ``clfunction``): a new one on each call, around the cached lookup's result;
- ``launcher.site``: its :class:`~specializer.kernels.LookupSite`;
- ``launcher.misses``: how many launches took the slow path (what a test counts);
- ``launcher.where_table(where)``: the where table (see "Cached state"), which a back-end may
  use for what it keeps per where (OpenCL keeps a queue's context key there) or override;
- ``launcher.template_params(...)``: what its template is rendered with for one signature
  (``tools/regen_generated.py`` renders it for review);
- :func:`forget` ``(part)``: a context (or the token a back-end keys one by) is gone;
- ``launcher.check_fork()``: the fork rule (SPEC 9), which each of a back-end's helpers that
  reach its device (a queue, a context, an array) calls first: it records that this process
  uses the device, or raises the fork error in a fork of one that did.

What the core does, so no back-end has to
-----------------------------------------

- a kernel of another back-end is refused; a kernel instance's type is not a kernel (its
  entry checks the instance's class); captured values come first, from the live instance;
- one world from dispatch to enqueue: a front entry is published only for the world its lookup
  ran in, and only when that world is still the latest after the lookup (so never while a task
  is pinned, a compile hook is active or precompile mode is on, nor when the world rose).

The hit path of a launch is ``launch`` (generated from ``launch.py.j2``) loading the kernel's
front entry and calling it: the entry compares the world, the where and the compiler kwargs,
unpacks the arguments, checks each one's class (and dtype), and sets and enqueues. It calls
no ``typeof`` and builds no type tuple. Anything else is :meth:`Launcher.miss`: ``typeof`` of
each argument, the cached lookup, a new front entry, and the launch.

Cached state
------------

Three levels around a launch, each with one owner (``docs/design.md`` maps every cache):

1. *Front entries* (the kernel's): the generated entry of one lookup, bound to its world,
   where, compiler kwargs (frozen: private copies, compared by value; a value of another
   mutable type, a ``UserList``, publishes none) and, weakly, kernel. A kernel keeps each launcher's
   newest under that launcher's ``front_attr``; each where keeps the newest of each kernel
   for it in each launcher's *where table*
   (:meth:`Launcher.where_table`: by default a dict in the where's own ``__dict__``, keyed
   by each kernel's token, an entry dropped when its kernel goes: ``_keep``), which a
   launch for another where finds and makes the kernel's newest. Arguments of other types go
   to the entry the newest replaced for the same world, where and kwargs (its ``_next``), up
   to :data:`CHAIN` entries in all, so a kernel launched with a few argument types in turn
   keeps hitting. Invalidated by comparison: an entry of another world (compared by value),
   another where or other kwargs is not used (a miss publishes a new one, chained to none
   of them). Lifetime: a where table goes with its where, and keeps no kernel alive (nor
   does any entry: a kernel holds its own); the only user object kept beyond that is the
   where of each kernel's newest entry per launcher, until the kernel launches elsewhere
   through that launcher. An entry holds its launcher: a
   launcher lives as long as its definitions' kernels do (back-ends make one, at import).
2. *The specialized lookup's cell*: ``cached_lookup`` through
   :class:`~specializer.kernels.LookupSite`, four (world, key) entries per (kernel, types),
   compared by world and key value; a key part that is gone (a dropped context) is dropped by
   :func:`forget`.
3. *The compiled-code cache* (:mod:`specializer.compiler`), with what belongs to it: each
   code instance's links per context (the linked kernels, with a back-end's argument-set
   records and the launch path bound to each, ``linked.bound``, cleared by :func:`forget`),
   and a back-end's programs or modules per context.

:func:`Launcher.function` (``clfunction``) keeps nothing of its own: it runs the cached lookup
and makes a new :class:`HostKernel` of its result. Code, not state: the generated code of each
signature (``Launcher._factories``, each launcher's own).
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

import numpy as np

from . import codegen
from . import compiler as _compiler
from . import world as _world
from .kernels import Definitions, Kernel, LookupSite
from .locks import new_lock
from .lookup import forget_key
from .methods import MethodError
from .suggest import unknown_keywords
from .types import WEAK, DeviceArray, Struct, type_name

__all__ = ["NOTHING", "REQUIRED", "HostKernel", "Launcher", "forget", "signature", "table_in"]


def signature(name: str, tt: Iterable[type]) -> str:
    """``name(T1, T2, ...)`` for messages."""
    return f"{name}({', '.join(type_name(t) for t in tt)})"


class HostKernel(functools.partial):  # type: ignore[type-arg]  # partial of the call's result
    """A kernel looked up for argument types ``tt`` in one *where* (a queue, a context), ready
    to call like ``launch`` without the kernel: ``hk(*args, <launch options>)``.

    It is a ``functools.partial`` of its signature's generated call, a closure over its kernel
    and where that binds no arguments: CPython 3.12 and later call a subclass of partial that
    does not define ``__call__`` through the vectorcall protocol, one Python call. On 3.10 and
    3.11 a class statement does not give a subclass that path, and each call builds and
    unpacks an argument tuple and a keyword dict (about 1,200 instructions more); that is the
    price of not writing into the type object. ``f`` is the live kernel or kernel instance
    (whose captured values come first on every call), ``linked`` the lookup's result.
    """

    f: Any
    tt: tuple[type, ...]
    linked: Any
    where: Any
    #: the process that used the back-end's device (set on the class: Launcher.check_fork)
    _device_user: ClassVar[int]

    def __new__(
        cls, call: Callable[..., Any], f: Any, where: Any, tt: tuple[type, ...], linked: Any
    ) -> HostKernel:
        self = super().__new__(cls, call)
        self.f = f
        self.tt = tt
        self.linked = linked
        self.where = where
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {signature(self.linked.name, self.tt)} of {self.f!r}>"

    def __reduce__(self) -> Any:
        raise TypeError(
            "a HostKernel holds device handles and cannot be pickled: pickle the kernel and "
            "look it up again in the other process"
        )


#: guards the attributes the launchers of this process have taken (Launcher._own_attrs)
_ATTRS_LOCK = new_lock(reentrant=False)
#: every launcher's front_attr and where_attr: each name is one launcher's, whatever its
#: definitions (names only: a launcher lives as long as its definitions' kernels do)
_TAKEN_ATTRS: frozenset[str] = frozenset()
#: the defaults a launch option may have
_DEFAULTS = ("required", "none", "zero", "false")
#: front entries a launch tries, for one kernel, world, where and compiler kwargs, before a
#: miss: a kernel launched with arguments of up to this many types in turn does not miss
CHAIN = 4
#: how many times a miss asks a `where` block and ``resolve`` again, together, before it
#: calls their disagreement the back-end's (see Launcher._recognized)
_WHERE_TRIES = 8
#: a lifted compiler kwarg that was not given
NOTHING: Any = type("NothingGiven", (), {"__repr__": lambda self: "<not given>"})()
#: the default of a "required" launch option in the generated signatures: a launch that
#: misspells one (``global_sise=``) reaches the slow path, which names the misspelling,
#: rather than Python's "missing 1 required keyword-only argument" (a default costs a call
#: that gives the option nothing)
REQUIRED: Any = type("RequiredOption", (), {"__repr__": lambda self: "<required>"})()


class Launcher:
    """A back-end's launch path (see the module docstring for what a back-end supplies)."""

    #: the back-end's short name, the first part of its generated functions' names
    name: ClassVar[str] = "backend"
    #: the back-end's template, extending ``entry.py.j2``
    template: ClassVar[str]
    #: launch option names, in order, and each one's default: "required", "none", "zero", "false"
    options: ClassVar[tuple[str, ...]]
    defaults: ClassVar[tuple[str, ...]]
    #: compiler kwargs that ``launch`` takes by name (a launch with them stays as cheap as
    #: one without: a keyword CPython must put into ``**compiler_kwargs`` costs a dict entry
    #: and a search of every parameter name on each call); the rest go to ``**``
    lifted: ClassVar[tuple[str, ...]] = ()
    #: every compiler kwarg's name, when all are known (then, with all of them lifted, a
    #: front entry only checks that no other keyword came, and a miss refuses any other
    #: keyword first, naming the nearest option)
    compiler_kwargs: ClassVar[tuple[str, ...]] = ()
    #: how an unknown keyword's message names the compiler options (default: "compiler
    #: options are <compiler_kwargs>")
    compiler_help: ClassVar[str] = ""
    #: the variable the template's ``where`` block sets: the where a front entry compares
    where_name: ClassVar[str] = "where"
    #: the key, in a where's own ``__dict__``, of its where table (see :meth:`where_table`);
    #: None: no where tables, each kernel keeps its newest front entry only. A launcher
    #: whose name another launcher took uses it numbered (``_2``), as it does front_attr
    where_attr: str | None = None
    #: the attribute of a kernel (or kernel instance type) that holds its newest front entry
    #: (numbered, ``_2``, where another launcher of this process took it)
    front_attr: str
    #: what the lookup's result is an instance of (checked on a miss)
    V: ClassVar[type]
    #: the HostKernel class this back-end returns
    host_class: ClassVar[type[HostKernel]] = HostKernel
    #: the name launch and lookup messages use ("launch", "clfunction")
    lookup_name: ClassVar[str] = "the lookup"
    #: every guard kind :meth:`guard_of` may return, and whether it checks an argument type's
    #: parameters (an array's or a struct's dtype) besides its class: the core's two, and
    #: those the back-end's ``guard`` block adds
    guard_kinds: ClassVar[dict[str, bool]] = {"cls": False, "cls_dtype": True}

    def __init__(self, definitions: Definitions) -> None:
        self.definitions = definitions
        self.typeof = definitions.typeof
        self._check_backend()
        self._own_attrs(definitions)
        self.other = self._make_other()
        self._misses = 0
        self._misses_lock = new_lock(reentrant=False)
        #: the generated launch path of each signature: code, bound to this launcher's globals
        #: (what its kinds() gives), so each launcher has its own
        self._factories: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._factories_lock = new_lock(reentrant=False)
        self.site = LookupSite(definitions, self.V, self.link)
        self.launch = codegen.generate(
            "launch.py.j2",
            (self.name, "launch"),
            {"_miss": self.miss, "_NOTHING": NOTHING, "_REQUIRED": REQUIRED},
            f"{self.name}: launch(f, *args, {', '.join(self.options)})",
            **self.launch_params(),
        )

    def _own_attrs(self, definitions: Definitions) -> None:
        """Take this launcher's attributes of the definitions' kernels and wheres (a kernel's
        front entry, a where's table): the class's ``front_attr`` and ``where_attr``, or, where
        another launcher in this process has them (over these definitions or any other's),
        the same names numbered (``_2``, ``_3``...), so that two launchers never run each
        other's entries: a kernel of other definitions has no entry under this launcher's
        name, and its launch takes the slow path, which refuses it by name."""
        global _TAKEN_ATTRS
        with _ATTRS_LOCK():
            taken = _TAKEN_ATTRS
            front, where = _free_attrs(self.front_attr, self.where_attr, taken)
            _TAKEN_ATTRS = taken | {front} | ({where} if where else set())
            self.front_attr, self.where_attr = front, where
            definitions.launcher_attrs |= {front} | ({where} if where else set())
            definitions.kernel_attrs += (
                (front,) if _TOKEN in definitions.kernel_attrs else (front, _TOKEN)
            )
            definitions.kernel_slots(*definitions.kernel_attrs)

    def _check_backend(self) -> None:
        """Refuse a back-end's mistake now, naming it and what to write, rather than let every
        launch take the slow path: a ``defaults`` value outside the four, and a template whose
        ``where`` block assigns nothing to ``where_name``."""
        what = f"back-end {self.name!r} ({type(self).__module__}.{type(self).__qualname__})"
        if len(self.defaults) != len(self.options):
            raise TypeError(
                f"{what}: {len(self.options)} launch options but {len(self.defaults)} defaults: "
                "give one default per option, in the same order"
            )
        for option, default in zip(self.options, self.defaults):
            if default not in _DEFAULTS:
                raise TypeError(
                    f"{what}: the default {default!r} of launch option {option!r} is not one of "
                    f'{", ".join(map(repr, _DEFAULTS))}: write "required" for an option '
                    'the caller must give, "none", "zero" or "false" for one that '
                    "defaults to None, 0 or False"
                )
        # One render with a launch argument of each declared guard kind: its entry must
        # assign the where, and its guard must check each argument.
        kinds = list(self.guard_kinds)
        params = self._params(
            (object,) * len(kinds),
            (object,) * len(kinds),
            kinds,
            ["guard_check"] * len(kinds),
            0,
            False,
        )
        try:
            tree = _checked_render(self.template, name="entry_check", **params)
        except SyntaxError:
            # Without arguments first (a block of its own is at fault: the error names it),
            # then each kind alone (one that renders nothing breaks the guard's expression).
            _checked_render(
                self.template, name="entry_check", **self._params((), (), [], [], 0, False)
            )
            for kind in kinds:
                self._check_guard_kind(kind, what)
            raise
        name = self.where_name
        entry = _function_named(tree, "entry")
        stored = any(
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
            for n in ast.walk(entry)
        )
        if not stored:
            raise TypeError(
                f"{what}: the `where` block of template {self.template!r} assigns nothing to "
                f"{name!r} (Launcher.where_name), which a front entry compares with the where "
                f"it was published for; without it every launch would take the slow path. Set "
                f"it in the block, e.g. `{name} = <the where option, or its default when None>`"
            )
        checked = _guarded_names(tree)
        for i, kind in enumerate(kinds):
            if f"a{i}" not in checked:
                self._check_guard_kind(kind, what)

    def _check_guard_kind(self, kind: str, what: str) -> None:
        """Refuse a declared guard kind the template does not render (naming it)."""
        params = self._params((object,), (object,), [kind], ["guard_check"], 0, False)
        try:
            checked = _guarded_names(
                ast.parse(codegen.render(self.template, name="entry_check", **params))
            )
        except SyntaxError:
            checked = set()
        if "a0" not in checked:
            raise TypeError(
                f"{what}: guard kind {kind!r} (Launcher.guard_kinds) renders no check in "
                f"template {self.template!r}: its `guard` block must render it (see "
                "templates/guards.j2)"
            )

    # -- what a back-end supplies -----------------------------------------------------------

    def link(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
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
        """For lookup types ``tt`` and the concrete types they took (``resolved``), both with
        the ``ncaptured`` captured ones first: the guard of each launch argument (one per
        ``tt[ncaptured:]``), the back-end's kind of each parameter (one per ``tt``), and the
        globals its template needs besides ``_C<i>``/``_D<i>``. Made once per signature and
        shared by every kernel of it: nothing in it may be one kernel's."""
        raise NotImplementedError

    def guard_of(self, t: type) -> tuple[str, type, Any]:
        """The guard of argument type ``t``: (guard kind, class, dtype or None)."""
        raise NotImplementedError

    # -- the core ---------------------------------------------------------------------------

    def argtypes(self, args: tuple[Any, ...], F: Any = None) -> tuple[type, ...]:
        """``typeof`` of each argument; an error names the argument's position (and the
        kernel ``F``)."""
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
        """Argument types as given to a lookup: a tuple (or sequence) of types, with Python's
        ``int``, ``float`` and ``bool`` standing for their weak types. ``what`` names the
        function given them in errors (default: the back-end's lookup)."""
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
        """``(run, front, host, where_of)`` of lookup types ``tt`` for ``linked`` (made once):
        the slow path's launch, the maker of front entries, the maker of a HostKernel's call
        (``host(f, where)``), and what
        the `where` block gives for given launch options."""
        instance = not isinstance(F, Kernel)
        # keyed on this launcher too: what it holds calls this launcher's miss and reads its
        # globals (a linked kernel is shared by the launchers over one definitions)
        ident = (self.front_attr, tt, instance)
        b = linked.bound.get(ident)
        if b is None:
            captured = _captured(F)
            factory = self._factory(captured + tt, tuple(linked.tt), len(captured), instance)
            b = linked.bound.setdefault(
                ident, factory(linked, self.miss, self.mismatch, self.unknown)
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
            **namespace,
        }
        for i, t in enumerate(full[ncaptured:], ncaptured):
            kind, cls, dtype = self.guard_of(t)
            self._check_guard(t, kind)
            namespace[f"_C{i}"] = cls
            namespace[f"_D{i}"] = dtype
        parts = (f"{self.name}_entry", *(type_name(t) for t in full))
        if instance:
            parts += (f"captured_{ncaptured}",)
        return parts, namespace, self._params(full, resolved, guards, kinds, ncaptured, instance)

    def _check_guard(self, t: type, kind: str) -> None:
        """Refuse a guard kind the back-end does not declare, and, for a parametric argument
        type, one that does not check the parameters (an int64 array would pass a float32
        array's guard and run its code)."""
        what = f"back-end {self.name!r}: guard_of({type_name(t)})"
        checks = self.guard_kinds.get(kind)
        if checks is None:
            raise TypeError(
                f"{what} returned guard kind {kind!r}, which is not one of its guard_kinds "
                f"({', '.join(sorted(self.guard_kinds))}); see docs/backend.md, 'Guards'"
            )
        if not checks and issubclass(t, (DeviceArray, Struct)):
            raise TypeError(
                f"{what} returned guard kind {kind!r}, which checks the class only: an argument "
                f"of another {'dtype' if issubclass(t, DeviceArray) else 'layout'} would take "
                'this signature\'s code; use a kind that checks the dtype ("cls_dtype")'
            )

    def _params(
        self,
        full: tuple[type, ...],
        resolved: tuple[type, ...],
        guards: list[str],
        kinds: list[str],
        ncaptured: int,
        instance: bool,
    ) -> dict[str, Any]:
        return {
            "captured": ncaptured,
            "instance": instance,
            "guards": guards,
            "kinds": kinds,
            "options": list(self.options),
            "defaults": list(self.defaults),
            "lifted": list(self.lifted),
            "all_lifted": bool(self.lifted) and set(self.lifted) == set(self.compiler_kwargs),
            "where": self.where_name,
        }

    def launch_params(self) -> dict[str, Any]:
        """The template parameters of this back-end's ``launch`` (``launch.py.j2``)."""
        return {
            "options": list(self.options),
            "defaults": list(self.defaults),
            "lifted": list(self.lifted),
            "attr": self.front_attr,
        }

    def miss(self, f: Any, args: tuple[Any, ...], opts: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        """A launch that its front entry does not hold: type the arguments, look up, publish
        a new front entry, launch. ``opts`` are the launch options, then the lifted compiler
        kwargs (``NOTHING`` where not given)."""
        F = self.definitions.kernel_type(f)
        if not hasattr(F, self.front_attr):  # a kernel with an entry of ours is ours
            self.definitions.own(F)
        self.check_fork()
        n = len(self.options)
        for k, v in zip(self.lifted, opts[n:]):
            if v is not NOTHING:
                kw = {**kw, k: v}
        given = opts[:n]
        error = self._call_error(F, len(args), given, kw)
        if error is not None:  # raised here: the fewest library frames above the user's line
            raise error
        where, opts = self.resolve(given)  # the launch's one read of a default where
        self.check_args(where, f, args)
        tt = self.argtypes(args, F)
        w = _world.task_cell()[0]  # before the lookup: see _publish
        key = self.key(where, kw)
        linked = self._lookup(F, tt, key)
        self.check_fork()  # again: a compile hook of the lookup may have forked
        with self._misses_lock():
            self._misses += 1
        run, front, _, where_of = self.bound(linked, tt, F)
        if self._recognized(where, given, where_of):
            self._publish(F, w, where, kw, front)
        return run(args if F is f else f.values + args, *opts)

    @property
    def misses(self) -> int:
        """How many launches took the slow path (typed their arguments and ran the cached
        lookup): what a test counts to see that launches hit."""
        return self._misses

    def check_args(self, where: Any, f: Any, args: tuple[Any, ...]) -> None:
        """What a miss checks of a launch's arguments (and ``f``'s captured values) against
        its where (``resolve``'s), before anything else; what a front entry for the same
        where and argument types need not check again. Default: nothing."""

    def _recognized(self, where: Any, given: tuple[Any, ...], where_of: Callable[..., Any]) -> bool:
        """Whether a front entry for ``where`` would recognize a launch given options
        ``given``: the `where` block gives what :meth:`resolve` gave. A block that reads a
        default (a queue, a context) reads it again here, so a change of that default by
        another thread since the launch's one read (``resolve``) may show: then the block
        and ``resolve`` are asked again together, and a back-end is refused only when they
        never agree; a launch that raced with such a change publishes no entry."""
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
            kw = _frozen(kw)
            if kw is NOTHING:  # a value of a type that may change in place: no entry
                return
            lifted = tuple(kw.pop(k, NOTHING) for k in self.lifted)
            table = self.where_table(where)
            # The entry this one replaces for the same world, where and kwargs (arguments of
            # other types) comes next, up to CHAIN entries: alternating types do not miss.
            # (a where table keys kernels by their token, each dropped when it goes: _keep)
            prev = table.get(_token(F)) if table is not None else getattr(F, self.front_attr, None)
            prev = getattr(prev, "__func__", prev)  # a kernel instance type's staticmethod
            made = getattr(prev, "chain", None)
            depth = 0
            if made is not None and made[1] is where and made[0] == w and made[2:4] == (kw, lifted):
                depth = made[4] + 1
            if depth == 0 or depth >= CHAIN:
                prev, depth = None, 0
            entry = front(w, where, kw, weakref.ref(F), self.other, prev, *lifted)
            entry.chain = (w, where, kw, lifted, depth)  # what the next publication compares
            # A kernel holds its entry itself; a kernel instance type as a staticmethod, so
            # that reading it through an instance does not bind the instance to it.
            held = entry if isinstance(F, Kernel) else staticmethod(entry)  # callable too
            if table is not None:  # kept by the where itself: gone with it
                _keep(table, F, held)
            setattr(F, self.front_attr, held)

    def where_table(self, where: Any, make: bool = True) -> dict[Any, Any] | None:
        """The *where table* of ``where``: what the core keeps for one where (a kernel's front
        entry for it, by kernel token: it keeps no kernel), owned by the where so that it goes
        with it. By default a
        dict in the where's own ``__dict__`` under ``where_attr``, made on first use (or not,
        when ``make`` is false: then None); None when the back-end has no ``where_attr`` or
        the where has no ``__dict__``. A back-end whose wheres cannot carry one may override
        this with a table that lives exactly as long as the where."""
        name = self.where_attr
        d = None if name is None else getattr(where, "__dict__", None)
        return None if d is None or name is None else table_in(d, name, make)

    def _make_other(self) -> Callable[[Any, Any], Any]:
        """``other(F, where)``: the front entry ``F`` was published for ``where`` (not its
        newest), or None; what a front entry calls when a launch comes for another where.
        The entry found becomes the kernel's newest (so the newest is of the where launched
        on last, and a where the user dropped is not held by it after a launch elsewhere)."""
        attr, table_of = self.front_attr, self.where_table

        def other(F: Any, where: Any) -> Any:
            try:
                entry = table_of(where, False)[F._specializer_token]  # type: ignore[index]
            except (KeyError, TypeError, AttributeError):  # no table, or never kept in one
                return None
            setattr(F, attr, entry)
            return entry

        return other

    def mismatch(self, linked: Any, f: Any, args: tuple[Any, ...], opts: tuple[Any, ...]) -> Any:
        """A HostKernel call whose arguments failed its guard: launch if they have its types
        after all (a numpy scalar subclass, an equal dtype), else say which types it takes."""
        F = self.definitions.kernel_type(f)
        tt = self.argtypes(args, F)
        b = linked.bound.get((self.front_attr, tt, F is not f))
        if b is not None:
            return b[0](args if F is f else f.values + args, *opts)
        raise TypeError(
            f"a HostKernel of {signature(linked.name, linked.tt)} was called with arguments of "
            f"types ({', '.join(map(type_name, tt))}), not the types it was looked up for; look "
            f"it up for those with {self.lookup_name}, or use launch(f, *args, ...), which "
            "looks up what it is given"
        )

    def _lookup(self, F: Any, tt: tuple[type, ...], key: Any) -> Any:
        """The cached lookup; a user's error in it (no method, an ambiguity, code that does not
        build, a method body that raised or returned no source, a back-end's error marked
        with :func:`specializer.compiler.users_error`) is raised with the traceback
        from here on (and the body's own frames), not the library's frames between."""
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
        """Record that this process uses the back-end's device, or raise the fork error in a
        fork of the process that did (SPEC 9): the back-end's one record of device use. The
        core calls it on a miss and a lookup (a fork has a world of its own, so its front
        entries miss), a back-end from each of its queue, context and array helpers. A fork
        of a process that never used the device may, and is then the one that uses it. The
        record is the ``host_class``'s (its ``_device_user``), which a fork's child patches:
        launchers of one back-end (one HostKernel class) share it, as they share the device."""
        pid = os.getpid()
        cls = self.host_class
        user = cls.__dict__.get("_device_user")  # this class's own, not a base class's
        if user is None:
            cls._device_user = pid
            if hasattr(os, "register_at_fork"):  # (twice if two threads get here: harmless)
                os.register_at_fork(after_in_child=self._refuse_host_kernels)
        elif user != pid:
            _world.check_fork(f"specializer's {self.name} back-end")

    def _refuse_host_kernels(self) -> None:
        """In a fork of this back-end's user: every HostKernel here is the parent's, and its
        call (which checks nothing) now raises the fork error. Until then the class has no
        ``__call__``: CPython calls it as a partial, and no check costs a call anything
        (3.12 and later drop the vectorcall path of a class whose ``__call__`` is set).
        A ``host_class`` shared by two back-ends would share their record too: each back-end
        here has its own."""
        check = self.check_fork

        def call_in_fork(hk: HostKernel, *args: Any, **kwargs: Any) -> Any:
            check()  # raises: this process is a fork of the user
            return functools.partial.__call__(hk, *args, **kwargs)

        self.host_class.__call__ = call_in_fork  # type: ignore[method-assign, assignment]

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
        """The error for a launch given keywords ``unknown`` that are neither launch nor
        compiler options: each named, with the nearest option when one is close, and both
        lists (SPEC 8). A back-end's ``key`` may raise it too."""
        compiler = self.compiler_help or (
            f"compiler options are {', '.join(self.compiler_kwargs)}"
            if self.compiler_kwargs
            else "any other keyword is a compiler option"
        )
        names = unknown_keywords(unknown, (*self.options, *self.compiler_kwargs))
        return TypeError(
            f"unknown keyword argument(s) {names}: launch options are "
            f"{', '.join(self.options)}; {compiler}"
        )

    def _call_error(
        self, F: Any, nargs: int, given: tuple[Any, ...], kw: dict[str, Any]
    ) -> TypeError | None:
        """The error of what a miss checks first, before anything is typed or dispatched
        (SPEC 8): every keyword is an option (when the compiler options are all known),
        every required launch option was given, and some method of the kernel, in the
        task's world, takes this many arguments (captured values counted); None when all
        is well."""
        if self.compiler_kwargs:
            unknown = [k for k in kw if k not in self.compiler_kwargs]
            if unknown:
                return self.keyword_error(unknown)
        for option, v in zip(self.options, given):
            if v is REQUIRED:
                return TypeError(
                    f"launch of kernel {_name(F)} is missing the required launch option "
                    f"{option}=: launch options are {', '.join(self.options)}"
                )
        return self._count_error(F, nargs, "launch")

    def _count_error(self, F: Any, nargs: int, what: str) -> MethodError | None:
        """A MethodError (a TypeError) that says so when no method of the kernel visible in
        the task's world takes ``nargs`` arguments after ``F``'s captured values; else None."""
        kernel = F if isinstance(F, Kernel) else F.kernel
        ncaptured = len(_captured(F))
        methods = kernel.methods()
        counts = sorted({len(m.signature) for m in methods})
        if not counts or ncaptured + nargs in counts:
            return None
        wanted = [c - ncaptured for c in counts if c >= ncaptured]
        takes = " or ".join(map(str, wanted)) if wanted else "none"
        listing = "; ".join(signature(kernel.name, m.signature) for m in methods)
        captured = (
            f" after its {ncaptured} captured value(s) (its methods count them)"
            if ncaptured
            else ""
        )
        return MethodError(
            f"kernel {kernel.name} takes {takes} argument(s){captured}, but the {what} gave "
            f"{nargs}: methods visible in world {_world.current()}: {listing}. Pass one "
            f"argument per parameter, or define a method of {kernel.name} with "
            f"{ncaptured + nargs} parameter(s)"
        )

    def function(self, f: Any, tt: Any, where_opt: Any, kw: dict[str, Any]) -> HostKernel:
        """The lookup of ``f`` (a kernel or kernel instance) for types ``tt`` in a where
        (``where_opt`` is the launch option that selects it), as a new HostKernel made from
        the cached lookup's result: nothing but that lookup is kept."""
        F = self.definitions.kernel_type(f)
        self.definitions.own(F)
        self.check_fork()
        tt = self.tt_of(tt)
        error = self._count_error(F, len(tt), f"{self.lookup_name}'s tt")
        if error is not None:
            raise error
        where = self.resolve_where(where_opt)
        linked = self._lookup(F, tt, self.key(where, kw))
        self.check_fork()  # again: a compile hook of the lookup may have forked
        return self.host_class(self.bound(linked, tt, F)[2](f, where), f, where, tt, linked)

    def resolve_where(self, where_opt: Any) -> Any:
        """The where a lookup given ``where_opt`` (None: the default) is for."""
        raise NotImplementedError


def table_in(tables: dict[Any, Any], name: str, make: bool) -> dict[Any, Any] | None:
    """The where table ``name`` in ``tables`` (a dict its where owns: its ``__dict__``, or what
    a back-end keeps for it), made on first use when ``make`` is true; None if there is none
    (or something else stands under that name)."""
    table = tables.get(name)
    if table is None and make:
        table = tables.setdefault(name, {})
    return table if isinstance(table, dict) else None


#: the attribute of a kernel (or kernel instance type) that holds its key in where tables: a
#: number no other kernel of the process ever has (so a table keeps no kernel, and no key is
#: ever another kernel's)
_TOKEN = "_specializer_token"
_tokens = itertools.count(1)
#: a where table's key of its _Drops
_DROPS = object()


def _token(F: Any) -> int:
    """``F``'s key in where tables, given on first use (a class's own, not a base class's)."""
    tok = F.__dict__.get(_TOKEN) if isinstance(F, type) else getattr(F, _TOKEN, None)
    if tok is None:
        tok = next(_tokens)
        setattr(F, _TOKEN, tok)
    return cast(int, tok)


class _Drops:
    """What drops a where table's entries for kernels that are gone: a weak reference to
    each kernel kept there, whose callback pops its entry. Held by the table only (so it goes
    with it), and referred to weakly by the callbacks."""

    __slots__ = ("__weakref__", "refs", "table")

    def __init__(self, table: dict[Any, Any]) -> None:
        self.table = table
        self.refs: dict[int, weakref.ref[Any]] = {}


def _keep(table: dict[Any, Any], F: Any, entry: Any) -> None:
    """Keep ``entry`` in where table ``table`` for ``F`` (alive: a launch of it publishes),
    under ``F``'s token, until ``F`` is gone: a where keeps no kernel alive (its entries refer
    to their kernels weakly). A lookup by ``F._specializer_token`` costs what one by ``F``
    would."""
    tok = _token(F)
    drops = table.get(_DROPS)
    if drops is None:
        drops = table.setdefault(_DROPS, _Drops(table))
    if tok not in drops.refs:
        drops.refs[tok] = weakref.ref(F, functools.partial(_gone, weakref.ref(drops), tok))
    table[tok] = entry


def _gone(drops_ref: weakref.ref[_Drops], tok: int, _: Any) -> None:
    """A kernel kept in a where table is gone: drop its entry (from the collector, in any
    thread: each step one atomic dict operation)."""
    drops = drops_ref()
    if drops is not None:
        drops.table.pop(tok, None)
        drops.refs.pop(tok, None)


def _free_attrs(front: str, where: str | None, taken: frozenset[str]) -> tuple[str, str | None]:
    """``front`` and ``where``, or the first pair of them numbered (``_2``, ``_3``...) that
    no other launcher has taken."""
    n = 1
    f, w = front, where
    while f in taken or (w is not None and w in taken):
        n += 1
        f, w = f"{front}_{n}", None if where is None else f"{where}_{n}"
    return f, w


def forget(part: Any) -> list[Any]:
    """A context (or the token a back-end keys one by, ``part`` of its lookup keys) is gone
    for good: drop what was linked for it from the compiled-code cache
    (:func:`specializer.compiler.forget_context`) and the results keyed by it from every
    lookup site (:func:`specializer.lookup.forget_key`), and clear each dropped linked
    kernel's launch paths (``bound``, which refer to it), so that it is freed now rather than
    by a later collection. Returns the dropped linked kernels. Safe from a finalizer: it
    takes no lock."""
    forget_key(part)
    dropped = _compiler.forget_context(part)
    for linked in dropped:
        linked.bound.clear()
    return dropped


def _function_named(tree: ast.AST, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _guarded_names(tree: ast.AST) -> set[str]:
    """The names the guard of a rendered HostKernel call (``call``) reads."""
    return {
        n.id
        for t in ast.walk(_function_named(tree, "call"))
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
        for n in ast.walk(t.operand)
        if isinstance(n, ast.Name)
    }


def _checked_render(template: str, **params: Any) -> ast.Module:
    """``template`` rendered with ``params`` and parsed; refused naming the template, the block
    and the line where the render does not compile."""
    source = codegen.render(template, **params)
    try:
        return ast.parse(source, f"<template {template}>")
    except SyntaxError as e:
        raise codegen.template_error(template, source, e, params) from None


#: values that cannot change: a front entry compares one by identity, then by value
_ATOMS = frozenset({str, bytes, int, float, complex, bool, type(None), frozenset})


def _frozen(v: Any) -> Any:
    """A compiler kwarg's value as a front entry keeps it: the value itself when it cannot
    change, a private copy of a list, tuple or dict (compared by value with what a later
    launch gives, so a list edited in place does not hit), or ``NOTHING`` for any other type
    (a ``UserList``, a ``deque``: a launch given one looks up by the value it has then)."""
    cls = v.__class__
    if cls in _ATOMS or isinstance(v, (np.number, np.bool_)):
        return v
    if cls is dict:
        out = {k: _frozen(x) for k, x in v.items()}
        return NOTHING if any(x is NOTHING for x in out.values()) else out
    if cls is list or cls is tuple:
        items = [_frozen(x) for x in v]
        if any(x is NOTHING for x in items):
            return NOTHING
        if cls is tuple and all(x is y for x, y in zip(items, v)):
            return v  # immutable all through: kept as given, so a constant hits by identity
        return cls(items)
    return NOTHING


def _name(F: Any) -> str:
    return F.name if isinstance(F, Kernel) else F.kernel.name


def _captured(F: Any) -> tuple[type, ...]:
    return () if isinstance(F, Kernel) else F.captured
