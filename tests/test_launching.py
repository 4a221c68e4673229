"""The core's HostKernel: a signature's generated call, bound to its record; and the OpenCL
launch path: what a launch keeps, and interrupted launches."""

from __future__ import annotations

import collections
import gc
import pickle
import random
import re
import signal
import time
import weakref
from pathlib import Path

import numpy as np
import pyopencl
import pyopencl.array as cla
import pytest

import specializer
from specializer import codegen, compile_count, launching
from specializer.backends import opencl as cl
from specializer.kernels import Definitions

HK_TT = (cl.Array[np.float32], np.float32)


@cl.kernel
def hk_fill(x: cl.Array[np.float32], v: np.float32) -> str:
    return "__kernel void hk_fill(__global float *x, float v) { x[get_global_id(0)] = v; }"


def cuda_host_kernel_class():
    from specializer.backends.cuda import HostKernel

    return HostKernel


def test_a_host_kernel_is_an_instance_of_its_back_ends_class_whose_call_runs_the_invoker():
    q = cl.default_queue()
    hk = cl.clfunction(hk_fill, HK_TT)
    assert type(hk) is cl.HostKernel and isinstance(hk, launching.HostKernel)
    assert not isinstance(hk, cuda_host_kernel_class())
    assert type(hk).__call__ is cl._launcher.host_call  # the generated call, a method
    assert hk.invoke is hk.linked.invokers[cl._launcher, None, HK_TT][0]  # the lookup's invoker
    # its attributes, as documented (docs/reference-opencl.md)
    assert hk.f is hk_fill and hk.tt == HK_TT and hk.queue is q
    assert hk.where is cl._launcher.where_of(queue=q)[0]  # the queue's context key
    assert hk.kernel is hk.linked.kernel and hk.program is hk.linked.program
    assert hk.context.int_ptr == q.context.int_ptr
    assert "hk_fill(Array[np.float32], np.float32)" in repr(hk)
    x = cla.zeros(q, 4, np.float32)
    hk(x, np.float32(3), global_size=4)
    assert x.get().tolist() == [3, 3, 3, 3]


def test_a_host_kernel_refuses_to_be_pickled_saying_why():
    hk = cl.clfunction(hk_fill, HK_TT)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="cannot be pickled: pickle the kernel and look it up"):
            pickle.dumps(hk, protocol)


def test_host_kernel_classes_are_not_patched_and_a_fork_is_one_store():
    # SPEC 10: nothing patched onto a class at run time; a fork child's refusal is one store
    # into the launcher's cell, which every HostKernel call reads
    before = {cls: dict(vars(cls)) for cls in (launching.HostKernel, cl.HostKernel)}
    hk = cl.clfunction(hk_fill, HK_TT)
    cl.launch(hk_fill, cla.zeros(cl.default_queue(), 1, np.float32), 1.0, global_size=1)
    hk(cla.zeros(cl.default_queue(), 1, np.float32), np.float32(1), global_size=1)
    for cls, attrs in before.items():
        assert dict(vars(cls)) == attrs
    assert "__call__" not in vars(launching.HostKernel)
    assert cl._launcher.fork == [None] and "_FORK" in cl._launcher.host_call.__globals__


def test_a_back_ends_host_kernel_subclass_keeps_its_methods_and_properties():
    class Mine(cl.HostKernel):
        @property
        def doubled(self):
            return 2 * len(self.tt)

        def fill(self, x, v):
            return self(x, v, global_size=x.size)

    hk = cl._launcher.function(Mine, hk_fill, HK_TT, {"queue": None}, {})
    assert type(hk) is Mine and hk.doubled == 4 and hk.queue is cl.default_queue()
    x = cla.zeros(cl.default_queue(), 3, np.float32)
    hk.fill(x, np.float32(5))
    assert x.get().tolist() == [5, 5, 5]
    hk.label = "mine"  # an instance takes attributes
    assert hk.label == "mine"


def test_a_host_kernel_class_that_does_not_call_through_its_launcher_is_refused():
    class NoCall(launching.HostKernel):
        pass

    with pytest.raises(TypeError, match=r"set `__call__ = <launcher>\.host_call`"):
        cl._launcher.function(NoCall, hk_fill, HK_TT, {"queue": None}, {})


# -- the OpenCL launch path: what a launch keeps, and interrupted launches -------------------

F32 = cl.Array[np.float32]


@pytest.fixture
def queue():
    return cl.default_queue()


@cl.kernel
def put_value(x: F32, v: np.int32) -> str:
    return "__kernel void put_value(__global float *x, int v) { x[get_global_id(0)] = v; }"


