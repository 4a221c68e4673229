# Generated from templates/launch.py.j2 by tools/regen_generated.py; do not edit.
def cuda_launch(f, /, *args, grid, block, stream=None, shared_mem=0, cooperative=False, **compiler_kwargs):
    try:
        entry = f._cuda_front
    except AttributeError:  # (the miss is called outside the handler: its errors chain nothing)
        entry = None
    if entry is None:
        return _miss(f, args, (grid, block, stream, shared_mem, cooperative, ), compiler_kwargs)
    return entry(f, args, grid, block, stream, shared_mem, cooperative, compiler_kwargs)
