# Generated from templates/opencl_entry.py.j2 by tools/regen_generated.py; do not edit.
# the fields of a pool record (LinkedKernel.new_record)
(SET_ARG, SET_BUF, KERNEL, LAST0, LAST1, SIZE) = range(6)


def opencl_entry_Array_np_float32_np_float32(
    linked, mismatch, unknown, fork
):
    """This signature's launch path for one linked kernel: ``(bind, host, where_of)``."""
    _take = linked.pool.pop
    _give = linked.pool.append
    _new = linked.new_record
    _ctx = linked.context_ptr

    def bind(miss, _w, _where, _kw, _F, _other, _next, _options):
        # A front entry: bound to the world, where and compiler kwargs of its lookup, and
        # weakly to its kernel (_F). Another where goes to _other, other argument types to
        # _next (the entry it replaced), anything else to miss. With _w None it goes on at
        # once: a HostKernel's binding (miss: its mismatch) and the slow path's (miss None).
        # What only those paths use is one tuple, _cold: CPython copies each variable a
        # closure reads into the frame on every call.
        _cold = (miss, _other, _next)

        def entry(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw):
            if queue is None:
                queue = _default_queue[0]
            if (
                queue is not _where
                or _w != _TASK()[0]
                or kw
                or options is not _options and options != _options
            ) and _w is not None:  # (None: a HostKernel's or the slow path's: they go on)
                miss_, other_, _ = _cold
                if queue is not _where:  # the kernel's entry for that where, if it has one
                    e = other_(f, queue)
                    if e is not None:
                        return e(
                            f, args, global_size, local_size, global_offset, wait_for, queue,
                            options, kw
                        )
                return miss_(
                    f, args, (global_size, local_size, global_offset, wait_for, queue, options), kw
                )
            try:
                a0, a1 = args
            except ValueError:  # another number of arguments: no guard takes _NOTHING
                a0 = _NOTHING
            if not (  # (args below, not what a guard may have rebound an argument to)
                a0.__class__ is _C0 and (a0.dtype is _D0 or a0.dtype == _D0)
                and a1.__class__ is _C1
            ):
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(
                        f, args, global_size, local_size, global_offset, wait_for, queue, options,
                        kw
                    )
                if miss_ is not None:
                    return miss_(
                        f, args, (global_size, local_size, global_offset, wait_for, queue, options),
                        kw
                    )
                a0, a1 = args
                if a1.__class__ is not _S1:  # a subclass: not recorded
                    a1 = _S1(a1)
            try:
                k = _take()
            except IndexError:
                k = _new()
            (set_arg, set_buf, kernel, last0, last1, size) = k
            if global_size is size[0] and local_size is None and global_offset is None:
                global_size = size  # the 1-tuple this record made of this very int
            elif (
                local_size is None
                and global_offset is None
                and global_size.__class__ is int
                and global_size > 0
            ):
                global_size = k[SIZE] = (global_size,)
            else:
                try:
                    global_size, local_size, global_offset = _sizes(
                        global_size, local_size, global_offset
                    )
                except BaseException as e:
                    _give(k)
                    error = _size_error(linked, e)
                    if error is None:
                        raise
                    raise error from None
            try:
                if last0() is not a0:  # not the array set last (a weak reference)
                    if a0.offset or not a0.flags.forc or a0.context.int_ptr != _ctx:
                        _bad_array(linked, 0, a0)
                    k[LAST0] = _nothing
                    set_arg(0, a0.base_data)
                    k[LAST0] = _ref(a0)
                if last1 is not a1:  # its own bytes
                    k[LAST1] = _nothing
                    set_buf(1, a1)
                    k[LAST1] = a1
                return _enqueue(queue, kernel, global_size, local_size, global_offset, wait_for)
            except _FAILURES as e:
                values = (a0, a1)
                error = _failed(linked, values, e, global_size, local_size)
                if error is None:
                    raise
                raise error from None
            finally:
                _give(k)

        return entry

    def host(f, where):
        # A HostKernel's call, bound to its kernel (or kernel instance) and where: an entry
        # that runs the lookup it was made from, whatever the world or the default where.
        entry = bind(mismatch, None, _NOTHING, None, None, None, None, _NOTHING)

        def call(
            _hk, *args, global_size=_REQUIRED, local_size=None, global_offset=None, wait_for=None,
            queue=None, **kw
        ):
            if kw:
                unknown(kw)
            if fork[0] is not None:  # a fork of the process that used the device: refused
                fork[0]()
            if queue is None:
                queue = where
            elif queue is not where:
                queue = _same_context(linked, queue)
            return entry(
                f, args, global_size, local_size, global_offset, wait_for, queue, _NOTHING, kw
            )

        return call

    def where_of(global_size, local_size, global_offset, wait_for, queue):
        # What the `where` block gives for these launch options: a miss checks that a
        # front entry published for them would recognize them (Launcher._publish).
        if queue is None:
            queue = _default_queue[0]
        return queue

    return bind, host, where_of
