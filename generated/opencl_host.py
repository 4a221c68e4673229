# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_host(
    hk, /, *args, global_size=_OPTIONS[0], local_size=_OPTIONS[1], global_offset=_OPTIONS[2],
    wait_for=_OPTIONS[3], queue=_OPTIONS[4], **kw
):
    if kw or _FORK[0] is not None:  # compiler kwargs (the lookup's), or a fork: refused
        _refuse(hk, kw)
    if queue is None:
        queue, where = hk.queue, hk.where
    else:
        where = _where(queue)
    if where is not hk.where:
        raise _other_where(hk, where)
    try:
        return hk.invoke(hk.f, args, global_size, local_size, global_offset, wait_for, queue)
    except _Missed:  # arguments of other types than it was looked up for
        pass
    return _mismatch(hk, args, (global_size, local_size, global_offset, wait_for, queue))
