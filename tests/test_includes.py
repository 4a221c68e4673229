"""The include scanner that keys built code on the user headers a source includes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from specializer import includes

try:  # the back-ends' tests skip where their library is missing
    from specializer.backends import opencl as cl
except ImportError:
    cl = None
try:
    from specializer.backends import cuda
except ImportError:
    cuda = None


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_include_dirs_reads_every_spelling_and_makes_them_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = ["-Iinc", "-I", "other", "--include-path=/abs/x", "--include-path", "y", "-O3"]
    assert includes.include_dirs([*opts, "-I=z", "-include", "h.h"]) == [
        str(tmp_path / "inc"),
        str(tmp_path / "other"),
        "/abs/x",
        str(tmp_path / "y"),
        str(tmp_path / "z"),  # as NVRTC (and clang without a sysroot) reads -I=dir
    ]
    assert includes.include_dirs(["--use_fast_math"]) == []


def test_pre_includes_reads_every_spelling_in_order():
    opts = ["-include", "a.h", "-include=b.h", "--pre-include=/abs/c.h", "--pre-include", "d.h"]
    assert includes.pre_includes([*opts, "-Iinclude", "-DX=1"]) == [
        "a.h",
        "b.h",
        "/abs/c.h",
        "d.h",
    ]
    assert includes.pre_includes(["-Iinclude", "--include-path=x"]) == []


def test_digest_changes_when_a_pre_included_header_is_edited(tmp_path):
    # found as a quoted include of the source is: the source's directory, in-memory headers,
    # then the -I directories; and followed into what it includes
    src = "__global__ void k() {}"
    write(tmp_path / "inc" / "pre.h", '#include "deeper.h"\n')
    write(tmp_path / "inc" / "deeper.h", "#define N 1\n")
    dirs = [str(tmp_path / "inc")]
    before = includes.digest(src, dirs, pre_includes=["pre.h"])
    assert before != includes.digest(src, dirs) == ""
    write(tmp_path / "inc" / "deeper.h", "#define N 2\n")
    assert includes.digest(src, dirs, pre_includes=["pre.h"]) != before
    in_memory = includes.digest(src, dirs, {"pre.h": "#define N 3"}, pre_includes=["pre.h"])
    assert in_memory != includes.digest(src, dirs, pre_includes=["pre.h"])


def test_digest_changes_when_an_included_header_is_edited(tmp_path):
    h = write(tmp_path / "inc" / "main.h", "#define N 256\n")
    src = '#include "main.h"\nint x = N;\n'
    before = includes.digest(src, [str(tmp_path / "inc")])
    h.write_text("#define N 128\n")
    after = includes.digest(src, [str(tmp_path / "inc")])
    assert before and after and before != after


def test_digest_follows_includes_recursively_and_angled_ones(tmp_path):
    inc = tmp_path / "inc"
    write(inc / "a.h", "#include <sub/b.h>\n")
    b = write(inc / "sub" / "b.h", '#include "c.h"\n')  # quoted: b.h's own directory first
    c = write(inc / "sub" / "c.h", "#define C 1\n")
    found = includes.scan("#include <a.h>\n", [str(inc)])
    assert [name for name, _ in found] == [
        f"file:{inc / 'a.h'}",
        f"file:{b}",
        f"file:{c}",
    ]
    before = includes.digest("#include <a.h>\n", [str(inc)])
    c.write_text("#define C 2\n")
    assert includes.digest("#include <a.h>\n", [str(inc)]) != before


def test_two_projects_with_the_same_relative_include_dir_differ(tmp_path, monkeypatch):
    for project, n in (("p1", 1), ("p2", 2)):
        write(tmp_path / project / "include" / "config.h", f"#define N {n}\n")
    digests = []
    for project in ("p1", "p2"):
        monkeypatch.chdir(tmp_path / project)
        dirs = includes.include_dirs(["-Iinclude"])
        digests.append(includes.digest('#include "config.h"\n', dirs))
    assert digests[0] != digests[1]


def test_in_memory_headers_count_by_contents_and_include_each_other():
    src = '#include "common.h"\n'
    a = includes.digest(src, [], {"common.h": '#include "more.h"\n', "more.h": "#define X 1\n"})
    b = includes.digest(src, [], {"common.h": '#include "more.h"\n', "more.h": "#define X 2\n"})
    assert a != b
    assert includes.scan(src, [], {"common.h": "", "unused.h": "x"}) == (
        ("header:common.h", hashlib.sha256(b"").hexdigest()),
    )


def test_source_dir_is_searched_for_quoted_includes_only(tmp_path):
    h = write(tmp_path / "k_common.h", "#define K 1\n")
    assert includes.scan('#include "k_common.h"\n', [], source_dir=str(tmp_path)) == (
        (f"file:{h}", hashlib.sha256(h.read_bytes()).hexdigest()),
    )
    assert includes.scan("#include <k_common.h>\n", [], source_dir=str(tmp_path)) == (
        ("unresolved:k_common.h", ""),
    )


def test_an_unresolved_include_counts_by_its_name_and_no_include_is_empty(tmp_path):
    assert includes.digest("int x;\n", [str(tmp_path)]) == ""
    a = includes.digest("#include <cuda_fp16.h>\n", [str(tmp_path)])
    b = includes.digest("#include <cuda_bf16.h>\n", [str(tmp_path)])
    assert a and b and a != b
    # creating the file in a user directory changes the key
    write(tmp_path / "cuda_fp16.h", "// shadows the toolkit's\n")
    assert includes.digest("#include <cuda_fp16.h>\n", [str(tmp_path)]) != a


def test_a_header_that_includes_itself_ends(tmp_path):
    write(tmp_path / "loop.h", '#pragma once\n#include "loop.h"\n#include "loop2.h"\n')
    write(tmp_path / "loop2.h", '#include "loop.h"\n')
    found = includes.scan('#include "loop.h"\n', [str(tmp_path)])
    assert len(found) == 2


def test_first_include_dir_that_has_the_file_wins(tmp_path):
    write(tmp_path / "a" / "x.h", "1")
    write(tmp_path / "b" / "x.h", "2")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    ((name, _),) = includes.scan("#include <x.h>\n", dirs)
    assert name == "file:" + os.path.join(str(tmp_path), "a", "x.h")


# -- includes written so that a line-by-line match misses them ---------------------------------


def test_line_continuations_and_comments_inside_a_directive_are_read(tmp_path):
    h = write(tmp_path / "x.h", "#define X 1\n")
    want = ((f"file:{h}", hashlib.sha256(h.read_bytes()).hexdigest()),)
    for src in (
        '#include \\\n"x.h"\n',
        "# \\\n  include \\\r\n <x.h>\n",
        '#include /* the sizes */ "x.h"\n',
        '/* a comment before */ # /* and inside */ include "x.h" // and after\n',
    ):
        assert includes.scan(src, [str(tmp_path)]) == want, src


def test_comment_markers_in_string_literals_and_commented_out_includes_are_not_read(tmp_path):
    write(tmp_path / "x.h", "")
    write(tmp_path / "y.h", "")
    src = (
        'const char *s = "/*"; const char c = \'"\';\n'
        '#include "x.h"\n'
        'const char *t = "*/";\n'
        '// #include "y.h"\n'
        '/* #include "y.h" */\n'
    )
    assert [n for n, _ in includes.scan(src, [str(tmp_path)])] == [f"file:{tmp_path / 'x.h'}"]


def test_a_computed_include_counts_every_file_under_the_search_path(tmp_path):
    inc, here = tmp_path / "inc", tmp_path / "src"
    a = write(inc / "sub" / "a.h", '#include "../../elsewhere/b.h"\n')  # followed from there
    b = write(tmp_path / "elsewhere" / "b.h", "")
    c = write(here / "c.h", "")
    src = '#define H "sub/a.h"\n#include H\n'
    found = includes.scan(src, [str(inc)], {"mem.h": ""}, source_dir=str(here))
    assert [n for n, _ in found] == sorted([f"file:{a}", f"file:{b}", f"file:{c}", "header:mem.h"])
    before = includes.digest(src, [str(inc)], source_dir=str(here))
    assert includes.keyed(before)
    c.write_text("#define C 2\n")  # any file the macro may name
    assert includes.digest(src, [str(inc)], source_dir=str(here)) != before


def test_past_the_cap_a_computed_include_keys_nothing_twice(tmp_path, monkeypatch):
    for i in range(3):
        write(tmp_path / f"{i}.h", "")
    monkeypatch.setattr(includes, "MAX_FILES", 2)
    src = "#include HEADER\n"
    a, b = includes.digest(src, [str(tmp_path)]), includes.digest(src, [str(tmp_path)])
    assert a != b and not includes.keyed(a) and not includes.keyed(b)
    monkeypatch.setattr(includes, "MAX_FILES", 3)
    assert includes.digest(src, [str(tmp_path)]) == includes.digest(src, [str(tmp_path)])
    monkeypatch.setattr(includes, "MAX_BYTES", 0)
    write(tmp_path / "0.h", "x")
    assert not includes.keyed(includes.digest(src, [str(tmp_path)]))


# -- both back-ends build the edited header of each spelling -----------------------------------

SPELLINGS = {
    "macro": '#define PARAMS "params.h"\n#include PARAMS\n',
    "continuation": '#include \\\n"params.h"\n',
    "comment": '#include /* the sizes */ "params.h"\n',
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory of the test's own, current (the search path a computed include
    counts is the ``-I`` directory and the current one: small here), with include/params.h."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECIALIZER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "include"


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_opencl_builds_the_edited_header_of_each_spelling(spelling, project):
    if cl is None:
        pytest.skip("needs pyopencl")
    import pyopencl.array as cla

    import specializer

    def define():
        @cl.kernel
        def spelled_k(out: cl.Array[np.float32]) -> str:
            return SPELLINGS[spelling] + (
                "__kernel void spelled_k(__global float *out) { out[get_global_id(0)] = FILL; }"
            )

        return spelled_k

    def run(k):
        out = cla.zeros(cl.default_queue(), 4, np.float32)
        cl.launch(k, out, global_size=4, options=(f"-I{project}",))
        return out.get().tolist()

    write(project / "params.h", "#define FILL 1.0f\n")
    k = define()
    assert run(k) == [1.0] * 4
    write(project / "params.h", "#define FILL 2.0f\n")
    specializer.bump()
    assert run(k) == [2.0] * 4
    write(project / "params.h", "#define FILL 3.0f\n")
    assert run(define()) == [3.0] * 4


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_cuda_compiles_the_edited_header_of_each_spelling(spelling, project):
    if cuda is None:
        pytest.skip("needs cuda-python")

    def ptx():
        @cuda.kernel
        def spelled_k(x: cuda.Array[np.float32]) -> str:
            return SPELLINGS[spelling] + (
                'extern "C" __global__ void spelled_k(float *x) { x[threadIdx.x] = SCALE; }'
            )

        return cuda.code_ptx(
            spelled_k, (cuda.Array[np.float32],), arch="sm_90", options=(f"-I{project}",)
        )

    write(project / "params.h", "#define SCALE 2.0f\n")
    assert "1073741824" in ptx()  # 2.0f
    write(project / "params.h", "#define SCALE 4.0f\n")
    assert "1082130432" in ptx()  # 4.0f


# How the kernel's source reaches params.h: each option NVRTC takes that names a file it reads.
FILE_OPTIONS = {
    "-I": lambda project: ('#include "params.h"\n', [f"-I{project}"]),
    "--pre-include=<absolute>": lambda project: ("", [f"--pre-include={project}/params.h"]),
    "--pre-include <name> -I": lambda project: ("", ["--pre-include", "params.h", f"-I{project}"]),
    "-include <name> --include-path": lambda project: (
        "",
        ["-include", "params.h", f"--include-path={project}"],
    ),
    "-include=<relative>": lambda project: ("", ["-include=include/params.h"]),
}

PTX_OF_FILE_OPTION = textwrap.dedent("""
    import sys
    import numpy as np
    from specializer.backends import cuda

    @cuda.kernel
    def keyed_k(x: cuda.Array[np.float32]) -> str:
        return sys.argv[1] + (
            'extern "C" __global__ void keyed_k(float *x) { x[threadIdx.x] = SCALE; }'
        )

    print(cuda.code_ptx(keyed_k, (cuda.Array[np.float32],), arch="sm_90", options=sys.argv[2:]))
