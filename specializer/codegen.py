"""Generated functions: Jinja templates rendered to Python source, exec'd, and kept reviewable.

As with Julia's ``@generated``, a template receives names and counts, never values (those are
bound as defaults or globals), so nothing a user controls becomes code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import json
import keyword
import linecache
import os
import re
import tempfile
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType
from typing import TYPE_CHECKING, Any

from . import diskcache, precompile
from .locks import import_before_fork, new_lock

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "GeneratedSource",
    "add_template_dir",
    "generate",
    "generated_sources",
    "identifier",
    "render",
    "template_cache_dir",
    "write_atomic",
]


def _templates_dir() -> Path:
    """``templates/``: inside the package in a wheel, beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for d in (here / "templates", here.parent / "templates"):
        if (d / "lookup.py.j2").is_file():
            return d
    raise ImportError(f"specializer's templates are missing (looked in {here / 'templates'})")


def template_cache_dir() -> Path | None:
    """Where renders are kept for the next process; ``None`` when the caches are off."""
    return diskcache.cache_dir("templates")


_search_path = [str(_templates_dir())]
_env: list[jinja2.Environment] = []  # made at the first render: jinja2 is not imported before
import_before_fork("jinja2")  # so a child never imports it: a fork never hangs in its import


def _environment() -> jinja2.Environment:
    """The Jinja environment, made on first use (renders kept on disk need no Jinja)."""
    with _lock():
        if not _env:
            import jinja2

            _env.append(
                jinja2.Environment(
                    loader=jinja2.FileSystemLoader(_search_path),
                    undefined=jinja2.StrictUndefined,
                    autoescape=False,
                    keep_trailing_newline=True,
                    trim_blocks=True,
                    lstrip_blocks=True,
                )
            )
    return _env[0]


@dataclass(frozen=True)
class GeneratedSource:
    """One generated function: its name, its source, and the specialization it serves."""

    name: str
    source: str
    template: str
    specialization: str

    def __str__(self) -> str:
        return self.source


#: How many records of released generated functions generated_sources() keeps.
RELEASED_KEPT = 1000

#: The live generated functions' records, by name, in order of generation.
_generated: dict[str, tuple[int, GeneratedSource]] = {}
_released: deque[tuple[int, GeneratedSource]] = deque(maxlen=RELEASED_KEPT)
#: Per base name, how many functions have had it: the next one gets ``base__<count + 1>``.
_counts: dict[str, int] = {}
_serial = itertools.count()
_lock = new_lock()  # re-entrant: a finalizer may run while a generation holds it
#: the function's name in a kept render: text no template spells and no parameter holds
#: (checked: where one does, the render keeps its real name)
NAME = "_specializer_generated_name_"
#: bytes: a render kept on disk larger than this is not read
_MAX_RENDER = 1 << 22
#: (the template files' names, sizes and modification times, the digest of their contents)
_identity: list[tuple[tuple[tuple[str, int, int], ...], str]] = []
#: the blocks of templates/launch.py.j2 a back-end's template fills
_BLOCKS = ("where", "setup", "invoke", "guard")


def generated_sources() -> list[GeneratedSource]:
    """Every function generated in this process, in order: those alive, and the newest
    :data:`RELEASED_KEPT` of those released since (so memory stays bounded)."""
    with _lock():
        records = [*_released, *_generated.values()]
    return [g for _, g in sorted(records, key=lambda record: record[0])]


def identifier(*parts: object, limit: int = 96) -> str:
    """A Python identifier made of sanitized ``parts`` (letters, digits and underscores only)."""
    text = "_".join(str(p) for p in parts)
    text = re.sub(r"[^0-9A-Za-z_]+", "_", text).strip("_")
    text = re.sub(r"_{2,}", "_", text)[:limit].rstrip("_") or "fn"
    if text[0].isdigit() or keyword.iskeyword(text):
        text = "_" + text
    return text


def _check_param(key: str, value: object) -> None:
    """Templates get identifiers, ints and bools (or lists of them), never arbitrary values."""
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_param(key, v)
    elif not isinstance(value, (bool, int)) and not (
        isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value)
    ):
        raise TypeError(
            f"template parameter {key}={value!r} is not an identifier, an int or a bool: "
            "values must be bound as defaults or globals, never rendered into source"
        )


def add_template_dir(path: str | os.PathLike[str]) -> None:
    """Let templates be found in ``path`` too (after ``templates/``): a back-end that lives
    outside this package keeps its template (which extends ``launch.py.j2``) beside itself."""
    d = str(Path(path).resolve())
    if not Path(d).is_dir():
        raise NotADirectoryError(f"no template directory {d}")
    with _lock():
        if d not in _search_path:
            _search_path.append(d)
            _identity.clear()
            if _env:  # the loader copied the list it was made with
                _env[0].loader.searchpath.append(d)  # type: ignore[union-attr]


def render(template: str, **params: Any) -> str:
    """Render ``templates/<template>`` with identifiers and ints only.

    A render depends only on the template files, Jinja and ``params``, so it is kept on disk
    (:func:`template_cache_dir`) and the next process skips importing Jinja. It is kept with
    :data:`NAME` for the function's name, so kernels of one shape share one kept render."""
    for k, v in params.items():
        _check_param(k, v)
    name = params.get("name")
    if name is not None and NAME not in json.dumps(params):
        return _kept_render(template, {**params, "name": NAME}).replace(NAME, name)
    return _kept_render(template, params)


