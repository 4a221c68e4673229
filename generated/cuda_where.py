# Generated from templates/cuda_launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_where(
    grid=_OPTIONS[0], block=_OPTIONS[1], stream=_OPTIONS[2], shared_mem=_OPTIONS[3],
    cooperative=_OPTIONS[4]
):
    where = _local.key
    if where is None:  # no context made current through this back-end in this thread
        where = _current_key()
    return where, (grid, block, stream, shared_mem, cooperative)
