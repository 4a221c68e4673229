"""NVRTC programs: one compilation, kept on disk, and the programs the kernels of a source share.

An ``sm_XX`` target also makes the cubin that gets loaded: the driver never JITs newer PTX.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ... import includes
from ...compiler import CompileError
from ...locks import LockBox, new_lock
from . import _diskcache
from ._cxx import kernel_names
from ._nvrtc import NVRTCError, nvrtc, nvrtc_check, nvrtc_version, version_str
from ._source import Program
from ._toolkit import (
    headers_cuda_version,
    headers_fingerprint,
    install_hint,
    missing_header_hint,
    toolkit_include_dirs,
)


@dataclass(frozen=True)
class CUDAArtifact:
    """What NVRTC made of a job, with its source, name expression, options and ``program``:
    the key of the NVRTC program's output (its source's key and the name expressions compiled),
    which the kernels compiled in that one program share (one module per key and context)."""

    source: str
    ptx: str
    cubin: bytes | None
    entry: str
    arch: str
    log: str
    expression: str = ""
    options: tuple[str, ...] = ()
    program: str = ""
    #: what it was compiled from, and the digest of the user files that included then
    built: Program | None = None
    included: str = ""


@dataclass(frozen=True)
class NVRTCResult:
    """One NVRTC compilation's outputs, and whether it came from the disk cache."""

    ptx: str
    cubin: bytes | None
    lowered: dict[str, str]
    log: str
    options: tuple[str, ...]
    cached: bool = field(default=False, compare=False)


_compiles = 0
_compiles_lock = new_lock(reentrant=False)


def nvrtc_compiles() -> int:
    """How many times NVRTC's compiler ran in this process (a disk-cache hit runs it not)."""
    return _compiles


def _program_bytes(prog: Any, get_size: Any, get: Any, detail: str) -> bytes:
    """The program's output that ``get`` copies (``nvrtc.nvrtcGetPTX``, ...), of the size
    ``get_size`` gives."""
    what = get.__name__
    size: int = nvrtc_check(get_size(prog), what, detail)
    # NVRTC writes into the buffer: one of its own (CPython shares every bytes object of
    # length 0 or 1, so b" " * 1 is the interpreter's b" ", which a write would corrupt)
    buf = b" " * (size + 2)
    nvrtc_check(get(prog, buf), what, detail)
    return buf[:size]


_MISSING = re.compile(r'(?:cannot|could not) open source file "([^"]+)"')
_GLOBALS_IN_SOURCE = re.compile(r"__global__\s+(?:[\w:<>,\s*&]*?\s)?(\w+)\s*\(")


def _disk_key(
    source: str,
    expressions: tuple[str, ...],
    opts: tuple[str, ...],
    name: str = "",
    headers: tuple[tuple[str, str], ...] = (),
    included: str = "",
) -> str:
    parts: dict[str, Any] = {
        "format": 1,
        "source": source,
        "name_expressions": sorted(expressions),  # in any order: one program
        "options": list(opts),
        "nvrtc": list(nvrtc_version()),
        "headers": [list(h) for h in headers_fingerprint()],
    }
    if name or headers or included:  # (without them, the keys of before)
        parts["program"] = {
            "name": name,
            "headers": [list(h) for h in headers],
            "included": included,
        }
    return _diskcache.key_of(parts)


def _program_name(name: str | None, kernel: str) -> str:
    return name or f"{kernel or 'program'}.cu"


def included_digest(
    source: str,
    options: tuple[str, ...],
    name: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    kernel: str = "",
) -> str:
    """The digest of the user files ``source`` includes, from ``options``' ``-I`` directories,
    the program name's directory (NVRTC's for quoted includes) and the in-memory ``headers``,
    with the headers ``options`` pre-include (``-include``) and the precompiled header they
    use (``--use-pch``). Toolkit headers count by NVRTC's version and their fingerprint."""
    program = _program_name(name, kernel)
    return includes.digest(
        source,
        includes.include_dirs(options),
        dict(headers),
        os.path.dirname(os.path.abspath(program)),
        includes.pre_includes(options),
        _precompiled_headers(options),
    )


def _precompiled_headers(options: tuple[str, ...]) -> list[str]:
    """The files ``--use-pch`` names, under ``--pch-dir`` unless absolute (as NVRTC reads it)."""
    pch_dir = next(reversed(includes.option_values(options, ("--pch-dir", "-pch-dir"))), "")
    return [
        os.path.join(pch_dir, f) if pch_dir else f
        for f in includes.option_values(options, ("--use-pch", "-use-pch"))
    ]


