# Generated from templates/cuda_entry.py.j2 by tools/regen_generated.py; do not edit.
def cuda_entry_Struct_x_f4_y_f4_z_f4_w_f4_np_float16_Array_np_float16(
    linked, mismatch, unknown, fork
):
    """This signature's launch path for one linked kernel: ``(bind, host, where_of)``."""
    _function = linked.function

    def bind(miss, _w, _where, _kw, _F, _other, _next):
        # A front entry: bound to the world, where and compiler kwargs of its lookup, and
        # weakly to its kernel (_F). Another where goes to _other, other argument types to
        # _next (the entry it replaced), anything else to miss. With _w None it goes on at
        # once: a HostKernel's binding (miss: its mismatch) and the slow path's (miss None).
        # What only those paths use is one tuple, _cold: CPython copies each variable a
        # closure reads into the frame on every call.
        _cold = (miss, _other, _next)

        def entry(f, args, grid, block, stream, shared_mem, cooperative, kw):
            where = _local.key
            if (
                where is not _where
                or _w != _TASK()[0]
                or (kw or _kw) and kw != _kw
            ) and _w is not None:  # (None: a HostKernel's or the slow path's: they go on)
                miss_, other_, _ = _cold
                if where is not _where:  # the kernel's entry for that where, if it has one
                    e = other_(f, where)
                    if e is not None:
                        return e(f, args, grid, block, stream, shared_mem, cooperative, kw)
                return miss_(f, args, (grid, block, stream, shared_mem, cooperative), kw)
            try:
                a0, a1, a2 = args
            except ValueError:  # another number of arguments: no guard takes _NOTHING
                a0 = _NOTHING
            if not (  # (args below, not what a guard may have rebound an argument to)
                (a0.__class__ is _C0 or a0.__class__ is _ndarray and a0.size == 1)
                    and a0.dtype == _D0
                and a1.__class__ is _C1
                and (  # a CuArray; a foreign array by its interface; one a reader in _R knows
                    a2.__class__ is _C2 and (a2 := a2.ptr) is not None
                    or a2.__class__ in _CAI
                    and (d2 := a2.__cuda_array_interface__)["typestr"] == _D2
                    and d2.get("strides") is None
                    and ("mask" not in d2 or d2["mask"] is None)
                    and (a2 := d2["data"][0]) is not None
                    or (r2 := _R.get(a2.__class__)) is not None
                    and (a2 := r2(a2, _D2)) is not None
                )
            ):
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(f, args, grid, block, stream, shared_mem, cooperative, kw)
                if miss_ is not None:
                    return miss_(f, args, (grid, block, stream, shared_mem, cooperative), kw)
                a0, a1, a2 = args
                if a2.__class__ is _own2:
                    a2 = a2.ptr
                else:
                    a2 = _pointer(a2)
            if grid.__class__ is int and grid > 0:
                gx, gy, gz = grid, 1, 1
            else:
                gx, gy, gz = _dim3(grid, "grid")
            if block.__class__ is int and block > 0:
                bx, by, bz = block, 1, 1
            else:
                bx, by, bz = _dim3(block, "block")
            s = _null if stream is None else _stream(stream)
            a1 = _half(a1)
            try:
                b = _take()
            except IndexError:
                b = _new()
            try:
                v = b.values
                _memmove(b.fields[0], a0.tobytes(), _n0)
                v.a1 = a1
                v.a2 = a2
                if cooperative:
                    _cooperative(linked, (gx, gy, gz), (bx, by, bz), shared_mem, s, b.address)
                    err = 0
                else:
                    (err,) = _launch(_function, gx, gy, gz, bx, by, bz, shared_mem, s, b.address, 0)
            finally:
                _give(b)
            if err:
                _failed(err, linked, grid, block, shared_mem)

        return entry

    def host(f, where):
        # A HostKernel's call, bound to its kernel (or kernel instance) and where: an entry
        # that runs the lookup it was made from, whatever the world or the default where.
        entry = bind(mismatch, None, _NOTHING, None, None, None, None)

        def call(
            _hk, *args, grid=_REQUIRED, block=_REQUIRED, stream=None, shared_mem=0,
            cooperative=False, **kw
        ):
            if kw:
                unknown(kw)
            if fork[0] is not None:  # a fork of the process that used the device: refused
                fork[0]()
            return entry(f, args, grid, block, stream, shared_mem, cooperative, kw)

        return call

    def where_of(grid, block, stream, shared_mem, cooperative):
        # What the `where` block gives for these launch options: a miss checks that a
        # front entry published for them would recognize them (Launcher._publish).
        where = _local.key
        return where

    return bind, host, where_of