def _check_put(queue, a, b, first):
    """Launch put_value on ``first`` then on the other array, each time checking both."""
    values = {id(a): 1, id(b): 2}
    second = b if first is a else a
    a.fill(0)
    b.fill(0)
    queue.finish()
    done = {id(a): 0, id(b): 0}
    for x in (first, second):
        cl.launch(put_value, x, np.int32(values[id(x)]), global_size=1)
        done[id(x)] = values[id(x)]
        queue.finish()
        assert (a.get()[0], b.get()[0]) == (done[id(a)], done[id(b)]), "the wrong array"


def test_random_interrupts_between_launches_on_two_arrays_never_make_one_write_the_other(queue):
    # 2,000 real timer signals, each raising KeyboardInterrupt wherever the main thread is in
    # a loop alternating launch(k, a, 1) and launch(k, b, 2). After each, the launch on the
    # array not being launched then (the one a stale record would name) runs first.
    a, b = cla.zeros(queue, 1, np.float32), cla.zeros(queue, 1, np.float32)
    one, two = np.int32(1), np.int32(2)
    _check_put(queue, a, b, a)
    rng = random.Random(17)
    armed = [False]

    def on_alarm(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        for _ in range(2000):
            current = a
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 6e-5))
                while True:
                    current = a
                    cl.launch(put_value, a, one, global_size=1)
                    current = b
                    cl.launch(put_value, b, two, global_size=1)
            except KeyboardInterrupt:
                pass
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            queue.finish()
            _check_put(queue, a, b, b if current is a else a)
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _references(probe):
    return probe.get_info(pyopencl.mem_info.REFERENCE_COUNT)


def test_a_dropped_kernel_instance_frees_its_captured_64_mib_array_after_it_ran(queue):
    @cl.kernel
    def add_captured(big: F32, out: F32) -> str:
        return """__kernel void add_captured(__global float *big, __global float *out) {
                      out[get_global_id(0)] += big[get_global_id(0)]; }"""

    big = cla.zeros(queue, 16 * 2**20, np.float32).fill(3)  # 64 MiB
    out = cla.zeros(queue, 4, np.float32)
    instance = add_captured.capture(big)
    cl.launch(instance, out, global_size=4)
    cl.clfunction(instance, (F32,))(out, global_size=4)
    queue.finish()
    assert out.get().tolist() == [6, 6, 6, 6]
    # A second handle of the buffer, which this test holds: once the array is gone it must be
    # the buffer's only reference (a kept record, entry or HostKernel would hold another).
    probe = pyopencl.MemoryObject.from_int_ptr(big.base_data.int_ptr, retain=True)
    assert _references(probe) > 1
    array_ref = weakref.ref(big)
    del instance, big
    gc.collect()
    assert array_ref() is None
    # PoCL releases a finished command's buffers from its own worker thread, a moment after
    # finish() returns: wait for that (bounded), so only a reference the library kept remains.
    deadline = time.monotonic() + 10
    while _references(probe) > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _references(probe) == 1


@pytest.mark.parametrize("make", [collections.UserList, collections.deque])
def test_build_options_in_a_sequence_edited_in_place_build_anew(queue, make):
    @cl.kernel
    def put_define(x: F32) -> str:
        return "__kernel void put_define(__global float *x) { x[get_global_id(0)] = V; }"

    x = cla.zeros(queue, 2, np.float32)
    options = make(["-DV=1"])
    cl.launch(put_define, x, global_size=2, options=options)
    assert x.get().tolist() == [1, 1]
    cl.launch(put_define, x, global_size=2, options=options)  # the same value: no build
    before = compile_count()
    options[0] = "-DV=2"
    cl.launch(put_define, x, global_size=2, options=options)
    assert x.get().tolist() == [2, 2]
    assert compile_count() == before + 1
    cl.launch(put_define, x.fill(0), global_size=2, options=options)
    assert x.get().tolist() == [2, 2]
    assert compile_count() == before + 1


def test_build_options_in_a_list_edited_in_place_build_anew_and_hit_by_value(queue):
    @cl.kernel
    def put_define_list(x: F32) -> str:
        return "__kernel void put_define_list(__global float *x) { x[get_global_id(0)] = V; }"

    x = cla.zeros(queue, 2, np.float32)
    options = ["-DV=1"]
    cl.launch(put_define_list, x, global_size=2, options=options)
    options[0] = "-DV=2"
    cl.launch(put_define_list, x, global_size=2, options=options)
    assert x.get().tolist() == [2, 2]
    cl.launch(put_define_list, x, global_size=2, options=["-DV=1"])
    assert x.get().tolist() == [1, 1]


