"""What is read of C++ without compiling it: the kernels a source defines (compiled into one
program) and a mangled entry's parameter types (what its pointers point at: PTX does not say).
"""

from __future__ import annotations

import re

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ATTRIBUTES = re.compile(r"__(?:launch_bounds|cluster_dims|maxnreg)__\s*\([^)]*\)")
_GLOBAL_DECL = re.compile(r"([^;{}]*?)\b__global__\b([^;{}(]*?)\b([A-Za-z_]\w*)\s*\(")


def kernel_names(source: str) -> list[str]:
    """The non-template, non-overloaded ``__global__`` functions at ``source``'s file scope."""
    text = _ATTRIBUTES.sub(" ", _COMMENTS.sub(" ", source))
    text = re.sub(r"^[ \t]*#[^\n]*", " ", text, flags=re.M)  # preprocessor lines
    # blocks but extern "C" { ... }: a kernel inside is not at file scope, or not a definition
    inner: list[tuple[int, int]] = []
    stack: list[tuple[int, bool]] = []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            head = text[: m.start()].rstrip()
            stack.append((m.start(), head.endswith('extern "C"')))
        elif stack:
            start, extern = stack.pop()
            if not extern:
                inner.append((start, m.start()))
    names: dict[str, int] = {}
    for m in _GLOBAL_DECL.finditer(text):
        name = m.group(3)
        nested = any(a < m.start() < b for a, b in inner)
        names[name] = 2 if nested or "template" in m.group(1) else names.get(name, 0) + 1
    return [n for n, count in names.items() if count == 1]


_MANGLED_BUILTINS = {
    **{"v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char"},
    **{"s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long"},
    **{"m": "unsigned long", "x": "long long", "y": "unsigned long long", "f": "float"},
    **{"d": "double", "e": "long double"},
}
_DIGITS = re.compile(r"\d+")
_SUBSTITUTION = re.compile(r"S([0-9A-Z]*)_")
_TEMPLATE_PARAM = re.compile(r"T(\d*)_")


class _Mangled:
    """The parameter types of an Itanium-mangled name, as C++ spells them: ``_Z1kPKfPi`` gives
    ``["float const*", "int*"]``. A subset: what it does not read (``std::`` names, operators,
    packs, ...) is a ValueError, and the entry goes unchecked."""

    def __init__(self, mangled: str) -> None:
        self.s, self.i = mangled, 0
        self.subs: list[str] = []  # substitution candidates, in order: S_, S0_, S1_, ...
        self.targs: list[str] = []  # the function's template arguments: T_, T0_, ...

    def params(self) -> list[str]:
        self.expect("_Z")
        self.name(function=True)
        if self.targs:
            self.type()  # a function template's return type
        out = []
        while self.i < len(self.s):
            out.append(self.type())
        return [] if out == ["void"] else out

    def expect(self, text: str) -> None:
        if not self.s.startswith(text, self.i):
            raise ValueError(self.s)
        self.i += len(text)

    def match(self, pattern: re.Pattern[str]) -> re.Match[str]:
        m = pattern.match(self.s, self.i)
        if m is None:
            raise ValueError(self.s)
        self.i = m.end()
        return m

    def source_name(self) -> str:
        n = int(self.match(_DIGITS)[0])
        self.i += n
        return self.s[self.i - n : self.i]

    def name(self, function: bool = False) -> str:
        """A name; each prefix of it is a substitution candidate, but a function's own."""
        nested = self.s.startswith("N", self.i)
        if nested:
            self.i += 1
            while self.s[self.i] in "rVK":
                self.i += 1
        prefix = ""
        while True:
            if self.s[self.i] == "S":
                prefix = self.substitution()
            else:
                part = self.source_name()
                prefix = f"{prefix}::{part}" if prefix else part
                args = []
                if self.s.startswith("I", self.i):
                    self.subs.append(prefix)
                    args = self.template_args()
                    prefix += f"<{', '.join(args)}>"
                last = not nested or self.s.startswith("E", self.i)
                if function and last:
                    self.targs = args
                else:
                    self.subs.append(prefix)
            if not nested or self.s.startswith("E", self.i):
                break
        self.i += nested
        return prefix

    def template_args(self) -> list[str]:
        self.expect("I")
        args = []
        while not self.s.startswith("E", self.i):
            if self.s[self.i] == "L":  # a literal: L <builtin type> <value> E
                end = self.s.index("E", self.i)
                args.append(self.s[self.i + 2 : end].replace("n", "-"))
                self.i = end + 1
            else:
                args.append(self.type())
        self.i += 1
        return args

    def substitution(self) -> str:
        seq = self.match(_SUBSTITUTION)[1]  # St, Sa, Ss, ...: std:: names, not read
        if self.s.startswith("I", self.i):
            raise ValueError(self.s)
        return self.subs[int(seq, 36) + 1 if seq else 0]

    def type(self) -> str:
        c = self.s[self.i]
        if c in _MANGLED_BUILTINS:
            self.i += 1
            return _MANGLED_BUILTINS[c]
        if self.s.startswith("DF16_", self.i):
            self.i += 5
            return "_Float16"
        if c == "S":
            return self.substitution()
        if c.isdigit() or c == "N":
            return self.name()
        if c == "P":
            self.i += 1
            t = self.type() + "*"
        elif c in "rVK":
            quals = ""
            while self.s[self.i] in "rVK":
                quals += {"r": "", "V": " volatile", "K": " const"}[self.s[self.i]]
                self.i += 1
            t = self.type() + quals
        elif c == "T":
            n = self.match(_TEMPLATE_PARAM)[1]
            t = self.targs[int(n) + 1 if n else 0]
        else:
            raise ValueError(self.s)
        self.subs.append(t)
        return t


def mangled_parameters(mangled: str) -> list[str] | None:
    """The C++ parameter types of entry ``mangled``, or None where it is not mangled or read."""
    try:
        return _Mangled(mangled).params() if mangled.startswith("_Z") else None
    except (ValueError, IndexError):
        return None
