"""Queues and contexts: the default queue (PoCL's CPU device), a context's key, and what is
kept in each queue's table."""

from __future__ import annotations

import functools
import weakref
from typing import Any

import pyopencl as cl

from ... import launching
from ...locks import new_lock

#: the back-end's launcher, a hook :mod:`._launch` sets at import: it checks the fork
_launcher: launching.Launcher = None  # type: ignore[assignment]  # set by _launch

_default_queue: list[cl.CommandQueue | None] = [None]  # the default queue, read by the launch path
_default_lock = new_lock(reentrant=False)


def _pocl_cpu_device() -> cl.Device:
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    for p in platforms:
        if "portable computing language" in p.name.lower() or "pocl" in p.vendor.lower():
            try:
                devices = p.get_devices(device_type=cl.device_type.CPU)
            except cl.Error:
                continue
            if devices:
                return devices[0]
    found = ", ".join(p.name for p in platforms) or "none"
    raise RuntimeError(
        f"no PoCL CPU device found (OpenCL platforms: {found}): install it with "
        "`pip install pocl-binary-distribution` (or `pip install specializer[opencl]`), "
        "or pick a queue with specializer.backends.opencl.set_default_queue(queue)"
    )


def default_queue() -> cl.CommandQueue:
    """The queue launches use when given none: the one set with :func:`set_default_queue`,
    else a queue on PoCL's CPU device (created on first use, then kept). In a fork of a
    process that used the device, the fork error (see :func:`launch`)."""
    _launcher.check_fork()  # using a queue is using the device
    queue = _default_queue[0]
    if queue is None:
        with _default_lock():
            queue = _default_queue[0]
            if queue is None:
                queue = _default_queue[0] = cl.CommandQueue(cl.Context([_pocl_cpu_device()]))
    return queue


def set_default_queue(queue: cl.CommandQueue | None) -> None:
    """Make launches given no queue use ``queue`` (``None``: a queue on PoCL's CPU device)."""
    if queue is not None:
        if not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"expected a pyopencl.CommandQueue or None, got {queue!r}")
        _launcher.check_fork()  # a queue of the user's is a device in use
    with _default_lock():
        _default_queue[0] = queue


class _ContextKey:
    """What lookups key on for one context, compared by identity. It holds the context weakly,
    through the context object pyopencl gives each queue it was seen with (it lives as long as
    the queue); when the last dies the context is forgotten and a later queue gets a new key."""

    __slots__ = ("__weakref__", "key", "name", "ptr", "refs")

    def __init__(self, context: cl.Context) -> None:
        self.ptr = context.int_ptr
        self.name = repr(context)
        self.key = (self, ())  # with no build options
        self.refs: dict[int, weakref.ref[cl.Context]] = {}  # by the context objects' ids

    def context(self) -> cl.Context | None:
        """A live object of the context (None once every queue it was seen with is gone)."""
        for ref in list(self.refs.values()):
            ctx = ref()
            if ctx is not None:
                return ctx
        return None

    def __repr__(self) -> str:
        return f"<context key of {self.name}>"


class _QueueTables:
    """A queue's where tables, by launcher front attribute. A queue takes no weak reference nor
    attribute, so this is found by its id and tied weakly to its own context object (``owner``,
    which lives as long as the queue): a later queue with that id gets tables of its own."""

    __slots__ = ("__weakref__", "owner", "tables")

    def __init__(self, key: int, context: cl.Context) -> None:
        self.tables: dict[str, dict[object, object]] = {}
        self.owner = weakref.ref(context, functools.partial(_drop_tables, key, weakref.ref(self)))


def _drop_tables(key: int, tables: weakref.ref[_QueueTables], _: object) -> None:
    # the queue's context object died (so did the queue): from the collector, no lock; a
    # race with a new queue of that id can only drop the new one's tables (they fill again)
    if _queue_tables.get(key) is tables():
        _queue_tables.pop(key, None)


# Each live context's key, by its cl_context address; each live queue's tables, by its id.
_context_keys: dict[int, _ContextKey] = {}
_queue_tables: dict[int, _QueueTables] = {}
_keys_lock = new_lock(reentrant=False)


def queue_tables(queue: Any, make: bool) -> dict[str, dict[object, object]] | None:
    """The where tables kept for ``queue`` (made on first use when ``make``), or None."""
    t = _queue_tables.get(id(queue))
    try:
        context = queue.context  # the queue's own object: a dead queue's id gives another
    except AttributeError:  # not a queue
        return None
    if t is None or t.owner() is not context:
        if not make or not isinstance(queue, cl.CommandQueue):
            return None
        with _keys_lock():
            t = _queue_tables.get(id(queue))
            if t is None or t.owner() is not context:
                t = _queue_tables[id(queue)] = _QueueTables(id(queue), context)
    return t.tables


def _key(queue: cl.CommandQueue) -> tuple[_ContextKey, tuple[str, ...]]:
    if not isinstance(queue, cl.CommandQueue):
        raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}")
    ctx = queue.context  # the queue's own context object: it dies with the queue
    ck = _context_keys.get(ctx.int_ptr)
    ref = None if ck is None else ck.refs.get(id(ctx))
    if ref is None or ref() is not ctx:
        with _keys_lock():
            ck = _context_keys.get(ctx.int_ptr)
            if ck is None:
                ck = _context_keys[ctx.int_ptr] = _ContextKey(ctx)
            ref = ck.refs.get(id(ctx))
            # held weakly, once: _release hears of its death before its id can be another's
            if ref is None or ref() is not ctx:
                ck.refs[id(ctx)] = weakref.ref(ctx)
                weakref.finalize(ctx, _release, ck, id(ctx))
    assert ck is not None
    return ck.key


def _release(ck: _ContextKey, ctx_id: int) -> None:
    """A queue the context key was seen with is gone; when it was the last, so is the context.
    From the collector in any thread, no lock: each step is one atomic dict operation, and a
    race can only forget a context still in use, which then links again under a new key."""
    ck.refs.pop(ctx_id, None)
    if not ck.refs:
        if _context_keys.get(ck.ptr) is ck:
            _context_keys.pop(ck.ptr, None)
        # the context is gone: so is what was built and linked for it, pools included
        for linked in launching.forget(ck):
            linked.pool.clear()  # a launch still running with it takes a new kernel object
