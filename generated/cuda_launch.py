# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_launch(
    f, /, *args, grid=_OPTIONS[0], block=_OPTIONS[1], stream=_OPTIONS[2], shared_mem=_OPTIONS[3],
    cooperative=_OPTIONS[4], **kw
):
    where = _local.key
    try:
        w, wh, ekw, invoke = f._specializer_cuda_cell[0]  # the kernel's newest entry
    except AttributeError:  # never launched, or not a kernel: the slow path
        return _miss(f, args, where, kw, (grid, block, stream, shared_mem, cooperative))
    # A hit: the task's world (None where the slow path decides), the where and the compiler
    # kwargs its entry was made for; the invoker checks the arguments' types itself.
    if w is _TASK()[0] and wh is where and (not kw if ekw is None else ekw == kw):
        try:
            return invoke(f, args, grid, block, stream, shared_mem, cooperative)
        except _Missed:  # an argument of another type: another entry's
            pass
    return f._specializer_cuda_cell[2](
        f, args, where, kw, grid, block, stream, shared_mem, cooperative
    )
