# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_invoker_Struct_x_f4_y_f4_z_f4_w_f4_Array_np_float32(linked):
    # This signature's invoker, bound to one linked kernel.
    # the fields of a pool record (LinkedKernel.new_record)
    (SET_ARG, SET_BUF, KERNEL, LAST0, LAST1, SIZE) = range(6)
    _take = linked.pool.pop
    _give = linked.pool.append
    _new = linked.new_record
    _ctx = linked.context_ptr

    def invoke(f, args, global_size, local_size, global_offset, wait_for, queue, _checked=False):
        try:
            a0, a1 = args
        except (TypeError, ValueError):  # another number of arguments, or not an instance
            raise _Missed from None
        if not (
            (a0.__class__ is _C0 or a0.__class__ is _ndarray and not a0.shape)
            and a0.dtype == _D0
            and a1.__class__ is _C1 and (a1.dtype is _D1 or a1.dtype == _D1)
        ):
            if not _checked:
                raise _Missed
            # typed by the slow path (values of subclasses): as given
            a0, a1 = args
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
            set_buf(0, a0)
            if last1() is not a1:  # not the array set last (a weak reference)
                if a1.offset or not a1.flags.forc or a1.context.int_ptr != _ctx:
                    _bad_array(linked, 1, a1)
                k[LAST1] = _nothing
                set_arg(1, a1.base_data)
                k[LAST1] = _ref(a1)
            return _enqueue(queue, kernel, global_size, local_size, global_offset, wait_for)
        except _FAILURES as e:
            values = (a0, a1)
            error = _failed(linked, values, e, global_size, local_size, wait_for)
            if error is None:
                raise
            raise error from None
        finally:
            _give(k)

    return invoke
