"""``cached_lookup``: a per-launch kernel lookup that costs a load and a couple of comparisons.

Back-ends wrap their lookup (dispatch, config, compiled-code cache, per-context handle) in it.
It remembers the result per (call site, F, tt, key type, V) and reuses it while the task's
world and the key are the same.

Each such tuple gets its own function, rendered from ``templates/lookup.py.j2`` and exec'd on
first use. Its cache is one cell (a two-item list) bound once as a default and never rebound:
``cell[0]`` holds the newest (world, key, result) entry, ``cell[1]`` the three older ones, each
an immutable tuple replaced whole by one store. A hit takes no lock, hashes nothing and
allocates nothing: a reader sees old or new tuples, never a torn entry (at worst an entry
twice, between a miss's two stores). Worlds and keys compare by value after identity.

Why the world must match exactly: after compiling ``f(::Number)`` for an int, adding
``f(::Int)`` leaves that code valid, but the call now dispatches to the new method.

Lifetimes (docs/design.md, the cache map): a site is its code object, and its functions
are released when the code is gone; the index holds ``F`` by ``id``, weakly where it can
(a kernel factory's dropped product is released), else one object per value, while a site
of it lives. ``cached_lookup`` finds the function (and its cell) in the same index for any
``F``: a class, an instance, a function, a kernel.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any, TypeVar

from . import codegen
from . import world as _world
from .locks import new_lock
from .types import type_name

__all__ = ["ENTRIES", "cached_lookup", "forget_key", "specialize"]

R = TypeVar("R")

#: The task's cell (``_task()[1]``: its world for a lookup, see :mod:`specializer.world`).
_task = _world.task_cell

#: How many recent results each specialized lookup keeps.
ENTRIES = 4

#: An empty entry's world: no world is 0 (worlds start at 1), so it never matches.
_NO_WORLD = 0
_EMPTY = (_NO_WORLD, None, None)


class _Spec:
    """The state a specialized function's miss path needs (never touched by a hit)."""

    __slots__ = ("K", "V", "cell", "what")

    def __init__(self, V: type, K: type, what: str) -> None:
        self.V = V
        self.K = K
        self.what = what
        #: the cache (bound once into the function): ``cell[0]`` the newest entry,
        #: ``cell[1]`` the older ones, flat
        self.cell: list[tuple[Any, ...]] = [_EMPTY, _EMPTY * (ENTRIES - 1)]


def _entries(cell: list[tuple[Any, ...]]) -> list[tuple[Any, Any, Any]]:
    flat = (*cell[0], *cell[1])
    return [flat[i : i + 3] for i in range(0, len(flat), 3) if flat[i] != _NO_WORLD]


def _store(cell: list[tuple[Any, ...]], entries: list[tuple[Any, Any, Any]]) -> None:
    """Make ``entries`` (most recent first) the cell's. The older ones are stored first, so
    a hit between the two stores sees an entry twice at worst, never a foreign one."""
    kept = [tuple(e) for e in entries[:ENTRIES]]
    kept += [_EMPTY] * (ENTRIES - len(kept))
    cell[1] = tuple(x for e in kept[1:] for x in e)
    cell[0] = kept[0]


def _miss(spec: _Spec, key: Any, lookup: Callable[[], Any]) -> Any:
    if not isinstance(key, spec.K):  # checked here only: a hit costs nothing more
        raise TypeError(
            f"the lookup for {spec.what} was called with a key of type "
            f"{type_name(type(key))}: it takes keys of type {type_name(spec.K)} (specialize "
            "once per key type, or use cached_lookup, which does)"
        )
    # The task's cell set again (an interrupted publication, a dead block, a pin's first
    # lookup), dead pins dropped; then the one world this call runs in.
    _world.settle()
    w = _world.current()
    bypass = _world.bypassing()
    if not bypass:  # a hit the cell did not show (its world was None): compared by value
        for ew, ek, er in _entries(spec.cell):
            if ew == w and (ek is key or ek == key):
                return er
    result = _world.invoke_in_world(w, lookup)
    if not isinstance(result, spec.V):
        raise TypeError(
            f"the lookup for {spec.what} returned {type(result).__name__}, "
            f"not {type_name(spec.V)}: nothing was stored"
        )
    if not (bypass or _world.bypassing()):
        with _lock():  # stores only; a hit never takes it
            _put(spec.cell, w, key, result)
    return result


