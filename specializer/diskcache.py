"""Files a process keeps for the next one, private to the user and never trusted blindly.

Directories are ``0700``; a file is read only when it is the user's own that no one else can
write, and its digest checks; nothing here raises or writes in precompile-output mode
(``docs/design.md`` has the rules and why).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import sys
import warnings
from pathlib import Path

from . import precompile
from .locks import new_lock

__all__ = [
    "DEFAULT_MAX_SIZE",
    "ENV_VAR",
    "MAX_SIZE_ENV_VAR",
    "cache_dir",
    "default_dir",
    "evict",
    "max_size",
    "private_dir",
    "read_entry",
    "read_private",
    "write_entry",
    "write_private",
]

#: the environment variable naming the caches' directory ("" or "0": off)
ENV_VAR = "SPECIALIZER_CACHE_DIR"
#: the environment variable bounding the caches' size together, in bytes (see max_size)
MAX_SIZE_ENV_VAR = "SPECIALIZER_CACHE_MAXSIZE"
#: the bound when MAX_SIZE_ENV_VAR is unset, empty or not a size: 1 GiB (CUDA's JIT cache's)
DEFAULT_MAX_SIZE = 1 << 30
#: a size: a number of bytes, or of KiB, MiB, GiB, TiB (``512M``, ``2G``, ``1.5GiB``, ``64kB``)
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*", re.IGNORECASE)

#: opening a file: never through a symlink, never waiting for a writer (a FIFO)
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
#: creating an entry's temporary file: a new one, never through a symlink
_CREATE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
#: how a warning names each cache
_LABELS = {"cuda": "CUDA disk cache", "templates": "disk cache of rendered templates"}
_DIGEST_SIZE = hashlib.sha256().digest_size
_warned: set[tuple[str, str]] = set()  # what was warned about: one warning each
_warned_lock = new_lock(reentrant=False)
#: the caches' size as this process counts it: (their root, the bytes its regular files took
#: when it last looked, plus what it wrote since); none before its first write
_usage: list[tuple[str, int]] = []
_usage_lock = new_lock(reentrant=False)


def default_dir() -> Path | None:
    """The caches' directory when ``SPECIALIZER_CACHE_DIR`` is unset (``None``: no home)."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "specializer" / "Cache"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if sys.platform not in ("win32", "darwin") and os.path.isabs(xdg):  # XDG: relative: ignored
        return Path(xdg) / "specializer"
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError):  # no HOME, no passwd entry
        home = None
    if home is None or not home.is_absolute():
        _warn_once(
            ("", "home"),
            "specializer: the disk caches are off: there is no home directory (HOME is unset or "
            f"relative, and no passwd entry gives one). Set {ENV_VAR} to a directory of your "
            "own to keep them.",
            stacklevel=3,
        )
        return None
    if sys.platform == "win32":
        return home / "AppData" / "Local" / "specializer" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "specializer"
    return home / ".cache" / "specializer"


def cache_dir(name: str) -> Path | None:
    """The directory of the cache ``name`` (``"cuda"``), or ``None`` when the caches are off."""
    value = os.environ.get(ENV_VAR)
    if value is not None and value.strip() in ("", "0"):
        return None
    d = default_dir() if value is None else Path(value.strip()).expanduser()
    return None if d is None else d / name


def max_size() -> int:
    """The bound on the caches' size together, in bytes: ``SPECIALIZER_CACHE_MAXSIZE`` (``512M``,
    ``2G``, ``1.5GiB``: powers of 1024), read at each write; ``0`` keeps nothing. Unset, empty or
    not a size (with one warning): :data:`DEFAULT_MAX_SIZE`."""
    value = os.environ.get(MAX_SIZE_ENV_VAR, "")
    if not value.strip():
        return DEFAULT_MAX_SIZE
    m = _SIZE.fullmatch(value)
    if m is None:
        _warn_once(
            ("", f"{MAX_SIZE_ENV_VAR}={value}"),
            f"specializer: {MAX_SIZE_ENV_VAR}={value!r} is not a size; the disk caches keep "
            f"their default bound, {DEFAULT_MAX_SIZE >> 30} GiB. Give a number of bytes, or of "
            "KiB, MiB, GiB with a suffix (512M, 2G); 0 keeps nothing.",
        )
        return DEFAULT_MAX_SIZE
    unit = 1024 ** " kmgt".index((m[2] or " ").lower())
    return int(float(m[1]) * unit)


def _not_private(st: os.stat_result, kind: int) -> str | None:
    """Why a file of status ``st`` is not the user's own of ``kind`` that no one else can
    write; ``None`` when it is (always on Windows, which has no owner or mode to check)."""
    if stat.S_IFMT(st.st_mode) != kind:
        return "is not a directory" if kind == stat.S_IFDIR else "is not a regular file"
    if not hasattr(os, "getuid"):
        return None
    if st.st_uid != os.getuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _warn_once(key: tuple[str, str], message: str, stacklevel: int = 4) -> None:
    with _warned_lock():
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


