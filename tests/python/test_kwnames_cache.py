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