def _put(cell: list[tuple[Any, ...]], w: int, key: Any, result: Any) -> None:
    """Store (w, key, result) in front of the cell's entries, dropping the one it replaces
    (the same world and key, compared as a hit compares them) and the oldest."""
    kept = [e for e in _entries(cell) if not (e[0] == w and (e[1] is key or e[1] == key))]
    _store(cell, [(w, key, result), *kept])


def forget_key(part: Any) -> None:
    """``part`` of lookup keys is gone for good (a dropped context's token): drop every
    cached result whose key is ``part`` or a tuple holding it. Takes no lock (it runs from
    finalizers): racing a miss can only keep an entry no key finds, or lose one."""

    def named(k: Any) -> bool:
        return k is part or (k.__class__ is tuple and any(x is part for x in k))

    for cell, _ in _specializations.copy().values():
        entries = _entries(cell)
        if any(named(k) for _, k, _ in entries):
            _store(cell, [e for e in entries if not named(e[1])])


#: A specialization's key: (``id`` of the site's code, ``id`` of F, tt, key type, V).
_Ident = tuple[int, int, tuple[type, ...], type, type]

#: each specialized function with its cell (bound once as its default), for cached_lookup
_specializations: dict[_Ident, tuple[list[tuple[Any, ...]], FunctionType]] = {}
#: Per call site (``id`` of its code): a weak reference whose callback releases the site's
#: functions, and their keys. The ``id`` stays unique: the callback runs before reuse.
_sites: dict[int, tuple[Any, dict[_Ident, None]]] = {}
#: Per ``F`` (``id``), the same (``F`` itself where it takes no weak reference).
_owners: dict[int, tuple[Any, dict[_Ident, None]]] = {}
#: One object per value of an ``F`` that takes no weak reference: equal values, one ``id``.
_values: dict[Any, Any] = {}
#: Serializes the creation of specialized functions and the stores into their cells.
_lock = new_lock()


def _release(
    index: dict[int, Any], other: dict[int, Any], part: int, at: int, ref: Any = None
) -> None:
    """A site's code (``index`` is ``_sites``) or an ``F`` (``_owners``) is gone: drop its
    functions, and their keys from ``other``. Takes no lock (the garbage collector may run
    it in a thread that holds one): each pop is atomic and each walk is of a copy."""
    entry = index.get(part)
    if entry is None or (ref is not None and entry[0] is not ref):
        return
    index.pop(part, None)
    for ident in entry[1].copy():
        _specializations.pop(ident, None)
        rest = other.get(ident[at])
        if rest is not None:
            rest[1].pop(ident, None)
            if not rest[1] and not isinstance(rest[0], weakref.ref):
                other.pop(ident[at], None)
                if _values.get(rest[0]) is rest[0]:
                    _values.pop(rest[0], None)


def _register(
    index: dict[int, Any], other: dict[int, Any], obj: Any, at: int, ident: _Ident
) -> None:
    """File ``ident`` under ``obj`` in ``index``: weakly, with a releasing callback, where
    ``obj`` takes weak references; strongly otherwise. Call with ``_lock`` held."""
    entry = index.get(id(obj))
    if entry is None:
        try:
            ref: Any = weakref.ref(obj, functools.partial(_release, index, other, id(obj), at))
        except TypeError:  # no weak reference (a str, a tuple): kept while its sites live
            ref = obj
        idents: dict[_Ident, None] = {}
        entry = index[id(obj)] = (ref, idents)
    entry[1][ident] = None


def _one_per_value(F: Any) -> Any:
    """``F`` where it takes a weak reference, else the one object kept for its value."""
    hash(F)
    try:
        weakref.ref(F)
    except TypeError:
        return _values.setdefault(F, F)
    return F


