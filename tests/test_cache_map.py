"""The cache map (SPEC 10): ``docs/design.md`` names every cache of the package, module-level
containers included, and each input that decides a cache's value, changed alone, is a miss.

The first tests read the package with ``ast``: every module-level (or class-level) mutable
container, and every ``functools.cache`` function, must be named in the design document's
tables ("The caches, and what invalidates each"), and every name there must still exist.
The rest are one table-driven test per cache, each case citing its row: a change of one
input, and the outcome it must have (lookups run, compilations, links, builds, results).
"""

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from pybackend import BACKEND, CONFIG, device, kernel, py, pyfunction, run

import specializer
from specializer import CompilerConfig, bump, cached_lookup, compile_count, latest, specialize
from specializer.kernels import uncached_lookup
from specializer.lookup import forget_key
from specializer.methods import GenericFunction

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(specializer.__file__).resolve().parent  # the package under test
DESIGN = ROOT / "docs" / "design.md"

# -- the map is complete --------------------------------------------------------------------

#: calls that make a mutable container (by the called name's last part)
_MUTABLE_CALLS = {
    "dict",
    "list",
    "set",
    "bytearray",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "ChainMap",
    "deque",
    "WeakValueDictionary",
    "WeakKeyDictionary",
    "WeakSet",
}
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_mutable(value: ast.expr | None) -> bool:
    if value is None:
        return False
    if isinstance(value, _CONTAINERS):
        return True
    if isinstance(value, ast.BinOp):  # {...} | {...}, [...] * n
        return _is_mutable(value.left) or _is_mutable(value.right)
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name in _MUTABLE_CALLS
    return False


def _is_cache_decorator(d: ast.expr) -> bool:
    d = d.func if isinstance(d, ast.Call) else d
    name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
    return name in ("cache", "lru_cache", "cached_property")


def _assigned(body: list[ast.stmt]) -> list[tuple[str, ast.expr | None]]:
    """(name, value) of each plain-name assignment in ``body`` and the blocks it runs
    (``if``, ``try``, ``with``), not in functions or classes."""
    out: list[tuple[str, ast.expr | None]] = []
    for node in body:
        if isinstance(node, ast.Assign):
            out += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.value))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                out += _assigned(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                out += _assigned(handler.body)
    return out


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text("utf-8")) for p in PACKAGE.rglob("*.py")}


def package_containers() -> set[str]:
    """``module.name`` (``module.Class.name``) of every module-level or class-level mutable
    container and every module-level ``functools.cache`` function of the package."""
    found = set()
    for mod, tree in _modules().items():
        for name, value in _assigned(tree.body):
            if _is_mutable(value) and not name.startswith("__"):
                found.add(f"{mod}.{name}")
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for name, value in _assigned(node.body):
                    if _is_mutable(value) and not name.startswith("__"):
                        found.add(f"{mod}.{node.name}.{name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _is_cache_decorator(d) for d in node.decorator_list
            ):
                found.add(f"{mod}.{node.name}")
    return found


def mapped_names() -> set[str]:
    """Every ``specializer....`` name in backticks in the first column of a table of the design
    document's cache section."""
    text = DESIGN.read_text("utf-8")
    start = text.index("## The caches, and what invalidates each")
    end = text.index("\n## ", start + 1)
    names = set()
    for line in text[start:end].splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            names.update(re.findall(r"`(specializer(?:\.\w+)+)`", first))
    return names


def test_the_cache_map_finds_the_containers_it_must_find():
    found = package_containers()
    # one of each kind the reader must see: a literal, an annotated constructor, a weak
    # container, a deque, a cell, a comprehension, a union, a class-level dict, a cache
    for name in (
        "specializer.lookup._specializations",
        "specializer.compiler._live",
        "specializer.locks._locks",
        "specializer.codegen._released",
        "specializer.world.hot_cell",
        "specializer.backends.cuda._types._SCALARS",
        "specializer.backends.opencl._args.GUARD_CLASS",
        "specializer.backends.opencl._program._programs",
        "specializer.launching.Launcher.options",
        "specializer.backends.cuda._nvrtc.nvrtc_version",
    ):
        assert name in found, name


