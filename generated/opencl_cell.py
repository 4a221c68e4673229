# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_cell(
    f, args, where, kw, global_size, local_size, global_offset, wait_for, queue, _cell=None
):
    # A launch its kernel's newest entry did not take: each older entry, then the slow path.
    w = _TASK()[0]
    for ew, ewh, ekw, invoke in _cell[1]:
        if ew is w and ewh is where and (not kw if ekw is None else ekw == kw):
            try:
                return invoke(f, args, global_size, local_size, global_offset, wait_for, queue)
            except _Missed:  # an argument of another type: another entry's
                pass
    return _miss(f, args, where, kw, (global_size, local_size, global_offset, wait_for, queue))
