"""NVRTC's output on disk, shared by every process of the user (:mod:`specializer.diskcache`).

An entry holds PTX, cubin, lowered names and log, keyed by a SHA-256 of all that decides them
and nothing else (no world, kernel or handle), so it is right in any process.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from ... import diskcache

_MAGIC = b"specializer nvrtc cache 2\n"
_LEN = struct.Struct("<Q")
_SUFFIX = ".nvrtc"
_MAX_ENTRY = 1 << 30  # bytes: an entry larger than this is refused unread


def cache_dir() -> Path | None:
    """The directory of the CUDA back-end's entries, or ``None`` when the cache is off."""
    return diskcache.cache_dir("cuda")


def key_of(parts: dict[str, Any]) -> str:
    """The key of a compilation: the SHA-256 (hex) of its parts in a canonical form."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _decode(key: str, body: bytes) -> dict[str, Any] | None:
    """The entry in ``body`` (its digest already checked), or ``None`` if it is not one."""
    if len(body) < len(_MAGIC) + _LEN.size or not body.startswith(_MAGIC):
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
    """The entry of ``key`` (``ptx``, ``cubin``, ``lowered``, ``log``), or ``None``."""
    d = diskcache.private_dir("cuda", create=False)
    if d is None:
        return None
    data = diskcache.read_entry(d, f"{key}{_SUFFIX}", _MAX_ENTRY)
    if data is None:
        return None
    try:
        return _decode(key, data)
    except Exception:  # a damaged entry of any shape is a miss; the compile rewrites it
        return None


def store(key: str, ptx: str, cubin: bytes | None, lowered: dict[str, str], log: str) -> bool:
    """Write the entry of ``key``; whether it was written."""
    d = diskcache.private_dir("cuda", create=True)
    if d is None:
        return False
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
    entry = b"".join((_MAGIC, _LEN.pack(len(meta)), meta, ptx_b, cubin or b""))
    return diskcache.write_entry(d, f"{key}{_SUFFIX}", entry)
