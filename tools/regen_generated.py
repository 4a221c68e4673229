"""Regenerate ``generated/``: the reviewed output of the templates for a fixed set of
specializations (those the bundled demo uses).

Run ``python tools/regen_generated.py`` after changing a template, review the diff of
``generated/``, and commit both. ``tests/test_generated.py`` fails while they differ.
``--check`` only compares and exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specializer.codegen import identifier, render, write_atomic
from specializer.lookup import ENTRIES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "generated"

# (template, name parts, parameters): what a process running the demo generates.
_DEMO_LOOKUPS = [
    ("fill", "Array[np.float32]", "float32"),
    ("fill", "Array[np.int64]", "int64"),
    ("axpy", "np.float32", "Array[np.float32]", "Array[np.float32]"),
    ("apply", "Array[np.float32]"),
    ("acc", "Array[np.float32]", "float32"),
]
_DEMO_OPENCL_LAUNCHERS = [
    (("Array[np.float32]", "np.float32"), ["array", "scalar"]),
    (("Array[np.int64]", "np.int64"), ["array", "packed"]),
    (("np.float32", "Array[np.float32]", "Array[np.float32]"), ["scalar", "array", "array"]),
    (("Array[np.float32]",), ["array"]),
]
DEMO: list[tuple[str, tuple[str, ...], dict]] = [
    *(
        ("lookup.py.j2", ("lookup", "link", *sig, "tuple", "LinkedKernel"), {"entries": ENTRIES})
        for sig in _DEMO_LOOKUPS
    ),
    *(
        ("opencl_launch.py.j2", ("opencl_launch", *tt), {"kinds": kinds})
        for tt, kinds in _DEMO_OPENCL_LAUNCHERS
    ),
]
# The CUDA back-end's launchers for the same kernel signatures (the demo runs on OpenCL).
CUDA: list[tuple[str, tuple[str, ...], dict]] = [
    (
        "cuda_launch.py.j2",
        ("cuda_launch", *tt),
        {
            "kinds": [
                "array" if t.startswith("Array[") else "int64" if t == "np.int64" else "scalar"
                for t in tt
            ]
        },
    )
    for tt, _ in _DEMO_OPENCL_LAUNCHERS
]
SPECIALIZATIONS = DEMO + CUDA


def render_all(specializations=SPECIALIZATIONS) -> dict[str, str]:
    """{file name: content} for every reviewed specialization."""
    files = {}
    for template, parts, params in specializations:
        name = identifier(*parts)
        header = (
            f"# Generated from templates/{template} by tools/regen_generated.py; do not edit.\n"
        )
        files[f"{name}.py"] = header + render(template, name=name, **params)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = p.parse_args(argv)
    from specializer.precompile import PrecompileOutputError, refuse_write

    if not args.check:  # refused in precompile-output mode before anything is touched
        try:
            refuse_write(OUT)
        except PrecompileOutputError as e:
            print(f"regen_generated: nothing changed: {e}", file=sys.stderr)
            return 1
    files = render_all()
    stale = sorted(set(f.name for f in OUT.glob("*.py")) - set(files))
    differ = sorted(
        n for n, text in files.items() if not (OUT / n).is_file() or (OUT / n).read_text() != text
    )
    if args.check:
        for n in differ + stale:
            print(f"generated/{n} is out of date", file=sys.stderr)
        return 1 if differ or stale else 0
    OUT.mkdir(exist_ok=True)
    for n in differ:
        write_atomic(OUT / n, files[n])
    for n in stale:
        (OUT / n).unlink()
    print(f"generated/: {len(differ)} written, {len(stale)} removed, {len(files)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
