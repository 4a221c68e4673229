"""The user files a device source includes, for keying built code on their contents (SPEC 3).

The scan reads directives as C's phases 2 and 3 leave them and counts every ``#include`` (also
under ``#if 0``); one that resolves to no user file counts by its name. A computed include counts
every file under its search path, up to :data:`MAX_FILES` files of :data:`MAX_BYTES`; past that,
:func:`keyed` is False (see ``docs/limitations.md``). System headers are the back-end's to count.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence

__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "digest",
    "include_dirs",
    "keyed",
    "option_values",
    "pre_includes",
    "scan",
]

#: The most files, and bytes in all, a computed include's search path may hold to be keyed.
MAX_FILES = 256
MAX_BYTES = 4 << 20

_UNKEYED = "unkeyed:"

# phase 2: a backslash ending a line joins the next (spaces before the newline, as GCC does)
_SPLICE = re.compile(r"\\[ \t]*\r?\n")
# phase 3: comments, and the literals whose text may hold comment markers
_LEXEME = re.compile(
    r"""//[^\n]*|/\*.*?(?:\*/|\Z)"""
    r"""|\b(?:u8|[uUL])?R"([^()\\\s]{0,16})\(.*?\)\1"|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?""",
    re.S,
)
_INCLUDE = re.compile(r"^[^\S\n]*#[^\S\n]*include\b[^\S\n]*(.*)", re.M)
_NAME = re.compile(r'"([^"\n]+)"|<([^>\n]+)>')


def include_dirs(options: Sequence[str]) -> list[str]:
    """The absolute paths of the ``-I`` directories in ``options`` (``-Idir``, ``-I dir``,
    ``-I=dir``, ``--include-path=dir``, ``--include-path dir``), in order."""
    return [
        os.path.abspath(p) for p in option_values(options, ("-I", "--include-path"), joined="-I")
    ]


def pre_includes(options: Sequence[str]) -> list[str]:
    """The headers ``options`` include before the source (``-include h``, ``-include=h``,
    ``--pre-include=h``, ``--pre-include h``), in order, as given: each is found as a quoted
    ``#include`` of the source is (:func:`scan`'s ``pre_includes``)."""
    return option_values(options, ("-include", "--pre-include"))


def option_values(options: Sequence[str], flags: Sequence[str], joined: str = "") -> list[str]:
    """The values of the options spelled by ``flags``: ``flag=value``, ``flag value`` and,
    for the flag ``joined``, ``flagvalue`` too (``-Idir``)."""
    out: list[str] = []
    opts = iter(options)
    for opt in opts:
        o = opt.strip()
        for flag in flags:
            if o == flag:
                value = next(opts, "").strip()  # "-I dir": the next
            elif o.startswith(flag + "="):
                value = o[len(flag) + 1 :].strip()
            elif flag == joined and o.startswith(flag):
                value = o[len(flag) :].strip()
            else:
                continue
            if value:
                out.append(value)
            break
    return out