def nvrtc_compile(
    source: str,
    expressions: tuple[str, ...],
    arch: str,
    options: tuple[str, ...] = (),
    *,
    kernel: str = "",
    name: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    included: str | None = None,
) -> NVRTCResult:
    """Compile ``source`` with NVRTC for ``arch`` (``compute_XX``: PTX only) and find the lowered
    name of each of ``expressions`` (``"reduce2<float>"``), asking the disk cache first.
    ``headers`` are ``(include name, text)``; ``included`` is :func:`included_digest`'s."""
    label = f"kernel {kernel}" if kernel else "a CUDA program"
    for what, text in (("source", source), *((f"header {h!r}", t) for h, t in headers)):
        if "\0" in text:  # NVRTC reads C strings
            raise CompileError(
                f"the {what} of {label} holds a NUL character (at offset {text.index(chr(0))}): "
                f"NVRTC would compile it cut short there; remove it"
            )
    opts = (
        f"--gpu-architecture={arch}",
        *options,
        *(f"--include-path={d}" for d in toolkit_include_dirs()),
    )
    program = _program_name(name, kernel)
    if included is None:
        included = included_digest(source, tuple(options), name, headers, kernel)
    key = _disk_key(source, expressions, opts, name or "", headers, included)
    on_disk = includes.keyed(included)  # else the files it includes are past the scan's cap
    hit = _diskcache.load(key) if on_disk else None
    if hit is not None and all(e in hit["lowered"] for e in expressions):
        return NVRTCResult(hit["ptx"], hit["cubin"], hit["lowered"], hit["log"], opts, True)
    entries = ", ".join(expressions)
    if kernel and entries != kernel:
        label += f" (entry {entries})"
    detail = f"compiling {label} for {arch}, options {list(options)}"
    err, log, built = _run_nvrtc(source, program, headers, expressions, arch, opts, detail)
    if built is None:
        raise _compile_error(err, log, label, arch, options, source, expressions, kernel)
    ptx, cubin, lowered = built
    if on_disk:
        _diskcache.store(key, ptx, cubin, lowered, log)
    return NVRTCResult(ptx, cubin, lowered, log, opts)


def _run_nvrtc(
    source: str,
    program: str,
    headers: tuple[tuple[str, str], ...],
    expressions: tuple[str, ...],
    arch: str,
    opts: tuple[str, ...],
    detail: str,
) -> tuple[Any, str, tuple[str, bytes | None, dict[str, str]] | None]:
    """One run of NVRTC: (result, log, and when it compiled (PTX, cubin, lowered names))."""
    global _compiles
    prog = nvrtc_check(
        nvrtc.nvrtcCreateProgram(
            source.encode(),
            program.encode(),
            len(headers),
            [t.encode() for _, t in headers],
            [h.encode() for h, _ in headers],
        ),
        "nvrtcCreateProgram",
        detail,
    )
    try:
        for e in expressions:
            nvrtc_check(
                nvrtc.nvrtcAddNameExpression(prog, e.encode()), "nvrtcAddNameExpression", detail
            )
        encoded = [o.encode() for o in opts]
        with _compiles_lock():
            _compiles += 1
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        raw = _program_bytes(prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, detail)
        log = raw.rstrip(b"\0").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return err, log, None
        lowered = {
            e: nvrtc_check(
                nvrtc.nvrtcGetLoweredName(prog, e.encode()), "nvrtcGetLoweredName", detail
            ).decode()
            for e in expressions
        }
        ptx = _program_bytes(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, detail)
        cubin = None
        if arch.startswith("sm_"):
            cubin = _program_bytes(prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, detail)
        return err, log, (ptx.rstrip(b"\0").decode(), cubin, lowered)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _compile_error(
    err: Any,
    log: str,
    label: str,
    arch: str,
    options: tuple[str, ...],
    source: str,
    expressions: tuple[str, ...],
    kernel: str,
) -> NVRTCError:
    """The error of a program that did not compile: NVRTC's log, with the hints it shows."""
    expression = expressions[0] if expressions else ""
    hints = [missing_header_hint(h) for h in dict.fromkeys(_MISSING.findall(log))]
    if "cannot determine which instance of function template" in log:
        hints.append(
            f"{expression} is a function template: name the instance to compile, returning "
            f"KernelSource(source, entry='{expression}<...>') from the method with the "
            f"template arguments built from its concrete types (for example "
            f"entry=f'{expression}<{{cuda.ctype(x.dtype)}}>')"
        )
    elif "__nv_name_map" in log:
        defined = [n for n in dict.fromkeys(_GLOBALS_IN_SOURCE.findall(source)) if n]
        there = (
            f"; the source defines __global__ function(s) {', '.join(defined)}: name the "
            f"method after one, or return KernelSource(source, entry='{defined[0]}')"
            if defined
            else ""
        )
        hints.append(
            f"the source must define a __global__ function named {expression} (for a kernel "
            f'named after the method, write it extern "C" __global__ void {kernel}(...)){there}'
        )
    found = headers_cuda_version()
    if found is not None and found[0] != nvrtc_version()[0]:
        hints.append(
            f"note: the runtime headers found are CUDA {found[0]}.{found[1]}'s, "
            f"NVRTC is {version_str()}: {install_hint()}"
        )
    return NVRTCError(
        f"{label} failed to compile with NVRTC {version_str()} for {arch} "
        f"({getattr(err, 'name', err)}), options {list(options)}, toolkit headers "
        f"from {list(toolkit_include_dirs())}:\n{log.rstrip()}"
        + "".join(f"\nhint: {h}" for h in hints),
        log,
    )