# -- a back-end's mistakes are refused when its Launcher is made --------------------------------


def _launcher_with(tmp_path, where_block: str, template="bad_launch.py.j2"):
    from pybackend import PyLauncher, py

    (tmp_path / template).write_text(
        '{% extends "python_launch.py.j2" %}\n{% block where %}\n'
        + where_block
        + "{% endblock %}\n"
    )
    codegen.add_template_dir(tmp_path)

    class BadLauncher(PyLauncher):
        name = "bad"

    BadLauncher.template = template
    return BadLauncher(Definitions(py.typeof, "bad"), py.backend)


def test_a_where_block_that_assigns_nothing_to_the_where_variable_is_refused(tmp_path):
    # Such a back-end's launches would all fail on a name error.
    with pytest.raises(TypeError) as e:
        _launcher_with(tmp_path, "    if context is None:\n        context = _default[0]\n")
    assert str(e.value) == (
        "back-end 'bad': the `where` block of template 'bad_launch.py.j2' assigns nothing to "
        "`where`, which a launch looks its kernel's entries up by: set it in the block, e.g. "
        "`where = <the where option, or its default when None>`"
    )
    # The same block assigning it makes a working back-end.
    from pybackend import Array

    launcher = _launcher_with(tmp_path, "    where = context or _default[0]\n", "good.py.j2")

    @launcher.definitions.kernel(localns=locals())
    def put_two(x: Array[np.float32]) -> str:
        return "def put_two(i, x): x[i] = 2"

    x = np.zeros(2, np.float32)
    launcher.launch(put_two, x, size=2)
    assert x.tolist() == [2, 2]


def test_an_empty_where_block_is_refused_naming_it(tmp_path):
    with pytest.raises(TypeError, match=r"the `where` block of template 'empty_where\.py\.j2'"):
        _launcher_with(tmp_path, "", template="empty_where.py.j2")


# -- public semantics only ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
#: the package under test: the checkout's, or the installed one (CI's other Pythons run the
#: tests from a copy, against a wheel)
PACKAGE = Path(specializer.__file__).resolve().parent
INTERNALS = re.compile(r"ctypes|IOBase|co_code|f_lasti|_getframe|_at_fork_reinit|tp_flags")
#: where the package may use ctypes, each file saying why in a comment: the CUDA parameter
#: buffers (the driver takes a void** of argument addresses; _types gives each parameter's C
#: type) and the dump command's renameat2
CTYPES_ALLOWED = (
    "specializer/backends/cuda/_params.py",
    "specializer/backends/cuda/_types.py",
    "specializer/dump.py",
)


def test_the_package_reaches_into_no_interpreter_internals():
    # `grep -rnE "ctypes|IOBase|co_code|f_lasti|_getframe|_at_fork_reinit|tp_flags" specializer/`
    hits = []
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 20, PACKAGE
    for path in paths:
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if INTERNALS.search(line) and rel not in CTYPES_ALLOWED:
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "interpreter internals used:\n" + "\n".join(hits)
    for rel in CTYPES_ALLOWED:
        text = (PACKAGE.parent / rel).read_text()
        assert INTERNALS.findall(text) and set(INTERNALS.findall(text)) == {"ctypes"}, rel
        why = [ln for ln in text.splitlines() if "ctypes" in ln and ("#" in ln or "why" in ln)]
        assert why, f"{rel} uses ctypes without a comment saying why"


@pytest.mark.parametrize("make", [list, collections.UserList, collections.deque])
def test_cuda_compiler_kwargs_in_a_mutable_sequence_are_frozen_into_the_lookup_key(make):
    from specializer.backends.cuda import _launch

    options = make(["-DV=1"])
    key = _launch._kwkey({"options": options})
    options[0] = "-DV=2"
    assert key == (("options", ("-DV=1",)),)
    assert hash(key) == hash((("options", ("-DV=1",)),))


