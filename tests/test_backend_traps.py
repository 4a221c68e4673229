"""A back-end author's interface and traps: a value of a subclass of its guard's class (an
``IntEnum``, a numpy scalar subclass) takes the slow path (a template may rely on the exact
class), as documented, and pushes no entry out of the cell; a kernel launched with compiler
kwargs that alternate hits, as one launched with argument types that alternate does; a
back-end declares what a fork means for it; docs/reference-backend.md lists the interface as
the class has it (at most about ten hooks, each with its default), and CUDA's driver keeps its
own record of device use rather than a hook set from above.
"""

import enum
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyopencl.array as cla
import pytest

from specializer import world
from specializer.backends import opencl as cl
from specializer.kernels import Definitions


def _launcher(**attrs):
    from pybackend import PyLauncher, py

    TrapLauncher = type("TrapLauncher", (PyLauncher,), {"name": "traps", **attrs})
    definitions = Definitions(py.typeof, "traps")
    return TrapLauncher(definitions, py.backend), definitions


def test_a_right_kind_hits_from_the_second_launch():
    launcher, definitions = _launcher()

    @definitions.kernel
    def twice(v: np.float32) -> str:
        return "def twice(i, v): pass"

    for _ in range(5):
        launcher.launch(twice, np.float32(1), size=1)
        launcher.launch(twice, 2.0, size=1)
    assert launcher.misses == 2


# -- values of a subclass of the guard's class: the slow path, documented ------------------


class Color(enum.IntEnum):
    RED = 1
    GREEN = 2


class Mine(np.float32):
    pass


def test_a_value_of_a_subclass_of_its_guards_class_takes_the_slow_path_and_evicts_nothing():
    # Its guard compares the class by identity and a template may rely on the exact class
    # (docs/backend.md, "Guards"): each launch is a miss, which keeps nothing, so the entries
    # of the values that hit stay in the cell.
    from pybackend import py

    @py.kernel
    def store(x: py.Array[np.generic], v: np.number) -> str:
        return "def store(i, x, v): x[i] += v"

    x, y = np.zeros(1), np.zeros(1, np.float32)
    for _ in range(2):
        py.launch(store, x, np.float32(1), size=1)
        py.launch(store, y, np.float32(1), size=1)
    before = py.launcher.misses
    for _ in range(3):
        py.launch(store, x, Mine(2.0), size=1)
        py.launch(store, x, np.float32(1), size=1)
        py.launch(store, y, np.float32(1), size=1)
    assert py.launcher.misses == before + 3  # the subclass's three, none of the others
    assert x[0] == 2 + 3 * 3 and y[0] == 2 + 3


def test_an_opencl_intenum_and_numpy_subclass_run_through_the_slow_path(queue):
    @cl.kernel
    def put(x: cl.Array[np.int32], v: np.int32) -> str:
        return "__kernel void put(__global int *x, int v) { x[get_global_id(0)] += v; }"

    x = cla.zeros(queue, 1, np.int32)

    class I32(np.int32):
        pass

    cl.launch(put, x, np.int32(1), global_size=1, queue=queue)
    before = cl._launcher.misses
    for _ in range(2):
        cl.launch(put, x, Color.GREEN, global_size=1, queue=queue)
        cl.launch(put, x, I32(3), global_size=1, queue=queue)
        cl.launch(put, x, np.int32(1), global_size=1, queue=queue)
    assert cl._launcher.misses == before + 4
    assert x.get().tolist() == [1 + 2 * (2 + 3 + 1)]


@pytest.fixture
def queue():
    return cl.default_queue()


# -- compiler kwargs that alternate --------------------------------------------------------


def test_launches_with_and_without_a_compiler_kwarg_in_turn_hit_after_the_first_of_each():
    from pybackend import py

    @py.kernel
    def add(x: py.Array[np.float64]) -> str:
        return "def add(i, x): x[i] += STEP"

    x = np.zeros(1)
    before = py.launcher.misses
    for _ in range(5):
        py.launch(add, x, size=1, defines={"STEP": 1})
        py.launch(add, x, size=1, defines={"STEP": 10})
        py.launch(add, x, size=1, defines={"STEP": 100})
    assert py.launcher.misses == before + 3
    assert x[0] == 5 * 111