#: NVRTC programs built in this process, by what they are built from (the newest kept).
_programs: OrderedDict[str, tuple[NVRTCResult, ...]] = OrderedDict()
_PROGRAMS_KEPT = 64
_programs_lock = new_lock(reentrant=False)  # the table's, held for its reads and stores only
#: A program compiles once: its compile holds the lock of its key's stripe, so programs of
#: other stripes compile meanwhile (NVRTC releases the GIL; a lock per key would need a table)
_compile_locks = tuple(new_lock(reentrant=False) for _ in range(16))


def compile_lock(key: str) -> LockBox:
    """The lock a compile of the program whose key is ``key`` holds."""
    return _compile_locks[int(key[:8], 16) % len(_compile_locks)]


def _program_key(p: Program, included: str) -> str:
    return _diskcache.key_of(
        {
            "source": p.source,
            "name": p.name or "",
            "headers": [list(h) for h in p.headers],
            "arch": p.arch,
            "options": list(p.options),
            "included": included,
            "nvrtc": list(nvrtc_version()),
            "toolkit": [list(h) for h in headers_fingerprint()],
            "include_dirs": list(toolkit_include_dirs()),
        }
    )


def compile_program(
    p: Program, expression: str, kernel: str = "", included: str | None = None
) -> tuple[str, NVRTCResult]:
    """``(key, result)``: the NVRTC program of ``p`` with ``expression`` among its name
    expressions, compiled with every kernel of the source too, so they reuse it; another
    template instance is another program, so a kernel's PTX never depends on what ran before.
    The key names the program's output: the source's key and the name expressions compiled
    (one source makes a program per template instance, each with a module of its own).
    ``included``: :func:`included_digest`'s, where the caller has it."""
    if included is None:
        included = included_digest(p.source, p.options, p.name, p.headers, kernel)
    key = _program_key(p, included)
    with compile_lock(key)():  # straight-line: the loops are in the called functions
        r = _kept(key, expression)
        if r is None:
            r = _compile(p, expression, kernel, included)
            with _programs_lock():
                _programs[key] = (*_programs.get(key, ()), r)
                _programs.move_to_end(key)
                if len(_programs) > _PROGRAMS_KEPT:  # one more at a time
                    _programs.popitem(last=False)
    return _output_key(key, r), r


def _kept(key: str, expression: str) -> NVRTCResult | None:
    """The kept program of ``key`` that compiled ``expression`` (now the newest), if any."""
    with _programs_lock():
        built = _programs.get(key, ())
        if built:
            _programs.move_to_end(key)
    return next((r for r in built if expression in r.lowered), None)


def _compile(p: Program, expression: str, kernel: str, included: str) -> NVRTCResult:
    extra = tuple(n for n in kernel_names(p.source) if n != expression)
    compile_ = functools.partial(
        nvrtc_compile,
        p.source,
        arch=p.arch,
        options=p.options,
        kernel=kernel,
        name=p.name,
        headers=p.headers,
        included=included,  # the headers as the program's key read them
    )
    try:
        r = compile_((expression, *extra))
    except NVRTCError as e:
        # a name found in the text that is no kernel NVRTC can name (under an #if, a macro)
        if not extra or "__nv_name_map" not in e.log:
            raise
        r = compile_((expression,))
    return r


def _output_key(key: str, r: NVRTCResult) -> str:
    return _diskcache.key_of({"program": key, "name_expressions": sorted(r.lowered)})
