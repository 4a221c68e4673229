from __future__ import annotations

import numpy as np
import pytest

from specializer import (
    AmbiguityError,
    GenericFunction,
    MethodError,
    bump,
    invoke_in_world,
    latest,
)
from specializer.methods import DISPATCH_DEPTH
from specializer.types import DeviceArray
from specializer.world import WORLD_MAX


class Array(DeviceArray):
    pass


def test_array_types_are_interned_and_follow_numpys_hierarchy():
    assert Array[np.float32] is Array[np.dtype("float32")]
    assert issubclass(Array[np.float32], Array[np.floating])
    assert issubclass(Array[np.floating], Array[np.generic])
    assert not issubclass(Array[np.float32], Array[np.integer])
    assert Array[np.float32].dtype == np.dtype(np.float32)
    assert Array[np.float32].eltype is np.float32
    assert repr(Array[np.float32]) == "Array[np.float32]"


def test_an_array_type_of_a_non_numpy_element_type_is_no_array_type():
    # Not refused by the subscript, which cannot name the parameter: a kernel method
    # annotated with it is (test_an_annotation_no_argument_can_match_is_a_type_error_...).
    assert not issubclass(Array[str], Array) and Array[str] is Array[str]
    assert repr(Array[str]) == "Array[str]"
    with pytest.raises(TypeError, match="numpy scalar type"):
        Array["float32"]  # not even a type


@pytest.mark.parametrize("first", [np.float32, np.floating, np.dtype([("a", np.int32)])])
def test_subscripting_a_parametrized_array_type_is_a_type_error(first):
    # a typo (Array[np.float32][np.int32]) once defined an Array[np.int32] method
    with pytest.raises(TypeError) as e:
        Array[first][np.int32]
    has = first if isinstance(first, np.dtype) else f"np.{first.__name__}"
    assert str(e.value) == (
        f"{Array[first]!r} is already parametrized (its element type is {has}): subscript the "
        "family once, as in Array[np.int32]"
    )


def test_more_specific_method_is_seen_in_the_new_world_and_not_in_an_older_one():
    gf = GenericFunction("spec")

    @gf.method
    def spec(x: np.number):
        return "number"

    before = latest()

    @gf.method
    def spec(x: np.int64):
        return "int64"

    assert gf.methodinstance((np.int64,)).method.fn(np.int64) == "int64"
    assert gf.methodinstance((np.float32,)).method.fn(np.float32) == "number"
    old = invoke_in_world(before, gf.methodinstance, (np.int64,))
    assert old.method.fn(np.int64) == "number"
    assert gf.methodinstance((np.int64,), world=before).method is old.method


def test_replacing_a_method_closes_its_range_and_keeps_it():
    gf = GenericFunction("repl")

    @gf.method
    def repl(x: np.floating):
        return 1

    first = gf.methodinstance((np.float32,)).method
    w = latest()

    @gf.method
    def repl(x: np.floating):
        return 2

    second = gf.methodinstance((np.float32,)).method
    assert first.max_world == w and second.min_world == w + 1
    assert gf.methodinstance((np.float32,), world=w).method is first
    assert len(gf.methods()) == 1 and len(gf.methods(world=w)) == 1


def test_method_instances_are_interned_per_method_and_types():
    gf = GenericFunction("interned")

    @gf.method
    def interned(x: np.number, y: Array[np.floating]):
        return 0

    a = gf.methodinstance((np.int64, Array[np.float32]))
    b = gf.methodinstance((np.int64, Array[np.float32]))
    assert a is b and a.tt == (np.int64, Array[np.float32])
    assert a.method.signature == (np.number, Array[np.floating])


def test_no_method_error_names_function_types_and_candidates():
    gf = GenericFunction("nomatch")

    @gf.method
    def nomatch(x: np.floating):
        return 0

    with pytest.raises(MethodError) as e:
        gf.methodinstance((np.int64,))
    msg = str(e.value)
    assert "nomatch(np.int64)" in msg and "nomatch(np.floating)" in msg
    assert f"world {latest()}" in msg