def test_opencl_launches_with_build_options_in_turn_hit(queue):
    @cl.kernel
    def bump(x: cl.Array[np.int32]) -> str:
        return (
            "__kernel void bump(__global int *x) { x[get_global_id(0)] += STEP; }\n"
            "#ifndef STEP\n#error STEP\n#endif"
        )

    x = cla.zeros(queue, 1, np.int32)
    before = cl._launcher.misses
    for _ in range(5):
        cl.launch(bump, x, global_size=1, queue=queue, options=("-DSTEP=1",))
        cl.launch(bump, x, global_size=1, queue=queue, options=("-DSTEP=20",))
    assert cl._launcher.misses == before + 2
    assert x.get().tolist() == [5 * 21]


def test_kwargs_that_alternate_with_types_that_alternate_hit_and_run_their_own_code():
    from pybackend import py

    @py.kernel
    def add(x: py.Array[np.generic]) -> str:
        return "def add(i, x): x[i] += STEP"

    a, b = np.zeros(1, np.float32), np.zeros(1, np.int64)
    before = py.launcher.misses
    for _ in range(4):
        for arr in (a, b):
            py.launch(add, arr, size=1, defines={"STEP": 1})
            py.launch(add, arr, size=1, defines={"STEP": 3})
    assert py.launcher.misses == before + 4
    assert a[0] == b[0] == 16
    # more sets of kwargs than the cell keeps: still each its own code
    from specializer.launching import ENTRIES

    for _ in range(2):
        for step in range(ENTRIES + 2):
            py.launch(add, a, size=1, defines={"STEP": step})
    assert a[0] == 16 + 2 * sum(range(ENTRIES + 2))


def test_an_entry_for_other_kwargs_never_runs_an_older_worlds_code():
    from pybackend import py

    @py.kernel
    def mark(x: py.Array[np.float64]) -> str:
        return "def mark(i, x): x[i] = STEP"

    x = np.zeros(1)
    for _ in range(2):
        py.launch(mark, x, size=1, defines={"STEP": 1})
        py.launch(mark, x, size=1, defines={"STEP": 2})

    @py.kernel
    def mark(x: py.Array[np.float64]) -> str:
        return "def mark(i, x): x[i] = 10 * STEP"

    py.launch(mark, x, size=1, defines={"STEP": 1})
    assert x[0] == 10
    py.launch(mark, x, size=1, defines={"STEP": 2})
    assert x[0] == 20


def test_the_entries_kept_for_other_kwargs_stay_bounded():
    from pybackend import py

    from specializer.launching import ENTRIES

    @py.kernel
    def count(x: py.Array[np.float64]) -> str:
        return "def count(i, x): x[i] += 1"

    x = np.zeros(1)
    for step in range(50):
        py.launch(count, x, size=1, defines={"N": step})
    cell = getattr(count, py.launcher.attr)
    entries = (cell[0], *cell[1])
    assert len(entries) == ENTRIES
    assert [e[2] for e in entries] == [{"defines": {"N": n}} for n in range(49, 49 - ENTRIES, -1)]
    assert x[0] == 50


# -- the fork ------------------------------------------------------------------------------


def test_the_fork_error_says_what_the_back_end_declared(monkeypatch):
    monkeypatch.setattr(world, "snapshot", world.snapshot._replace(forked=True))
    monkeypatch.setattr(world, "_fork_rules", {})
    with pytest.raises(RuntimeError) as e:
        world.check_fork("specializer's x back-end")
    assert "so a launch here would hang: start worker processes with" in str(e.value)
    _launcher()
    with pytest.raises(RuntimeError) as e:
        world.check_fork("specializer's traps back-end")
    assert str(e.value).startswith(
        "this process was forked after specializer's traps back-end was used; device "
        "contexts and queues do not survive fork, so a launch here would hang: start"
    )
    _launcher(fork_consequence="its thread pool is the parent's and would deadlock")
    with pytest.raises(RuntimeError, match="used; its thread pool is the parent's and would"):
        world.check_fork("specializer's traps back-end")
    _launcher(fork_consequence=None)
    world.check_fork("specializer's traps back-end")  # nothing raised


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_safe_back_end_launches_in_a_fork_of_its_user():
    code = textwrap.dedent(
        """
        import os, sys
        import numpy as np
        from pybackend import PyLauncher, py
        from specializer.kernels import Definitions

        class Safe(PyLauncher):
            name = "safe"
            fork_consequence = None

        class Unsafe(PyLauncher):
            name = "unsafe"

        out = []
        for cls in (Safe, Unsafe):
            defs = Definitions(py.typeof, cls.name)
            launcher = cls(defs, py.backend)

            @defs.kernel
            def put(x: py.Array[np.float64]) -> str:
                return "def put(i, x): x[i] = 7"

            x = np.zeros(1)
            launcher.launch(put, x, size=1)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    launcher.launch(put, np.zeros(1), size=1)
                    os.write(w, b"ran")
                except RuntimeError as e:
                    os.write(w, str(e).encode()[:200])
                os._exit(0)
            os.waitpid(pid, 0)
            out.append(os.read(r, 200).decode())
        print(out[0])
        print(out[1])
        """
    )
    here = os.path.dirname(os.path.abspath(__file__))  # pybackend's; the package: PYTHONPATH
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    safe, unsafe = done.stdout.splitlines()
    assert safe == "ran"
    assert unsafe.startswith("this process was forked after specializer's unsafe back-end")


