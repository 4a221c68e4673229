"""A process's cold start: what a template renders is kept on disk, so a later process that
renders the same thing reads it back instead of importing Jinja and compiling templates."""

import os
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import sys
    from specializer import GenericFunction, cached_lookup, generated_sources

    F = GenericFunction("cold")
    cached_lookup(lambda: 1, int, F, (), "key")
    print("jinja2" in sys.modules)
    print(generated_sources()[-1].source)
""")


def _run(code, cache, *args, cwd=None):
    env = {**os.environ, "SPECIALIZER_CACHE_DIR": str(cache)}
    env.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=cwd,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_later_process_reads_the_render_back_without_importing_jinja(tmp_path):
    first = _run(PROGRAM, tmp_path)
    second = _run(PROGRAM, tmp_path)
    assert first.startswith("True\n") and second.startswith("False\n")
    assert first.split("\n", 1)[1] == second.split("\n", 1)[1]
    assert "def lookup_" in second


def test_a_changed_template_is_rendered_again(tmp_path):
    templates = tmp_path / "tpl"
    templates.mkdir()
    code = textwrap.dedent("""
        import sys
        from specializer import codegen
        codegen.add_template_dir(sys.argv[1])
        print(codegen.render("mine.py.j2", n=3), end="")
    """)
    (templates / "mine.py.j2").write_text("x = {{ n }}\n")
    assert _run(code, tmp_path / "cache", str(templates)) == "x = 3\n"
    assert _run(code, tmp_path / "cache", str(templates)) == "x = 3\n"
    (templates / "mine.py.j2").write_text("y = {{ n }} * 2\n")
    assert _run(code, tmp_path / "cache", str(templates)) == "y = 3 * 2\n"


def test_an_empty_cache_variable_turns_the_disk_cache_off(tmp_path):
    for _ in range(2):  # nothing kept: the second process renders with Jinja too
        assert _run(PROGRAM, "", cwd=tmp_path).startswith("True\n")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_directory_leaves_rendering_working(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert _run(PROGRAM, blocker).startswith("True\n")


def _planted(tmp_path, how):
    """Render once, then replace the kept render with code of someone else's making, in the
    way ``how`` says; a later process must render afresh and never exec the planted code."""
    code = textwrap.dedent("""
        import sys
        from specializer import codegen
        codegen.add_template_dir(sys.argv[1])
        print(codegen.render("mine.py.j2", n=3), end="")
    """)
    templates = tmp_path / "tpl"
    templates.mkdir()
    (templates / "mine.py.j2").write_text("x = {{ n }}\n")
    cache = tmp_path / "cache"
    assert _run(code, cache, str(templates)) == "x = 3\n"
    (kept,) = (cache / "templates").glob("*.py")
    planted = "import os; os._exit(3)\n"
    kept.unlink()
    if how == "writable":
        kept.write_text(planted)
        kept.chmod(0o666)
    elif how == "symlink":
        other = tmp_path / "elsewhere.py"
        other.write_text(planted)
        kept.symlink_to(other)
    elif how == "fifo":
        os.mkfifo(kept)
    return _run(code, cache, str(templates))


def test_a_kept_render_writable_by_others_is_not_read(tmp_path):
    assert _planted(tmp_path, "writable") == "x = 3\n"


def test_a_kept_render_that_is_a_symlink_is_not_followed(tmp_path):
    assert _planted(tmp_path, "symlink") == "x = 3\n"


def test_a_fifo_at_a_kept_render_does_not_block(tmp_path):
    assert _planted(tmp_path, "fifo") == "x = 3\n"


def test_the_template_cache_directory_is_private_whatever_the_umask(tmp_path):
    code = (
        "import os; os.umask(0); from specializer import codegen; "
        "codegen.render('lookup.py.j2', name='f', entries=2)"
    )
    _run(code, tmp_path / "c")
    for d in (tmp_path / "c", tmp_path / "c" / "templates"):
        assert (d.stat().st_mode & 0o777) == 0o700
    for f in (tmp_path / "c" / "templates").iterdir():
        assert (f.stat().st_mode & 0o077) == 0
