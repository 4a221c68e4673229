# Generated from templates/opencl_launch.py.j2 by tools/regen_generated.py; do not edit.
def opencl_launch_Array_np_float32(kernel, lock, set_arg, set_buf, bad_array):
    """Bind this signature's launcher to one built kernel object and the lock that guards it."""

    def launch(queue, global_size, local_size, params, _kernel=kernel, _lock=lock,
               _set_arg=set_arg, _set_buf=set_buf, _bad_array=bad_array, _enqueue=_enqueue):
        a0, = params
        if a0.offset or not a0.flags.forc:
            _bad_array(0, a0)
        # Setting the arguments and enqueueing is one step: another thread launching this
        # kernel object must not set its arguments in between.
        _lock.acquire()
        try:
            _set_arg(0, a0.base_data)
            return _enqueue(queue, _kernel, global_size, local_size)
        finally:
            _lock.release()

    return launch
