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
