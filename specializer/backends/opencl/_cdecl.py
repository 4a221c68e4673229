"""C declarations: a kernel's parameters read from its OpenCL C source (scalars, vectors,
pointers, structs and typedefs laid out), and checked against the argument types."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import numpy as np
import pyopencl as cl

from ...compiler import CompilerJob, users_error
from ...signatures import signature
from ...types import CONCRETE_SCALARS, Struct, type_name
from ._args import Array, Buffer, Image, LocalMemory, Sampler, c_type

_SCALAR_PARAMS: dict[str, tuple[str, int]] = {
    **{n: ("int", 1) for n in ("char", "uchar", "signed char", "unsigned char", "bool")},
    **{n: ("int", 2) for n in ("short", "ushort", "unsigned short")},
    **{n: ("int", 4) for n in ("int", "uint", "unsigned int", "unsigned")},
    **{n: ("int", 8) for n in ("long", "ulong", "unsigned long")},
    "half": ("float", 2),
    "float": ("float", 4),
    "double": ("float", 8),
}
_ADDRESS_BITS_PARAMS = ("size_t", "ptrdiff_t", "intptr_t", "uintptr_t")
_VECTOR = re.compile(r"([a-z]+)(2|3|4|8|16)")
_COMPLEX_PARAMS = {"cfloat_t": "float2", "cdouble_t": "double2"}  # pyopencl-complex.h
_POINTERS: dict[int, str] = {
    cl.kernel_arg_address_qualifier.GLOBAL: "__global",
    cl.kernel_arg_address_qualifier.CONSTANT: "__constant",
    cl.kernel_arg_address_qualifier.LOCAL: "__local",
}
_QUALIFIERS = frozenset(
    {"const", "volatile", "restrict", "__restrict", "__private", "private", "__global"}
    | {"global", "__constant", "constant", "__local", "local"}
)
_PART_NAMES = {
    **{v: k for k, v in _SCALAR_PARAMS.items() if " " not in k and k[0] != "u"},
    ("int", 1): "char",
}


class _Layout(NamedTuple):
    """How a type holds its values: the (kind, size) of each part (None: a struct of mixed
    fields), how many parts (n), its size and its alignment in bytes."""

    part: tuple[str, int] | None
    n: int
    size: int
    align: int

    def __str__(self) -> str:
        if self.part is None:
            return f"a struct of mixed fields ({self.size} bytes)"
        name = _PART_NAMES.get(self.part, f"{self.part[1]}-byte {self.part[0]}")
        return name if self.n == 1 else f"{name}{self.n}"


# Source scanning for the names argument info reports: typedefs and structs the program's own
# text defines (comments removed; preprocessor conditions are not evaluated).
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRUCTS = re.compile(r"\b(typedef\s+)?struct\b\s*(\w+\s*)?(\{[^{}]*\})\s*(\w+)?\s*;")
_TYPEDEFS = re.compile(r"\btypedef\s+([\w\s]+?)\s+(\w+)\s*;")
_FIELD = re.compile(
    r"((?:\w+\s+)*?\w+)\s+(\w+(?:\s*\[\s*\d+\s*\])?(?:\s*,\s*\w+(?:\s*\[\s*\d+\s*\])?)*)"
)


def _source_types(source: str) -> dict[str, str]:
    """Each typedef and struct name ``source`` defines -> what it names (a type's name, or a
    struct's ``{...}`` body); a name defined twice differently names nothing (``""``)."""
    text = _COMMENTS.sub(" ", source)
    found: list[tuple[str, str]] = []
    for m in _STRUCTS.finditer(text):
        if m[2]:
            found.append((f"struct {m[2].strip()}", m[3]))
        if m[1] and m[4]:
            found.append((m[4], m[3]))
    found += [(m[2], " ".join(m[1].split())) for m in _TYPEDEFS.finditer(text)]
    types: dict[str, str] = {}
    for name, what in found:
        types[name] = what if types.get(name, what) == what else ""
    return types


def _layout(name: str, address_bits: int, types: dict[str, str], depth: int = 0) -> _Layout | None:
    """The layout of the type spelled ``name`` (qualifiers and a pointer's ``*`` dropped), or
    None where it is not known: ``void``, a name the source does not define plainly."""
    name = " ".join(w for w in name.replace("*", " ").split() if w not in _QUALIFIERS)
    name = _COMPLEX_PARAMS.get(name, name) if name not in types else name
    if name in _SCALAR_PARAMS or name in _ADDRESS_BITS_PARAMS:
        part = _SCALAR_PARAMS.get(name, ("int", address_bits // 8))
        return _Layout(part, 1, part[1], part[1])
    m = _VECTOR.fullmatch(name)
    if m and m[1] in _SCALAR_PARAMS:
        part, n = _SCALAR_PARAMS[m[1]], int(m[2]) + (m[2] == "3")
        return _Layout(part, n, part[1] * n, part[1] * n)
    what = types.get(name, "")
    if depth > 8 or not what:
        return None
    if what[0] != "{":
        return _layout(what, address_bits, types, depth + 1)
    return _struct_layout(what[1:-1], address_bits, types, depth + 1)


def _struct_layout(
    body: str, address_bits: int, types: dict[str, str], depth: int
) -> _Layout | None:
    """The layout of a struct of fields ``body``, as C lays it out; None unless every field
    is of a known type (no pointers, bit fields, attributes or sizes from macros)."""
    size = align = count = 0
    parts = set()
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        m = _FIELD.fullmatch(decl)
        field = m and _layout(m[1], address_bits, types, depth)
        if not m or field is None:
            return None
        for declarator in m[2].split(","):
            length = int(re.sub(r"\D", "", declarator.partition("[")[2]) or 1)
            size = -(-size // field.align) * field.align + field.size * length
            align, count = max(align, field.align), count + field.n * length
            parts.add(field.part)
    if not align:
        return None
    size = -(-size // align) * align
    part = parts.pop() if len(parts) == 1 else None
    if part is None or count * part[1] != size:  # mixed, or padded: compared by size alone
        return _Layout(None, 1, size, align)
    return _Layout(part, count, size, align)


def _dtype_layout(dt: np.dtype) -> _Layout | None:
    """The layout of a numpy dtype's values: a scalar, a complex (two floats), a subarray or
    struct of equal packed parts (a ``pyopencl.cltypes`` vector), or another struct."""
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        inner = _dtype_layout(base)
        return inner and inner._replace(n=inner.n * int(np.prod(shape)), size=dt.itemsize)
    if dt.names is None:
        kind = "float" if dt.kind in "fc" else "int" if dt.kind in "biu" else ""
        n = 2 if dt.kind == "c" else 1
        return _Layout((kind, dt.itemsize // n), n, dt.itemsize, dt.alignment) if kind else None
    fields = [_dtype_layout(dt.fields[n][0]) for n in dt.names] if dt.fields else []
    parts = {f.part if f else None for f in fields}
    count = sum(f.n for f in fields if f)
    part = parts.pop() if len(parts) == 1 else None
    if part is not None and count * part[1] == dt.itemsize:
        return _Layout(part, count, dt.itemsize, dt.alignment)
    return _Layout(None, 1, dt.itemsize, dt.alignment)


def _param_kind(
    name: str, address: int, address_bits: int, types: dict[str, str] | None = None
) -> tuple[str, int, _Layout | None]:
    """(kind, size, layout) of a parameter of type ``name`` in address space ``address``; kind
    is "image", "sampler", "__global"/"__constant"/"__local" (a pointer; layout: its elements'),
    "int", "float", "vector", "struct", or "unknown" (nothing is checked)."""
    name = " ".join(name.split())
    if name.startswith("image") and name.endswith("_t"):
        return "image", 0, None
    if name == "sampler_t":
        return "sampler", 0, None
    layout = _layout(name, address_bits, types or {})
    if name.endswith("*") or address in _POINTERS:
        return _POINTERS.get(address, "__global"), 0, layout
    if layout is None:
        return "unknown", 0, None
    if layout.part is None:
        return "struct", layout.size, layout
    return (layout.part[0] if layout.n == 1 else "vector"), layout.size, layout


def _param_mismatch(t: type, kind: str, size: int, layout: _Layout | None = None) -> str | None:
    """Why an argument of type ``t`` cannot be a parameter of (kind, size, layout), or None
    when it can (or may: only clear mismatches are refused)."""
    if kind == "unknown":
        return None
    if isinstance(t, type) and issubclass(t, (Array, Buffer)):
        if kind not in ("__global", "__constant"):
            return "a buffer is a __global pointer"
        dt = t.dtype if issubclass(t, Array) and t.eltype in CONCRETE_SCALARS else None
        theirs = None if dt is None else _dtype_layout(dt)
        if layout is None or theirs is None:
            return None
        # parts of one kind and size (a float4 * takes floats), or mixed structs of one size
        if theirs.part == layout.part and (theirs.part is not None or theirs.size == layout.size):
            return None
        return f"the array's elements are {theirs}, the parameter's are {layout}"
    if t is LocalMemory:
        return None if kind == "__local" else "local memory is a __local pointer"
    if t is Image:
        return None if kind == "image" else "an image is an image parameter"
    if t is Sampler:
        return None if kind == "sampler" else "a sampler is a sampler_t parameter"
    if kind in ("image", "sampler", "__global", "__constant", "__local"):
        return "a value passed by value cannot be a pointer, an image or a sampler"
    if isinstance(t, type) and issubclass(t, Struct):
        if t.dtype is None:
            raise TypeError(f"{t!r} has no layout: a parameter's struct type is Struct[dtype]")
        dt = t.dtype
    elif isinstance(t, type) and issubclass(t, np.generic):
        dt = np.dtype(t)
    else:
        return None
    if dt.itemsize != size:
        return f"they differ in size ({dt.itemsize} and {size} bytes)"
    theirs = _dtype_layout(dt)
    if layout is None or theirs is None:
        return None
    if kind in ("int", "float") and dt.names is None and dt.kind != "c":
        arg_kind = "floating-point" if dt.kind == "f" else "integer"
        if arg_kind != {"float": "floating-point"}.get(kind, "integer"):
            article = "an" if arg_kind == "integer" else "a"
            return f"the argument is of {article} {arg_kind} type, the parameter is not"
    if theirs.part == layout.part and (theirs.n == layout.n or layout.part is None):
        return None
    return f"the argument holds {theirs}, the parameter {layout}"


def check_params(job: CompilerJob, knl: Any, context: cl.Context, source: str = "") -> None:
    """Each kernel parameter's type, as the device reports it, against the method's argument
    type (SPEC 8): a clear mismatch is a TypeError, before anything is enqueued. Once per
    linked kernel; devices reporting no argument info are not checked."""
    address_bits = min(d.address_bits for d in context.devices)
    info = cl.kernel_arg_info
    types = _source_types(source)
    for i, t in enumerate(job.mi.tt):
        try:
            name = knl.get_arg_info(i, info.TYPE_NAME)
            address = knl.get_arg_info(i, info.ADDRESS_QUALIFIER)
        except cl.Error:  # no argument info: built without -cl-kernel-arg-info
            return
        why = _param_mismatch(t, *_param_kind(name, address, address_bits, types))
        if why is None:
            continue
        try:
            pname = knl.get_arg_info(i, info.NAME)
        except cl.Error:
            pname = ""
        space = _POINTERS.get(address, "")
        declared = f"{space} {name}" if space and "*" in name else name
        theirs = type_name(t)
        if isinstance(t, type) and issubclass(t, np.generic):
            try:
                theirs += f" (OpenCL C {c_type(t)[0]})"
            except TypeError:  # a type OpenCL C does not spell
                pass
        raise users_error(
            TypeError(
                f"kernel {signature(job.name, job.mi.tt)}: parameter {i}"
                f"{f' ({pname})' if pname else ''} is declared {declared!r} in the kernel source, "
                f"but the method's signature gives it {theirs}: {why}. Make the annotation match "
                "the C declaration (or the declaration the annotation); nothing was launched"
            )
        )
