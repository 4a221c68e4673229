import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from regen_generated import DEMO, render_all  # noqa: E402

import specializer  # noqa: E402


def test_templates_still_render_to_the_reviewed_output_in_generated():
    files = render_all()
    on_disk = {p.name: p.read_text() for p in (ROOT / "generated").glob("*.py")}
    assert set(on_disk) == set(files), (
        "generated/ lists other files than the templates render; "
        "run `python tools/regen_generated.py` and review the diff"
    )
    for name, text in files.items():
        assert on_disk[name] == text, (
            f"generated/{name} no longer matches its template; "
            "run `python tools/regen_generated.py` and review the diff"
        )


def test_reviewed_output_compiles():
    for name, text in render_all().items():
        compile(text, name, "exec")


def test_generated_holds_exactly_what_the_demo_generates():
    import subprocess

    import pytest

    pytest.importorskip("pyopencl")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specializer",
            "dump",
            str(Path(specializer.__file__).with_name("demo.py")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    dumped = {}
    for block in r.stdout.split("# --- ")[1:]:
        name, _, rest = block.partition(": ")
        dumped[name] = rest.split("\n", 1)[1].rstrip("\n") + "\n"
    files = render_all(DEMO)
    assert {f"{n}.py" for n in dumped} == set(files), (
        "the demo generates other functions than generated/ holds; update SPECIALIZATIONS in "
        "tools/regen_generated.py and run it"
    )
    for name, source in dumped.items():
        assert files[f"{name}.py"].split("\n", 1)[1] == source


# -- generated code read at a glance (SPEC 10): lines of at most 100 columns, the launch
# body once, in the invoker ------------------------------------------------------------------

#: what each back-end's `invoke` block calls once per launch: once in an invoker, nowhere else
LAUNCH_MARKERS = {
    "opencl_launch.py.j2": ("_enqueue(", "_take()", "_sizes("),
    "cuda_launch.py.j2": ("_launch(_function", "_dim3(grid", "_cooperative("),
    "python_launch.py.j2": ("for i in range(size):", "_size(size)"),
}


def _too_long(text):
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if len(line) > 100]


def test_every_line_in_generated_is_at_most_100_columns():
    for path in sorted((ROOT / "generated").glob("*.py")):
        assert _too_long(path.read_text()) == [], path.name


def _fresh_entries():
    """Entries rendered now, the reviewed ones and wider ones: a dozen parameters of every
    kind, captured values, the test suite's pure-Python back-end."""
    import numpy as np

    from specializer.backends import opencl as cl
    from specializer.backends.cuda import _launch as cu
    from specializer.codegen import render
    from specializer.types import Struct, Weak

    sys.path.insert(0, str(ROOT / "tests"))
    from pybackend import py

    float4 = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("w", "<f4")])
    A, CA = cl.Array[np.float64], cu.Array[np.float64]
    wide_cl = (A, cl.Buffer, cl.LocalMemory, cl.Sampler, cl.Image, Struct[float4], np.int8)
    wide_cu = (CA, Struct[float4], np.float16, np.int8, CA, CA)
    cases = [
        (
            cl._launcher,
            wide_cl + (Weak[int], Weak[float]) * 3,
            wide_cl + (np.int32, np.float32) * 3,
            0,
        ),
        (cl._launcher, wide_cl, wide_cl, 3),
        (
            cu._launcher,
            wide_cu + (Weak[int], Weak[float]) * 3,
            wide_cu + (np.int64, np.float16) * 3,
            0,
        ),
        (cu._launcher, wide_cu, wide_cu, 2),
        (
            py.launcher,
            (py.Array[np.float32], Weak[int]) * 6,
            (py.Array[np.float32], np.int16) * 6,
            1,
        ),
    ]
    out = {}
    for n, (launcher, full, resolved, ncap) in enumerate(cases, 90):
        instance = full[:ncap] if ncap else None
        parts, params, _ = launcher.invokers.params(instance, full[ncap:], resolved)
        name = f"{parts[0]}__{n}"  # numbered, as a later invoker of one name is
        out[name] = (launcher.template, render(launcher.template, name=name, **params))
        for part in ("launch", "cell", "where", "host"):
            parts, params = launcher.part_params(part)
            name = f"{parts[0]}_{parts[1]}__{n}"
            out[name] = (launcher.template, render(launcher.template, name=name, **params))
    return out


def test_freshly_rendered_entries_are_at_most_100_columns_wide():
    for name, (template, source) in _fresh_entries().items():
        assert _too_long(source) == [], (template, name)
        compile(source, name, "exec")


def test_an_invoker_holds_its_launch_body_once_and_nothing_else_does():
    # launch, a kernel's cell and a HostKernel's call all run the signature's invoker
    files = {
        name: (template, text)
        for name, text in render_all().items()
        for template in LAUNCH_MARKERS
        if name.startswith(template.split("_")[0] + "_")
    }
    files.update(_fresh_entries())
    invokers = {name: f for name, f in files.items() if "_invoker_" in name}
    assert len(invokers) == 13 and len(files) > 2 * len(invokers)
    for name, (template, source) in files.items():
        for marker in LAUNCH_MARKERS[template]:
            assert source.count(marker) == (1 if name in invokers else 0), (name, marker)
        assert not re.search(r"\bk\[\d", source), name  # a pool record's fields by name