def scan(
    source: str,
    include_dirs: Sequence[str],
    headers: Mapping[str, str] | None = None,
    source_dir: str | None = None,
    pre_includes: Sequence[str] = (),
    whole_files: Sequence[str] = (),
) -> tuple[tuple[str, str], ...]:
    """Every include of ``source`` and, recursively, of the user files it includes, as sorted
    ``(name, sha256)``: ``file:<absolute path>``, ``header:<name>`` (in memory),
    ``unresolved:<name>`` (empty digest); past the cap, ``unkeyed:<directory>`` ends the scan.
    ``pre_includes`` are headers included before the source (as its first quoted includes);
    ``whole_files`` other files the compiler reads (a precompiled header), not scanned."""
    headers = dict(headers or {})
    dirs = [os.path.abspath(d) for d in include_dirs]
    found: dict[str, str] = {}
    for path in whole_files:
        whole = _read(path)
        key = f"unresolved:{path}" if whole is None else whole[0]
        found[key] = "" if whole is None else _sha256(whole[1])
    if pre_includes:  # a name holding a quote or a newline is found nowhere, and counts so
        source = "".join(f'#include "{h}"\n' for h in pre_includes) + source
    walked: set[str] = set()  # the directories whose every file counts already
    budget = [MAX_FILES, MAX_BYTES]
    # (text, the directory quoted includes of it look in first, or None for in-memory text)
    todo = [(source, os.path.abspath(source_dir) if source_dir else None)]
    while todo:
        text, here = todo.pop()
        text = _SPLICE.sub("", text)
        if "include" not in text:  # no directive can include a file (most sources: cheap)
            continue
        for m in _INCLUDE.finditer(_directives(text)):
            named = _NAME.match(m.group(1))
            if named:
                quoted, name = named.group(1) is not None, (named.group(1) or named.group(2))
                files = [_resolve(name.strip(), quoted, here, headers, dirs)]
            else:  # a macro names the file: any file it may name counts
                roots = [d for d in dict.fromkeys([here, *dirs]) if d]
                paths = _files_under(roots, walked, budget)
                if paths is None:
                    found[_UNKEYED + os.pathsep.join(roots)] = ""
                    return tuple(sorted(found.items()))
                files = [f for f in map(_read, paths) if f is not None]
                files += [(f"header:{h}", t, None) for h, t in headers.items()]
            for key, content, where in files:
                if key in found:
                    continue
                if content is None:
                    found[key] = ""
                    continue
                found[key] = _sha256(content)
                todo.append((content, where))
    return tuple(sorted(found.items()))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _directives(spliced: str) -> str:
    """``spliced`` (phase 2 done: continuations joined) as phase 3 leaves it: comments one
    space."""
    return _LEXEME.sub(lambda m: " " if m.group().startswith("/") else m.group(), spliced)


def _files_under(roots: list[str], walked: set[str], budget: list[int]) -> list[str] | None:
    """Files under ``roots`` outside ``walked`` (added to), spent from ``budget``; None past it."""
    out = []
    for root in roots:
        if root in walked:
            continue
        for d, subdirs, names in os.walk(root):
            walked.add(d)
            subdirs[:] = sorted(s for s in subdirs if os.path.join(d, s) not in walked)
            for name in sorted(names):
                path = os.path.join(d, name)
                try:
                    size = os.stat(path).st_size
                except OSError:
                    continue
                budget[0] -= 1
                budget[1] -= size
                if budget[0] < 0 or budget[1] < 0:
                    return None
                out.append(path)
    return out


def _resolve(
    name: str, quoted: bool, here: str | None, headers: dict[str, str], dirs: list[str]
) -> tuple[str, str | None, str | None]:
    """(key, contents or None, the directory of the file found): a quoted name is looked for
    in the including file's directory first, then in the in-memory headers, then in ``dirs``."""
    if os.path.isabs(name):
        return _read(name) or (f"unresolved:{name}", None, None)
    if quoted and here and (found := _read(os.path.join(here, name))):
        return found
    if name in headers:
        return f"header:{name}", headers[name], None
    for d in dirs:
        if found := _read(os.path.join(d, name)):
            return found
    return f"unresolved:{name}", None, None


def _read(path: str) -> tuple[str, str, str] | None:
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return f"file:{path}", data.decode("utf-8", "surrogateescape"), os.path.dirname(path)


def keyed(digest: str) -> bool:
    """Whether ``digest`` keys the code: False past the cap, where no cache should keep it."""
    return not digest.startswith(_UNKEYED)


def digest(
    source: str,
    include_dirs: Sequence[str],
    headers: Mapping[str, str] | None = None,
    source_dir: str | None = None,
    pre_includes: Sequence[str] = (),
    whole_files: Sequence[str] = (),
) -> str:
    """A hex SHA-256 of what :func:`scan` finds, ``''`` when the source includes nothing;
    past the cap, a value never returned before, for which :func:`keyed` is False."""
    found = scan(source, include_dirs, headers, source_dir, pre_includes, whole_files)
    if not found:
        return ""
    if any(name.startswith(_UNKEYED) for name, _ in found):
        return _UNKEYED + os.urandom(16).hex()  # (no import on a lookup's path: see locks)
    h = hashlib.sha256()
    for name, sha in found:
        h.update(f"{name}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()