def private_dir(name: str, create: bool) -> Path | None:
    """The directory of the cache ``name`` if private to the user (with ``create``, made
    ``0700``, but in precompile-output mode); ``None``: off, missing or not private."""
    d = cache_dir(name)
    if d is None:
        return None
    if create and not precompile.generating_output():  # the mode makes no directory
        missing = [p for p in (d, *d.parents) if not os.path.lexists(p)]
        try:
            for p in reversed(missing):
                try:
                    os.mkdir(p, 0o700)
                except FileExistsError:  # made by another process meanwhile: checked below
                    continue
                os.chmod(p, 0o700)  # the umask may have narrowed it, never widened: exactly
        except OSError:
            return None
    try:
        root = os.stat(d.parent)  # the root may be a symlink the user made
        own = os.lstat(d)  # the cache's own directory: never a symlink
    except OSError:
        return None
    for what, st in (("it", root), (f"its {name}/", own)):
        why = _not_private(st, stat.S_IFDIR)
        if why is not None:  # warned once per root and process
            _warn_once(
                (str(d.parent), name),
                f"specializer: the {_LABELS.get(name, name)} at {d.parent} is not used: {what} "
                f"{why}, and the cache is private to the user. Point {ENV_VAR} at a directory of "
                "your own (chmod 700), or set it empty to turn the cache off.",
                stacklevel=3,
            )
            return None
    return d


def read_private(path: Path, max_size: int, touch: bool = False) -> bytes | None:
    """The bytes (at most ``max_size``) of the user's own regular file at ``path`` that no one
    else can write, else ``None``; ``touch`` marks it used (its modification time), but in
    precompile-output mode, which changes nothing on disk."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:  # missing, a symlink (ELOOP), a directory we cannot open...
        return None
    try:
        st = os.fstat(fd)
        if _not_private(st, stat.S_IFREG) is not None or st.st_size > max_size:
            return None
        if touch and not precompile.generating_output():
            with contextlib.suppress(OSError):
                os.utime(fd if os.utime in os.supports_fd else path)
        with open(fd, "rb", closefd=False) as f:  # reads until EOF or the size asked
            data = f.read(st.st_size + 1)  # one byte more: a file grown meanwhile is seen
        return None if len(data) > st.st_size else data
    except (OSError, MemoryError):
        return None
    finally:
        os.close(fd)


def write_private(directory: Path, filename: str, data: bytes) -> bool:
    """Write ``directory/filename`` whole (``0600``, renamed into place), but in
    precompile-output mode; whether it was written (never raises but an interrupt, which
    leaves neither the entry half-written nor the temporary file)."""
    if precompile.generating_output():
        return False
    # Named before it exists, so an interrupt just after the open still knows what to remove.
    tmp = directory / f".{filename[:16]}.{secrets.token_hex(8)}.tmp"
    fd = -1
    try:
        fd = os.open(tmp, _CREATE_FLAGS, 0o600)
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
        fd, written = -1, fd  # given up before closed: an interrupt never closes it twice
        os.close(written)
        os.replace(tmp, directory / filename)  # replaces whatever was there, FIFO or link
        return True
    except FileExistsError:  # another writer's name (never one of ours: it is random)
        return False
    except BaseException as e:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            return False
        raise


def _digest(filename: str, payload: bytes) -> bytes:
    """What an entry ends in: the SHA-256 of its file name (its key) and its payload."""
    return hashlib.sha256(filename.encode() + b"\0" + payload).digest()


def read_entry(directory: Path, filename: str, max_size: int) -> bytes | None:
    """The payload :func:`write_entry` wrote at ``directory/filename`` (at most ``max_size``
    bytes), touched as used; ``None`` if missing, not private or failing its digest."""
    data = read_private(directory / filename, max_size, touch=True)
    if data is None or len(data) < _DIGEST_SIZE:
        return None
    payload, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    return payload if digest == _digest(filename, payload) else None


def write_entry(directory: Path, filename: str, payload: bytes) -> bool:
    """Write ``payload`` with its digest, evicting while the caches are over :func:`max_size`;
    whether it was written (an entry larger than the bound is not)."""
    bound = max_size()
    data = payload + _digest(filename, payload)
    if len(data) > bound or not write_private(directory, filename, data):
        return False
    root = str(directory.parent)
    with _usage_lock():
        if _usage and _usage[0][0] == root and _usage[0][1] + len(data) <= bound:
            _usage[0] = (root, _usage[0][1] + len(data))  # (a rewrite counts twice: looks sooner)
            return True
        _usage.clear()  # (an interrupted look leaves no count: the next write looks again)
        _usage.append((root, evict(bound)))
    return True


def evict(bound: int) -> int:
    """Remove the regular files used longest ago from the caches' private directories until
    they take at most ``bound`` bytes together; the bytes they take then. Another process
    removing the same entry is no error; nothing is removed in precompile-output mode."""
    if precompile.generating_output():
        return 0
    files: list[tuple[int, str, int]] = []
    for name in _LABELS:
        d = private_dir(name, create=False)
        if d is None:
            continue
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:  # removed meanwhile
                        continue
                    if stat.S_ISREG(st.st_mode):
                        files.append((st.st_mtime_ns, e.path, st.st_size))
        except OSError:
            continue
    total = sum(size for _, _, size in files)
    for _, path, size in sorted(files):
        if total <= bound:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:  # another process evicted it
            pass
        except OSError:
            continue
        total -= size
    return total
