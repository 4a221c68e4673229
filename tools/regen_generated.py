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

import numpy as np

from specializer.codegen import identifier, render
from specializer.dump import write_set
from specializer.lookup import ENTRIES
from specializer.types import Struct, Weak

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "generated"
HEADER = "# Generated from templates/{template} by tools/regen_generated.py; do not edit.\n"


def _lookup(kernel: str, *types: str) -> tuple[str, tuple[str, ...], dict]:
    """The specialized cached lookup of one kernel signature at the back-ends' one call site."""
    return (
        "lookup.py.j2",
        ("lookup", "uncached_lookup", kernel, *types, "tuple", "object"),
        {"entries": ENTRIES},
    )


def _parts(launcher) -> list[tuple[str, tuple[str, ...], dict]]:
    """A back-end's launch, cell function, lookup's where and HostKernel call."""
    out = []
    for part in ("launch", "cell", "where", "host"):
        parts, params = launcher.part_params(part)
        out.append((launcher.template, parts, params))
    return out


def _invokers(launcher, *signatures) -> list[tuple[str, tuple[str, ...], dict]]:
    """A back-end's invokers for ``signatures``: (captured types or None, argument types,
    the concrete types they take)."""
    out = []
    for instance, tt, resolved in signatures:
        parts, params, _ = launcher.invokers.params(instance, tt, resolved)
        out.append((launcher.template, parts, params))
    return out


def _specializations() -> tuple[list, list]:
    """(what the bundled demo generates, the other reviewed launch paths)."""
    from specializer.backends import opencl as cl
    from specializer.backends.cuda import _launch as cu

    F32 = (cl.Array[np.float32], np.float32)
    float4 = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("w", "<f4")])
    demo = [
        *_parts(cl._launcher),
        *(_lookup(k, "Array[np.float32]", "float32") for k in ("scale", "shift", "acc")),
        *_invokers(cl._launcher, (None, F32, F32)),
    ]
    more = _invokers(
        cl._launcher,
        (None, (cl.Buffer, cl.LocalMemory, Weak[int]), (cl.Buffer, cl.LocalMemory, np.int32)),
        (None, *((cl.Image, cl.Sampler, cl.Array[np.float32]),) * 2),
        (None, *((Struct[float4], cl.Array[np.float32]),) * 2),
        (
            (np.float32,),
            (cl.Array[np.float32], cl.Array[np.float32]),
            (np.float32, cl.Array[np.float32], cl.Array[np.float32]),
        ),
    )
    A = cu.Array
    more += _parts(cu._launcher)
    more += _invokers(
        cu._launcher,
        (None, *((A[np.float32], np.float32),) * 2),
        (None, (A[np.float32], Weak[int]), (A[np.float32], np.int32)),
        (None, *((Struct[float4], np.float16, A[np.float16]),) * 2),
    )
    return demo, more


DEMO, MORE = _specializations()
SPECIALIZATIONS = DEMO + MORE


def render_all(specializations=SPECIALIZATIONS) -> dict[str, str]:
    """{file name: content} for every reviewed specialization."""
    files = {}
    for template, parts, params in specializations:
        name = identifier(*parts)
        files[f"{name}.py"] = HEADER.format(template=template) + render(
            template, name=name, **params
        )
    return files


def _reviewed(path: Path) -> bool:
    """Whether ``path`` holds only Python files (generated/ is this tool's; nothing else in it
    may be lost when it is replaced whole)."""
    return all(f.suffix == ".py" and f.is_file() for f in path.iterdir())


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
    if differ or stale:  # the whole set, or nothing: written beside generated/, renamed in
        write_set(OUT, sorted(files.items()), owned=_reviewed)
    print(f"generated/: {len(differ)} written, {len(stale)} removed, {len(files)} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