def test_ambiguity_error_names_the_candidates():
    gf = GenericFunction("amb")

    @gf.method
    def amb(x: np.float32, y: np.number):
        return 0

    @gf.method
    def amb(x: np.number, y: np.float32):
        return 0

    with pytest.raises(AmbiguityError) as e:
        gf.methodinstance((np.float32, np.float32))
    msg = str(e.value)
    assert "amb(np.float32, np.float32) is ambiguous" in msg
    assert "amb(np.float32, np.number)" in msg and "amb(np.number, np.float32)" in msg

    @gf.method
    def amb(x: np.float32, y: np.float32):
        return 1

    assert gf.methodinstance((np.float32, np.float32)).method.fn(None, None) == 1


def test_dispatch_depends_on_argument_count():
    gf = GenericFunction("arity")

    @gf.method
    def arity(x: np.number):
        return 1

    @gf.method
    def arity(x: np.number, y: np.number):
        return 2

    assert gf.methodinstance((np.int64, np.int64)).method.fn(0, 0) == 2
    with pytest.raises(MethodError):
        gf.methodinstance(())


def test_method_without_annotation_is_rejected_naming_the_parameter_and_changes_nothing():
    gf = GenericFunction("bad")
    w = latest()
    with pytest.raises(TypeError, match=r"parameter 'y' .* has no annotation"):

        @gf.method
        def bad(x: np.number, y):
            return 0

    with pytest.raises(TypeError, match=r"parameter 'x' .* not a type"):

        @gf.method
        def bad(x: 3):
            return 0

    with pytest.raises(TypeError, match="plain positional"):

        @gf.method
        def bad(*xs: np.number):
            return 0

    assert latest() == w and gf.methods() == []


def test_string_annotations_are_evaluated():
    gf = GenericFunction("strann")

    @gf.method
    def strann(x: np.float32):  # a string under `from __future__ import annotations`
        return 0

    assert gf.methodinstance((np.float32,)).method.signature == (np.float32,)


def test_dispatch_on_a_non_type_is_a_type_error():
    gf = GenericFunction("nontype")

    @gf.method
    def nontype(x: np.number):
        return 0

    with pytest.raises(TypeError, match="must be types"):
        gf.methodinstance((1.0,))
    with pytest.raises(TypeError, match="tuple of types"):
        gf.methodinstance([np.int64])


def test_method_visible_only_from_its_world():
    gf = GenericFunction("later")
    w = bump()

    @gf.method
    def later(x: np.number):
        return 0

    with pytest.raises(MethodError):
        gf.methodinstance((np.int64,), world=w)


def _count_applies(monkeypatch):
    from specializer.methods import Method

    calls = [0]
    applies, applies_weak = Method.applies, Method.applies_weak

    def counting(self, tt):
        calls[0] += 1
        return applies(self, tt)

    def counting_weak(self, tt):
        calls[0] += 1
        return applies_weak(self, tt)

    monkeypatch.setattr(Method, "applies", counting)
    monkeypatch.setattr(Method, "applies_weak", counting_weak)
    return calls


def test_a_cached_dispatch_looks_at_no_method_after_an_unrelated_definition(monkeypatch):
    gf = GenericFunction("cached_dispatch")
    for i, t in enumerate((np.int8, np.int16, np.int32, np.uint8, np.uint16, np.float16)):
        gf.add_method(lambda x, i=i: i, signature=(t,))
    gf.add_method(lambda x: "f32", signature=(np.float32,))
    mi = gf.methodinstance((np.float32,))
    other = GenericFunction("cached_dispatch_other")
    calls = _count_applies(monkeypatch)
    other.add_method(lambda x: 0, signature=(np.float32,))
    bump()
    assert gf.methodinstance((np.float32,)) is mi
    assert calls[0] == 0  # neither the definition nor the lookup looked at a method


def test_a_definition_ends_only_the_cached_signatures_it_changes():
    gf = GenericFunction("ends_only")
    gf.add_method(lambda x: "number", signature=(np.number,))
    f32 = gf.methodinstance((np.float32,))
    i64 = gf.methodinstance((np.int64,))
    before = latest()
    gf.add_method(lambda x: "int64", signature=(np.int64,))
    assert gf._table.dispatch[(np.float32,)][0].max_world == WORLD_MAX  # unchanged: still open
    assert gf._table.dispatch[(np.int64,)][0].max_world == before  # changed: ended
    assert gf.methodinstance((np.float32,)) is f32
    assert gf.methodinstance((np.int64,)).method.fn(0) == "int64"
    assert gf.methodinstance((np.int64,), before) is i64


