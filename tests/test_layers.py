"""The back-end packages' modules, and the core's dispatch modules, are layered without a circle
(read with ``ast``, nothing run).

Each module imports, at module level, only modules of lower layers, and no function imports a
sibling module (the way a circle used to be broken at run time). A lower layer that needs to
call up has a hook the higher one sets at import (CUDA's ``_driver.on_forget``); a test
checks it is set. CUDA's driver keeps its own record of device use (``_driver.check_use``),
calling nothing above it. Few private names cross from one module to another (read the same
way).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specializer

CORE = Path(specializer.__file__).resolve().parent  # under test
BACKENDS = CORE / "backends"

#: lowest first: a module may import (at module level) only the modules before it
CUDA_LAYERS = [
    "_driver",  # driver calls, the probe, contexts, streams
    "_array",  # CuArray, Array[dtype], foreign arrays' pointers
    "_types",  # argument types: typeof (what a value dispatches as), its C type
    "_decorators",  # the definitions: @kernel, @device, capture
    "_params",  # parameter buffers: how a launch's arguments are laid out
    "_diskcache",  # PTX and cubins on disk
    "_cxx",  # what is read of C++: a source's kernels, a mangled name's parameters
    "_ptx",  # what is read of PTX: parameters checked against argument types, variables
    "_nvrtc",  # NVRTC's binding: its checker, error, version, architectures
    "_toolkit",  # the toolkit's header directories, and a missing header's hint
    "_source",  # KernelSource, and the program a compiler job makes
    "_program",  # NVRTC compilation, its disk cache, the programs of a source
    "_module",  # modules loaded into contexts, LinkedKernel
    "_compiler",  # the Backend: compile, link, the config of compiler keyword arguments
    "_launch",  # the Launcher, HostKernel, launch, cufunction
    "__init__",  # the public API
]

OPENCL_LAYERS = [
    "_args",  # argument kinds: Array[dtype], Buffer, ...; typeof, ctype, scalar packing
    "_cdecl",  # what is read of OpenCL C: a kernel's parameters, checked against argument types
    "_queues",  # the default queue, context keys, each queue's table
    "_sizes",  # work sizes checked and converted
    "_decorators",  # the definitions: @kernel, @device, capture
    "_failures",  # a failed launch's messages: the argument or work size, and why
    "_program",  # programs, the Backend, LinkedKernel, a failed build's message
    "_launch",  # configs, HostKernel, the Launcher, clfunction, launch
    "__init__",  # the public API
]

LAYERS = {"cuda": CUDA_LAYERS, "opencl": OPENCL_LAYERS}
PACKAGE_MODULES = [(package, m) for package, layers in LAYERS.items() for m in layers]

#: The core's world age, dispatch and compiled-code cache, lowest first: each imports (at
#: module level, ``TYPE_CHECKING`` included) only the ones before it; a lower one that must
#: reach up takes a ``Protocol`` or a listener (``backedges.on_invalidate``).
DISPATCH_LAYERS = [
    "world",  # world age: the counter, pins, the world lock, a definition's publication
    "signatures",  # argument-type tuples: read, checked, compared, spelled
    "backedges",  # edges on dispatches, the ones a definition ends, its listeners
    "methods",  # generic functions: methods, the table value, definitions, dispatch
    "compiler",  # compiler jobs, the compiled-code cache, compile hooks
]


def _modules(package: str = "cuda") -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted((BACKENDS / package).glob("*.py"))
    }


def _siblings(node: ast.Import | ast.ImportFrom, module: str, package: str) -> list[str]:
    """The modules of ``package`` (``""``: the core) that an import statement in ``module``
    imports."""
    prefix = f"specializer.backends.{package}" if package else "specializer"
    names: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith(prefix + "."):
                names.append(alias.name[len(prefix) + 1 :].split(".")[0])
        return names
    if node.level == 0:
        base = node.module or ""
    else:
        parts = prefix.split(".")  # __init__'s package and a submodule's are the same
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        if node.module:
            base = f"{base}.{node.module}" if base else node.module
    if base == prefix:  # from . import _params, _types
        names.extend(alias.name for alias in node.names)
    elif base.startswith(prefix + "."):
        names.append(base[len(prefix) + 1 :].split(".")[0])
    return names


def _imports(
    tree: ast.Module, module: str, package: str = "cuda"
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(module-level, in-function) imports of sibling modules: (line, sibling) pairs. An
    import in a class body or under ``if``/``try`` at module level counts as module level."""
    top: list[tuple[int, str]] = []
    inner: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for name in _siblings(child, module, package):
                    (inner if in_function else top).append((child.lineno, name))
            nested = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            visit(child, nested)

    visit(tree, False)
    return top, inner


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_the_layer_list_names_every_module_of_the_package(package: str) -> None:
    assert sorted(_modules(package)) == sorted(LAYERS[package])


@pytest.mark.parametrize(("package", "module"), PACKAGE_MODULES)
def test_a_module_imports_only_lower_layers(package: str, module: str) -> None:
    layers = LAYERS[package]
    top, _ = _imports(_modules(package)[module], module, package)
    higher = [
        f"{module}.py:{line} imports {name}"
        for line, name in top
        if name not in layers or layers.index(name) >= layers.index(module)
    ]
    assert not higher, f"a module may import only the layers below it ({layers}): {higher}"