def test_every_module_level_container_is_in_the_cache_map():
    missing = sorted(package_containers() - mapped_names())
    assert not missing, (
        "module-level mutable containers named in no table of docs/design.md's section "
        "'The caches, and what invalidates each' (add each to the caches, with its owner, "
        "key, inputs and invalidation, or to the state that is not a cache):\n  "
        + "\n  ".join(missing)
    )


def test_every_name_in_the_cache_map_exists():
    """No row names what the package no longer has: the module exists and defines the first
    name after it (a container, a function, a class whose attribute is meant)."""
    modules = _modules()
    stale = []
    for name in sorted(mapped_names()):
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            tree = modules.get(".".join(parts[:i]))
            if tree is not None:
                break
        else:
            stale.append(name)
            continue
        top = {n for n, _ in _assigned(tree.body)} | {
            n.name
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        if parts[i] not in top:
            stale.append(name)
    assert not stale, f"docs/design.md's cache map names what the package lacks: {stale}"


# -- 2. the specialized lookup's cell (`specializer.lookup._specializations`) -----------------

F1, F2 = GenericFunction("cm_F1"), GenericFunction("cm_F2")


def _at_site(site, calls, F, tt, key, V):
    """Two call sites of one shape: ``cached_lookup`` keys its cell on the lookup's code."""
    if site == "a":
        return cached_lookup(lambda: (calls.append(1), "result")[1:], V, F, tt, key)
    return cached_lookup(lambda: (calls.append(1), "result")[1:], V, F, tt, key)


class Part:
    """A part of lookup keys (as a context's token is): equal by identity."""


LOOKUP_CASES = {
    # change -> (the second call's arguments from the first's, done between the calls, a miss?)
    "same-everything": (lambda a: a, None, False),
    "another-world": (lambda a: a, bump, True),
    "another-key": (lambda a: {**a, "key": (a["key"][0], 2)}, None, True),
    "equal-key-another-object": (lambda a: {**a, "key": (a["key"][0], 1)}, None, False),
    "another-key-type": (lambda a: {**a, "key": [*a["key"]]}, None, True),
    "another-F": (lambda a: {**a, "F": F2}, None, True),
    "another-tt": (lambda a: {**a, "tt": (np.int32,)}, None, True),
    "another-V": (lambda a: {**a, "V": object}, None, True),
    "another-call-site": (lambda a: {**a, "site": "b"}, None, True),
    "key-part-forgotten": (lambda a: a, "forget", True),
}


@pytest.mark.parametrize("change", LOOKUP_CASES)
def test_lookup_cell_misses_on_each_input_alone(change):
    """Row '2. specialized lookups': call site, F, tt, key type and V choose the function,
    world and key (by value) the entry; ``forget_key`` drops what a gone part keyed."""
    second, between, miss = LOOKUP_CASES[change]
    calls = []
    first = {"site": "a", "F": F1, "tt": (np.float32,), "key": (Part(), 1), "V": tuple}
    assert _at_site(calls=calls, **first) == ("result",)
    assert _at_site(calls=calls, **first) == ("result",)
    assert len(calls) == 1  # the same everything: a hit
    if between == "forget":
        forget_key(first["key"][0])
    elif between is not None:
        between()
    again = second(first)
    assert _at_site(calls=calls, **again) == ("result",)
    assert len(calls) == 1 + miss


def test_lookup_cell_keeps_four_entries_and_a_fifth_key_evicts_the_oldest():
    """Row '2. specialized lookups': four (world, key) entries per specialized function."""
    calls = []
    fn = specialize(_at_site, tuple, F1, (np.float64,), int)

    def lookup():
        calls.append(1)
        return ("r",)

    bump()
    for k in range(5):
        fn(k, lookup)
    assert len(calls) == 5
    for k in (1, 2, 3, 4):
        fn(k, lookup)
    assert len(calls) == 5  # the newest four hit
    fn(0, lookup)
    assert len(calls) == 6  # the first was evicted


# -- 3. the compiled-code cache (`specializer.methods.MethodInstance.code`) -------------------


def _fresh():
    """A kernel of its own (a closure: each call defines another kernel) calling a device
    function of its own, and a way to redefine that device function."""
    k = 2

    @device
    def cm_helper():
        return f"def cm_helper(v): return v * {k}"

    @kernel(callees=[cm_helper])
    def cm_top(x: np.number):
        return f"def cm_top(x): return cm_helper(x) + {k - 1}"  # k: a closure

    def redefine_callee():
        cm_helper.add_method(lambda: "def cm_helper(v): return v * 10")

    return cm_top, redefine_callee


def _more_specific(top):
    def more(x: np.float32):
        return "def cm_top(x): return -x"

    top.add_method(more)


def _unrelated(top):
    @kernel
    def cm_unrelated(x: np.number):
        return "def cm_unrelated(x): return x"

    bump()


CODE_CASES = {
    # change -> (what a second lookup does differently, result, compiles, links)
    "same-everything": (lambda top, redefine: (top, (np.float32,), CONFIG, "c0"), 7, 0, 0),
    "another-method-instance": (
        lambda top, redefine: (top, (np.int64,), CONFIG, "c0"),
        7,
        1,
        1,
    ),
    "another-config": (
        lambda top, redefine: (top, (np.float32,), CompilerConfig(BACKEND, ("cm",)), "c0"),
        7,
        1,
        1,
    ),
    "another-context": (lambda top, redefine: (top, (np.float32,), CONFIG, "c1"), 7, 0, 1),
    "callee-redefined": (
        lambda top, redefine: (redefine(), (top, (np.float32,), CONFIG, "c0"))[1],
        31,
        1,
        1,
    ),
    "more-specific-method": (
        lambda top, redefine: (_more_specific(top), (top, (np.float32,), CONFIG, "c0"))[1],
        -3,
        1,
        1,
    ),
    "unrelated-definition": (
        lambda top, redefine: (_unrelated(top), (top, (np.float32,), CONFIG, "c0"))[1],
        7,
        0,
        0,
    ),
}


@pytest.mark.parametrize("change", CODE_CASES)
def test_compiled_code_cache_recompiles_on_each_input_alone(change):
    """Rows '3. compiled-code cache' and '3. per-context links': (method instance, config)
    and the dispatches the code used decide the code; the context decides the link; an
    unrelated definition raises the world and recompiles (and relinks) nothing."""
    second, result, compiles, links = CODE_CASES[change]
    top, redefine = _fresh()
    assert uncached_lookup(top, (np.float32,), CONFIG, "c0")(np.float32(3)) == 7
    c, n = compile_count(), BACKEND.links
    args = second(top, redefine)
    assert uncached_lookup(*args)(args[1][0](3)) == result
    assert (compile_count() - c, BACKEND.links - n) == (compiles, links)


def test_an_older_world_still_uses_the_code_compiled_for_it():
    """Row '3. compiled-code cache': a definition closes ranges, it does not drop what a
    pinned world may use; the new world compiles its own."""
    top, _ = _fresh()
    assert run(top, np.float32(3)) == 7
    old = latest()
    _more_specific(top)
    assert run(top, np.float32(3)) == -3
    c = compile_count()
    assert specializer.invoke_in_world(old, run, top, np.float32(3)) == 7
    assert compile_count() == c  # the old code is still cached for the old world's pin


# -- the dispatch memo (`specializer.methods.GenericFunction._table`) ------------------------


def test_dispatch_memo_follows_each_definition_and_keeps_older_worlds():
    """Row 'dispatch memo': a more specific method is a new dispatch from its world on; the
    older world keeps its own; another tt is another entry; a method for other types
    changes nothing."""
    gf = GenericFunction("cm_dispatch")

    def chosen(tt, world=None):
        return gf.methodinstance(tt, world).method.signature

    @gf.method
    def _(x: np.number):
        return "generic"

    tt = (np.float32,)
    assert chosen(tt) == (np.number,)
    before = latest()

    @gf.method
    def _(x: np.integer):
        return "ints"

    assert chosen(tt) == (np.number,)  # a method for other types: the same dispatch
    assert chosen((np.int32,)) == (np.integer,)  # another tt
    middle = latest()

    @gf.method
    def _(x: np.float32):
        return "specific"

    assert chosen(tt) == (np.float32,)  # a new dispatch
    assert chosen(tt, before) == (np.number,)  # the older worlds' own
    assert chosen(tt, middle) == (np.number,)
    assert chosen((np.float64,)) == (np.number,)


# -- 1. launch cells (`specializer.launching.Launcher.attr`), on the py back-end ----------------


@pytest.fixture
def counts(monkeypatch):
    """Launch-cell misses (the launch path's lookups) and lookup-cell misses (uncached
    lookups) of the py back-end's launches."""
    site = py.launcher.site
    out = {"launch": 0, "lookup": 0}
    real_lookup, real_link = site.lookup, site.link

    def lookup(F, tt, key):
        out["launch"] += 1
        return real_lookup(F, tt, key)

    def link(F, tt, key):
        out["lookup"] += 1
        return real_link(F, tt, key)

    monkeypatch.setattr(site, "lookup", lookup)
    monkeypatch.setattr(site, "link", link)
    return out


@py.kernel
def cm_add(c: np.float32, x: py.Array[np.float32]) -> str:
    return "def cm_add(i, c, x): x[i] += c"


@py.kernel
def cm_fill(x: py.Array[np.number], v: np.number) -> str:
    return "def cm_fill(i, x, v): x[i] = v"


def _launch(f=cm_fill, x=None, v=np.float32(2), **kw):
    x = np.zeros(4, np.float32) if x is None else x
    py.launch(f, x, v, size=x.size, **kw)
    return x


FRONT_CASES = {
    # change -> (the second launch, its expected x[0], launch-cell misses, lookup-cell misses)
    "same-everything": (lambda: _launch(v=np.float32(5)), 5, 0, 0),
    "another-world": (lambda: (bump(), _launch())[1], 2, 1, 1),
    "another-where": (lambda: _launch(context="cm-other"), 2, 1, 1),
    "other-compiler-kwargs": (lambda: _launch(defines={"cm": 1}), 2, 1, 1),
    "another-argument-type": (
        lambda: _launch(x=np.zeros(4, np.int32), v=np.int32(3)),
        3,
        1,
        1,
    ),
    "another-kernel": (
        lambda: py.launch(cm_add.capture(np.float32(4)), np.zeros(4, np.float32), size=4),
        None,
        1,
        1,
    ),
}


@pytest.mark.parametrize("change", FRONT_CASES)
def test_launch_cell_misses_on_each_input_alone(change, counts):
    """Row '1. launch cells': world, where, compiler kwargs, kernel and argument types
    decide the entry; a launch with the same everything (other values) hits."""
    second, value, launch, lookup = FRONT_CASES[change]
    bump()  # a world of this case's own
    assert _launch()[0] == 2
    assert _launch(v=np.float32(3))[0] == 3
    base = dict(counts)
    assert base == {"launch": 1, "lookup": 1}
    x = second()
    if value is not None:
        assert x[0] == value
    assert (counts["launch"] - 1, counts["lookup"] - 1) == (launch, lookup)


def test_kernel_instances_key_on_their_type_not_their_values(counts):
    """Row '1. launch cells': a kernel instance's entry lives on its type: other values of
    the same types hit (and are passed); values of another type are another kernel."""
    bump()
    x = np.zeros(4, np.float32)
    py.launch(cm_add.capture(np.float32(1)), x, size=4)
    py.launch(cm_add.capture(np.float32(10)), x, size=4)
    assert x[0] == 11
    assert (counts["launch"], counts["lookup"]) == (1, 1)
    py.launch(cm_add.capture(2.0), x, size=4)  # a Weak[float]: another instance type
    assert x[0] == 13
    assert (counts["launch"], counts["lookup"]) == (2, 2)


def test_a_pinned_launch_keeps_no_entry(counts):
    """Row '1. launch cells': nothing is kept while the task is pinned."""
    bump()
    _launch()
    w = latest()
    bump()
    for _ in range(2):
        specializer.invoke_in_world(w, _launch)
    assert counts["launch"] == 3  # each pinned launch looks up: no entry was kept
    assert counts["lookup"] == 1  # and finds the older world's entry in the cell


def test_py_lookup_with_the_test_backend_keys_on_context():
    """Row '2. specialized lookups' through a back-end's own call site: another context
    links again, the same one is the same result."""
    top, _ = _fresh()
    n = BACKEND.links
    a = pyfunction(top, (np.float32,), "cm-a")
    assert pyfunction(top, (np.float32,), "cm-a") is a
    b = pyfunction(top, (np.float32,), "cm-b")
    assert b is not a and BACKEND.links - n == 2


def test_launchers_of_one_class_each_keep_their_own_defaults():
    """Row 'invoker factories': two launchers of one class, each with a default context of
    its own; each launch with no context runs in its launcher's default."""
    from pybackend import _Items

    a, b = _Items(), _Items()
    a.set_default_context("cm-ctx-A")
    b.set_default_context("cm-ctx-B")

    @a.kernel
    def cm_where_a(x: a.Array[np.float32]) -> str:
        return "def cm_where_a(i, x): x[i] = ord(context[-1])"

    @b.kernel
    def cm_where_b(x: b.Array[np.float32]) -> str:
        return "def cm_where_b(i, x): x[i] = ord(context[-1])"

    x = np.zeros(1, np.float32)
    a.launch(cm_where_a, x, size=1)
    assert chr(int(x[0])) == "A"
    for _ in range(2):  # the first is the miss, the second the cell's entry
        b.launch(cm_where_b, x, size=1)
        assert chr(int(x[0])) == "B"


# -- OpenCL: launch cells by context, programs, argument-set records -------------------------

pyopencl = pytest.importorskip("pyopencl")
import pyopencl.array as cla  # noqa: E402

from specializer.backends import opencl as cl  # noqa: E402


@pytest.fixture
def cl_counts(monkeypatch):
    """OpenCL launch-cell misses, lookup-cell misses and program builds."""
    site = cl._site
    out = {"launch": 0, "lookup": 0, "builds": 0}
    real_lookup, real_link, real_build = site.lookup, site.link, pyopencl.Program.build

    def lookup(F, tt, key):
        out["launch"] += 1
        return real_lookup(F, tt, key)

    def link(F, tt, key):
        out["lookup"] += 1
        return real_link(F, tt, key)

    def build(self, *args, **kwargs):
        out["builds"] += 1
        return real_build(self, *args, **kwargs)

    monkeypatch.setattr(site, "lookup", lookup)
    monkeypatch.setattr(site, "link", link)
    monkeypatch.setattr(pyopencl.Program, "build", build)
    return out


CL_SOURCE = "\n".join(
    f"__kernel void {name}(__global int *x, int v) {{ x[get_global_id(0)] = v; }}"
    for name in ("cm_cl_fill", "cm_cl_fill_too")
)


@cl.kernel
def cm_cl_fill(x: cl.Array[np.int32], v: np.int32) -> str:
    return CL_SOURCE


@cl.kernel
def cm_cl_fill_too(x: cl.Array[np.int32], v: np.int32) -> str:  # the same source: one program
    return CL_SOURCE


def _new_context_queue():
    return pyopencl.CommandQueue(pyopencl.Context([cl.default_queue().device]))


def _cl_fill(queue, v=1, f=cm_cl_fill, **kw):
    x = cla.zeros(queue, 4, np.int32)
    cl.launch(f, x, np.int32(v), global_size=4, queue=queue, **kw)
    return x.get()[0]


def test_opencl_cells_key_on_the_context_and_take_the_queue_from_the_launch(cl_counts):
    """Row '1. launch cells': a queue of the same context is the same where (its entry hits
    and runs on that queue); a queue of another context is another where (a launch-cell
    miss, a lookup-cell miss, a build)."""
    q1 = _new_context_queue()
    q2 = pyopencl.CommandQueue(q1.context, q1.device)
    assert _cl_fill(q1, 1) == 1 and _cl_fill(q1, 2) == 2
    assert (cl_counts["launch"], cl_counts["lookup"], cl_counts["builds"]) == (1, 1, 1)
    assert _cl_fill(q2, 3) == 3
    assert (cl_counts["launch"], cl_counts["lookup"], cl_counts["builds"]) == (1, 1, 1)
    assert _cl_fill(_new_context_queue(), 4) == 4
    assert (cl_counts["launch"], cl_counts["lookup"], cl_counts["builds"]) == (2, 2, 2)
    assert _cl_fill(q1, 5) == 5  # q1's context's entry: a hit
    assert (cl_counts["launch"], cl_counts["lookup"]) == (2, 2)
    bump()
    assert _cl_fill(q1, 6) == 6
    assert (cl_counts["launch"], cl_counts["lookup"], cl_counts["builds"]) == (3, 3, 2)


PROGRAM_CASES = {
    # change -> (the second launch, builds)
    "same-source-same-options-same-context": (lambda q: _cl_fill(q, 2), 0),
    "same-source-of-another-kernel": (lambda q: _cl_fill(q, 2, cm_cl_fill_too), 0),
    "other-options": (lambda q: _cl_fill(q, 2, options=("-DCM=1",)), 1),
    "another-context": (lambda q: _cl_fill(_new_context_queue(), 2), 1),
}


@pytest.mark.parametrize("change", PROGRAM_CASES)
def test_opencl_programs_are_built_once_per_source_options_and_context(change, cl_counts):
    """Row '3. OpenCL programs': (source, options, headers) per context decide a program."""
    second, builds = PROGRAM_CASES[change]
    queue = _new_context_queue()  # a context of this case's own: its first launch builds
    assert _cl_fill(queue, 1) == 1
    assert cl_counts["builds"] == 1
    assert second(queue) == 2
    assert cl_counts["builds"] - 1 == builds


@cl.kernel
def cm_cl_header(x: cl.Array[np.int32]) -> str:
    return (
        '#include "cm_value.h"\n'
        "__kernel void cm_cl_header(__global int *x) { x[get_global_id(0)] = CM_VALUE; }"
    )


def _header_edit(tmp_path, monkeypatch, counts):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cm_value.h").write_text("#define CM_VALUE 5\n")
    queue = _new_context_queue()
    x = cla.zeros(queue, 4, np.int32)
    opts = ("-I", str(tmp_path))
    cl.launch(cm_cl_header, x, global_size=4, queue=queue, options=opts)
    assert x.get()[0] == 5 and counts["builds"] == 1
    (tmp_path / "cm_value.h").write_text("#define CM_VALUE 9\n")
    c = compile_count()
    bump()
    cl.launch(cm_cl_header, x, global_size=4, queue=queue, options=opts)
    assert x.get()[0] == 9
    assert compile_count() == c  # the code (its source) is the same: built again, not compiled


def test_opencl_program_is_built_again_when_an_included_header_changes(
    tmp_path, cl_counts, monkeypatch
):
    """Row '3. OpenCL programs': the included headers' contents are part of the key; a new
    world (the user's edit announced with ``bump()``) relinks with the new header."""
    _header_edit(tmp_path, monkeypatch, cl_counts)
    assert cl_counts["builds"] >= 2


def test_opencl_header_edit_builds_the_program_once(tmp_path, cl_counts, monkeypatch):
    """Row '3. OpenCL programs': one edit, one build."""
    _header_edit(tmp_path, monkeypatch, cl_counts)
    assert cl_counts["builds"] == 2


def test_opencl_argument_set_records_set_each_new_value(cl_counts):
    """Row '1. argument-set records': the record says what is set at each index; another
    array or scalar at an index is set again, the same one is not needed again."""
    queue = _new_context_queue()
    a, b = cla.zeros(queue, 4, np.int32), cla.zeros(queue, 4, np.int32)
    for x, v in ((a, 1), (a, 1), (b, 1), (a, 2), (b, 3)):
        cl.launch(cm_cl_fill, x, np.int32(v), global_size=4, queue=queue)
    assert a.get().tolist() == [2] * 4 and b.get().tolist() == [3] * 4
    assert cl_counts["launch"] == 1  # values decide the records, never the entry


# -- CUDA: NVRTC programs and the disk cache (no GPU needed) ----------------------------------


def _cuda():
    cuda = pytest.importorskip("specializer.backends.cuda")
    try:
        from specializer.backends.cuda import _nvrtc, _program

        _nvrtc.nvrtc_version()
    except Exception as e:  # no NVRTC: nothing to compile with
        pytest.skip(f"NVRTC unavailable: {e}")
    return cuda, _program


CU_SOURCE = 'extern "C" __global__ void {name}(int *x) {{ x[threadIdx.x] = {value}; }}'


def _cu_kernel(cuda, value=1):
    n = value  # a closure: each call defines a kernel of its own

    @cuda.kernel
    def cm_cu(x: cuda.Array[np.int32]) -> str:
        return CU_SOURCE.format(name="cm_cu", value=n)

    return cm_cu


CUDA_CASES = {
    # change -> (a value of the case's own source, code_ptx keyword arguments of the second
    # lookup, NVRTC compiles)
    "same-source-another-kernel": (101, {"arch": "sm_80"}, 0),
    "another-arch": (102, {"arch": "sm_90"}, 1),
    "other-options": (103, {"arch": "sm_80", "options": ("-DCM=1",)}, 1),
}


@pytest.mark.parametrize("change", CUDA_CASES)
def test_cuda_nvrtc_programs_are_keyed_on_source_arch_and_options(change, monkeypatch, tmp_path):
    """Row '3. CUDA NVRTC programs': another kernel of the same source reuses the program;
    another architecture or options compile again."""
    cuda, _program = _cuda()
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))  # an empty disk cache
    tt = (cuda.Array[np.int32],)
    value, kw, compiles = CUDA_CASES[change]
    n = _program.nvrtc_compiles()
    assert ".entry cm_cu" in cuda.code_ptx(_cu_kernel(cuda, value), tt, arch="sm_80")
    assert _program.nvrtc_compiles() - n == 1
    cuda.code_ptx(_cu_kernel(cuda, value), tt, **kw)  # another kernel, its source the same
    assert _program.nvrtc_compiles() - n - 1 == compiles


