"""Nothing on disk breaks an import or a launch (SPEC 9): a kept render that is empty, cut
short, cut where it still compiles, another entry's content or not UTF-8 is a miss and is
written again; with no home directory the disk caches are off with one warning; a relative
``XDG_CACHE_HOME`` is ignored. Each case runs in a fresh interpreter, as a user's next
process would."""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyopencl")

# Import, then two launches of other values: a render cut short must not leave either undone.
LAUNCH = textwrap.dedent("""
    import numpy as np
    import pyopencl.array as cla
    from specializer.backends import opencl as cl

    @cl.kernel
    def fill(x: cl.Array[np.int32], v: np.int32) -> str:
        return "__kernel void fill(__global int *x, int v) { x[get_global_id(0)] = v; }"

    x = cla.zeros(cl.default_queue(), 4, np.int32)
    for v in (5, 7):
        cl.launch(fill, x, np.int32(v), global_size=4)
        print(x.get().tolist())
""")
LAUNCHED = "[5, 5, 5, 5]\n[7, 7, 7, 7]\n"


def _run(code, *args, env=(), unset=(), cwd=None):
    environ = {**os.environ, **dict(env)}
    for name in ("SPECIALIZER_PRECOMPILE_OUTPUT", *unset):
        environ.pop(name, None)
    r = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _kept(cache):
    return {p.name: p.read_bytes() for p in sorted((cache / "templates").iterdir())}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A cache holding the renders of an import and a launch, and their bytes."""
    cache = tmp_path_factory.mktemp("whole")
    assert _run(LAUNCH, env={"SPECIALIZER_CACHE_DIR": cache}) == LAUNCHED
    kept = _kept(cache)
    assert len(kept) >= 2
    return cache, kept


def _compiles(data):
    try:
        compile(data.decode(), "<cut>", "exec")
    except (SyntaxError, ValueError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def _cut_where_it_compiles(data, others):
    """The line end nearest the middle where the file, cut there, still compiles: code that
    Python would run without complaint, with its later lines missing."""
    ends = [i + 1 for i in range(len(data) - 1) if data[i] == ord("\n")]
    cuts = [c for c in ends if _compiles(data[:c])]
    return data[: min(cuts, key=lambda c: abs(c - len(data) // 2))] if cuts else data


def _cut_mid_line(data, others):
    cut = len(data) // 2
    while b"\n" in data[cut - 1 : cut + 1]:
        cut += 1
    return data[:cut]


DAMAGE = {
    "empty": lambda data, others: b"",  # what a rename without fsync can leave after a crash
    "cut mid-line": _cut_mid_line,
    "cut where it still compiles": _cut_where_it_compiles,
    "another entry's content": lambda data, others: others[0],
    "not UTF-8": lambda data, others: b"\xff" + data[1:],
}


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_kept_render_breaks_no_import_or_launch_and_is_written_again(
    whole, tmp_path, how
):
    source, kept = whole
    cache = tmp_path / "cache"
    shutil.copytree(source, cache)
    names = list(kept)
    damaged = 0
    for i, name in enumerate(names):
        others = [kept[n] for n in names[i + 1 :] + names[:i]]
        data = DAMAGE[how](kept[name], others)
        damaged += data != kept[name]
        (cache / "templates" / name).write_bytes(data)
    assert damaged
    assert _run(LAUNCH, env={"SPECIALIZER_CACHE_DIR": cache}) == LAUNCHED
    assert _kept(cache) == kept  # every damaged entry was rendered and written again


# One template, rendered, then its kept render cut at every byte (every line, and within
# every line): each render afterwards gives the whole text and writes the entry whole again.
CUT_EVERYWHERE = textwrap.dedent("""
    import pathlib, sys
    from specializer import codegen
    codegen.add_template_dir(sys.argv[1])
    render = lambda: codegen.render("cut.py.j2", name="f", n=3)
    text = render()
    (kept,) = (pathlib.Path(sys.argv[2]) / "templates").iterdir()
    data = kept.read_bytes()
    for cut in range(len(data)):
        kept.write_bytes(data[:cut])
        assert render() == text, cut
        assert kept.read_bytes() == data, cut
    print(len(data), end="")
