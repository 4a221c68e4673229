"""Queues and contexts: the default queue (PoCL's CPU device) and each context's key, the
*where* of a launch (what decides the code: the context; the queue comes from the launch)."""

from __future__ import annotations

import atexit
import weakref
from typing import Any

import pyopencl as cl

from ...launching import forget, use_device
from ...locks import new_lock
from .. import _pyopencl_private as _private

#: (the default queue, its context's key), read by every launch given no queue; (None,
#: None) until the first launch, or default_queue(), makes it
default_where: list[tuple[cl.CommandQueue | None, Any]] = [(None, None)]
_default_lock = new_lock(reentrant=False)


def check_fork() -> None:
    """Record that this process uses the OpenCL device, or raise the fork error in a fork of
    one that did: first, on every path that reaches a device."""
    use_device("opencl")


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
        "`pip install pocl-binary-distribution` (or the [opencl] extra: "
        "`pip install -e '.[opencl]'` in a checkout), "
        "or pick a queue with specializer.backends.opencl.set_default_queue(queue)"
    )


def default_queue() -> cl.CommandQueue:
    """The queue launches use when given none: the one set with :func:`set_default_queue`,
    else a queue on PoCL's CPU device (created on first use, then kept). In a fork of a
    process that used the device, the fork error (see :func:`launch`)."""
    return first_default()[0]


def first_default() -> tuple[cl.CommandQueue, ContextKey]:
    """The default queue and its where, the queue made on first use."""
    check_fork()  # using a queue is using the device
    queue, where = default_where[0]
    if queue is None:
        with _default_lock():
            queue, where = default_where[0]
            if queue is None:
                queue = cl.CommandQueue(cl.Context([_pocl_cpu_device()]))
                where = context_key(queue)
                default_where[0] = (queue, where)
    return queue, where


def set_default_queue(queue: cl.CommandQueue | None) -> None:
    """Make launches given no queue use ``queue`` (``None``: a queue on PoCL's CPU device)."""
    default: tuple[cl.CommandQueue | None, Any] = (None, None)
    if queue is not None:
        if not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"expected a pyopencl.CommandQueue or None, got {queue!r}")
        check_fork()  # a queue of the user's is a device in use
        default = (queue, context_key(queue))
    with _default_lock():
        default_where[0] = default


def finish_default_queue() -> None:
    """Finish what was enqueued on the default queue the library made, and drop it: at exit,
    before the interpreter's (and the C library's) exit handlers run, so no device thread is
    still working for it then."""
    with _default_lock():
        queue = default_where[0][0]
        default_where[0] = (None, None)
    if queue is not None:
        try:
            queue.finish()
        except cl.Error:
            pass


atexit.register(finish_default_queue)


class ContextKey:
    """What lookups and launch cells key on for one context, compared by identity. It holds
    the context weakly, through the context objects pyopencl gives the queues it was seen with
    (each lives as long as its queue); when the last dies the context is forgotten (what was
    linked for it dropped) and a later queue of it gets a new key."""

    __slots__ = ("__weakref__", "arg_info", "key", "name", "ptr", "refs")

    def __init__(self, context: cl.Context) -> None:
        self.ptr = context.int_ptr
        self.name = repr(context)
        self.key = (self, ())  # the lookup key with no build options
        self.refs: dict[int, weakref.ref[cl.Context]] = {}  # by the context objects' ids
        #: whether every device of the context takes -cl-kernel-arg-info (asked once)
        self.arg_info: bool | None = None

    def context(self) -> cl.Context | None:
        """A live object of the context (None once every queue it was seen with is gone)."""
        for ref in list(self.refs.values()):
            ctx = ref()
            if ctx is not None:
                return ctx
        return None

    def __repr__(self) -> str:
        return f"<context key of {self.name}>"

    def __str__(self) -> str:
        return self.name


#: each live context's key, by its cl_context address
_context_keys: dict[int, ContextKey] = {}
#: each live context object seen (a queue's own), by id: (a weak reference to it, its key)
_seen: dict[int, tuple[weakref.ref[cl.Context], ContextKey]] = {}
_keys_lock = new_lock(reentrant=False)


def context_key(queue: cl.CommandQueue) -> ContextKey:
    """The key of ``queue``'s context: a launch's where. A ``TypeError`` for anything but a
    queue."""
    try:
        ctx = _private.queue_context(queue)  # the queue's own context object: dies with it
    except AttributeError:  # not read yet on this queue, or not a queue
        if not isinstance(queue, cl.CommandQueue):
            raise TypeError(f"queue must be a pyopencl.CommandQueue, got {queue!r}") from None
        ctx = queue.context
    seen = _seen.get(id(ctx))
    if seen is not None and seen[0]() is ctx:
        return seen[1]
    return _first_seen(ctx)


def _first_seen(ctx: cl.Context) -> ContextKey:
    """The key of a context object not seen before (the context's, made if it is new), which
    is then held weakly, once: _release hears of its death before its id can be another's."""
    with _keys_lock():
        ck = _context_keys.get(ctx.int_ptr)
        if ck is None:
            ck = _context_keys[ctx.int_ptr] = ContextKey(ctx)
        ref = ck.refs.get(id(ctx))
        if ref is None or ref() is not ctx:
            ref = ck.refs[id(ctx)] = weakref.ref(ctx)
            weakref.finalize(ctx, _release, ck, id(ctx))
        _seen[id(ctx)] = (ref, ck)
    return ck


def _release(ck: ContextKey, ctx_id: int) -> None:
    """A queue the context key was seen with is gone; when it was the last, so is the context.
    From the collector in any thread, no lock: each step is one atomic dict operation, and a
    race can only forget a context still in use, which then links again under a new key."""
    ck.refs.pop(ctx_id, None)
    seen = _seen.get(ctx_id)
    if seen is not None and seen[1] is ck:
        _seen.pop(ctx_id, None)
    if not ck.refs:
        if _context_keys.get(ck.ptr) is ck:
            _context_keys.pop(ck.ptr, None)
        # the context is gone: so is what was built and linked for it, pools included
        for linked in forget(ck):
            linked.pool.clear()  # a launch still running with it takes a new kernel object