""")


@pytest.mark.parametrize("spelling", FILE_OPTIONS)
def test_cuda_compiles_an_edited_header_an_option_names_after_a_bump_and_in_the_next_process(
    spelling, project
):
    # SPEC 3: a header an option names keys the code by its content: after an edit, bump()
    # builds the new code in this process, and the next process does not read the old one
    # from the disk cache.
    if cuda is None:
        pytest.skip("needs cuda-python")
    import specializer

    text, options = FILE_OPTIONS[spelling](project)

    @cuda.kernel
    def keyed_k(x: cuda.Array[np.float32]) -> str:
        return text + 'extern "C" __global__ void keyed_k(float *x) { x[threadIdx.x] = SCALE; }'

    def ptx():
        return cuda.code_ptx(keyed_k, (cuda.Array[np.float32],), arch="sm_90", options=options)

    def next_process():
        r = subprocess.run(
            [sys.executable, "-c", PTX_OF_FILE_OPTION, text, *options],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "SPECIALIZER_PRECOMPILE_OUTPUT": ""},
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    write(project / "params.h", "#define SCALE 2.0f\n")
    assert "1073741824" in ptx() and "1073741824" in next_process()  # 2.0f, kept on disk
    write(project / "params.h", "#define SCALE 4.0f\n")
    assert "1073741824" in ptx()  # the same world: the same code
    specializer.bump()
    assert "1082130432" in ptx()  # 4.0f
    assert "1082130432" in next_process()
    assert len(list((project.parent / "cache" / "cuda").iterdir())) == 2


def test_cuda_keys_a_precompiled_header_by_its_content(tmp_path, monkeypatch):
    # --use-pch names a file NVRTC reads (under --pch-dir unless absolute): its content keys
    if cuda is None:
        pytest.skip("needs cuda-python")
    from specializer.backends.cuda import _program

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pch" / "a.pch", "one")

    def digest(*options):
        return _program.included_digest("", options)

    spellings = [("--use-pch=pch/a.pch",), ("--pch-dir=pch", "-use-pch=a.pch")]
    before = [digest(*o) for o in spellings]
    assert before[0] == before[1] != digest()
    write(tmp_path / "pch" / "a.pch", "two")
    assert all(digest(*o) != b for o, b in zip(spellings, before))


def test_cuda_past_the_cap_compiles_again_and_keeps_nothing_on_disk(project, monkeypatch):
    if cuda is None:
        pytest.skip("needs cuda-python")
    from specializer.backends.cuda import _program

    write(project / "params.h", "#define SCALE 2.0f\n")
    write(project / "other.h", "")
    monkeypatch.setattr(includes, "MAX_FILES", 1)

    def ptx():
        @cuda.kernel
        def capped_k(x: cuda.Array[np.float32]) -> str:
            return SPELLINGS["macro"] + (
                'extern "C" __global__ void capped_k(float *x) { x[threadIdx.x] = SCALE; }'
            )

        return cuda.code_ptx(
            capped_k, (cuda.Array[np.float32],), arch="sm_90", options=(f"-I{project}",)
        )

    n = _program.nvrtc_compiles()
    assert "1073741824" in ptx() and "1073741824" in ptx()
    assert _program.nvrtc_compiles() == n + 2  # the same text, not reused
    assert not (project.parent / "cache" / "cuda").exists()


def test_opencl_past_the_cap_builds_again_after_each_bump(project, monkeypatch):
    if cl is None:
        pytest.skip("needs pyopencl")
    import pyopencl.array as cla

    import specializer

    @cl.kernel
    def capped_k(out: cl.Array[np.float32]) -> str:
        return SPELLINGS["macro"] + (
            "__kernel void capped_k(__global float *out) { out[get_global_id(0)] = FILL; }"
        )

    def run():
        out = cla.zeros(cl.default_queue(), 4, np.float32)
        cl.launch(capped_k, out, global_size=4, options=(f"-I{project}",))
        return out.get().tolist()

    write(project / "params.h", "#define FILL 1.0f\n")
    monkeypatch.setattr(includes, "MAX_FILES", 0)
    assert run() == [1.0] * 4
    write(project / "params.h", "#define FILL 2.0f\n")
    specializer.bump()
    assert run() == [2.0] * 4
