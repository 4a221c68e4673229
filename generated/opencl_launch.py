# Generated from templates/launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_launch(f, /, *args, global_size, local_size=None, global_offset=None, wait_for=None, queue=None, options=_NOTHING, **compiler_kwargs):
    try:
        entry = f._opencl_front
    except AttributeError:  # (the miss is called outside the handler: its errors chain nothing)
        entry = None
    if entry is None:
        return _miss(f, args, (global_size, local_size, global_offset, wait_for, queue, options, ), compiler_kwargs)
    return entry(f, args, global_size, local_size, global_offset, wait_for, queue, options, compiler_kwargs)
