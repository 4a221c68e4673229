"""The include scanner that keys built code on the user headers a source includes."""

from __future__ import annotations

import os

from specializer import includes


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_include_dirs_reads_every_spelling_and_makes_them_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    opts = ["-Iinc", "-I", "other", "--include-path=/abs/x", "--include-path", "y", "-O3"]
    assert includes.include_dirs(opts) == [
        str(tmp_path / "inc"),
        str(tmp_path / "other"),
        "/abs/x",
        str(tmp_path / "y"),
    ]
    assert includes.include_dirs(["--use_fast_math"]) == []


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
        ("header:common.h", includes._sha256(b"")),
    )


def test_source_dir_is_searched_for_quoted_includes_only(tmp_path):
    h = write(tmp_path / "k_common.h", "#define K 1\n")
    assert includes.scan('#include "k_common.h"\n', [], source_dir=str(tmp_path)) == (
        (f"file:{h}", includes._sha256(h.read_bytes())),
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
