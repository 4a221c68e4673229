"""What the back-end reads of PTX: a kernel's parameters, checked against the argument types
when it is compiled (SPEC 8), and a module's variables.
"""

from __future__ import annotations

import re

import numpy as np

from ...compiler import users_error
from ...types import Struct, type_name
from ._array import Array
from ._cxx import mangled_parameters
from ._params import struct_dtype

_PTX_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.([a-z])(\d+)((?:\s+\.\w+)*)(?:\s+\.align\s+\d+)?"
    r"\s+[\w$]+\s*(?:\[(\d+)\])?"
)
_KIND_NAMES = {"f": "floating-point", "i": "integer", "ptr": "pointer", "bytes": "bytes"}


def ptx_parameters(ptx: str, lowered: str) -> list[tuple[str, int, str]] | None:
    """(kind ``f``/``i``/``ptr``/``bytes``, size, PTX spelling) of each parameter of ``.entry
    lowered``; None when the entry is not found."""
    m = re.search(rf"\.entry\s+{re.escape(lowered)}\s*\(([^)]*)\)", ptx)
    if m is None:
        return None
    out = []
    for p in _PTX_PARAM.finditer(m.group(1)):
        letter, bits, quals, count = p.group(1), int(p.group(2)), p.group(3), p.group(4)
        size = bits // 8 * (int(count) if count else 1)
        if letter == "b":
            kind = "bytes"
        elif letter == "f":
            kind = "f"
        else:
            kind = "ptr" if ".ptr" in quals else "i"
        out.append((kind, size, f".{letter}{bits}" + (f"[{count}]" if count else "")))
    return out


def _argument_kind(t: type) -> tuple[str, int] | None:
    if isinstance(t, type) and issubclass(t, Array):
        return "ptr", 8
    if isinstance(t, type) and issubclass(t, Struct):
        return "bytes", struct_dtype(t).itemsize
    if isinstance(t, type) and issubclass(t, np.generic):
        dt = np.dtype(t)
        return ("f" if dt.kind == "f" else "bytes" if dt.kind == "c" else "i"), dt.itemsize
    return None


def check_parameters(kernel: str, ptx: str, lowered: str, tt: tuple[type, ...]) -> None:
    """A ``TypeError`` when an argument type cannot be the kernel's parameter as the PTX
    declares it (another size, a float for an integer or back) or, for a C++ entry, an array's
    elements differ from what its mangled name says the pointer points at."""
    params = ptx_parameters(ptx, lowered)
    if params is None:
        return
    if len(params) != len(tt):
        raise users_error(
            TypeError(
                f"kernel {kernel} takes {len(params)} parameter(s) (its PTX .entry {lowered}), "
                f"its method was looked up for {len(tt)} argument(s) "
                f"({', '.join(type_name(t) for t in tt)}): launch it with one argument per "
                f"parameter (captured values first)"
            )
        )
    for i, ((kind, size, ptx_type), t) in enumerate(zip(params, tt)):  # sizes and kinds
        arg = _argument_kind(t)
        if arg is None:
            continue
        akind, asize = arg
        same_kind = kind == akind or "bytes" in (kind, akind) or {kind, akind} == {"i", "ptr"}
        if size != asize or not same_kind:
            raise users_error(
                TypeError(
                    f"argument {i} of kernel {kernel} (counting from 0, captured values first) is "
                    f"a {type_name(t)} ({asize}-byte {_KIND_NAMES[akind]}), but the kernel's "
                    f"parameter {i} is a {size}-byte {_KIND_NAMES[kind]} (PTX {ptx_type}): pass a "
                    f"value of the parameter's C type, or declare the method's parameter as it"
                )
            )
    for i, (spelled, t) in enumerate(zip(mangled_parameters(lowered) or (), tt)):  # pointees
        if not (isinstance(t, type) and issubclass(t, Array)):
            continue
        try:
            dtype = t.dtype
        except TypeError:  # Array[np.floating]: no elements to compare
            continue
        theirs = None if dtype is None else _array_element(dtype)
        pointee = _pointee(spelled)
        if theirs and pointee and theirs != pointee:
            raise users_error(
                TypeError(
                    f"argument {i} of kernel {kernel} (counting from 0, captured values first) is "
                    f"a {type_name(t)} (elements: {theirs[1]}-byte {theirs[0]}), but the kernel's "
                    f"parameter {i} is a {spelled} (elements: {pointee[1]}-byte {pointee[0]}; its "
                    f"entry {lowered}): pass an array of the parameter's element type, or declare "
                    "the method's parameter as it"
                )
            )


#: the (kind, size) of each value of the types a pointer parameter may point at
_ELEMENTS: dict[str, tuple[str, int]] = {
    **{n: ("int", 1) for n in ("bool", "char", "signed char", "unsigned char", "uchar")},
    **{n: ("int", 2) for n in ("short", "unsigned short", "ushort")},
    **{n: ("int", 4) for n in ("int", "unsigned int", "uint")},
    **{n: ("int", 8) for n in ("long", "unsigned long", "ulong", "long long", "longlong")},
    **{n: ("int", 8) for n in ("unsigned long long", "ulonglong")},
    **{n: ("float", 2) for n in ("__half", "_Float16", "__half2")},
    **{n: ("bfloat16", 2) for n in ("__nv_bfloat16", "__nv_bfloat162")},
    "float": ("float", 4),
    "double": ("float", 8),
}
_CUDA_VECTOR = re.compile(r"(\w+?)[1-4]")  # vector_types.h: float4, uchar2, longlong2, ...


def _pointee(spelled: str) -> tuple[str, int] | None:
    """The (kind, size) of what a pointer of C++ type ``spelled`` points at, if known."""
    if not spelled.endswith("*"):
        return None
    name = " ".join(w for w in spelled[:-1].split() if w not in ("const", "volatile"))
    m = _CUDA_VECTOR.fullmatch(name)
    return _ELEMENTS.get(name) or (_ELEMENTS.get(m[1]) if m else None)


def _array_element(dtype: np.dtype) -> tuple[str, int] | None:
    """The (kind, size) of an array's elements (a complex's float, a uniform struct's field)."""
    if dtype.subdtype is not None:
        return _array_element(dtype.subdtype[0])
    if dtype.names is not None and dtype.fields is not None:
        parts = {_array_element(dtype.fields[n][0]) for n in dtype.names}
        return parts.pop() if len(parts) == 1 else None
    if dtype.kind in "fc":
        return "float", dtype.itemsize // (2 if dtype.kind == "c" else 1)
    return ("int", dtype.itemsize) if dtype.kind in "biu" else None


_PTX_GLOBAL = re.compile(
    r"^(?:\.visible\s+|\.weak\s+)?\.(?:const|global)\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)", re.M
)
#: the mangled prefixes of the toolkit headers' own variables (CCCL, cooperative groups)
_TOOLKIT_GLOBALS = ("_ZN4cuda", "_ZN3cub", "_ZN6thrust", "_ZN18cooperative_groups", "_ZN2nv")


def ptx_globals(ptx: str) -> list[str]:
    """The ``__constant__`` and ``__device__`` variables a PTX module declares (not toolkit's)."""
    names = dict.fromkeys(_PTX_GLOBAL.findall(ptx))
    return [n for n in names if not n.startswith(_TOOLKIT_GLOBALS) and "_INTERNAL_" not in n]