def test_dispatch_and_definitions_do_not_look_at_replaced_methods(monkeypatch):
    gf = GenericFunction("history")
    for _ in range(300):
        gf.add_method(lambda x: 0, signature=(np.number,))
        gf.methodinstance((np.float32,))
    assert len(gf._table.history) == 300 and len(gf.methods()) == 1
    calls = _count_applies(monkeypatch)
    gf.add_method(lambda x: 1, signature=(np.number,))  # a redefinition
    mi = gf.methodinstance((np.float32,))  # and the miss after it
    assert mi.method.fn(0) == 1
    assert calls[0] <= 4  # the live method only, never the 300 replaced ones
    assert len(gf._table.dispatch[(np.float32,)]) <= DISPATCH_DEPTH


def test_an_older_world_still_dispatches_through_the_whole_history():
    gf = GenericFunction("old_history")
    worlds = []
    for i in range(10):
        gf.add_method(lambda x, i=i: i, signature=(np.number,))
        worlds.append(latest())
    for i, w in enumerate(worlds):
        assert gf.methodinstance((np.float32,), w).method.fn(0) == i
    for i, w in reversed(list(enumerate(worlds))):
        assert invoke_in_world(w, gf.methodinstance, (np.float32,)).method.fn(0) == i


# -- messages: no two types read the same; entry points name their parameters ------------------


def test_a_method_error_never_prints_two_signatures_that_read_the_same():
    from specializer.types import Weak

    gf = GenericFunction("alike")

    @gf.method
    def alike(x: Array[np.float32], v: int):
        return 0

    with pytest.raises(MethodError) as e:
        gf.methodinstance((Array[np.float32], Weak[int]))
    message = str(e.value)
    assert "matches alike(Array[np.float32], Weak[int])" in message
    assert "methods visible there: alike(Array[np.float32], builtins.int)" in message


def test_a_method_error_qualifies_array_types_of_two_back_ends_by_module():
    cl = pytest.importorskip("specializer.backends.opencl")
    cuda = pytest.importorskip("specializer.backends.cuda")
    gf = GenericFunction("two_arrays")
    gf.add_method(lambda x: 0, (cuda.Array[np.float32],))
    with pytest.raises(MethodError) as e:
        gf.methodinstance((cl.Array[np.float32],))
    assert str(e.value).startswith(
        "no method of two_arrays matches two_arrays(specializer.backends.opencl.Array"
        "[np.float32]) in world "
    )
    assert "visible there: two_arrays(specializer.backends.cuda.Array[np.float32])" in str(e.value)
    # and two classes of one module and name (a class defined again) by where they live
    first, second = (type("Same", (), {"__module__": "mod"}) for _ in range(2))
    gf.add_method(lambda x: 0, (first,))
    with pytest.raises(MethodError) as e:
        gf.methodinstance((second,))
    assert f"two_arrays(mod.Same (class at 0x{id(second):x}))" in str(e.value)
    assert f"two_arrays(mod.Same (class at 0x{id(first):x}))" in str(e.value)


def test_core_entry_points_name_the_parameter_in_their_errors():
    gf = GenericFunction("params")
    gf.add_method(lambda x: 0, (np.float32,))
    cases = [
        (lambda: gf.methodinstance((np.float32,), world="x"), "world (the world to dispatch"),
        (lambda: gf.methodinstance((np.float32,), world=True), "world (the world to dispatch"),
        (lambda: gf.methods(world=1.5), "world (the world to dispatch params in)"),
        (lambda: gf.dispatches_to((np.float32,), "1"), "world (the world to dispatch"),
        (lambda: gf.methodinstance([np.float32]), "tt (the argument types of params)"),
        (lambda: gf.add_method(lambda x: 0, callees=3), "callees (of params) is an iterable"),
        (lambda: gf.add_method(lambda x: 0, [np.int8]), "signature (the argument types of"),
        (lambda: gf.add_method(3), "fn (a method of params) must be callable"),
        (lambda: gf.method(callees=3)(lambda x: 0), "callees (of params) is an iterable"),
        (lambda: gf.add_backedge([np.float32], None, None), "tt (the argument types of"),
        (lambda: gf.add_backedge((np.float32,), None, None), "method (of params) is a Method"),
    ]
    for call, says in cases:
        with pytest.raises(TypeError) as e:
            call()
        assert says in str(e.value), (says, str(e.value))
    assert gf.methodinstance((np.float32,), world=np.int64(latest())).method.signature == (
        np.float32,
    )


