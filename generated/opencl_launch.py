# Generated from templates/launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_launch(
    f, /, *args, global_size=_REQUIRED, local_size=None, global_offset=None, wait_for=None,
    queue=None, options=_NOTHING, **compiler_kwargs
):
    try:
        entry = f._opencl_front
    except AttributeError:  # no front entry yet, or not a kernel: the slow path (called
        entry = _first      # outside the handler, so its errors chain nothing)
    return entry(
        f, args, global_size, local_size, global_offset, wait_for, queue, options, compiler_kwargs
    )


def _first(f, args, global_size, local_size, global_offset, wait_for, queue, options, kw):
    # What a kernel without a front entry (or anything else) launches through.
    return _miss(f, args, (global_size, local_size, global_offset, wait_for, queue, options), kw)