def _kept_render(template: str, params: dict[str, Any]) -> str:
    """The render of ``template`` with ``params``: kept on disk (see :func:`render`)."""
    d = diskcache.private_dir("templates", create=True)
    if d is None:
        return _environment().get_template(template).render(**params)
    blob = json.dumps([_templates_identity(), template, params], sort_keys=True)
    filename = f"{hashlib.sha256(blob.encode()).hexdigest()}.py"
    data = diskcache.read_entry(d, filename, _MAX_RENDER)
    if data is not None:
        with contextlib.suppress(UnicodeDecodeError):  # if so, rendered and written again
            return data.decode("utf-8")
    source = _environment().get_template(template).render(**params)
    diskcache.write_entry(d, filename, source.encode("utf-8"))
    return source


def _templates_identity() -> str:
    """The digest of the template files and Jinja keying kept renders; re-read when one changed."""
    files = [f for d in _search_path for f in sorted(Path(d).glob("*.j2"))]
    stats = tuple((str(f), st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()])
    if _identity and _identity[0][0] == stats:
        return _identity[0][1]
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0".encode() + f.read_bytes() + b"\0")
    h.update(_jinja_identity().encode())
    _identity[:] = [(stats, h.hexdigest())]
    return h.hexdigest()


def _jinja_identity() -> str:
    """Which Jinja renders: its ``__init__``'s path, size and mtime (without importing it)."""
    spec = importlib.util.find_spec("jinja2")
    if spec is None or not spec.origin:
        return ""
    st = os.stat(spec.origin)
    return f"{spec.origin}\0{st.st_size}\0{st.st_mtime_ns}"


def _forget(name: str, filename: str) -> None:
    """A generated function was released: its record joins the released, its lines go."""
    with _lock():
        record = _generated.pop(name, None)
        if record is not None:
            _released.append(record)
        linecache.cache.pop(filename, None)


def generate(
    template: str,
    name_parts: Iterable[object],
    namespace: Mapping[str, Any],
    specialization: str,
    **params: Any,
) -> FunctionType:
    """Render ``template`` (with ``name`` and ``params``) as a function named from
    ``name_parts``, exec it with ``namespace`` as its globals, register its source, return it."""
    with _lock():
        # base, then base__2, ...: never a name used before (identifier() makes none with __)
        base = identifier(*name_parts)
        n = _counts.get(base, 0) + 1
        _counts[base] = n
        name = base if n == 1 else f"{base}__{n}"
        source = render(template, name=name, **params)
        filename = f"<specializer {name}>"
        try:
            code = compile(source, filename, "exec")
        except SyntaxError as e:
            raise template_error(template, source, e, params) from None
        glb = {"__name__": f"specializer.generated.{name}", **namespace}
        exec(code, glb)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        fn = glb[name]
        if not isinstance(fn, FunctionType):
            raise TypeError(f"template {template} must define a function named {name}")
        _generated[name] = (next(_serial), GeneratedSource(name, source, template, specialization))
        weakref.finalize(fn, _forget, name, filename)
    return fn


def render_block(template: str, block: str, **params: Any) -> str | None:
    """What block ``block`` renders to with ``params`` in ``template`` or the nearest template
    it extends that defines it (None where none does, or it cannot be rendered alone)."""
    import jinja2  # (only on an error's path: Jinja is imported at the first render)

    env = _environment()
    name: str | None = template
    while name is not None:
        tmpl = env.get_template(name)
        render_fn = tmpl.blocks.get(block)
        if render_fn is not None:
            try:
                return "".join(render_fn(tmpl.new_context(params)))
            except jinja2.TemplateError:  # it needs the whole render (a macro of its template)
                return None
        parsed = env.parse(env.loader.get_source(env, name)[0])  # type: ignore[union-attr]
        parent = next(parsed.find_all(jinja2.nodes.Extends), None)
        name = getattr(parent.template, "value", None) if parent is not None else None
    return None


def template_error(
    template: str, source: str, e: SyntaxError, params: dict[str, Any]
) -> SyntaxError:
    """A render that does not compile, as an error naming the template, the block the bad
    line came from (or the required block that rendered nothing) and the line."""
    lines = source.splitlines()
    bad = lines[e.lineno - 1].strip() if e.lineno and 0 < e.lineno <= len(lines) else ""
    where = ""
    for block in ("where", "invoke"):  # the blocks a launch path cannot do without
        if not (render_block(template, block, **params) or "").strip():
            where = f", block `{block}` (empty: it must render at least one statement)"
            break
    else:
        for block in _BLOCKS:
            text = render_block(template, block, **params) or ""
            if bad and bad in (line.strip() for line in text.splitlines()):
                where = f", block `{block}`"
                break
    return SyntaxError(
        f"template {template}{where} renders code that does not compile: {e.msg} at line "
        f"{e.lineno} of the render: {bad!r}"
    )


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so no reader (and no
    failure) ever sees a half-written file. Refused in precompile-output mode."""
    path = Path(path)
    precompile.refuse_write(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