""")


def test_a_kept_render_cut_at_any_byte_is_rendered_and_written_again(tmp_path):
    templates = tmp_path / "tpl"
    templates.mkdir()
    (templates / "cut.py.j2").write_text(
        "def {{ name }}(x):\n    y = x + {{ n }}\n    y = y * 2\n    return y\n"
    )
    cache = tmp_path / "cache"
    size = _run(CUT_EVERYWHERE, templates, cache, env={"SPECIALIZER_CACHE_DIR": cache})
    assert int(size) > 50


# -- where the caches live -------------------------------------------------------------------

# Under a uid with no passwd entry when run as root (the interpreter's own files may be
# readable by root alone, so they are imported first and specializer is then imported afresh
# as that uid); otherwise the passwd lookup is made to fail as it fails for such a uid.
NO_HOME = textwrap.dedent("""
    import json, os, sys, warnings
    uid = int(sys.argv[1])
    if uid >= 0:
        os.environ["SPECIALIZER_CACHE_DIR"] = ""  # root's own import keeps nothing
        import specializer.backends.opencl
        for name in [m for m in sys.modules if m.split(".")[0] == "specializer"]:
            del sys.modules[name]
        del os.environ["SPECIALIZER_CACHE_DIR"]
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    else:
        import pwd

        def getpwuid(uid):
            raise KeyError(f"getpwuid(): uid not found: {uid}")

        pwd.getpwuid = getpwuid
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(sys.argv[2])
        from specializer import GenericFunction, cached_lookup, diskcache

        assert cached_lookup(lambda: 1, int, GenericFunction("homeless"), (), "key") == 1
        assert diskcache.cache_dir("templates") is None and diskcache.cache_dir("cuda") is None
    print(json.dumps([str(w.message) for w in caught]))
""")


def _uid_without_passwd_entry():
    for uid in range(54321, 54421):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no free uid without a passwd entry")


def _others_can_import_the_package() -> bool:
    """Whether a uid of no group could read the package (the checkout may lie under a
    directory only its owner enters, such as a fresh clone in a mktemp -d)."""
    import specializer

    package = Path(specializer.__file__).resolve().parent
    if any(not os.stat(d).st_mode & stat.S_IXOTH for d in (package, *package.parents)):
        return False
    return all(os.stat(f).st_mode & stat.S_IROTH for f in package.rglob("*.py"))


def test_no_home_directory_means_no_disk_cache_and_one_warning(tmp_path):
    """No home and (run as root) no passwd entry: the kernels build and run, with pyopencl's
    own caches off too (they need a home: each pyopencl.Kernel would raise), and the one
    warning of the whole run is the library's."""
    real = os.geteuid() == 0 and _others_can_import_the_package()
    uid = _uid_without_passwd_entry() if real else -1
    out = _run(
        NO_HOME,
        uid,
        LAUNCH,
        unset=("HOME", "SPECIALIZER_CACHE_DIR", "XDG_CACHE_HOME", "PYOPENCL_NO_CACHE"),
        cwd=tmp_path,
    )
    *launched, warned = out.splitlines(keepends=True)
    assert "".join(launched) == LAUNCHED
    (warning,) = json.loads(warned)
    assert "disk caches are off: there is no home directory" in warning
    assert "SPECIALIZER_CACHE_DIR" in warning
    assert list(tmp_path.iterdir()) == []


LOOKUP = "import specializer as s; s.cached_lookup(lambda: 1, int, s.GenericFunction('g'), (), 1)"


def test_a_relative_xdg_cache_home_is_ignored(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {"HOME": home, "XDG_CACHE_HOME": "relative-cache"}
    _run(LOOKUP, env=env, unset=("SPECIALIZER_CACHE_DIR",), cwd=work)
    assert list(work.iterdir()) == []  # not under the current directory
    assert any((home / ".cache" / "specializer" / "templates").iterdir())
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")  # an absolute one is used
    _run(LOOKUP, env=env, unset=("SPECIALIZER_CACHE_DIR",), cwd=work)
    assert any((tmp_path / "xdg" / "specializer" / "templates").iterdir())