def _name_of(x: Any) -> str:
    if isinstance(x, type):
        return x.__name__
    return str(getattr(x, "name", None) or getattr(x, "__name__", None) or type(x).__name__)


def specialize(
    site: Callable[..., Any] | CodeType, V: type, F: Any, tt: tuple[type, ...], K: type
) -> Callable[[Any, Callable[[], Any]], Any]:
    """The specialized lookup for (call site, ``V``, ``F``, ``tt``, key type ``K``).

    Returns ``fn(key, lookup)``: the cached result for ``key`` in the task's world, or
    ``lookup()``'s (run in that world, checked to be a ``V``, stored) on a miss. Keep
    ``fn`` and call it directly to skip even the search for it.
    """
    code = site if isinstance(site, CodeType) else getattr(site, "__code__", None)
    if not isinstance(code, CodeType):
        raise TypeError(f"a lookup site is a Python function or code object, got {site!r}")
    ident = (id(code), id(F), tt, K, V)
    try:
        made = _specializations.get(ident)
        if made is None:  # F is a key as a dict sees it, though the index files it by id:
            F = _one_per_value(F)  # an equal str or tuple is one object
            ident = (id(code), id(F), tt, K, V)
            made = _specializations.get(ident)
    except TypeError:
        raise TypeError(f"F, tt, K and V must be hashable, got F={F!r}, tt={tt!r}") from None
    if made is not None:
        return made[1]
    if not isinstance(V, type):
        raise TypeError(f"V is the class the lookup's result must be an instance of, got {V!r}")
    if not isinstance(K, type):
        raise TypeError(f"K is the key's type, got {K!r}")
    if not isinstance(tt, tuple) or not all(isinstance(t, type) for t in tt):
        raise TypeError(f"tt is a tuple of argument types, got {tt!r}")
    with _lock():  # straight-line (generate is a call)
        made = _specializations.get(ident)
        if made is not None:
            return made[1]
        what = (
            f"{_name_of(F)}({', '.join(type_name(t) for t in tt)}) at {code.co_name} "
            f"({code.co_filename}:{code.co_firstlineno}), key {type_name(K)}"
        )
        spec = _Spec(V, K, what)
        fn = codegen.generate(
            "lookup.py.j2",
            (
                "lookup",
                code.co_name,
                _name_of(F),
                *(_name_of(t) for t in tt),
                _name_of(K),
                _name_of(V),
            ),
            {"_miss": functools.partial(_miss, spec), "_task": _world.task_cell},
            f"cached_lookup: V={type_name(V)}, {what}",
            entries=ENTRIES,
        )
        fn.__defaults__ = (spec.cell,)  # bound once, never rebound
        _register(_sites, _owners, code, 1, ident)
        _register(_owners, _sites, F, 0, ident)
        _specializations[ident] = (spec.cell, fn)  # the cell too: cached_lookup's check
    return fn


def cached_lookup(lookup: Callable[[], R], V: type[R], F: Any, tt: tuple[type, ...], key: Any) -> R:
    """Run ``lookup()`` and remember its result per (``lookup.__code__``, ``F``, ``tt``,
    ``type(key)``, ``V``), reusing it while the task's world and ``key`` are the same.

    Equivalent to ``specialize(lookup, V, F, tt, type(key))(key, lookup)``.
    """
    try:
        cell, fn = _specializations[id(lookup.__code__), id(F), tt, type(key), V]
    except (KeyError, TypeError, AttributeError):  # a first call, or bad arguments
        return specialize(lookup, V, F, tt, type(key))(key, lookup)  # type: ignore[no-any-return]
    # fn's first check, without its call (a frame, about 440 instructions): the newest entry
    # stored under this very world and key.
    w, k, r = cell[0]
    if w is _task()[1] and k is key:
        return r  # type: ignore[no-any-return]
    return fn(key, lookup)  # type: ignore[no-any-return]