# -- annotations are checked when a kernel method is defined (SPEC 8) --------------------------


def _backends():
    found = []
    for name in ("opencl", "cuda"):
        try:
            found.append(__import__(f"specializer.backends.{name}", fromlist=["_"]))
        except ImportError:
            pass
    return found


def _define(backend, annotation):
    def k(x, v):
        return ""

    k.__annotations__ = {"x": backend.Array[np.float32], "v": annotation}  # the types themselves
    return backend.kernel(k)


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: b.__name__.rsplit(".", 1)[1])
def test_an_annotation_no_argument_can_match_is_a_type_error_at_definition(backend):
    other = next((b for b in _backends() if b is not backend), None)
    cases = {
        int: "annotated int, which no argument matches: a Python int passed to a kernel "
        "dispatches as np.int64 or the concrete integer type that the method declares, and a "
        "numpy scalar as its own type; annotate it with np.int64, np.int32 or np.integer",
        float: "annotate it with np.float64, np.float32 or np.floating",
        bool: "annotate it with np.bool_",
        np.ndarray: "a kernel takes device arrays, not numpy arrays; annotate it with "
        f"{backend.__name__}'s Array[dtype] (for example Array[np.float32])",
        str: f"annotated str, which is not an argument type of {backend.__name__}",
        np.str_: "annotated np.str_, which no argument matches",
        np.void: "annotate it with Struct[dtype] for a struct by value",
        backend.Array[int]: "annotated Array[int], which no argument matches: an array's "
        "element type is a numpy scalar type or dtype, and int is none; annotate it with "
        "Array[np.int64]",
        backend.Array[float]: "annotate it with Array[np.float64]",
        backend.Array[bool]: "annotate it with Array[np.bool_]",
        backend.Array[str]: "and str is none; annotate it with Array[dtype] with a numpy "
        "scalar type or dtype (Array[np.float32], ...)",
    }
    if other is not None:
        cases[other.Array[np.int16]] = (
            f"annotated Array[np.int16] of {other.__name__}, another back-end's array type, "
            f"which no argument matches: annotate it with {backend.__name__}'s Array[np.int16]"
        )
    for annotation, says in cases.items():
        with pytest.raises(TypeError) as e:
            _define(backend, annotation)
        assert str(e.value).startswith("parameter 'v' of kernel k is annotated "), str(e.value)
        assert says in str(e.value), (annotation, str(e.value))
    for fine in (np.float32, np.floating, np.generic, object, backend.Struct, backend.Array):
        _define(backend, fine)  # every one matches some argument


@pytest.mark.parametrize("backend", _backends(), ids=lambda b: b.__name__.rsplit(".", 1)[1])
def test_an_array_of_a_python_type_is_refused_where_its_method_is_defined(backend):
    # The annotation as written, under this module's 'from __future__ import annotations' (a
    # string evaluated at definition) and evaluated at the def itself.
    with pytest.raises(TypeError) as e:

        @backend.kernel(localns=locals())
        def lazy(x: backend.Array[int]) -> str:
            return ""

    assert str(e.value).startswith("parameter 'x' of kernel lazy is annotated Array[int], ")
    assert str(e.value).endswith("annotate it with Array[np.int64]")

    def eager(x, y):
        return ""

    eager.__annotations__ = {"x": backend.Array[np.float32], "y": backend.Array[float]}
    with pytest.raises(TypeError, match=r"^parameter 'y' of kernel eager is annotated Array\[fl"):
        backend.kernel(eager)
