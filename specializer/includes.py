"""The user files a device source includes, for keying built code on their contents.

SPEC section 3: every cache of built code is keyed by the contents of every file the
source includes from a user directory (an ``-I`` directory of the options made absolute,
the source's own directory, in-memory headers), so editing a header and redefining the
kernel builds the new code, in this process and the next, and two projects with the same
relative ``-Iinclude`` never share code. Toolkit and system headers are the back-end's
to count (by the toolkit's version); here an include that resolves to no user file counts
by its name.

The scan is textual and conservative: every ``#include "x"`` and ``#include <x>`` line
counts, also one inside ``#if 0`` or a comment (a file keyed that the compiler skips
costs nothing but a rebuild when it changes). Quoted includes look in the including
file's own directory first, as C compilers do; then both kinds look in the in-memory
headers and the include directories, in order. It backs no back-end in particular:
:func:`digest` is what a back-end adds to its keys.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence

__all__ = ["digest", "include_dirs", "scan"]

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.M)


def include_dirs(options: Sequence[str]) -> list[str]:
    """The absolute paths of the ``-I`` directories in ``options``, in order: ``-Idir``,
    ``-I dir``, ``--include-path=dir`` and ``--include-path dir`` (relative ones against
    the current directory, as the compiler resolves them when the code is built)."""
    out: list[str] = []
    opts = list(options)
    i = 0
    while i < len(opts):
        o = opts[i].strip()
        path = None
        for flag in ("-I", "--include-path=", "--include-path", "-include-path="):
            if o.startswith(flag):
                rest = o[len(flag) :]
                if rest:
                    path = rest.strip()
                elif i + 1 < len(opts):
                    i += 1
                    path = opts[i].strip()
                break
        if path:
            out.append(os.path.abspath(path))
        i += 1
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scan(
    source: str,
    include_dirs: Sequence[str],
    headers: Mapping[str, str] | None = None,
    source_dir: str | None = None,
) -> tuple[tuple[str, str], ...]:
    """Every include of ``source`` and, recursively, of the user files it includes, as a
    sorted tuple of ``(name, sha256 of the contents)``: ``file:<absolute path>`` for a file
    found in ``source_dir`` (quoted includes of the source), the including file's directory
    (quoted includes of a file) or ``include_dirs``; ``header:<name>`` for an in-memory
    header; ``unresolved:<name>`` (with an empty digest) for one found in none of them."""
    headers = dict(headers or {})
    dirs = [os.path.abspath(d) for d in include_dirs]
    found: dict[str, str] = {}
    # (text, the directory quoted includes of it look in first, or None for in-memory text)
    todo: list[tuple[str, str | None]] = [(source, source_dir)]
    while todo:
        text, here = todo.pop()
        for m in _INCLUDE.finditer(text):
            quoted, name = m.group(1) is not None, (m.group(1) or m.group(2)).strip()
            key, content, where = _resolve(name, quoted, here, headers, dirs)
            if key in found:
                continue
            if content is None:
                found[key] = ""
                continue
            found[key] = _sha256(content.encode("utf-8", "surrogateescape"))
            todo.append((content, where))
    return tuple(sorted(found.items()))


def _resolve(
    name: str, quoted: bool, here: str | None, headers: dict[str, str], dirs: list[str]
) -> tuple[str, str | None, str | None]:
    """(key, contents or None, the directory of the file found)."""
    candidates = ([here] if quoted and here else []) + dirs
    if os.path.isabs(name):
        found = _read(name)
        return found if found is not None else (f"unresolved:{name}", None, None)
    if name in headers:
        if quoted and here:  # the including file's directory comes first
            path = _read(os.path.join(here, name))
            if path is not None:
                return path
        return f"header:{name}", headers[name], None
    for d in candidates:
        path = _read(os.path.join(d, name))
        if path is not None:
            return path
    return f"unresolved:{name}", None, None


def _read(path: str) -> tuple[str, str, str] | None:
    path = os.path.normpath(os.path.abspath(path))
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return f"file:{path}", data.decode("utf-8", "surrogateescape"), os.path.dirname(path)


def digest(
    source: str,
    include_dirs: Sequence[str],
    headers: Mapping[str, str] | None = None,
    source_dir: str | None = None,
) -> str:
    """A hex SHA-256 of what :func:`scan` finds (every included user file's contents and
    every unresolved include's name), ``''`` when the source includes nothing."""
    found = scan(source, include_dirs, headers, source_dir)
    if not found:
        return ""
    h = hashlib.sha256()
    for name, sha in found:
        h.update(f"{name}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()
