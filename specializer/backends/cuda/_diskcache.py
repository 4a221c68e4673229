"""NVRTC's output on disk, shared by every process of the user: compile once, not once per process.

An entry is what NVRTC made of one compilation: the PTX, the cubin (for an ``sm_XX``
target), the lowered (mangled) name of each name expression, and NVRTC's log. Its key
is a SHA-256 over everything that decides that output: the full device source, the
name expressions, every option passed to NVRTC (the architecture and the header
directories among them), NVRTC's version, and the identity (size and modification
time) of the toolkit headers found. Nothing else goes in: no world number, no
method or kernel object, no context or module handle, so an entry is right in any
process and any world that asks for the same compilation.

Where: ``$SPECIALIZER_CACHE_DIR/cuda``; without that variable, the user's cache
directory (``$XDG_CACHE_HOME/specializer`` or ``~/.cache/specializer`` on Linux,
``~/Library/Caches/specializer`` on macOS, ``%LOCALAPPDATA%\\specializer\\Cache`` on
Windows). ``SPECIALIZER_CACHE_DIR=`` (empty) or ``=0`` turns the cache off. The variable
is read at each compilation, so it can change while a process runs.

Files: one per entry, ``<key>.nvrtc``, ending in a SHA-256 of its contents. An entry is
written to a temporary file in the same directory and renamed over the final name
(``os.replace``), so a reader sees a whole entry or none, and two processes writing the
same entry at once each rename a whole file (the later one wins; both are equal). An
entry that cannot be read, is cut short or fails its checksum is ignored (a miss) and
written again after the compile. A directory that cannot be created or written makes
the cache a no-op: it never makes a compilation fail.

Precompile-output mode (:func:`specializer.generating_output`): the disk cache reads and
writes as usual. What that mode guards against, results tied to this process's worlds
or devices being saved with the build, cannot happen here: an entry holds compiled
code keyed by its full inputs, and writing compiled code for later runs is what a build
is for.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ENV_VAR", "cache_dir", "default_dir", "entry_path", "key_of", "load", "store"]

#: the environment variable naming the cache's directory ("" or "0": off)
ENV_VAR = "SPECIALIZER_CACHE_DIR"

_MAGIC = b"specializer nvrtc cache 1\n"
_LEN = struct.Struct("<Q")
_DIGEST = 32  # bytes of SHA-256
_SUFFIX = ".nvrtc"


def default_dir() -> Path:
    """The cache's directory when ``SPECIALIZER_CACHE_DIR`` is unset: under the user's cache
    directory."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "specializer" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "specializer"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specializer"


def cache_dir() -> Path | None:
    """The directory of the CUDA back-end's entries, or ``None`` when the cache is off."""
    value = os.environ.get(ENV_VAR)
    if value is None:
        return default_dir() / "cuda"
    value = value.strip()
    if value in ("", "0"):
        return None
    return Path(value).expanduser() / "cuda"


def key_of(parts: dict[str, Any]) -> str:
    """The key of a compilation: the SHA-256 (hex) of its parts in a canonical form."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def entry_path(key: str, directory: Path | None = None) -> Path | None:
    """Where the entry of ``key`` lives (``None`` when the cache is off)."""
    d = cache_dir() if directory is None else directory
    return None if d is None else d / f"{key}{_SUFFIX}"


def _encode(key: str, ptx: str, cubin: bytes | None, lowered: dict[str, str], log: str) -> bytes:
    ptx_b = ptx.encode()
    meta = json.dumps(
        {
            "key": key,
            "ptx": len(ptx_b),
            "cubin": -1 if cubin is None else len(cubin),
            "lowered": lowered,
            "log": log,
        },
        sort_keys=True,
    ).encode()
    body = b"".join((_MAGIC, _LEN.pack(len(meta)), meta, ptx_b, cubin or b""))
    return body + hashlib.sha256(body).digest()


def _decode(key: str, data: bytes) -> dict[str, Any] | None:
    if len(data) < len(_MAGIC) + _LEN.size + _DIGEST or not data.startswith(_MAGIC):
        return None
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        return None
    at = len(_MAGIC)
    (n,) = _LEN.unpack_from(body, at)
    at += _LEN.size
    meta = json.loads(body[at : at + n].decode())
    at += n
    if meta.get("key") != key:
        return None
    n_ptx, n_cubin = int(meta["ptx"]), int(meta["cubin"])
    if at + n_ptx + max(n_cubin, 0) != len(body):
        return None
    lowered = meta["lowered"]
    if not isinstance(lowered, dict) or not isinstance(meta["log"], str):
        return None
    return {
        "ptx": body[at : at + n_ptx].decode(),
        "cubin": None if n_cubin < 0 else bytes(body[at + n_ptx :]),
        "lowered": {str(k): str(v) for k, v in lowered.items()},
        "log": meta["log"],
    }


def load(key: str) -> dict[str, Any] | None:
    """The entry of ``key`` (``ptx``, ``cubin``, ``lowered``, ``log``), or ``None``: the cache
    is off, there is no entry, or it is unreadable or corrupt."""
    path = entry_path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return _decode(key, data)
    except Exception:  # a damaged entry of any shape is a miss; the compile rewrites it
        return None


def store(key: str, ptx: str, cubin: bytes | None, lowered: dict[str, str], log: str) -> bool:
    """Write the entry of ``key`` atomically; whether it was written (never raises: a
    cache that cannot be written is no cache)."""
    d = cache_dir()
    if d is None:
        return False
    data = _encode(key, ptx, cubin, lowered, log)
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, d / f"{key}{_SUFFIX}")
        return True
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False
