# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_launch_np_float32_Array_np_float32_Array_np_float32(fun, grid, block, shared_mem, stream, args):
    (a0, a1, a2, ) = args
    if grid.__class__ is int and grid > 0:
        gx, gy, gz = grid, 1, 1
    else:
        gx, gy, gz = _dim3(grid, "grid")
    if block.__class__ is int and block > 0:
        bx, by, bz = block, 1, 1
    else:
        bx, by, bz = _dim3(block, "block")
    s = _null if stream is None else _stream(stream)
    p1 = a1.ptr if a1.__class__ is _own1 else _pointer(a1)
    p2 = a2.ptr if a2.__class__ is _own2 else _pointer(a2)
    # A buffer of this thread's own until the driver has copied the values (when
    # cuLaunchKernel returns); concurrent launches take other buffers from the pool.
    try:
        b = _take()
    except IndexError:
        b = _new()
    try:
        v = b.values
        v.a0 = a0
        v.a1 = p1
        v.a2 = p2
        (err,) = _launch(fun.function, gx, gy, gz, bx, by, bz, shared_mem, s, b.address, 0)
    finally:
        _give(b)
    if err:
        _failed(err, fun, grid, block, shared_mem)
