"""Command line: ``python -m specializer {demo,dump,precompile}``.

- ``demo``: run the OpenCL demo on PoCL (kernels, redefinition, launch costs).
- ``dump [--out DIR] SCRIPT_OR_MODULE [ARGS...]``: run a program, then print (or write one
  file per function to DIR) every function generated while it ran.
- ``precompile -- CMD [ARGS...]``: run a build command with precompile-output mode on.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
from pathlib import Path

from .codegen import generated_sources, write_atomic
from .precompile import ENV_VAR, refuse_write


def _run_program(target: str, args: list[str]) -> int:
    """Run a script path or a module name as ``__main__``; returns its exit status."""
    saved = sys.argv[:]
    sys.argv = [target, *args]
    try:
        if target.endswith(".py") or os.path.sep in target or Path(target).is_file():
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0


def dump(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m specializer dump",
        description="Run a program and show every function specializer generated while it ran.",
    )
    p.add_argument("--out", metavar="DIR", help="write one file per function into DIR")
    p.add_argument("target", metavar="SCRIPT_OR_MODULE")
    p.add_argument("args", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    if ns.out:
        refuse_write(ns.out)  # before running anything: nothing half-done
    status = _run_program(ns.target, ns.args)
    sources = generated_sources()
    if ns.out:
        out = Path(ns.out)
        out.mkdir(parents=True, exist_ok=True)
        for g in sources:
            write_atomic(out / f"{g.name}.py", f"# {g.specialization}\n{g.source}")
        print(f"wrote {len(sources)} generated function(s) to {out}", file=sys.stderr)
    else:
        for g in sources:
            print(f"# --- {g.name}: {g.specialization}\n{g.source}")
    return status


def precompile(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m specializer precompile -- CMD [ARGS...]", file=sys.stderr)
        return 2
    env = {**os.environ, ENV_VAR: "1"}
    try:
        return subprocess.call(argv, env=env)
    except FileNotFoundError:
        print(f"precompile: command not found: {argv[0]}", file=sys.stderr)
        return 127


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = {"dump": dump, "precompile": precompile}
    if argv and argv[0] == "demo":
        from .demo import main as demo

        return demo(argv[1:])
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