def test_cuda_disk_cache_serves_a_later_process_and_misses_on_another_source(monkeypatch, tmp_path):
    """Row 'CUDA PTX and cubins on disk': with the in-memory programs gone (as in a later
    process), the same source and options are read from disk; another source compiles."""
    cuda, _program = _cuda()
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    tt = (cuda.Array[np.int32],)
    n = _program.nvrtc_compiles()
    ptx = cuda.code_ptx(_cu_kernel(cuda, 111), tt, arch="sm_80")
    assert _program.nvrtc_compiles() - n == 1
    monkeypatch.setattr(_program, "_programs", type(_program._programs)())  # a new process
    assert cuda.code_ptx(_cu_kernel(cuda, 111), tt, arch="sm_80") == ptx
    assert _program.nvrtc_compiles() - n == 1  # from disk
    cuda.code_ptx(_cu_kernel(cuda, 112), tt, arch="sm_80")
    assert _program.nvrtc_compiles() - n == 2


# -- template renders on disk (`specializer.codegen.render`) ---------------------------------

# In a fresh process with an empty cache directory, one template of a directory of its own
# rendered with a change of one input at a time: what the render gave, whether it matched a
# render with the caches off, and how many renders are kept (a miss keeps one more).
RENDERS = """
import json, pathlib, sys, os
from specializer import codegen
tpl, kept = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]) / "templates"
codegen.add_template_dir(tpl)
out = []

def render(change, **params):
    text = codegen.render("cm_shape.py.j2", **params)
    os.environ["SPECIALIZER_CACHE_DIR"] = ""  # the same render, kept nowhere
    direct = codegen.render("cm_shape.py.j2", **params)
    os.environ["SPECIALIZER_CACHE_DIR"] = sys.argv[2]
    out.append([change, text == direct, len(list(kept.iterdir()))])
    return text

first = render("first", name="f", n=1, flag=True, kinds=["a", "b"])
assert first.startswith("def f(x):"), first
render("another-name", name="g__2", n=1, flag=True, kinds=["a", "b"])
render("same-again", name="f", n=1, flag=True, kinds=["a", "b"])
render("another-n", name="f", n=2, flag=True, kinds=["a", "b"])
render("another-flag", name="f", n=1, flag=False, kinds=["a", "b"])
render("another-kinds", name="f", n=1, flag=True, kinds=["a", "c"])
render("one-more-parameter", name="f", n=1, flag=True, kinds=["a", "b"], other=True)
(tpl / "cm_shape.py.j2").write_text((tpl / "cm_shape.py.j2").read_text() + "# edited\\n")
render("template-file-edited", name="f", n=1, flag=True, kinds=["a", "b"])
(tpl / "cm_other.j2").write_text("{# a template it does not use #}")
render("another-template-file", name="f", n=1, flag=True, kinds=["a", "b"])
codegen._jinja_identity = lambda: "another Jinja"
codegen._identity.clear()  # (as a later process, which digests the files again)
render("another-jinja", name="f", n=1, flag=True, kinds=["a", "b"])
print(json.dumps(out))
"""

