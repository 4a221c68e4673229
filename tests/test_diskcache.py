"""Nothing on disk breaks an import or a launch (SPEC 9): a kept render that is empty, cut
short, cut where it still compiles, another entry's content or not UTF-8 is a miss and is
written again; with no home directory the disk caches are off with one warning; a relative
``XDG_CACHE_HOME`` is ignored. Each case runs in a fresh interpreter, as a user's next
process would."""

import contextlib
import json
import os
import pwd
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
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


@pytest.fixture
def pocl_cache():
    """A kernel cache for PoCL that any uid may write. With no home PoCL keeps its kernels in
    /tmp/pocl/kcache, which fails every build when another user (say root, in an earlier
    run) made it: the machine's state, not the library's, so each run gets its own."""
    path = Path(tempfile.mkdtemp(prefix="pocl-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_home_directory_means_no_disk_cache_and_one_warning(tmp_path, pocl_cache):
    """No home and (run as root) no passwd entry: the kernels build and run, with pyopencl's
    own caches off too (they need a home: each pyopencl.Kernel would raise), and the one
    warning of the whole run is the library's."""
    real = os.geteuid() == 0 and _others_can_import_the_package()
    uid = _uid_without_passwd_entry() if real else -1
    out = _run(
        NO_HOME,
        uid,
        LAUNCH,
        env={"POCL_CACHE_DIR": pocl_cache},
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


# -- SPEC 9: the caches grow with what is distinct, under a bound, least recently used out ---

# Factory kernels (closures made by one factory, each its own kernel) of one signature,
# launched on OpenCL: the files after the first few, then after all of them.
FACTORY = textwrap.dedent("""
    import pathlib, sys
    import numpy as np
    import pyopencl.array as cla
    from specializer.backends import opencl as cl

    def make(v):
        @cl.kernel
        def fill(x: cl.Array[np.float32]) -> str:
            return f"__kernel void fill(__global float *x) {{ x[get_global_id(0)] = {v}.0f; }}"
        return fill

    def files():
        return sum(1 for p in pathlib.Path(sys.argv[1]).rglob("*") if p.is_file())

    x = cla.zeros(cl.default_queue(), 4, np.float32)
    counts = []
    for i in range(300):
        cl.launch(make(i % 3), x, global_size=4)  # three device sources among them
        assert x.get().tolist() == [float(i % 3)] * 4
        if i in (2, 299):
            counts.append(files())
    print(*counts)
""")


def test_factory_kernels_of_one_signature_add_no_files_to_the_disk_caches(tmp_path):
    cache = tmp_path / "cache"
    after_3, after_300 = map(
        int, _run(FACTORY, cache, env={"SPECIALIZER_CACHE_DIR": cache}).split()
    )
    assert after_3 == after_300 < 10


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """The two caches' directories in an empty cache directory, with the default bound."""
    from specializer import diskcache

    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECIALIZER_CACHE_MAXSIZE", raising=False)
    monkeypatch.delenv("SPECIALIZER_PRECOMPILE_OUTPUT", raising=False)
    return diskcache.private_dir("templates", True), diskcache.private_dir("cuda", True)


def _entries(*directories):
    return sorted(p.name for d in directories for p in d.iterdir())


def test_a_bound_below_the_size_evicts_the_least_recently_used_entries_first(caches, monkeypatch):
    from specializer import diskcache

    templates, cuda = caches
    payload = b"x" * 1000
    hour_ago = (time.time() - 3600) * 1e9
    for i in range(6):  # one bound for both caches: entries alternate between them
        d = caches[i % 2]
        assert diskcache.write_entry(d, f"e{i}", payload)
        t = int(hour_ago + i * 1e9)  # e0 written first, e5 last
        os.utime(d / f"e{i}", ns=(t, t))
    assert diskcache.read_entry(templates, "e0", 1 << 20) == payload  # e0 used: now the newest
    size = (templates / "e0").stat().st_size
    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", str(4 * size))  # room for four of seven
    assert diskcache.write_entry(cuda, "e6", payload)
    assert _entries(templates, cuda) == ["e0", "e4", "e5", "e6"]
    assert diskcache.read_entry(templates, "e2", 1 << 20) is None  # evicted: a miss


@pytest.mark.parametrize(
    "value, size",
    [
        ("4096", 4096),
        ("100B", 100),
        ("64k", 64 << 10),
        ("64KiB", 64 << 10),
        ("512M", 512 << 20),
        (" 2g ", 2 << 30),
        ("1.5GB", 3 << 29),
        ("0", 0),
        ("", 1 << 30),
    ],
)
def test_the_size_bound_is_read_from_the_environment(value, size, monkeypatch):
    from specializer import diskcache

    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", value)
    assert diskcache.max_size() == size
    monkeypatch.delenv("SPECIALIZER_CACHE_MAXSIZE")
    assert diskcache.max_size() == diskcache.DEFAULT_MAX_SIZE == 1 << 30


@pytest.mark.parametrize("value", ["lots", "-1", "1X", "5 G B", "0x10"])
def test_a_bad_size_bound_warns_once_naming_it_and_keeps_the_default(value, monkeypatch):
    from specializer import diskcache

    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", value)
    monkeypatch.setattr(diskcache, "_warned", set())
    with pytest.warns(RuntimeWarning, match=rf"SPECIALIZER_CACHE_MAXSIZE='{value}' is not a size"):
        assert diskcache.max_size() == diskcache.DEFAULT_MAX_SIZE
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert diskcache.max_size() == diskcache.DEFAULT_MAX_SIZE  # warned once


def test_a_bound_of_zero_keeps_nothing(caches, monkeypatch):
    from specializer import diskcache

    templates, cuda = caches
    assert diskcache.write_entry(templates, "old", b"x")
    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", "0")
    assert not diskcache.write_entry(cuda, "new", b"x")
    assert diskcache.read_entry(cuda, "new", 1 << 20) is None
    assert _entries(templates, cuda) == ["old"]  # (removed at the next write that fits)


def test_entries_evicted_under_readers_and_writers_are_misses_never_errors(caches, monkeypatch):
    from specializer import diskcache

    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", "6k")  # about five entries of the twenty
    payloads = {f"k{i}": bytes([i]) * 1000 for i in range(20)}
    errors, seen = [], []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(300):
                name = rng.choice(list(payloads))
                d = caches[rng.randrange(2)]
                if rng.random() < 0.5:
                    diskcache.write_entry(d, name, payloads[name])
                else:
                    got = diskcache.read_entry(d, name, 1 << 20)
                    assert got in (None, payloads[name])
                    seen.append(got is not None)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert any(seen) and not all(seen)  # hits and misses both
    total = sum(p.stat().st_size for d in caches for p in d.iterdir())
    assert total <= 6 << 10


def test_a_process_counts_the_caches_size_and_looks_again_when_over_or_at_another_root(
    caches, monkeypatch, tmp_path
):
    # Row 'the disk caches' size as counted': a write adds to the count; another process's
    # writes are seen when the count goes over the bound (the directory is looked at again),
    # and a write under another root looks at that root first.
    from specializer import diskcache

    templates, cuda = caches
    payload = b"x" * 1000
    assert diskcache.write_entry(templates, "mine0", payload)  # the first write looks
    size = (templates / "mine0").stat().st_size
    assert diskcache._usage == [(str(tmp_path), size)]
    old = int((time.time() - 3600) * 1e9)
    for i in range(3):  # another process's entries, older than mine: not counted here
        (cuda / f"other{i}").write_bytes(payload)
        os.utime(cuda / f"other{i}", ns=(old + i, old + i))
    os.utime(templates / "mine0", ns=(old + 10, old + 10))
    monkeypatch.setenv("SPECIALIZER_CACHE_MAXSIZE", str(5 * size // 2))
    assert diskcache.write_entry(templates, "mine1", payload)  # counted 2: under the bound
    assert diskcache._usage == [(str(tmp_path), 2 * size)]
    assert _entries(templates, cuda) == ["mine0", "mine1", "other0", "other1", "other2"]
    assert diskcache.write_entry(templates, "mine2", payload)  # counted 3: looks, evicts
    assert _entries(templates, cuda) == ["mine1", "mine2"]  # the oldest first, mine0 too
    assert diskcache._usage == [(str(tmp_path), 2 * size)]
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(elsewhere))
    d = diskcache.private_dir("templates", True)
    assert diskcache.write_entry(d, "there", payload)
    assert diskcache._usage == [(str(elsewhere), size)]


def _left(directory, name, payload):
    """What a write of ``name`` left in ``directory``: nothing, or the whole entry; never a
    temporary file or a half entry."""
    from specializer import diskcache

    names = sorted(p.name for p in directory.iterdir())
    assert names in ([], [name]), names
    if names:
        assert diskcache.read_entry(directory, name, 1 << 30) == payload
    return bool(names)


@pytest.mark.skipif(not (3, 10) <= sys.version_info[:2] <= (3, 13), reason="the injector")
def test_a_write_interrupted_at_any_point_leaves_the_entry_whole_or_absent_and_no_temporary_file(
    caches,
):
    # Every point where CPython could raise a KeyboardInterrupt in write_entry, one run each
    # (tests/test_interrupts.py's injector), the first ones in the temporary file's making.
    from test_interrupts import interrupt_everywhere

    templates, _ = caches
    payload = b"p" * 100_000
    runs = []

    def setup():
        for p in templates.iterdir():
            p.unlink()
        return templates

    def op(directory):
        from specializer import diskcache

        diskcache.write_entry(directory, "entry", payload)

    def check(directory, interrupted):
        runs.append((interrupted, _left(directory, "entry", payload)))

    assert interrupt_everywhere(setup, op, check) > 10
    assert (True, False) in runs and (True, True) in runs  # interrupts before and after


@pytest.mark.parametrize("at", ["open", "write", "close", "replace", "after replace"])
def test_an_interrupted_write_leaves_no_temporary_file(caches, monkeypatch, at):
    # An interrupt just after each system call (for the write, in its middle; for the rename,
    # just before it too).
    from specializer import diskcache

    templates, _ = caches
    payload = b"p" * 100_000
    real = {"open": os.open, "close": os.close, "replace": os.replace}

    def after(name):
        def call(*args, **kwargs):
            if at != "replace":
                real[name](*args, **kwargs)
            raise KeyboardInterrupt(at)

        return call

    class HalfWritten:  # the file object write_private opens, interrupted in its write
        def __init__(self, *args, **kwargs):
            self.f = open(*args, **kwargs)  # noqa: SIM115 (closed by __exit__)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise KeyboardInterrupt("write")

    with monkeypatch.context() as m:
        if at == "write":
            m.setattr(diskcache, "open", HalfWritten, False)
        else:
            m.setattr(diskcache.os, at.split()[-1], after(at.split()[-1]))
        with pytest.raises(KeyboardInterrupt, match=at):
            diskcache.write_entry(templates, "entry", payload)
    assert _left(templates, "entry", payload) == (at == "after replace")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_real_timer_interrupts_of_disk_cache_writes_leave_no_temporary_file(caches):
    # A Ctrl-C as a user sends it: a timer's signal at a random moment of each write.
    from specializer import diskcache

    templates, _ = caches
    rnd = random.Random(7)
    payload = b"q" * 1_000_000
    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt("timer")

    t = time.perf_counter()
    assert diskcache.write_entry(templates, "e0", payload)
    duration = time.perf_counter() - t
    old_handler = signal.signal(signal.SIGALRM, handler)
    interrupted = 0
    try:
        for i in range(200):
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, max(rnd.random() * duration, 1e-6))
                diskcache.write_entry(templates, f"e{i % 4}", payload)
                armed[0] = False  # before the timer is stopped: a late signal does nothing
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old_handler)
    assert interrupted >= 50, interrupted
    names = sorted(p.name for p in templates.iterdir())
    assert set(names) <= {"e0", "e1", "e2", "e3"}, names  # no .tmp left
    assert all(diskcache.read_entry(templates, n, 1 << 30) == payload for n in names)


@contextlib.contextmanager
def _environment_precompile():
    """As SPECIALIZER_PRECOMPILE_OUTPUT=1 at import sets the mode, for a block (with no
    switch in effect, which an earlier test may have left)."""
    from specializer import world

    switch = world.switch_precompile(None)
    world.set_environment_precompile(True)
    try:
        yield
    finally:
        world.set_environment_precompile(False)
        world.switch_precompile(switch)


@pytest.mark.parametrize("how", ["block", "switch", "env"])
def test_reading_an_entry_in_precompile_mode_does_not_mark_it_used(caches, how):
    # SPEC 6: nothing of the disk caches is changed, not even an entry's modification time
    # (least-recently-used eviction's clock); outside the mode a read marks it used.
    import specializer
    from specializer import diskcache

    templates, cuda = caches
    hour_ago = int((time.time() - 3600) * 1e9)
    for d in caches:
        assert diskcache.write_entry(d, "entry", b"payload")
        os.utime(d / "entry", ns=(hour_ago, hour_ago))
    mode = {
        "block": specializer.precompile_output,
        "switch": lambda: specializer.precompile_output(True),
        "env": _environment_precompile,
    }[how]
    with mode():
        assert specializer.generating_output()
        for d in caches:
            assert diskcache.read_entry(d, "entry", 1 << 20) == b"payload"
    assert not specializer.generating_output()
    assert {(d / "entry").stat().st_mtime_ns for d in caches} == {hour_ago}
    assert diskcache.read_entry(templates, "entry", 1 << 20) == b"payload"
    assert (templates / "entry").stat().st_mtime_ns > hour_ago  # marked used
    assert (cuda / "entry").stat().st_mtime_ns == hour_ago
