# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_invoker_Array_np_float32_Weak_int(linked):
    # This signature's invoker, bound to one linked kernel.
    _function = linked.function
    _take, _give, _new = _pool(linked.tt)

    def invoke(f, args, grid, block, stream, shared_mem, cooperative, _checked=False):
        try:
            a0, a1 = args
        except (TypeError, ValueError):  # another number of arguments, or not an instance
            raise _Missed from None
        if not (
            (  # a CuArray; a foreign array by its interface; one a reader in _R knows
                a0.__class__ is _C0 and (a0 := a0.ptr) is not None
                or a0.__class__ in _CAI
                and (d0 := a0.__cuda_array_interface__)["typestr"] == _D0
                and d0.get("strides") is None
                and ("mask" not in d0 or d0["mask"] is None)
                and (a0 := d0["data"][0]) is not None
                or (r0 := _R.get(a0.__class__)) is not None
                and (a0 := r0(a0, _D0)) is not None
            )
            and a1.__class__ is _C1
        ):
            if not _checked:
                raise _Missed
            # typed by the slow path (values of subclasses): as given
            a0, a1 = args
            a0 = _X0(a0)
        if grid.__class__ is int and grid > 0:
            gx, gy, gz = grid, 1, 1
        else:
            gx, gy, gz = _dim3(grid, "grid")
        if block.__class__ is int and block > 0:
            bx, by, bz = block, 1, 1
        else:
            bx, by, bz = _dim3(block, "block")
        s = _null if stream is None else _stream(stream)
        if (a1 < _lo1 or a1 > _hi1) and a1 - a1 == 0:
            _overflow(linked, 1, a1)
        try:
            b = _take()
        except IndexError:
            b = _new()
        try:
            v = b.values
            v.a0 = a0
            v.a1 = a1
            if cooperative:
                _cooperative(linked, (gx, gy, gz), (bx, by, bz), shared_mem, s, b.address)
                err = 0
            else:
                (err,) = _launch(_function, gx, gy, gz, bx, by, bz, shared_mem, s, b.address, 0)
        finally:
            _give(b)
        if err:
            _failed(err, linked, grid, block, shared_mem)

    return invoke
