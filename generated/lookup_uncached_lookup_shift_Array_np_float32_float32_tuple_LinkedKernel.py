# Generated from templates/lookup.py.j2 by tools/regen_generated.py; do not edit.
def lookup_uncached_lookup_shift_Array_np_float32_float32_tuple_LinkedKernel(
    key, lookup, _task=None, _cell=None
):
    # The task's world, by value: the latest world, or None where the slow path decides
    # (the task is pinned, a compile hook is active, precompile output is on).
    w = _task()[0]
    e = _cell[0]
    if (e[0] is w or e[0] == w) and (e[1] is key or e[1] == key):
        return e[2]
    if (e[3] is w or e[3] == w) and (e[4] is key or e[4] == key):
        return e[5]
    if (e[6] is w or e[6] == w) and (e[7] is key or e[7] == key):
        return e[8]
    if (e[9] is w or e[9] == w) and (e[10] is key or e[10] == key):
        return e[11]
    return _miss(key, lookup)
