"""The private pyopencl attribute the OpenCL back-end uses still does what it was checked to do.

When one of these fails after a pyopencl upgrade, see specializer/backends/_pyopencl_private.py:
the attribute changed; check it against the new release and add that release to CHECKED, or
drop the attribute (the back-end then takes the public path, slower).
"""

from __future__ import annotations

import numpy as np
import pyopencl
import pyopencl.array as cla
import pytest

from specializer.backends import _pyopencl_private as private
from specializer.backends import opencl as cl


def _changed(what: str) -> str:
    return (
        f"pyopencl {pyopencl.VERSION_TEXT} changed {what}, which "
        f"specializer/backends/_pyopencl_private.py was checked to use with pyopencl "
        f"{', '.join(private.CHECKED)}"
    )


def test_kernel_set_arg_buf_still_sets_an_arguments_raw_bytes():
    queue = cl.default_queue()
    program = pyopencl.Program(
        queue.context, "__kernel void k(__global float *x, float v, int n) { x[0] = v + n; }"
    ).build()
    knl = pyopencl.Kernel(program, "k")
    assert private.SET_ARG_BUF == "_set_arg_buf", _changed("Kernel._set_arg_buf (it is gone)")
    x = cla.zeros(queue, 1, np.float32)
    knl.set_arg(0, x.base_data)
    try:
        private.set_arg_buf(knl)(1, np.float32(2.5))
        private.set_arg_buf(knl)(2, np.int32(4).tobytes())
        pyopencl.enqueue_nd_range_kernel(queue, knl, (1,), None)
    except Exception as e:  # pragma: no cover - only on a changed release
        pytest.fail(_changed(f"Kernel._set_arg_buf (it raised {e!r})"))
    assert x.get()[0] == 6.5, _changed("Kernel._set_arg_buf (it set other bytes)")


def test_the_checked_releases_include_the_installed_one():
    assert pyopencl.VERSION_TEXT in private.CHECKED, (
        f"pyopencl {pyopencl.VERSION_TEXT} is installed, but specializer/backends/"
        f"_pyopencl_private.py was checked against {', '.join(private.CHECKED)} only: run "
        "tests/test_pyopencl_private.py and tools/bench_launch.py, then add the release to CHECKED"
    )


def test_program_get_prg_still_gives_the_built_program_without_its_context():
    queue = cl.default_queue()
    program = pyopencl.Program(queue.context, "__kernel void k(__global float *x) { }").build()
    try:
        raw = private.raw_program(program)
    except AttributeError:  # pragma: no cover - only on a changed release
        pytest.fail(_changed("Program._get_prg (it is gone)"))
    assert raw.get_info(pyopencl.program_info.KERNEL_NAMES) == "k", _changed("Program._get_prg")
    assert not isinstance(raw, pyopencl.Program), _changed("Program._get_prg (it is the wrapper)")


NO_HOME_KERNEL = """
import os, pwd

def getpwuid(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")

pwd.getpwuid = getpwuid  # as for a uid with no passwd entry (HOME is unset)
import numpy as np
import pyopencl
import pyopencl.array as cla
from specializer.backends import _pyopencl_private as private

assert private.cache_off_without_home()
ctx = pyopencl.Context(pyopencl.get_platforms()[0].get_devices()[:1])
q = pyopencl.CommandQueue(ctx)
x = cla.zeros(q, 2, np.int32)
program = pyopencl.Program(ctx, "__kernel void k(__global int *x) { x[0] = 3; }").build()
pyopencl.Kernel(program, "k")(q, (1,), None, x.data)
print(x.get()[0])
"""


def test_pyopencl_no_cache_flag_still_turns_its_caches_off_after_its_import(
    tmp_path, tmp_path_factory
):
    import os
    import subprocess
    import sys

    assert isinstance(getattr(pyopencl, "_PYOPENCL_NO_CACHE", None), bool), _changed(
        "_PYOPENCL_NO_CACHE (it is gone)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    env.pop("PYOPENCL_NO_CACHE", None)
    env["POCL_CACHE_DIR"] = str(
        tmp_path_factory.mktemp("pocl")
    )  # not /tmp/pocl: see test_diskcache
    done = subprocess.run(
        [sys.executable, "-c", NO_HOME_KERNEL],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "3", _changed(
        f"_PYOPENCL_NO_CACHE (a Kernel with no home failed: {done.stderr[-800:]})"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_queue_has_a_context_object_of_its_own_that_lives_as_long_as_it():
    # What the OpenCL back-end ties a queue's where tables and context key to (_queues): not
    # an attribute it reads, but pyopencl's caching of `queue.context` (one object per queue).
    import gc
    import weakref

    q1 = cl.default_queue()
    q2 = pyopencl.CommandQueue(q1.context)
    assert q2.context is q2.context, _changed("CommandQueue.context (no longer one per queue)")
    assert q2.context is not q1.context, _changed("CommandQueue.context (shared by queues)")
    ref = weakref.ref(q2.context)
    del q2
    gc.collect()
    assert ref() is None, _changed("CommandQueue.context (it outlives its queue)")


def test_a_queue_still_caches_its_own_context_object_where_a_launch_reads_it():
    queue = pyopencl.CommandQueue(cl.default_queue().context)
    with pytest.raises(AttributeError):  # not read yet: the public path fills it
        private.queue_context(queue)
    ctx = queue.context
    try:
        cached = private.queue_context(queue)
    except AttributeError:  # pragma: no cover - only on a changed release
        pytest.fail(_changed(f"CommandQueue.{private.QUEUE_CONTEXT} (it is gone)"))
    assert cached is ctx and queue.context is ctx, _changed(
        f"CommandQueue.{private.QUEUE_CONTEXT} (it is not what queue.context returns)"
    )
    other = pyopencl.CommandQueue(ctx)
    assert other.context is not ctx  # each queue its own object: a where dies with its queue
    with pytest.raises(AttributeError):
        private.queue_context(object())  # what is not a queue has none
