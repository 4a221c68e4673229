# Generated from templates/opencl_entry.py.j2 by tools/regen_generated.py; do not edit.
# the fields of a pool record (LinkedKernel.new_record)
(SET_ARG, SET_BUF, KERNEL, LAST0, LAST1, LAST2, SIZE) = range(7)


def opencl_entry_np_float32_Array_np_float32_Array_np_float32_captured_1(
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
                or f.__class__ is not _F()
            ) and _w is not None:  # (None: a HostKernel's or the slow path's: they go on)
                miss_, other_, _ = _cold
                if queue is not _where:  # the kernel's entry for that where, if it has one
                    e = other_(f.__class__, queue)
                    if e is not None:
                        return e(
                            f, args, global_size, local_size, global_offset, wait_for, queue,
                            options, kw
                        )
                return miss_(
                    f, args, (global_size, local_size, global_offset, wait_for, queue, options), kw
                )
            (a0,) = f.values
            try:
                a1, a2 = args
            except ValueError:  # another number of arguments: no guard takes _NOTHING
                a1 = _NOTHING
            if not (  # (args below, not what a guard may have rebound an argument to)
                a1.__class__ is _C1 and (a1.dtype is _D1 or a1.dtype == _D1)
                and a2.__class__ is _C2 and (a2.dtype is _D2 or a2.dtype == _D2)
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
                a1, a2 = args
            try:
                k = _take()
            except IndexError:
                k = _new()
            (set_arg, set_buf, kernel, last0, last1, last2, size) = k
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
                set_buf(0, a0)
                if last1() is not a1:  # not the array set last (a weak reference)
                    if a1.offset or not a1.flags.forc or a1.context.int_ptr != _ctx:
                        _bad_array(linked, 1, a1)
                    k[LAST1] = _nothing
                    set_arg(1, a1.base_data)
                    k[LAST1] = _ref(a1)
                if last2() is not a2:  # not the array set last (a weak reference)
                    if a2.offset or not a2.flags.forc or a2.context.int_ptr != _ctx:
                        _bad_array(linked, 2, a2)
                    k[LAST2] = _nothing
                    set_arg(2, a2.base_data)
                    k[LAST2] = _ref(a2)
                return _enqueue(queue, kernel, global_size, local_size, global_offset, wait_for)
            except _FAILURES as e:
                values = (a0, a1, a2)
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