def test_compiler_kwargs_in_a_dict_edited_in_place_look_up_anew():
    # A front entry keeps a private copy: the user's dict, edited, compares unequal to it.
    from pybackend import py

    @py.kernel(localns=locals())  # string annotations naming this function's `py`
    def put_defined(x: py.Array[np.int64]) -> str:
        return "def put_defined(i, x): x[i] = VALUE"

    x = np.zeros(2, np.int64)
    defines = {"VALUE": 1}
    py.launch(put_defined, x, size=2, defines=defines)
    py.launch(put_defined, x, size=2, defines=defines)
    assert x.tolist() == [1, 1]
    defines["VALUE"] = 2
    py.launch(put_defined, x, size=2, defines=defines)
    assert x.tolist() == [2, 2]
    py.launch(put_defined, x, size=2, defines={"VALUE": np.int64(3)})
    py.launch(put_defined, x, size=2, defines={"VALUE": np.int64(3)})
    assert x.tolist() == [3, 3]


def test_no_critical_section_of_the_package_holds_a_loop():
    """Every `with <lock>:` body is straight-line code (loops and comprehensions, which 3.12
    inlines, run in called functions): CPython 3.13 can unwind a frame past its with statement
    when an interrupt lands at a backward jump (gh-130279), which would leave the lock held."""
    import ast

    loops = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp)
    found = []
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 20, PACKAGE
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.With):
                continue
            if not any("lock" in ast.unparse(i.context_expr).lower() for i in node.items):
                continue
            for sub in (s for b in node.body for s in ast.walk(b)):
                if isinstance(sub, loops):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{sub.lineno}")
    assert not found, f"loops inside a with of a lock: {found}"


# -- guards: a kind's class and dtype ------------------------------------------------------


def test_a_kind_that_guards_only_the_class_of_an_array_is_refused():
    # With it, an int64 array would pass a float32 array's guard and run its code.
    from pybackend import Array, PyLauncher, py

    class ClassOnly(PyLauncher):
        name = "guarded"

        def kind(self, t, r, captured):
            k = super().kind(t, r, captured)
            return launching.Kind(k.name, k.cls) if issubclass(t, Array) else k

    definitions = Definitions(py.typeof, "guarded")
    launcher = ClassOnly(definitions, py.backend)

    @definitions.kernel(localns=locals())
    def fill_guarded(x: Array[np.float32]) -> str:
        return "def fill_guarded(i, x): x[i] = 1"

    with pytest.raises(TypeError) as e:
        launcher.launch(fill_guarded, np.zeros(4, np.float32), size=4)
    assert str(e.value) == (
        "back-end 'guarded': kind(Array[np.float32]) guards the class only: an argument of "
        "another dtype would run this signature's code; give the Kind its dtype"
    )


def test_launches_that_hit_leave_the_public_miss_count_alone():
    from pybackend import py

    F32 = py.Array[np.float32]

    @py.kernel(localns=locals())
    def counted(x: F32) -> str:
        return "def counted(i, x): x[i] += 1"

    x = np.zeros(4, np.float32)
    before = py.launcher.misses
    for _ in range(5):
        py.launch(counted, x, size=4)
    assert py.launcher.misses == before + 1 and x.tolist() == [5] * 4


def test_two_launchers_over_the_same_definitions_run_their_own_entries():
    # one back-end class twice over one Definitions: each launcher keeps its launch cells
    # under attributes of its own, so each launch runs (and counts) its own launcher's code
    from pybackend import DEFAULT_CONTEXT, PyLauncher, items_typeof, py

    F32 = py.Array[np.float32]
    defs = Definitions(items_typeof, "twice")
    first, second = PyLauncher(defs, py.backend), PyLauncher(defs, py.backend)
    second.default[0] = "the second's context"
    # (py's own launcher took the name's attribute: these are numbered after it)
    base = py.launcher.attr
    assert first.attr.startswith(base + "_") and second.attr.startswith(base + "_")
    assert len({first.attr, second.attr, py.launcher.attr}) == 3

    @defs.kernel(localns=locals())
    def where_am_i(x: F32) -> str:
        return "def where_am_i(i, x): x[i] = len(context)"

    x = np.zeros(2, np.float32)
    for launcher, n in ((first, len(DEFAULT_CONTEXT)), (second, len("the second's context"))) * 3:
        launcher.launch(where_am_i, x, size=2)
        assert x.tolist() == [n, n]
    assert first.misses == 1 and second.misses == 1  # each hit its own entry after the first
    third = PyLauncher(defs, py.backend)  # defined after the kernel: its entries still its own
    third.default[0] = "3rd"
    third.launch(where_am_i, x, size=2)
    first.launch(where_am_i, x, size=1)
    assert x.tolist() == [len(DEFAULT_CONTEXT), 3]
    assert third.attr not in (first.attr, second.attr)
    assert first.misses == 1 and third.misses == 1


