# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_host(
    hk, /, *args, grid=_OPTIONS[0], block=_OPTIONS[1], stream=_OPTIONS[2], shared_mem=_OPTIONS[3],
    cooperative=_OPTIONS[4], **kw
):
    if kw or _FORK[0] is not None:  # compiler kwargs (the lookup's), or a fork: refused
        _refuse(hk, kw)
    where = hk.where
    if where is not hk.where:
        raise _other_where(hk, where)
    try:
        return hk.invoke(hk.f, args, grid, block, stream, shared_mem, cooperative)
    except _Missed:  # arguments of other types than it was looked up for
        pass
    return _mismatch(hk, args, (grid, block, stream, shared_mem, cooperative))
