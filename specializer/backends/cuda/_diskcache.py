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

Private to the user (SPEC 9): the directories it creates are ``0700`` whatever the umask
(set after ``mkdir``, which the umask can only narrow). A directory it did not create is
used only when it is the user's own and writable by no one else (group or others): a
shared one, ``/tmp`` itself for example, turns the cache off with one warning. An entry
is used only when it is a regular file owned by the user that no one else can write; it
is opened without following a symlink and without blocking (a FIFO planted at its path
opens at once and is refused), and read with a bound on its size. Anything else is a
miss, and the compile's rewrite replaces it.

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
import stat
import struct
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

__all__ = ["ENV_VAR", "cache_dir", "default_dir", "entry_path", "key_of", "load", "store"]

#: the environment variable naming the cache's directory ("" or "0": off)
ENV_VAR = "SPECIALIZER_CACHE_DIR"

_MAGIC = b"specializer nvrtc cache 1\n"
_LEN = struct.Struct("<Q")
_DIGEST = 32  # bytes of SHA-256
_SUFFIX = ".nvrtc"
_MAX_ENTRY = 1 << 30  # bytes: an entry larger than this is refused unread
#: opening an entry: never through a symlink, never waiting for a writer (a FIFO)
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_warned: set[str] = set()  # the roots already warned about, one warning each
_warned_lock = threading.Lock()


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


def _not_private(st: os.stat_result, kind: int) -> str | None:
    """Why a file of status ``st`` is not the user's own of ``kind`` (``stat.S_IFDIR``,
    ``stat.S_IFREG``) that no one else can write; ``None`` when it is. (Windows: the user's
    profile directory keeps the cache private, and there is no owner or mode to check.)"""
    if stat.S_IFMT(st.st_mode) != kind:
        return "is not a directory" if kind == stat.S_IFDIR else "is not a regular file"
    if not hasattr(os, "getuid"):
        return None
    if st.st_uid != os.getuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _refuse(root: Path, why: str) -> None:
    """Warn, once per root and process, that the cache at ``root`` is not used."""
    with _warned_lock:
        if str(root) in _warned:
            return
        _warned.add(str(root))
    warnings.warn(
        f"specializer: the CUDA disk cache at {root} is not used: {why}, and the cache is "
        f"private to the user. Point {ENV_VAR} at a directory of your own (chmod 700), or "
        "set it empty to turn the cache off.",
        RuntimeWarning,
        stacklevel=2,
    )


def _private_dir(create: bool) -> Path | None:
    """The entries' directory when it is private to the user, creating it (and any missing
    parent) ``0700`` when ``create``; ``None``: off, missing or not private."""
    d = cache_dir()
    if d is None:
        return None
    if create:
        missing = []
        p = d
        while not os.path.lexists(p) and p.parent != p:
            missing.append(p)
            p = p.parent
        for p in reversed(missing):
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:  # made by another process meanwhile: checked below
                continue
            os.chmod(p, 0o700)  # the umask may have narrowed it, never widened: set exactly
    try:
        root = os.stat(d.parent)  # the root may be a symlink the user made
        own = os.lstat(d)  # its cuda/ is the library's own: never a symlink
    except OSError:
        return None
    for what, st in (("it", root), ("its cuda/", own)):
        why = _not_private(st, stat.S_IFDIR)
        if why is not None:
            _refuse(d.parent, f"{what} {why}")
            return None
    return d


def _read_private(path: Path) -> bytes | None:
    """The bytes of the entry at ``path`` if it is a regular file of the user's that no one
    else can write, at most ``_MAX_ENTRY`` of them; ``None`` otherwise."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:  # missing, a symlink (ELOOP), a directory we cannot open...
        return None
    try:
        st = os.fstat(fd)
        if _not_private(st, stat.S_IFREG) is not None or st.st_size > _MAX_ENTRY:
            return None
        chunks, left = [], st.st_size + 1  # one byte more: an entry grown meanwhile is seen
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except (OSError, MemoryError):
        return None
    finally:
        os.close(fd)


def load(key: str) -> dict[str, Any] | None:
    """The entry of ``key`` (``ptx``, ``cubin``, ``lowered``, ``log``), or ``None``: the cache
    is off or not private, there is no entry, or it is not the user's own regular file, is
    unreadable or corrupt."""
    d = _private_dir(create=False)
    if d is None:
        return None
    data = _read_private(d / f"{key}{_SUFFIX}")
    if data is None:
        return None
    try:
        return _decode(key, data)
    except Exception:  # a damaged entry of any shape is a miss; the compile rewrites it
        return None


def store(key: str, ptx: str, cubin: bytes | None, lowered: dict[str, str], log: str) -> bool:
    """Write the entry of ``key`` atomically, ``0600`` in a ``0700`` directory; whether it was
    written (never raises: a cache that cannot be written is no cache)."""
    data = _encode(key, ptx, cubin, lowered, log)
    tmp = None
    try:
        d = _private_dir(create=True)
        if d is None:
            return False
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{key[:16]}.", suffix=".tmp")  # 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, d / f"{key}{_SUFFIX}")  # replaces whatever was there, FIFO or link
        return True
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False
