# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_launch(
    f, /, *args, global_size=_OPTIONS[0], local_size=_OPTIONS[1], global_offset=_OPTIONS[2],
    wait_for=_OPTIONS[3], queue=_OPTIONS[4], **kw
):
    if queue is None:
        queue, where = _default[0]
    else:
        where = _where(queue)
    try:
        w, wh, ekw, invoke = f._specializer_opencl_cell[0]  # the kernel's newest entry
    except AttributeError:  # never launched, or not a kernel: the slow path
        return _miss(f, args, where, kw, (global_size, local_size, global_offset, wait_for, queue))
    # A hit: the task's world (None where the slow path decides), the where and the compiler
    # kwargs its entry was made for; the invoker checks the arguments' types itself.
    if w is _TASK()[0] and wh is where and (not kw if ekw is None else ekw == kw):
        try:
            return invoke(f, args, global_size, local_size, global_offset, wait_for, queue)
        except _Missed:  # an argument of another type: another entry's
            pass
    return f._specializer_opencl_cell[2](
        f, args, where, kw, global_size, local_size, global_offset, wait_for, queue
    )
