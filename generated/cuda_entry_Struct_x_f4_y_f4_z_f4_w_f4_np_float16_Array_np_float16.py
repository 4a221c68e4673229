# Generated from templates/cuda_entry.py.j2 by tools/regen_generated.py; do not edit.
def cuda_entry_Struct_x_f4_y_f4_z_f4_w_f4_np_float16_Array_np_float16(linked, miss, mismatch, unknown):
    """Bind this signature's launch path to one linked kernel: ``(run, front, host, where_of)``."""
    _function = linked.function

    def run(params, grid, block, stream, shared_mem, cooperative, ):
        # The slow path's launch: every argument was typed, captured values come first.
        a0, a1, a2, = params
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


    def front(_w, _where, _kw, _F, _other, _next):
        # A kernel's front entry, bound to the world, where and compiler kwargs of the
        # lookup it holds, and to its kernel or kernel instance type weakly (_F, a weak
        # reference: a where's table keeps entries, and must not keep their kernels). Another
        # where goes to the kernel's entry for that where (_other(F, where): its newest there,
        # or None), which checks everything again; arguments of other types go to _next, the
        # entry of the same world, where and kwargs this one replaced (None: none); anything
        # else is a miss. What only those paths use is one tuple, _cold: CPython copies each
        # variable a closure reads into its frame on every call.
        _cold = (miss, _other, _next)

        def entry(f, args, grid, block, stream, shared_mem, cooperative, kw):
            where = _local.key
            if _w != _TASK()[0] or where is not _where or (kw or _kw) and kw != _kw:
                miss_, other_, _ = _cold
                if where is not _where:  # the kernel's entry for that where, if it has one
                    e = other_(f, where)
                    if e is not None:
                        return e(f, args, grid, block, stream, shared_mem, cooperative, kw)
                return miss_(f, args, (grid, block, stream, shared_mem, cooperative, ), kw)
            try:
                a0, a1, a2, = args
            except ValueError:
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(f, args, grid, block, stream, shared_mem, cooperative, kw)
                return miss_(f, args, (grid, block, stream, shared_mem, cooperative, ), kw)
            if not ((a0.__class__ is _C0 or a0.__class__ is _ndarray and a0.size == 1) and a0.dtype == _D0 and a1.__class__ is _C1 and (a2.__class__ is _C2 and (a2 := a2.ptr) is not None or a2.__class__ in _CAI and (d2 := a2.__cuda_array_interface__)["typestr"] == _D2 and d2.get("strides") is None and ("mask" not in d2 or d2["mask"] is None) and (a2 := d2["data"][0]) is not None or (r2 := _R.get(a2.__class__)) is not None and (a2 := r2(a2, _D2)) is not None)):  # (args, not a guard's rebinding of an argument)
                miss_, _, next_ = _cold
                if next_ is not None:
                    return next_(f, args, grid, block, stream, shared_mem, cooperative, kw)
                return miss_(f, args, (grid, block, stream, shared_mem, cooperative, ), kw)
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
        # A HostKernel's call, bound to its kernel (or kernel instance) and where by closure:
        # the HostKernel, a partial of it, binds no arguments, so a call need not join two
        # argument tuples (CPython 3.10 and 3.11 call a partial subclass with a tuple).
        def call(*args, grid=_REQUIRED, block=_REQUIRED, stream=None, shared_mem=0, cooperative=False, **kw):
            # the arguments must have the types it was looked up for
            if kw:
                unknown(kw)
            try:
                a0, a1, a2, = args
            except ValueError:
                return mismatch(linked, f, args, (grid, block, stream, shared_mem, cooperative, ))
            if not ((a0.__class__ is _C0 or a0.__class__ is _ndarray and a0.size == 1) and a0.dtype == _D0 and a1.__class__ is _C1 and (a2.__class__ is _C2 and (a2 := a2.ptr) is not None or a2.__class__ in _CAI and (d2 := a2.__cuda_array_interface__)["typestr"] == _D2 and d2.get("strides") is None and ("mask" not in d2 or d2["mask"] is None) and (a2 := d2["data"][0]) is not None or (r2 := _R.get(a2.__class__)) is not None and (a2 := r2(a2, _D2)) is not None)):
                return mismatch(linked, f, args, (grid, block, stream, shared_mem, cooperative, ))
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


        return call

    def where_of(grid, block, stream, shared_mem, cooperative, ):
        # What the `where` block gives for these launch options: a miss checks that a
        # front entry published for them would recognize them (Launcher._publish).
        where = _local.key
        return where

    return run, front, host, where_of
