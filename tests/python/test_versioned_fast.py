"""The versioned call consumers make, `t.__dlpack__(max_version=(1, n))`, on its fast path
(issue 23), and `__dlpack__`'s own vectorcall entry.

* An exact tuple of two of CPython's cached small ints (-5..256) with a major of at least 1 is
  exported with a constant request; the tuple is then remembered by identity (one strong
  reference, replaced by the next such tuple). Everything else takes the general parser. Both
  must give the same answers: the same capsule kind for every value, the same errors for bad
  ones, whether or not a good tuple was seen just before.
* `Tensor.__dict__["__dlpack__"]` stays a `method_descriptor` (CPython's specialised keyword-free
  call keeps working), with a vectorcall entry of dlbind's that takes an exact `Tensor` `self`
  straight to the export and leaves everything else to CPython's own entry: unbound calls,
  a missing or wrong `self`, C callers (`PyObject_VectorcallMethod`, `operator.methodcaller`).
"""

import ctypes
import operator
import sys

import pytest

import dlpack_helpers as H
from conftest import readonly_view


def kind(cap):
    return H.capsule_name(cap)


# Values the rule decides by the major alone (versioned iff major >= 1); the ones made of cached
# small ints take the fast path, the others (257, 10**20, negative beyond -5) the general one.
GOOD = [
    ((1, 0), True), ((1, 3), True), ((2, 0), True), ((256, 256), True), ((1, -5), True),
    ((257, 0), True), ((1, 257), True), ((10**20, 0), True), ((1, -6), True),
    ((0, 9), False), ((-5, 0), False), ((0, 0), False), ((-(10**20), 1), False),
]


@pytest.mark.parametrize("mv,versioned", GOOD)
def test_every_max_version_gives_the_rules_capsule(Tensor, mv, versioned):
    t = Tensor.arange(6, "float32")
    want = H.VERSIONED if versioned else H.LEGACY
    for _ in range(3):  # the first call may remember the tuple, the next ones recognise it
        cap = t.__dlpack__(max_version=mv)
        assert kind(cap) == want, mv
        info = H.inspect_capsule(cap)
        assert info.data == t.data_ptr and tuple(info.shape) == (6,)
        if versioned:
            assert info.flags & H.FLAG_READ_ONLY == 0


class Pair(tuple):
    """A tuple subclass: not the fast path's exact tuple, still a tuple of two ints."""


BAD = [(True, 0), (1, True), (1, 1.5), (1.0, 0), (1,), (1, 0, 0), [1, 0], "10", 1]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_bad_max_version_refused_after_a_good_one_was_seen(Tensor, bad):
    t = Tensor.arange(4, "int32")
    assert kind(t.__dlpack__(max_version=(1, 0))) == H.VERSIONED
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version=bad)
    assert kind(t.__dlpack__(max_version=(1, 0))) == H.VERSIONED


def test_tuple_subclass_and_none_take_the_general_path(Tensor):
    t = Tensor.arange(4, "int32")
    assert kind(t.__dlpack__(max_version=Pair((1, 0)))) == H.VERSIONED
    assert kind(t.__dlpack__(max_version=Pair((0, 1)))) == H.LEGACY
    assert kind(t.__dlpack__(max_version=None)) == H.LEGACY


def test_read_only_data_is_flagged_on_the_fast_path(Tensor):
    t = readonly_view(Tensor.arange(6, "float64"))
    for _ in range(2):
        info = H.inspect_capsule(t.__dlpack__(max_version=(1, 0)))
        assert info.versioned and info.flags & H.FLAG_READ_ONLY


def test_the_remembered_tuple_holds_one_reference_until_replaced(Tensor):
    t = Tensor.arange(3, "float32")
    # Built at run time: not a constant of this code object, so only these names refer to them.
    a, b = tuple([1, 0]), tuple([1, 2])
    legacy = tuple([0, 5])
    ra, rb, rl = sys.getrefcount(a), sys.getrefcount(b), sys.getrefcount(legacy)
    t.__dlpack__(max_version=a)
    assert sys.getrefcount(a) == ra + 1, "remembered: one strong reference"
    t.__dlpack__(max_version=a)
    assert sys.getrefcount(a) == ra + 1, "recognised: no second reference"
    t.__dlpack__(max_version=legacy)
    assert sys.getrefcount(legacy) == rl, "a legacy request is not remembered"
    assert sys.getrefcount(a) == ra + 1
    t.__dlpack__(max_version=b)
    assert sys.getrefcount(a) == ra, "replaced: its reference is given back"
    assert sys.getrefcount(b) == rb + 1
    # Once `b` is released elsewhere, the remembered reference keeps it alive: its address cannot
    # be another tuple's while it is remembered.
    del b
    c = tuple([1, 7])
    assert kind(t.__dlpack__(max_version=c)) == H.VERSIONED


def test_other_keywords_with_max_version_are_parsed(Tensor):
    t = Tensor.arange(3, "float32")
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 0), copy=True))
    assert info.versioned and info.flags & H.FLAG_IS_COPIED and info.data != t.data_ptr
    assert kind(t.__dlpack__(stream=None, max_version=(1, 0))) == H.VERSIONED
    with pytest.raises(TypeError):
        t.__dlpack__((1, 0))
    with pytest.raises(TypeError):
        t.__dlpack__(max_version=(1, 0), bogus=1)


# ------------------------------------------------------------------ the vectorcall entry


def test_descriptor_keeps_its_type_and_class(Tensor):
    t = Tensor.zeros((2,))
    t.__dlpack__()  # binds the descriptors to the class
    d = type(t).__dict__["__dlpack__"]
    assert type(d).__name__ == "method_descriptor" and d.__objclass__ is type(t)


def test_unbound_and_c_callers(Tensor):
    t = Tensor.arange(5, "int64")
    T = type(t)
    assert kind(T.__dlpack__(t)) == H.LEGACY
    assert kind(T.__dlpack__(t, max_version=(1, 0))) == H.VERSIONED
    assert kind(operator.methodcaller("__dlpack__", max_version=(1, 1))(t)) == H.VERSIONED
    assert kind(operator.methodcaller("__dlpack__")(t)) == H.LEGACY
    # PyObject_VectorcallMethod, as numpy's from_dlpack calls the producer.
    vcm = ctypes.pythonapi.PyObject_VectorcallMethod
    vcm.restype = ctypes.py_object
    vcm.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_size_t, ctypes.py_object]
    args = (ctypes.py_object * 2)(t, (1, 0))
    cap = vcm("__dlpack__", ctypes.cast(args, ctypes.c_void_p), 1, ("max_version",))
    assert kind(cap) == H.VERSIONED


def test_missing_or_wrong_self_is_cpythons_error(Tensor):
    T = type(Tensor.zeros((1,)))
    with pytest.raises(TypeError, match="needs an argument"):
        T.__dlpack__()
    with pytest.raises(TypeError, match="doesn't apply to a 'int' object"):
        T.__dlpack__(42)
    with pytest.raises(TypeError, match="doesn't apply to a 'int' object"):
        T.__dlpack__(42, max_version=(1, 0))
    with pytest.raises(TypeError, match="positional"):
        T.__dlpack__(Tensor.zeros((1,)), (1, 0))
