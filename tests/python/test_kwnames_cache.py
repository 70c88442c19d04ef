"""`__dlpack__` remembers the last tuple of keyword names it resolved (issue 23).

C callers pass the same `kwnames` tuple on every call (numpy's `from_dlpack` passes
`("dl_device", "copy", "max_version")`), so dlbind resolves a tuple of two or more names once
and then maps values by position. These tests drive `__dlpack__` through
`PyObject_Vectorcall` with tuples of our own making: each value must land on its own name
whatever the order, for a tuple reused with other values and for fresh tuples of the same names
in another order (a freed tuple's address can be reused by the next one; the cache keeps its
tuple alive so that cannot alias), and errors (unknown, repeated names) are never cached away.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlpack_helpers as H

_vectorcall = ctypes.pythonapi.PyObject_Vectorcall
_vectorcall.restype = ctypes.py_object
_vectorcall.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_size_t, ctypes.py_object]


def call(fn, names: tuple, values: list):
    """`fn(**dict(zip(names, values)))`, passing `names` itself as the vectorcall kwnames."""
    arr = (ctypes.py_object * len(values))(*values)
    return _vectorcall(fn, ctypes.cast(arr, ctypes.c_void_p), 0, names)


def fresh(a, b, c=None):
    """A new tuple object of new (not interned) str objects equal to the names given. Built by
    BUILD_TUPLE, which takes CPython's tuple free list: a tuple freed just before is reused at
    the same address."""
    n = ["".join(list(x)) for x in (a, b, c) if x is not None]
    return (n[0], n[1], n[2]) if c is not None else (n[0], n[1])


def check(cap, want_versioned, want_copied):
    info = H.inspect_capsule(cap)
    assert info.versioned == want_versioned
    if want_versioned:
        assert bool(info.flags & H.FLAG_IS_COPIED) == want_copied
    return info


def test_one_tuple_reused_with_other_values(Tensor):
    t = Tensor.zeros((3, 4), "float32")
    names = ("copy", "max_version")
    for _ in range(3):  # the first call resolves the tuple, the next ones hit the cache
        check(call(t.__dlpack__, names, [True, (1, 0)]), True, True)
        check(call(t.__dlpack__, names, [None, (1, 0)]), True, False)
        check(call(t.__dlpack__, names, [False, None]), False, False)


def test_fresh_tuples_in_every_order(Tensor):
    t = Tensor.zeros((2, 2), "float32")
    before = sys.getrefcount(None)
    for i in range(200):
        # Alternate orders with fresh tuples (and fresh name strings): a freed tuple's address
        # may be reused by the next, so a cache keyed on a borrowed address would map the
        # values of one order onto the names of the other.
        if i % 2:
            info = check(call(t.__dlpack__, fresh("max_version", "copy", "dl_device"), [(1, 0), True, None]),
                         True, True)
        else:
            info = check(call(t.__dlpack__, fresh("dl_device", "max_version", "copy"), [(1, 0), (1, 0), False]),
                         True, False)
        assert info.device == (1, 0)
    gc.collect()
    assert abs(sys.getrefcount(None) - before) < 50


def test_errors_are_never_cached(Tensor):
    t = Tensor.zeros((2,), "float32")
    names = ("copy", "max_version")
    check(call(t.__dlpack__, names, [None, (1, 0)]), True, False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        call(t.__dlpack__, ("copy", "bogus"), [None, 1])
    with pytest.raises(TypeError, match="multiple values"):
        call(t.__dlpack__, fresh("copy", "copy"), [None, None])
    # Bad values under the cached tuple are still checked every call.
    with pytest.raises((TypeError, ValueError)):
        call(t.__dlpack__, names, [None, "not a version"])
    check(call(t.__dlpack__, names, [None, (1, 0)]), True, False)


def test_numpy_consumer_values_follow_their_names(Tensor):
    """numpy's from_dlpack reuses one tuple: copy=True copies, copy=False / None share."""
    t = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)) if hasattr(Tensor, "from_numpy") \
        else Tensor.from_dlpack(np.arange(6, dtype=np.float32).reshape(2, 3))
    base = np.from_dlpack(t)
    for copy in (None, True, False, True, None):
        a = np.from_dlpack(t, copy=copy)
        assert np.array_equal(a, base)
        assert np.shares_memory(a, base) == (copy is not True)


NUMPY_NAMES = ("dl_device", "copy", "max_version")


@pytest.mark.parametrize("values", [
    (None, None, (1, 0)), (None, None, (1, 3)), (None, True, (1, 0)), (None, False, (1, 0)),
    (None, None, (0, 9)), (None, None, None), ((1, 0), None, (1, 0)), (None, None, (300, 0)),
])
def test_numpy_call_shape_decided_alike_first_and_remembered(Tensor, values):
    """numpy's call, `dl_device=None, copy=None, max_version=(1, n)` with one remembered name
    tuple, takes the constant versioned export; every other value of the same names still goes
    through the parser. The first call (a fresh tuple: parsed) and the repeats (the remembered
    tuple: the shortcut where it applies) give the same capsule."""
    t = Tensor.arange(6, dtype="float32")
    names = fresh(*NUMPY_NAMES)
    alive = [call(t.__dlpack__, names, list(values))]  # copies stay alive: distinct addresses
    want = check(alive[0], *expect(values))
    for _ in range(3):
        alive.append(call(t.__dlpack__, names, list(values)))
        got = check(alive[-1], *expect(values))
        assert (got.shape, got.strides, got.code, got.bits) == (want.shape, want.strides, want.code, want.bits)
        assert (got.data == want.data) == (values[1] is not True)


def expect(values):
    _, copy, mv = values
    return (mv is not None and mv[0] >= 1), copy is True


@pytest.mark.parametrize("values,error", [
    (((2, 0), None, (1, 0)), BufferError), ((None, None, "x"), TypeError),
    ((None, "yes", (1, 0)), TypeError), ((None, None, (1,)), TypeError),
])
def test_numpy_call_shape_errors_after_the_shortcut_was_taken(Tensor, values, error):
    """The remembered tuple with values the shortcut must not take: each refused as the parser
    refuses it, right after the same tuple took the shortcut."""
    t = Tensor.arange(6, dtype="float32")
    names = fresh(*NUMPY_NAMES)
    for _ in range(2):
        check(call(t.__dlpack__, names, [None, None, (1, 0)]), True, False)
    with pytest.raises(error):
        call(t.__dlpack__, names, list(values))
    check(call(t.__dlpack__, names, [None, None, (1, 0)]), True, False)


def test_numpy_from_dlpack_round_trip_through_the_shortcut(Tensor):
    """What np.from_dlpack(t) gets back is t's data (zero-copy), also on repeat calls."""
    t = Tensor.from_dlpack(np.arange(12, dtype=np.float64).reshape(3, 4).T)
    for _ in range(4):
        a = np.from_dlpack(t)
        assert a.ctypes.data == t.data_ptr and a.strides == (8, 32)
        assert np.array_equal(a, np.arange(12.0).reshape(3, 4).T)
