# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_invoker_Buffer_LocalMemory_Weak_int(linked):
    # This signature's invoker, bound to one linked kernel.
    # the fields of a pool record (LinkedKernel.new_record)
    (SET_ARG, SET_BUF, KERNEL, LAST0, LAST1, LAST2, SIZE) = range(7)
    _take = linked.pool.pop
    _give = linked.pool.append
    _new = linked.new_record
    _ctx = linked.context_ptr

    def invoke(f, args, global_size, local_size, global_offset, wait_for, queue, _checked=False):
        try:
            a0, a1, a2 = args
        except (TypeError, ValueError):  # another number of arguments, or not an instance
            raise _Missed from None
        if not (
            a0.__class__ is _C0
            and a1.__class__ is _C1
            and a2.__class__ is _C2
        ):
            if not _checked:
                raise _Missed
            # typed by the slow path (values of subclasses): as given
            a0, a1, a2 = args
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
            set_arg(0, a0)
            s1 = a1.size
            if last1 != s1:
                k[LAST1] = _nothing
                set_arg(1, a1)
                k[LAST1] = s1
            if last2 is not a2:
                k[LAST2] = _nothing
                set_buf(2, _pack2(a2))
                if not _checked:  # (a value of a subclass: not kept)
                    k[LAST2] = a2
            return _enqueue(queue, kernel, global_size, local_size, global_offset, wait_for)
        except _FAILURES as e:
            values = (a0, a1, a2)
            error = _failed(linked, values, e, global_size, local_size, wait_for)
            if error is None:
                raise
            raise error from None
        finally:
            _give(k)

    return invoke
