# Generated from templates/opencl_entry.py.j2 by tools/regen_generated.py; do not edit.
def opencl_entry_Struct_x_f4_y_f4_z_f4_w_f4_Array_np_float32(linked, miss, mismatch, unknown):
    """Bind this signature's launch path to one linked kernel: ``(run, front, host, where_of)``."""
    _take = linked.pool.pop
    _give = linked.pool.append
    _new = linked.new_record
    _ctx = linked.context_ptr

    def run(params, global_size, local_size, global_offset, wait_for, queue, ):
        # The slow path's launch: every argument was typed, captured values come first.
        a0, a1, = params
        try:
            k = _take()
        except IndexError:
            k = _new()
        t = k[5]  # the 1-tuple this record last made of an int size
        if global_size is t[0] and local_size is None and global_offset is None:
            global_size = t
        elif global_size.__class__ is int and global_size > 0 and local_size is None and global_offset is None:
            global_size = k[5] = (global_size,)
        else:
            try:
                global_size, local_size, global_offset = _sizes(global_size, local_size, global_offset)
            except BaseException as e:
                _give(k)
                error = _size_error(linked, e)
                if error is None:
                    raise
                raise error from None
        try:
            k[1](0, a0)
            if k[4]() is not a1:
                if a1.offset or not a1.flags.forc or a1.context.int_ptr != _ctx:
                    _bad_array(linked, 1, a1)
                k[4] = _nothing
                k[0](1, a1.base_data)
                k[4] = _ref(a1)
            return _enqueue(queue, k[2], global_size, local_size, global_offset, wait_for)
        except _FAILURES as e:
            error = _failed(linked, (a0, a1, ), e, global_size, local_size)
            if error is None:
                raise
            raise error from None
        finally:
            _give(k)


    def front(_w, _where, _kw, _F, _other, _next, _options):
        # A kernel's front entry, bound to the world, where and compiler kwargs of the
        # lookup it holds, and to its kernel or kernel instance type weakly (_F, a weak
        # reference: a where's table keeps entries, and must not keep their kernels). Another
        # where goes to the kernel's entry for that where (_other(F, where): its newest there,
        # or None), which checks everything again; arguments of other types go to _next, the
        # entry of the same world, where and kwargs this one replaced (None: none); anything
        # else is a miss. What only those paths use is one tuple, _cold: CPython copies each
        # variable a closure reads into its frame on every call.
        _cold = (miss, _other, _next)

        def entry(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw):
            if queue is None:
                queue = _default_queue[0]
            if _w != _TASK()[0] or queue is not _where or kw or options is not _options and options != _options:
                miss_, other_, _ = _cold
                if queue is not _where:  # the kernel's entry for that where, if it has one
                    e = other_(f, queue)
                    if e is not None:
                        return e(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw)
                return miss_(f, args, (global_size, local_size, global_offset, wait_for, queue, options, ), kw)
            try:
                a0, a1, = args
            except ValueError:
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw)
                return miss_(f, args, (global_size, local_size, global_offset, wait_for, queue, options, ), kw)
            if not ((a0.__class__ is _C0 or a0.__class__ is _ndarray and not a0.shape) and a0.dtype == _D0 and a1.__class__ is _C1 and (a1.dtype is _D1 or a1.dtype == _D1)):  # (args, not a guard's rebinding of an argument)
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw)
                return miss_(f, args, (global_size, local_size, global_offset, wait_for, queue, options, ), kw)
            try:
                k = _take()
            except IndexError:
                k = _new()
            t = k[5]  # the 1-tuple this record last made of an int size
            if global_size is t[0] and local_size is None and global_offset is None:
                global_size = t
            elif global_size.__class__ is int and global_size > 0 and local_size is None and global_offset is None:
                global_size = k[5] = (global_size,)
            else:
                try:
                    global_size, local_size, global_offset = _sizes(global_size, local_size, global_offset)
                except BaseException as e:
                    _give(k)
                    error = _size_error(linked, e)
                    if error is None:
                        raise
                    raise error from None
            try:
                k[1](0, a0)
                if k[4]() is not a1:
                    if a1.offset or not a1.flags.forc or a1.context.int_ptr != _ctx:
                        _bad_array(linked, 1, a1)
                    k[4] = _nothing
                    k[0](1, a1.base_data)
                    k[4] = _ref(a1)
                return _enqueue(queue, k[2], global_size, local_size, global_offset, wait_for)
            except _FAILURES as e:
                error = _failed(linked, (a0, a1, ), e, global_size, local_size)
                if error is None:
                    raise
                raise error from None
            finally:
                _give(k)

        return entry

    def host(f, where):
        # A HostKernel's call, bound to its kernel (or kernel instance) and where by closure:
        # the HostKernel, a partial of it, binds no arguments, so a call need not join two
        # argument tuples (CPython 3.10 and 3.11 call a partial subclass with a tuple).
        def call(*args, global_size=_REQUIRED, local_size=None, global_offset=None, wait_for=None, queue=None, **kw):
            # the arguments must have the types it was looked up for
            if kw:
                unknown(kw)
            if queue is None:
                queue = where
            elif queue is not where:
                queue = _same_context(linked, queue)
            try:
                a0, a1, = args
            except ValueError:
                return mismatch(linked, f, args, (global_size, local_size, global_offset, wait_for, queue, ))
            if not ((a0.__class__ is _C0 or a0.__class__ is _ndarray and not a0.shape) and a0.dtype == _D0 and a1.__class__ is _C1 and (a1.dtype is _D1 or a1.dtype == _D1)):
                return mismatch(linked, f, args, (global_size, local_size, global_offset, wait_for, queue, ))
            try:
                k = _take()
            except IndexError:
                k = _new()
            t = k[5]  # the 1-tuple this record last made of an int size
            if global_size is t[0] and local_size is None and global_offset is None:
                global_size = t
            elif global_size.__class__ is int and global_size > 0 and local_size is None and global_offset is None:
                global_size = k[5] = (global_size,)
            else:
                try:
                    global_size, local_size, global_offset = _sizes(global_size, local_size, global_offset)
                except BaseException as e:
                    _give(k)
                    error = _size_error(linked, e)
                    if error is None:
                        raise
                    raise error from None
            try:
                k[1](0, a0)
                if k[4]() is not a1:
                    if a1.offset or not a1.flags.forc or a1.context.int_ptr != _ctx:
                        _bad_array(linked, 1, a1)
                    k[4] = _nothing
                    k[0](1, a1.base_data)
                    k[4] = _ref(a1)
                return _enqueue(queue, k[2], global_size, local_size, global_offset, wait_for)
            except _FAILURES as e:
                error = _failed(linked, (a0, a1, ), e, global_size, local_size)
                if error is None:
                    raise
                raise error from None
            finally:
                _give(k)


        return call

    def where_of(global_size, local_size, global_offset, wait_for, queue, ):
        # What the `where` block gives for these launch options: a miss checks that a
        # front entry published for them would recognize them (Launcher._publish).
        if queue is None:
            queue = _default_queue[0]
        return queue

    return run, front, host, where_of
