# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_where(
    global_size=_OPTIONS[0], local_size=_OPTIONS[1], global_offset=_OPTIONS[2],
    wait_for=_OPTIONS[3], queue=_OPTIONS[4]
):
    if queue is None:
        queue, where = _default[0]
        if queue is None:  # no launch has made the default queue yet
            queue, where = _first_default()
    else:
        where = _where(queue)
    return where, (global_size, local_size, global_offset, wait_for, queue)