def test_two_launchers_on_one_context_each_bind_their_own_code_to_a_linked_kernel():
    # both launchers look the kernel up in one context: one linked kernel (the compiled-code
    # cache's), which keeps an invoker per launcher (each its own template and kinds)
    from pybackend import DEFAULT_CONTEXT, PyLauncher, items_typeof, py

    defs = Definitions(items_typeof, "one context")
    first, second = PyLauncher(defs, py.backend), PyLauncher(defs, py.backend)
    second.default[0] = "S"
    F32 = py.Array[np.float32]

    @defs.kernel(localns=locals())
    def where_now(x: F32) -> str:
        return "def where_now(i, x): x[i] = len(context)"

    x = np.zeros(1, np.float32)
    first.launch(where_now, x, size=1, context="C")
    for _ in range(3):
        second.launch(where_now, x, size=1, context="C")  # the same linked kernel
    assert (first.misses, second.misses) == (1, 1) and x.tolist() == [1]
    second.launch(where_now, x, size=1)  # second's default context, "S", by its own code
    assert x.tolist() == [len("S")] and (first.misses, second.misses) == (1, 2)
    first.launch(where_now, x, size=1)  # first's, by its own
    assert x.tolist() == [len(DEFAULT_CONTEXT)] and (first.misses, second.misses) == (2, 2)


def test_launches_that_alternate_argument_types_hit_after_each_types_first():
    # each type is an entry of the kernel's cell (up to launching.ENTRIES): those launched
    # in turn never miss again
    from pybackend import py

    from specializer.launching import ENTRIES

    types = [np.float32, np.float64, np.int32, np.int64, np.int16, np.uint8, np.uint16, np.uint32]
    types += [np.uint64, np.int8][: ENTRIES + 1 - len(types)]
    assert len(types) == ENTRIES + 1

    @py.kernel(localns=locals())
    def turn(x: py.Array[np.generic]) -> str:
        return "def turn(i, x): x[i] += 1"

    arrays = [np.zeros(2, t) for t in types]
    before = py.launcher.misses
    for _ in range(5):
        for a in arrays[:ENTRIES]:
            py.launch(turn, a, size=2)
    assert py.launcher.misses == before + ENTRIES
    assert all(a.tolist() == [5, 5] for a in arrays[:ENTRIES])
    # one type more than the cell holds: each launch misses (and still runs the right code)
    before = py.launcher.misses
    for _ in range(2):
        for a in arrays:
            py.launch(turn, a, size=2)
    assert py.launcher.misses - before >= len(arrays)
    assert all(a.tolist() == [7, 7] for a in arrays[:ENTRIES]) and arrays[-1].tolist() == [2, 2]


def test_an_entry_never_runs_code_of_an_older_world_or_another_where():
    from pybackend import DEFAULT_CONTEXT, py

    F32, F64 = py.Array[np.float32], py.Array[np.float64]

    @py.kernel(localns=locals())
    def stamp(x: F32) -> str:
        return "def stamp(i, x): x[i] = len(context)"

    @py.kernel(localns=locals())
    def stamp(x: F64) -> str:
        return "def stamp(i, x): x[i] = 100 + len(context)"

    x, y = np.zeros(1, np.float32), np.zeros(1, np.float64)
    for _ in range(2):
        py.launch(stamp, x, size=1)
        py.launch(stamp, y, size=1)
    n = len(DEFAULT_CONTEXT)
    assert (x[0], y[0]) == (n, 100 + n)

    @py.kernel(localns=locals())
    def stamp(x: F64) -> str:  # redefined: a new world
        return "def stamp(i, x): x[i] = 200 + len(context)"

    py.launch(stamp, x, size=1)  # the entries of the old world miss
    py.launch(stamp, y, size=1)  # not the old world's float64 entry
    assert (x[0], y[0]) == (n, 200 + n)
    py.launch(stamp, y, size=1, context="other")  # another where: its own code
    assert y[0] == 200 + len("other")
    py.launch(stamp, x, size=1)
    assert x[0] == n


def test_alternating_types_on_a_kernel_instance_hit_too():
    from pybackend import py

    @py.kernel(localns=locals())
    def add_to(out: py.Array[np.float64], x: py.Array[np.generic]) -> str:
        return "def add_to(i, out, x): out[i] += x[i]"

    out = np.zeros(2)
    inst = add_to.capture(out)
    a, b = np.ones(2, np.float32), np.full(2, 2, np.int32)
    before = py.launcher.misses
    for _ in range(4):
        py.launch(inst, a, size=2)
        py.launch(inst, b, size=2)
    assert py.launcher.misses == before + 2 and out.tolist() == [12, 12]
