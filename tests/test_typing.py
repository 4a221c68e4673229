"""Users' scripts in the documented style type-check: ``mypy --strict`` and ``pyright`` pass on
``tests/typing/`` with no error code turned off (``Array[np.float32]``, ``Array[np.floating]``
with ``x.dtype``, the decorators, ``launch``, ``clfunction``, struct dtypes through
``typing.Annotated``, methods added with ``@fill.method`` on a ``def _``), and catch a
mistake there; the OpenCL scripts also run."""

from __future__ import annotations

import importlib.util
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "typing"

# A launch without its required global_size: both checkers must see launch's signature.
BAD = """\
import numpy as np
import pyopencl.array as cla
from specializer.backends import opencl as cl

@cl.kernel
def fill(x: cl.Array[np.number], v: np.number) -> str:
    return f"{cl.ctype(x.dtype)}"

x = cla.zeros(cl.default_queue(), 4, np.float32)
cl.launch(fill, x, np.float32(3))
"""


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(
            f"{module} is not installed (it is in the test extra: "
            ".venv/bin/pip install -e '.[test]' --config-settings editable_mode=compat)"
        )


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    # The checkout first on the checkers' path (as the README's editable install puts it), so
    # that they check this tree whatever else the environment has installed.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    _needs("mypy")
    return _run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *map(str, paths)])


def _pyright(*paths: Path) -> subprocess.CompletedProcess[str]:
    _needs("pyright")
    # --pythonpath: this interpreter's packages (pyopencl, numpy), not whatever python is on PATH
    return _run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, *map(str, paths)])


@pytest.mark.slow
def test_mypy_strict_passes_on_users_scripts():
    r = _mypy(SCRIPTS)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_pyright_passes_on_users_scripts():
    r = _pyright(SCRIPTS)
    assert r.returncode == 0 and "0 errors" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_the_checkers_see_launchs_signature(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(BAD, encoding="utf-8")
    r = _mypy(bad)
    assert r.returncode == 1 and 'Missing named argument "global_size"' in r.stdout, r.stdout
    r = _pyright(bad)
    assert r.returncode == 1 and '"global_size"' in r.stdout, r.stdout


def test_the_opencl_script_runs():
    pytest.importorskip("pyopencl")
    runpy.run_path(str(SCRIPTS / "opencl_user.py"), run_name="__main__")


def test_the_methods_script_runs():
    pytest.importorskip("pyopencl")
    runpy.run_path(str(SCRIPTS / "methods_user.py"), run_name="__main__")


def test_the_cuda_script_defines_its_kernels():
    runpy.run_path(str(SCRIPTS / "cuda_user.py"))  # (main() launches: it needs a GPU)


def test_annotated_dtypes_are_the_runtime_types():
    from typing import Annotated

    import numpy as np

    from specializer.backends import cuda
    from specializer.types import Struct, argument_type

    pair = np.dtype([("x", np.float32), ("n", np.int32)])
    assert argument_type(Annotated[Struct, pair]) is Struct[pair]
    assert argument_type(Annotated[cuda.Array[np.void], pair]) is cuda.Array[pair]
    assert argument_type(Annotated[cuda.Array[np.float32], "a note"]) is cuda.Array[np.float32]
    assert argument_type(np.float32) is np.float32
    with pytest.raises(TypeError, match="not below"):
        argument_type(Annotated[cuda.Array[np.void], np.dtype(np.float32)])
    with pytest.raises(TypeError, match="more than one dtype"):
        argument_type(Annotated[Struct, pair, pair])
    with pytest.raises(TypeError, match="goes with"):
        argument_type(Annotated[np.float32, pair])