TEMPLATE = """\
def {{ name }}(x):
    {{ name }}_calls = 0
    return x + {{ n }}{% if flag %} * 2{% endif %}{% for k in kinds %} + {{ k }}{% endfor %}
{% if other is defined and other %}
# the other branch
{% endif %}
"""


def test_template_renders_on_disk_miss_on_each_input_alone_and_not_on_the_name(tmp_path):
    """Row 'template renders on disk': the key is (the template files' and Jinja's identity,
    the template, every parameter but the name); every kernel of one shape shares a render,
    and each render is exactly the one Jinja gives with the name."""
    import json
    import os
    import subprocess
    import sys

    tpl = tmp_path / "tpl"
    tpl.mkdir()
    (tpl / "cm_shape.py.j2").write_text(TEMPLATE)
    cache = tmp_path / "cache"
    env = {**os.environ, "SPECIALIZER_CACHE_DIR": str(cache)}
    env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    r = subprocess.run(
        [sys.executable, "-c", RENDERS, str(tpl), str(cache)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert all(exact for _, exact, _ in seen), seen
    kept = {change: n for change, _, n in seen}
    assert kept == {
        "first": 1,
        "another-name": 1,
        "same-again": 1,
        "another-n": 2,
        "another-flag": 3,
        "another-kinds": 4,
        "one-more-parameter": 5,
        "template-file-edited": 6,
        "another-template-file": 7,
        "another-jinja": 8,
    }