# -- the reference is the interface ----------------------------------------------------------

#: the hooks a back-end may set, each with its default (docs/reference-backend.md)
HOOKS = (
    "name",
    "template",
    "options",
    "compiler_kwargs",
    "lookup_name",
    "fork_consequence",
    "namespace",
    "key",
    "uncached_lookup",
    "kind",
)


def test_the_interface_is_ten_hooks_each_with_a_default_and_a_one_line_comment():
    from specializer.launching import Launcher

    source = inspect.getsource(Launcher)
    body = source[: source.index("# -- the core")]
    for hook in HOOKS:
        assert hook in vars(Launcher), hook
        line = next(
            i for i, ln in enumerate(body.splitlines()) if re.match(rf"    (def )?{hook}\b", ln)
        )
        comment = body.splitlines()[line - 1].strip()
        assert comment.startswith("# ") and len(comment) <= 96, (hook, comment)
    hooks = [
        n for n in re.findall(r"^    (?:def )?([a-z_]+)\b", body, re.M) if not n.startswith("_")
    ]
    assert tuple(hooks) == HOOKS


def test_the_reference_documents_every_hook_and_block():
    text = (Path(__file__).resolve().parent.parent / "docs" / "reference-backend.md").read_text()
    for hook in HOOKS:
        assert f"`{hook}" in text, hook
    for block in ("where", "setup", "invoke", "guard"):
        assert f"`{block}`" in text, block


def test_the_docs_minimal_back_end_is_at_most_200_lines_and_runs():
    # SPEC 10: docs/backend.md's minimal back-end runs in the tests (here, and in
    # tests/test_ranges.py and tests/test_docs.py) and stays short.
    from test_docs import DOCS, _blocks
    from test_ranges import _docs_minimal_back_end

    (code,) = [c for _, c, _ in _blocks(DOCS / "backend.md") if "class MiniLauncher" in c]
    assert len(code.splitlines()) <= 200
    ns = _docs_minimal_back_end()
    assert isinstance(ns["launcher"], ns["MiniLauncher"])
    assert ns["launch"](ns["twice"], np.float32(2)) == 5  # its second method's code


def test_the_cuda_driver_keeps_its_own_record_and_says_the_back_ends_fork_error(monkeypatch):
    # No hook set from above: the driver records the device's first user and, in a fork of
    # it, raises the cuda back-end's fork error through the core (no GPU needed).
    pytest.importorskip("cuda.bindings")
    from specializer.backends.cuda import _driver, _launch

    assert f"specializer's {_launch._launcher.name} back-end" == _driver.FORK_WHAT
    monkeypatch.setattr(_driver, "_device_user", None)
    _driver.check_use()  # a process that never used the device: now its user
    assert _driver._device_user == os.getpid()
    monkeypatch.setattr(world, "snapshot", world.snapshot._replace(forked=True))
    monkeypatch.setattr(_driver, "_device_user", os.getpid() + 1)  # the parent's record
    with pytest.raises(RuntimeError) as e:
        _driver.check_use()
    assert str(e.value).startswith(
        "this process was forked after specializer's cuda back-end was used; device contexts "
        "and queues do not survive fork, so a launch here would hang: start worker processes"
    )


def test_threads_launching_with_kwargs_in_turn_each_run_their_own_code():
    import threading

    from pybackend import py

    @py.kernel
    def add(x: py.Array[np.generic]) -> str:
        return "def add(i, x): x[i] += STEP"

    errors = []

    def work(seed):
        try:
            x = np.zeros(1, np.float64 if seed % 2 else np.int64)
            steps = [1, 10, 100][: 2 + seed % 2]
            for _ in range(300):
                for step in steps:
                    py.launch(add, x, size=1, defines={"STEP": step})
            assert x[0] == 300 * sum(steps), (seed, x[0])
        except BaseException as e:  # reported below
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
