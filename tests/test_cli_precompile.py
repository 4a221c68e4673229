import os
import subprocess
import sys
import textwrap
import time

import pytest

import specializer
from specializer import PrecompileOutputError, generating_output, precompile_output
from specializer.codegen import write_atomic

PROGRAM = textwrap.dedent("""
    import sys
    import specializer
    from specializer import GenericFunction, cached_lookup

    F = GenericFunction("dumped")
    calls = []

    def get(key):
        return cached_lookup(lambda: (calls.append(key) or len(calls),), tuple, F, (), key)

    for k in ["a", "a", "b"]:
        get(k)
    print("generating_output", specializer.generating_output(), "lookups", len(calls))
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def _python(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def test_precompile_output_as_function_and_context_manager():
    assert not generating_output()
    with precompile_output():
        assert generating_output()
        with precompile_output(False):
            assert not generating_output()
        assert generating_output()
    assert not generating_output()
    precompile_output(True)
    try:
        assert specializer.generating_output()
    finally:
        precompile_output(False)
    assert not generating_output()


def test_environment_variable_turns_the_mode_on_and_lookups_store_nothing(program):
    r = _python(str(program), env={"SPECIALIZER_PRECOMPILE_OUTPUT": "1"})
    assert r.returncode == 0, r.stderr
    assert "generating_output True lookups 3" in r.stdout
    r = _python(str(program), env={"SPECIALIZER_PRECOMPILE_OUTPUT": "0"})
    assert "generating_output False lookups 2" in r.stdout


def test_precompile_command_runs_a_build_command_with_the_mode_on(program):
    r = _python("-m", "specializer", "precompile", "--", sys.executable, str(program), "3")
    assert r.returncode == 3
    assert "generating_output True lookups 3" in r.stdout


def test_writing_generated_source_is_refused_in_precompile_mode_and_leaves_nothing(tmp_path):
    target = tmp_path / "out.py"
    with precompile_output(), pytest.raises(PrecompileOutputError) as e:
        write_atomic(target, "x = 1\n")
    msg = str(e.value)
    assert "precompile-output mode is on" in msg
    assert "precompile_output(False)" in msg and "SPECIALIZER_PRECOMPILE_OUTPUT" in msg
    assert list(tmp_path.iterdir()) == []


def test_write_atomic_replaces_whole_files(tmp_path):
    target = tmp_path / "out.py"
    write_atomic(target, "a = 1\n")
    write_atomic(target, "a = 2\n")
    assert target.read_text() == "a = 2\n" and [p.name for p in tmp_path.iterdir()] == ["out.py"]


@pytest.mark.slow
def test_dump_prints_every_generated_function_deterministically(program):
    r1 = _python("-m", "specializer", "dump", str(program))
    r2 = _python("-m", "specializer", "dump", str(program))
    assert r1.returncode == 0, r1.stderr
    assert "def lookup_lambda_dumped_str_tuple(\n    key, lookup" in r1.stdout
    assert "lookups 2" in r1.stdout
    assert r1.stdout == r2.stdout


@pytest.mark.slow
def test_dump_passes_arguments_and_exit_status(program):
    r = _python("-m", "specializer", "dump", str(program), "5")
    assert r.returncode == 5 and "def lookup_lambda_dumped" in r.stdout


def test_dump_out_writes_one_file_per_function(program, tmp_path):
    out = tmp_path / "dumped"
    r = _python("-m", "specializer", "dump", "--out", str(out), str(program))
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == ["lookup_lambda_dumped_str_tuple.py"]
    text = (out / files[0]).read_text()
    compile(text, files[0], "exec")
    header = text.splitlines()[:3]
    assert all(line.startswith("#") for line in header) and "cached_lookup" in header[2]


def test_dump_out_is_refused_in_precompile_mode_before_running(program, tmp_path):
    out = tmp_path / "dumped"
    r = _python(
        "-m",
        "specializer",
        "dump",
        "--out",
        str(out),
        str(program),
        env={"SPECIALIZER_PRECOMPILE_OUTPUT": "1"},
    )
    assert r.returncode == 2
    assert "precompile-output mode is on" in r.stderr
    assert "generating_output" not in r.stdout  # the program never ran
    assert not out.exists()


def test_dump_runs_a_module(tmp_path):
    (tmp_path / "dumpmod.py").write_text(PROGRAM)
    r = _python("-m", "specializer", "dump", "dumpmod", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "def lookup_lambda_dumped_str_tuple" in r.stdout


def test_unknown_command_prints_usage():
    r = _python("-m", "specializer", "frobnicate")
    assert r.returncode == 2 and "usage: python -m specializer" in r.stderr
    assert "unknown command 'frobnicate'" in r.stderr


# -- SPEC 6: the library's own disk caches write nothing while the mode is on ----------------

# Turns the mode on as argv[1] says, then imports the back-ends, launches an OpenCL kernel,
# looks one up with clfunction and calls it, and (argv[2] == "cuda") compiles a CUDA kernel
# with NVRTC (no GPU needed); prints whether Jinja was imported (a render not on disk).
ON_DISK_PROGRAM = textwrap.dedent("""
    import contextlib, sys
    import specializer as sp

    how, cuda_too = sys.argv[1], sys.argv[2] == "cuda"
    if how == "switch":
        sp.precompile_output(True)
    with sp.precompile_output() if how == "block" else contextlib.nullcontext():
        assert sp.generating_output() == (how != "off"), how
        import numpy as np
        import pyopencl.array as cla
        from specializer.backends import opencl as cl

        @cl.kernel
        def fill(x: cl.Array[np.float32], v: np.float32) -> str:
            return "__kernel void fill(__global float *x, float v) { x[get_global_id(0)] = v; }"

        x = cla.zeros(cl.default_queue(), 4, np.float32)
        cl.launch(fill, x, np.float32(1), global_size=4)
        assert x.get().tolist() == [1.0] * 4
        hk = cl.clfunction(fill, (cl.Array[np.float32], np.float32))
        hk(x, np.float32(2), global_size=4)
        assert x.get().tolist() == [2.0] * 4
        if cuda_too:
            from specializer.backends import cuda

            @cuda.kernel
            def one(x: cuda.Array[np.float32]) -> str:
                return 'extern "C" __global__ void one(float *x) { x[0] = 1; }'

            ptx = cuda.code_ptx(one, (cuda.Array[np.float32],), arch="sm_80")
            assert ".entry one" in ptx
    print("jinja2" in sys.modules)
""")


def _cuda_too() -> str:
    try:
        import cuda.bindings  # noqa: F401
    except ImportError:
        return ""
    return "cuda"


def _on_disk(cache, how, mode_env=False):
    env = {"SPECIALIZER_CACHE_DIR": str(cache)}
    if mode_env:
        env["SPECIALIZER_PRECOMPILE_OUTPUT"] = "1"
    environ = {**os.environ, **env}
    if not mode_env:
        environ.pop("SPECIALIZER_PRECOMPILE_OUTPUT", None)
    r = subprocess.run(
        [sys.executable, "-c", ON_DISK_PROGRAM, how, _cuda_too()],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip() == "True"


def _files(cache):
    return {str(p.relative_to(cache)): p.read_bytes() for p in cache.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["env", "switch", "block"])
def test_precompile_mode_writes_nothing_to_the_disk_caches(tmp_path, how):
    # from a fresh cache directory: an import, a launch, a clfunction and an NVRTC compile
    # leave no rendered template, no compiled code, not even a directory
    pytest.importorskip("pyopencl")
    cache = tmp_path / "cache"
    _on_disk(cache, "on" if how == "env" else how, mode_env=how == "env")
    assert not cache.exists(), sorted(_files(cache))


def test_a_render_kept_before_precompile_mode_is_read_while_it_is_on(tmp_path):
    pytest.importorskip("pyopencl")
    cache = tmp_path / "cache"
    assert _on_disk(cache, "off")  # the first process renders (Jinja) and keeps the renders
    kept = _files(cache)
    assert any(name.startswith("templates") for name in kept)
    hour_ago = int((time.time() - 3600) * 1e9)
    for name in kept:  # used an hour ago: a read that marked them used would show
        os.utime(cache / name, ns=(hour_ago, hour_ago))
    # every render read from disk (Jinja never imported), nothing written, removed or touched
    assert not _on_disk(cache, "on", mode_env=True)
    assert _files(cache) == kept
    assert {(cache / name).stat().st_mtime_ns for name in kept} == {hour_ago}
