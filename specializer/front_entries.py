"""A kernel's front entries as a miss sees them: the chain its newest entry keeps, and the
guards of an entry checked against the arguments of the launch that missed.

A new entry for the world, where and compiler kwargs of the one it replaces calls that one
next when the arguments fail its guards, up to :data:`CHAIN` entries (argument types that
alternate do not miss). The newest entry also keeps, as ``alternates``, up to ``CHAIN - 1``
entries for other compiler kwargs, which a miss tries first (kwargs that alternate do not
miss either). See ``docs/reference-backend.md`` ("Cached state").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .types import type_name

if TYPE_CHECKING:
    from .launching import Launcher

#: a kernel launched with arguments of up to this many types in turn, or with up to this
#: many sets of compiler kwargs in turn (each with its types), does not miss
CHAIN = 4


class Tried(dict):  # type: ignore[type-arg]
    """The compiler kwargs a miss passes to an entry it tries for them (:func:`alternate`):
    equal to them, and telling that entry's own miss, if it comes, to take the slow path."""

    __slots__ = ()


def alternate(newest: Any, w: int, lifted: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """The entry ``newest`` keeps for world ``w`` and these compiler kwargs, or None; the
    entry checks the where and the arguments itself."""
    for entry in getattr(newest, "alternates", ()):
        made = entry.chain
        if made[0] == w and made[3] == lifted and made[2] == kw:
            return entry
    return None


def new_entry(
    front: Any, prev: Any, F_ref: Any, other: Any, w: Any, where: Any, kw: Any, lifted: Any
) -> Any:
    """A new front entry from ``front`` in the place of ``prev`` (the kernel's newest, or
    None): chained to the entry of the same kwargs it replaces, keeping those of other
    kwargs. ``prev`` then keeps none."""
    made = getattr(prev, "chain", None)
    same: Any = None
    depth, alternates = 0, ()
    if made is not None and made[1] is where and made[0] == w:
        if made[2:4] == (kw, lifted):  # arguments of other types: its _next
            same, alternates = prev, prev.alternates
        else:  # other kwargs: kept, with those before, for a miss to try
            same = next((e for e in prev.alternates if e.chain[2:4] == (kw, lifted)), None)
            others = (e for e in prev.alternates if e is not same)
            alternates = (prev, *others)[: CHAIN - 1]
        depth = 0 if same is None else same.chain[4] + 1
    chained = same if 0 < depth < CHAIN else None
    entry = front(w, where, kw, F_ref, other, chained, *lifted)
    entry.chain = (w, where, kw, lifted, depth % CHAIN)  # what the next one compares
    entry.alternates = alternates  # the newest entry's only: what alternate() tries
    if made is not None:  # no longer the newest: keeps none (so none pile up)
        prev.alternates = ()
    return entry


def guards_pass(launcher: Launcher, args: tuple[Any, ...], front: Any) -> bool:
    """Whether ``args`` pass the core's guards of the entries ``front`` makes. A value of a
    subclass (an ``IntEnum`` for ``Weak[int]``) does not: guards compare classes by
    identity, so such a launch takes the slow path. A ``guard_of`` giving a class or dtype
    no argument has, which would make every launch miss, is a ``TypeError`` naming it."""
    passed = True
    guards = front.func.__globals__["_GUARDS"]  # (front: a partial of the generated bind)
    for a, (t, kind, cls, dtype) in zip(args, guards):
        if kind != "cls" and kind != "cls_dtype":
            continue  # a back-end's own kind: its template's check
        if kind == "cls_dtype" and not (a.dtype is dtype or a.dtype == dtype):
            raise _guard_error(launcher, t, f"dtype {dtype!r}", f"{a.dtype!r}", "t.dtype")
        if a.__class__ is not cls:
            if not isinstance(cls, type) or issubclass(cls, launcher.definitions.argtypes):
                what = "the class of the values typeof maps to it"
                raise _guard_error(launcher, t, f"class {cls!r}", type_name(a.__class__), what)
            passed = False
    return passed


def _guard_error(launcher: Launcher, t: type, returned: str, actual: str, fix: str) -> TypeError:
    return TypeError(
        f"back-end {launcher.name!r}: guard_of({type_name(t)}) returned {returned}, which no "
        f"argument of type {type_name(t)} has (this one's is {actual}): the guard of every "
        f"front entry for it would fail, and every {launcher.launch_name} would take the slow "
        f"path. Return {fix} (see docs/backend.md, 'Guards')"
    )
