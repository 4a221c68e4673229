"""Command line: python -m specializer {demo,dump,precompile} (also installed as `specializer`);
each command's help below says what it does, and the dump's work is :mod:`specializer.dump`'s."""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .dump import ShowAtExit, check_out, check_program, collect_device_sources, run_program
from .precompile import ENV_VAR

COMMANDS = ("demo", "dump", "precompile")

DESCRIPTION = """\
specializer: per-launch kernel lookups that are nearly free and exactly right
(a port of GPUCompiler.jl's cached_lookup)."""

EPILOG = """\
examples:
  {prog} demo
  {prog} dump my_script.py --size 1024
  {prog} dump --out generated_here my_package.my_module
  {prog} precompile -- python -m build

Run '{prog} COMMAND --help' for what a command does, its options and an example."""

DEMO_HELP = """\
Run the OpenCL demo on PoCL's CPU device (about a second; a first run also builds
its kernels, a few seconds more). It runs the same kernels through a naive cache
(a dict keyed on kernel and argument types) and through specializer, side by
side: after a more specific method is defined, and after a device function is
redefined (only the kernel calling it recompiles), the naive cache runs the old
code and specializer the new; a task pinned to an older world runs that world's
code. Then it times one launch (launch(), a HostKernel call, typed pyopencl and a
bare enqueue): CPU time per launch, the median of ROUNDS interleaved rounds of
LAUNCHES launches each. Needs pyopencl and PoCL: pip install -e '.[opencl]' in a
checkout. Exits 1 if any result differs from numpy's."""

DEMO_EPILOG = """\
example:
  {prog} --launches 500 --rounds 3"""

DUMP_HELP = """\
Run a program (a script path or a module name, as python would run it, with ARGS as
its arguments), then show every function specializer generated while it ran: its
name, the specialization it serves and its source. They are collected when the
program ends as Python ends it, its non-daemon threads and exit handlers done, and
shown by the process that started as dump only (not by a child it forks). Without
--out they are printed after the program's own output; with --out DIR they are
written one file per function, and DIR is replaced by the new set as a whole (it
then holds the whole new set or, on any failure, the previous one), keeping DIR's
permissions. DIR must be new, empty, or the output of an earlier dump. The exit
status is the program's; what was generated is shown even when the program fails.
Writing is refused in precompile-output mode ({env}=1).

With --device-source, the device source of every kernel the program looked up (each
distinct source once, with the kernel, its argument types, its back-end and the options
it was built with: its methods' KernelSource options, then the launch's) follows,
printed or written as DEVICE_<backend>_<kernel>_<types>.cl (.cu for CUDA, .device for
another back-end). It is collected by a compile hook (specializer.device_code) that is
on while the program runs, so every launch takes the slow path, as inside such a block:
same results, slower launches."""

DUMP_EPILOG = """\
examples:
  {prog} my_script.py --size 1024
  {prog} --out dumped my_package.my_module
  {prog} --device-source my_script.py"""

PRECOMPILE_HELP = """\
Run a build command with precompile-output mode on ({env}=1
in its environment): cached lookups store nothing and writing generated source is
refused, because what would be stored is tied to this process's worlds. Everything
after '--' (or from the first argument on) is the command and its arguments. The
exit status is the command's (127 if it is not found, 128+N if signal N ends it)."""

PRECOMPILE_EPILOG = """\
examples:
  {prog} -- .venv/bin/python -m build
  {prog} .venv/bin/python setup.py build_ext
(name the virtual environment's python: a bare 'python' is whichever PATH finds)"""


