"""SPEC 8's weak Python scalars, against generic functions directly.

A Python ``int`` (``Weak[int]``) dispatches as ``np.int64`` where a method takes that (or an
abstract type above it); otherwise it takes the concrete integer type that the most specific
applicable method declares. Likewise ``float`` and ``bool``. The method instance's ``tt`` holds
the concrete types, so the method body never sees a weak type.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from pybackend import CONFIG

from specializer import (
    AmbiguityError,
    GenericFunction,
    MethodError,
    compile_count,
    invoke_in_world,
    latest,
)
from specializer.compiler import CompilerJob, compile_and_link
from specializer.types import DeviceArray, Weak
from specializer.world import WORLD_MAX

WI, WF, WB = Weak[int], Weak[float], Weak[bool]


class Array(DeviceArray):
    pass


A32 = Array[np.float32]


def body(tag):
    def fn(*types):
        return (tag, types)

    return fn


def test_a_python_int_takes_the_concrete_integer_type_a_method_declares():
    gf = GenericFunction("w_int32")
    gf.add_method(body("int32"), signature=(Array[np.floating], np.int32))
    mi = gf.methodinstance((A32, WI))
    assert mi.tt == (A32, np.int32)
    assert mi.method.fn(*mi.tt) == ("int32", (A32, np.int32))  # the body sees concrete types
    assert gf.methodinstance((A32, np.int32)) is mi  # one interned instance for both


def test_unsigned_and_narrow_declared_types_take_a_python_int():
    gf = GenericFunction("w_uint8")
    gf.add_method(body("u8"), signature=(np.uint8,))
    assert gf.methodinstance((WI,)).tt == (np.uint8,)


def test_a_generic_integer_parameter_takes_a_python_int_as_int64():
    for declared in (np.integer, np.signedinteger, np.number, np.generic, np.int64):
        gf = GenericFunction("w_generic")
        gf.add_method(body("generic"), signature=(A32.__mro__[1], declared))
        mi = gf.methodinstance((A32, WI))
        assert mi.tt == (A32, np.int64), declared


def test_the_default_wins_over_a_declared_narrow_type():
    gf = GenericFunction("w_both")
    gf.add_method(body("int32"), signature=(np.int32,))
    gf.add_method(body("integer"), signature=(np.integer,))
    mi = gf.methodinstance((WI,))
    assert mi.method.fn() == ("integer", ()) and mi.tt == (np.int64,)
    # a numpy scalar is a different argument type: np.int32 takes the int32 method
    assert gf.methodinstance((np.int32,)).method.fn() == ("int32", ())


def test_a_later_int64_method_takes_over_in_the_new_world_only():
    gf = GenericFunction("w_later")
    gf.add_method(body("int32"), signature=(np.int32,))
    old = latest()
    first = gf.methodinstance((WI,))
    assert first.tt == (np.int32,)
    gf.add_method(body("int64"), signature=(np.int64,))
    now = gf.methodinstance((WI,))
    assert now.tt == (np.int64,) and now.method.fn() == ("int64", ())
    # an older world keeps the old method
    assert invoke_in_world(old, gf.methodinstance, (WI,)) is first
    assert gf.methodinstance((WI,), world=old) is first
    # and np.int32 itself still takes the int32 method in the new world
    assert gf.methodinstance((np.int32,)) is first


def test_two_equally_specific_declared_types_are_ambiguous_naming_the_python_type():
    gf = GenericFunction("w_amb")
    gf.add_method(body("int32"), signature=(np.int32,))
    gf.add_method(body("int16"), signature=(np.int16,))
    with pytest.raises(AmbiguityError) as e:
        gf.methodinstance((WI,))
    msg = str(e.value)
    assert "w_amb(int) is ambiguous" in msg
    assert "w_amb(np.int32)" in msg and "w_amb(np.int16)" in msg
    assert "Weak" not in msg
    gf.add_method(body("int64"), signature=(np.int64,))  # the default settles it
    assert gf.methodinstance((WI,)).tt == (np.int64,)


def test_ambiguity_among_methods_that_take_the_default_is_an_error_too():
    gf = GenericFunction("w_amb_default")
    gf.add_method(body("a"), signature=(np.int64, np.number))
    gf.add_method(body("b"), signature=(np.number, np.int64))
    gf.add_method(body("narrow"), signature=(np.int32, np.int32))  # not consulted
    with pytest.raises(AmbiguityError, match=r"w_amb_default\(int, int\) is ambiguous"):
        gf.methodinstance((WI, WI))


def test_no_method_names_the_python_type_and_says_what_it_takes():
    gf = GenericFunction("w_none")
    gf.add_method(body("f32"), signature=(np.float32,))
    with pytest.raises(MethodError) as e:
        gf.methodinstance((WI,))
    msg = str(e.value)
    assert "no method of w_none matches w_none(int)" in msg
    assert "w_none(np.float32)" in msg
    assert "a Python int takes a parameter declared np.int64" in msg
    assert "Weak" not in msg


def test_a_python_float_takes_the_declared_floating_type_or_float64():
    gf = GenericFunction("w_float")
    gf.add_method(body("f32"), signature=(np.float32,))
    assert gf.methodinstance((WF,)).tt == (np.float32,)
    gf16 = GenericFunction("w_float16")
    gf16.add_method(body("f16"), signature=(np.float16,))
    assert gf16.methodinstance((WF,)).tt == (np.float16,)
    generic = GenericFunction("w_floating")
    generic.add_method(body("floating"), signature=(np.floating,))
    assert generic.methodinstance((WF,)).tt == (np.float64,)
    ints = GenericFunction("w_float_to_int")
    ints.add_method(body("i32"), signature=(np.int32,))
    with pytest.raises(MethodError, match=r"w_float_to_int\(float\)"):
        ints.methodinstance((WF,))  # a float never takes an integer type


def test_a_python_bool_takes_bool_and_never_an_integer_type():
    gf = GenericFunction("w_bool")
    gf.add_method(body("bool"), signature=(np.bool_,))
    assert gf.methodinstance((WB,)).tt == (np.bool_,)
    generic = GenericFunction("w_bool_generic")
    generic.add_method(body("generic"), signature=(np.generic,))
    assert generic.methodinstance((WB,)).tt == (np.bool_,)
    ints = GenericFunction("w_bool_int")
    ints.add_method(body("int32"), signature=(np.int32,))
    ints.add_method(body("integer"), signature=(np.integer,))
    with pytest.raises(MethodError, match=r"w_bool_int\(bool\)") as e:
        ints.methodinstance((WB,))
    assert re.search(
        r"a Python bool takes a parameter declared np\.bool_? or a type above it", str(e.value)
    )


def test_weak_and_numpy_scalars_mix_each_resolved_on_its_own():
    gf = GenericFunction("w_mix")
    gf.add_method(body("ii"), signature=(np.int32, np.int32))
    gf.add_method(body("if"), signature=(np.int32, np.float32))
    assert gf.methodinstance((np.int32, WI)).tt == (np.int32, np.int32)
    assert gf.methodinstance((WI, WF)).tt == (np.int32, np.float32)
    assert gf.methodinstance((np.int32, WF)).tt == (np.int32, np.float32)
    with pytest.raises(MethodError):
        gf.methodinstance((np.int64, WI))  # a numpy scalar never changes type
    with pytest.raises(MethodError):
        gf.methodinstance((WI, np.float64))


def test_several_weak_parameters_each_take_their_declared_type():
    gf = GenericFunction("w_multi")
    gf.add_method(body("m"), signature=(A32.__mro__[1], np.uint16, np.float32, np.bool_))
    mi = gf.methodinstance((A32, WI, WF, WB))
    assert mi.tt == (A32, np.uint16, np.float32, np.bool_)


class Edge:
    """What compiled code registers: its validity ends when a definition lowers max_world."""

    def __init__(self):
        self.max_world = WORLD_MAX


def test_a_backedge_on_a_weak_signature_fires_when_the_weak_dispatch_changes():
    gf = GenericFunction("w_edge")
    gf.add_method(body("int32"), signature=(np.int32,))
    weak_edge, concrete_edge = Edge(), Edge()
    gf.add_backedge((WI,), gf.methodinstance((WI,)).method, weak_edge)
    gf.add_backedge((np.int32,), gf.methodinstance((np.int32,)).method, concrete_edge)
    w = latest()
    gf.add_method(body("int64"), signature=(np.int64,))
    assert weak_edge.max_world == w  # a Python int now takes another method
    assert concrete_edge.max_world == WORLD_MAX  # np.int32 still takes the same one
    assert [e for _, _, e in gf.backedges()] == [concrete_edge]  # the ended one is gone


def test_code_for_a_weak_lookup_is_the_code_of_the_method_it_resolves_to():
    gf = GenericFunction("w_code")
    gf.add_method(
        lambda *ts: f"def w_code(x): return ('int32', {ts[0].__name__!r})", signature=(np.int32,)
    )
    mi = gf.methodinstance((WI,))
    ci, _ = compile_and_link(CompilerJob(mi, CONFIG, latest()), "ctx")
    n = compile_count()
    # the same code serves np.int32 callers: one method instance
    ci2, _ = compile_and_link(CompilerJob(gf.methodinstance((np.int32,)), CONFIG, latest()), "ctx")
    assert ci2 is ci and compile_count() == n
    gf.add_method(lambda *ts: "def w_code(x): return 'int64'", signature=(np.int64,))
    # a Python int now dispatches to the new method and compiles its code ...
    ci3, fn3 = compile_and_link(CompilerJob(gf.methodinstance((WI,)), CONFIG, latest()), "ctx")
    assert ci3 is not ci and fn3(1) == "int64" and compile_count() == n + 1
    # ... while np.int32's code is still valid and reused
    ci4, _ = compile_and_link(CompilerJob(gf.methodinstance((np.int32,)), CONFIG, latest()), "ctx")
    assert ci4 is ci and ci.valid(latest())


def test_subclasses_of_python_scalars_are_weak_in_both_back_ends_numpy_scalars_are_not():
    import enum

    from specializer.backends import cuda
    from specializer.types import weak_type

    class Color(enum.IntEnum):
        RED = 1

    class Meters(float):
        pass

    for typeof in (pytest.importorskip("specializer.backends.opencl").typeof, cuda.typeof):
        assert typeof(Color.RED) is WI and typeof(Meters(2.5)) is WF and typeof(True) is WB
        assert typeof(np.float64(1)) is np.float64  # a float subclass with a type of its own
    assert weak_type(Color.RED) is WI and weak_type(False) is WB and weak_type("1") is None