@pytest.mark.parametrize(("package", "module"), PACKAGE_MODULES)
def test_no_function_imports_a_sibling_module(package: str, module: str) -> None:
    _, inner = _imports(_modules(package)[module], module, package)
    found = [f"{module}.py:{line} imports {name} in a function" for line, name in inner]
    assert not found, f"import it at module level (a lower layer), or set a hook: {found}"


@pytest.mark.parametrize("module", DISPATCH_LAYERS)
def test_a_dispatch_module_imports_only_lower_layers(module: str) -> None:
    tree = ast.parse((CORE / f"{module}.py").read_text(encoding="utf-8"))
    top, inner = _imports(tree, module, "")
    higher = [
        f"{module}.py:{line} imports {name}"
        for line, name in (*top, *inner)
        if name in DISPATCH_LAYERS and DISPATCH_LAYERS.index(name) >= DISPATCH_LAYERS.index(module)
    ]
    assert not higher, f"a module may import only the layers below it ({DISPATCH_LAYERS}): {higher}"


def test_the_reader_sees_each_form_of_import() -> None:
    src = (
        "from . import _driver, _array\n"
        "from ._types import typeof\n"
        "import specializer.backends.cuda._params\n"
        "from specializer.backends.cuda._compiler import BACKEND\n"
        "from ... import launching\n"
        "def f():\n"
        "    from ._launch import _launcher\n"
    )
    top, inner = _imports(ast.parse(src), "_x")
    assert [name for _, name in top] == ["_driver", "_array", "_types", "_params", "_compiler"]
    assert inner == [(7, "_launch")]
    core = (
        "from . import world as _world\n"
        "from .backedges import on_invalidate\n"
        "if TYPE_CHECKING:\n"
        "    from .compiler import CodeInstance\n"
        "from .backends.cuda import _driver\n"
    )
    top, _ = _imports(ast.parse(core), "methods", "")
    assert [name for _, name in top] == ["world", "backedges", "compiler", "backends"]


def test_the_higher_layers_set_the_hooks_of_the_lower() -> None:
    pytest.importorskip("cuda.bindings")
    from specializer.backends.cuda import _driver, _launch, _module

    assert f"specializer's {_launch._launcher.name} back-end" == _driver.FORK_WHAT
    assert _module._forget_modules in _driver.on_forget


def test_a_context_gone_drops_the_modules_loaded_into_it() -> None:
    """The driver forgets a context through the modules' hook (no GPU: a stand-in)."""
    pytest.importorskip("cuda.bindings")
    from specializer.backends.cuda import _driver, _module

    class StandIn:  # a ContextKey holds its context weakly: anything weakly referable
        pass

    ctx = StandIn()
    token = _driver.ContextKey(ctx)  # type: ignore[arg-type]
    _module._modules[token] = {"program": object()}
    _driver._forget(token)
    assert token not in _module._modules


def _private_names_taken_across_modules(package: Path = CORE) -> set[tuple[str, str, str]]:
    """(taker, module, name) for each private name (``_x``, not ``__x__``) one module of
    ``package`` takes from another: ``from .m import _x``, or ``m._x`` where ``m`` is a module
    of the package imported by name."""
    root = package.parent
    private = lambda n: n.startswith("_") and not n.startswith("__")  # noqa: E731

    def is_module(dotted: str) -> bool:
        path = root / dotted.replace(".", "/")
        return path.with_suffix(".py").exists() or (path / "__init__.py").exists()

    found: set[tuple[str, str, str]] = set()
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        taker = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules: dict[str, str] = {}  # a local name bound to a module of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = parts if is_package else parts[:-1]
                if node.level:
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != package.name:
                    continue
                for alias in node.names:
                    if is_module(f"{source}.{alias.name}"):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif private(alias.name) and source != taker:
                        found.add((taker, source, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package.name and alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and modules[node.value.id] != taker
                and private(node.attr)
            ):
                found.add((taker, modules[node.value.id], node.attr))
    return found


def test_few_private_names_are_taken_across_modules() -> None:
    # What one module shares with another is public within the package's private modules; the
    # names left are the OpenCL package's own launcher and the site its errors name.
    opencl = "specializer.backends.opencl"
    assert _private_names_taken_across_modules() == {
        (opencl, f"{opencl}._launch", "_launcher"),
        (opencl, f"{opencl}._launch", "_site"),
    }


def test_the_private_name_reader_sees_each_form(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import _x, y\n")
    (pkg / "a.py").write_text("_x = y = 1\n_own = 2\nfrom .a import _own\n")
    (pkg / "b.py").write_text("from . import a\nimport pkg.a as aa\nprint(a._x, aa._z, a.y)\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import _w\nfrom pkg import b\nb._v\n")
    assert _private_names_taken_across_modules(pkg) == {
        ("pkg", "pkg.a", "_x"),
        ("pkg.b", "pkg.a", "_x"),
        ("pkg.b", "pkg.a", "_z"),
        ("pkg.sub.c", "pkg.a", "_w"),
        ("pkg.sub.c", "pkg.b", "_v"),
    }