def _fail(prog: str, message: str, status: int = 2) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    prog = "python -m specializer" if Path(sys.argv[0]).name == "__main__.py" else "specializer"
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, epilog=EPILOG.format(prog=prog), formatter_class=fmt
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)

    def command(name: str, help: str, text: str, epilog: str, usage: str = "") -> Any:
        return sub.add_parser(
            name,
            help=help,
            usage=f"{prog} {name} [-h] {usage}" if usage else None,
            description=text.format(env=ENV_VAR),
            epilog=epilog.format(prog=f"{prog} {name}"),
            formatter_class=fmt,
        )

    demo = command(
        "demo",
        "run the OpenCL demo on PoCL (why a kernel cache needs the world age; launch costs)",
        DEMO_HELP,
        DEMO_EPILOG,
    )
    # The demo's own parser gives the defaults and checks the values.
    for flag, what in (
        ("--launches", "launches per timed round (default 3000)"),
        ("--rounds", "timed rounds per variant (default 7)"),
    ):
        demo.add_argument(flag, default=argparse.SUPPRESS, help=what)

    dump = command(
        "dump",
        "run a program and show every function specializer generated while it ran",
        DUMP_HELP,
        DUMP_EPILOG,
        "[--out DIR] [--device-source] SCRIPT_OR_MODULE [ARGS...]",
    )
    dump.add_argument("--out", metavar="DIR", help="write one file per function into DIR")
    dump.add_argument(
        "--device-source",
        action="store_true",
        help="also show the device source of every kernel the program looked up",
    )
    # One REMAINDER positional (checked by hand): everything from the program on is its own.
    dump.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    pre = command(
        "precompile",
        "run a build command with precompile-output mode on",
        PRECOMPILE_HELP,
        PRECOMPILE_EPILOG,
        "[--] CMD [ARGS...]",
    )
    pre.add_argument("command_line", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p, {"demo": demo, "dump": dump, "precompile": pre}


def _rest(parser: argparse.ArgumentParser, args: list[str], what: str) -> list[str]:
    rest = args[1:] if args[:1] == ["--"] else args
    if not rest:
        parser.error(f"the following arguments are required: {what}")
    return rest


def dump(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    target, *args = _rest(parser, ns.program, "SCRIPT_OR_MODULE")
    out = Path(ns.out).resolve() if ns.out else None
    why = (check_out(out) if out is not None else None) or check_program(target)
    if why:
        return _fail(parser.prog, why)

    # Registered before the program runs, so that it runs after the program's own handlers.
    ending = ShowAtExit(parser.prog, out, collect_device_sources() if ns.device_source else None)
    atexit.register(ending)
    ending.status = run_program(target, args)
    return ending.status


def precompile(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    prog = parser.prog
    command = _rest(parser, ns.command_line, "CMD")
    # One line naming the mode and what runs (the resolved program shows which python it is).
    found = shutil.which(command[0]) or command[0]
    line = f"{prog}: precompile-output mode on ({ENV_VAR}=1): {shlex.join([found, *command[1:]])}"
    print(line, file=sys.stderr, flush=True)
    try:
        proc = subprocess.Popen(command, env={**os.environ, ENV_VAR: "1"})
    except FileNotFoundError:
        return _fail(prog, f"command not found: {command[0]}", 127)
    except PermissionError:
        return _fail(prog, f"cannot run {command[0]}: permission denied", 126)
    except OSError as e:
        return _fail(prog, f"cannot run {command[0]}: {e.strerror or e}", 126)
    with proc:
        while True:
            try:
                status = proc.wait()
            except KeyboardInterrupt:  # the command got it too; its status tells what it did
                continue
            return 128 - status if status < 0 else status  # killed by a signal: as a shell says


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, subparsers = _parser()
    prog = parser.prog
    choose = f"choose from {', '.join(COMMANDS)}, e.g. '{prog} dump my_script.py'"
    if not argv:
        parser.error(f"the following arguments are required: COMMAND ({choose})")
    option = argv[0].split("=", 1)[0]  # taken before a command: -h, --help, --version, abbreviated
    top_level = option == "-h" or (
        len(option) > 2 and any(o.startswith(option) for o in ("--help", "--version"))
    )
    if argv[0].startswith("-") and argv[0] != "--" and not top_level:
        parser.error(
            f"unknown option {argv[0]!r}: a COMMAND comes first ({choose}); its own options "
            f"follow it, as '{prog} COMMAND --help' lists them"
        )
    if not argv[0].startswith("-") and argv[0] not in COMMANDS:
        parser.error(f"unknown command {argv[0]!r} ({choose})")
    ns, extra = parser.parse_known_args(argv)
    sub = subparsers[ns.command]
    if extra:  # an option the command does not take, before its program or command line
        sub.error(f"unknown option(s) {' '.join(extra)}; '{sub.prog} --help' lists its options")
    if ns.command == "demo":
        from .demo import main as demo

        return demo([f"--{k}={getattr(ns, k)}" for k in ("launches", "rounds") if hasattr(ns, k)])
    if ns.command == "dump":
        return dump(ns, sub)
    return precompile(ns, sub)


if __name__ == "__main__":
    sys.exit(main())
