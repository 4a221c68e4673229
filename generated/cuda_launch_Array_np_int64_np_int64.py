# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_launch_Array_np_int64_np_int64(fun, grid, block, shared_mem, stream, args):
    (a0, a1, ) = args
    if grid.__class__ is int and grid > 0:
        gx, gy, gz = grid, 1, 1
    else:
        gx, gy, gz = _dim3(grid, "grid")
    if block.__class__ is int and block > 0:
        bx, by, bz = block, 1, 1
    else:
        bx, by, bz = _dim3(block, "block")
    s = _null if stream is None else _stream(stream)
    p0 = a0.ptr if a0.__class__ is _own0 else _pointer(a0)
    if a1.__class__ is int and not _lo <= a1 <= _hi:
        _overflow(fun, 1, a1)
    # A buffer of this thread's own until the driver has copied the values (when
    # cuLaunchKernel returns); concurrent launches take other buffers from the pool.
    try:
        b = _take()
    except IndexError:
        b = _new()
    try:
        v = b.values
        v.a0 = p0
        v.a1 = a1
        (err,) = _launch(fun.function, gx, gy, gz, bx, by, bz, shared_mem, s, b.address, 0)
    finally:
        _give(b)
    if err:
        _failed(err, fun, grid, block, shared_mem)
