"""`Tensor`'s free list (`dlbind::freelist`, issue 5's 40 ns target).

Released `Tensor`s keep their memory in a bounded per-type list, and `from_dlpack(t)` builds
the new `Tensor` directly in such memory once a probe has checked PyO3's layout. Nothing of
that may show: a `Tensor` is GC-tracked unless its only Python reference can close no cycle
(decision 0013), the type's reference count is its instances' plus the list's, weak
references die with their object and never
see the next occupant, values and layouts are those of the source, sources are released
exactly when their views are, and the list never exceeds its capacity.
Timings are not tested here (bench/bench_dlpack.py).
"""

import gc
import os
import sys
import weakref

import numpy as np
import pytest

import dlbind_demo as m
from dlbind_demo import Tensor

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("DLBIND_FREELIST") == "0",
        reason="DLBIND_FREELIST=0 in the environment turns the free lists off (test_reuse_switch.py covers that)",
    ),
    pytest.mark.skipif(
        not dict((n, a) for n, a, _ in m._testing.shortcuts())["full_api"],
        reason="an abi3 build has no free lists (the limited API cannot replace tp_alloc): "
        "test_interpreters.py checks that none is installed",
    ),
]


def stats():
    length, direct, capacity = m._testing.tensor_freelist_stats()
    return length, direct, capacity


def layout(t):
    return (t.data_ptr, t.shape, t.strides, t.dtype, t.device, t.readonly)


def test_the_demo_tensor_has_a_list_and_builds_directly():
    t = Tensor.arange(6, dtype="float32")
    m.from_dlpack(t)
    length, direct, capacity = stats()
    assert length is not None, "Tensor has a free list"
    assert direct, "the layout probe passed for the frozen Tensor"
    assert 0 <= length <= capacity


def test_released_tensors_fill_the_list_up_to_its_capacity_and_are_taken_back():
    t = Tensor.arange(6, dtype="float32")
    _, _, capacity = stats()
    many = [m.from_dlpack(t) for _ in range(capacity + 10)]
    held = stats()[0]
    del many
    assert stats()[0] == capacity, "released tensors wait in the list, at most its capacity"
    assert held < capacity
    again = [m.from_dlpack(t) for _ in range(5)]
    assert stats()[0] == capacity - 5, "new tensors take memory from the list"
    del again


@pytest.mark.parametrize("make", [
    lambda: Tensor.arange(12, dtype="float64"),
    lambda: Tensor.arange(12, dtype="int16").reversed(),
    lambda: Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").transpose(),
    lambda: Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").slice(2, 1, None, 2),
    lambda: Tensor.arange(8, dtype="int32").set_readonly(),
    lambda: Tensor.zeros((), dtype="float32"),
])
def test_reused_memory_gives_correct_tracked_tensors(make):
    src = make()
    want = np.from_dlpack(src)
    # Churn so the results come from reused memory.
    for _ in range(3):
        views = [m.from_dlpack(src) for _ in range(20)]
        for v in views:
            assert gc.is_tracked(v) == gc.is_tracked(src), (
                "a view of a Tensor is tracked as its source is, reused or not"
            )
            assert layout(v)[1:] == layout(src)[1:]
            assert v.data_ptr == src.data_ptr
            np.testing.assert_array_equal(np.from_dlpack(v), want)
        del views
    # Tensors made by PyO3 methods (views) also come from the list and are tracked.
    r = Tensor.arange(6, dtype="float32").reversed()
    assert gc.is_tracked(r)


def test_each_instance_and_each_kept_memory_holds_one_reference_to_the_type():
    """A released Tensor's memory keeps its reference to the type while it waits in the list
    and hands it to the next Tensor made there (no count change on either side); memory the
    full list frees gives it back. So the type's count is always its live instances plus the
    list's length plus what else refers to it: checked across every way in and out of the list
    (the derived release, PyO3's deallocation of a method-made Tensor, a full list, reuse by
    the typed import and by PyO3's constructor)."""
    t = Tensor.arange(6, dtype="float32")
    a = np.arange(6.0)

    def others():
        gc.collect()
        return sys.getrefcount(Tensor) - stats()[0]

    base = others()
    _, _, capacity = stats()
    for _ in range(3):
        views = [m.from_dlpack(t) for _ in range(capacity + 7)]  # drains the list, then allocates
        numpy_views = [m.from_dlpack(a) for _ in range(5)]
        made = [t.reversed() for _ in range(5)]  # PyO3's constructor and deallocation
        assert others() - base == len(views) + len(numpy_views) + len(made)
        del views  # fills the list, then frees what does not fit
        assert stats()[0] == capacity
        assert others() - base == len(numpy_views) + len(made)
        del numpy_views, made
        assert others() == base
    assert t.shape == (6,)


class _ArrayInterfaceOwner:
    """A GC-tracked object whose memory a Tensor can view (it could store that Tensor)."""

    def __init__(self):
        self.a = np.arange(8.0)

    @property
    def __array_interface__(self):
        return self.a.__array_interface__


def test_imports_whose_reference_can_close_no_cycle_stay_out_of_the_collector():
    """A Tensor viewing a numpy array (not a GC type) cannot be in a cycle the collector could
    free, nor can one viewing an untracked Tensor: neither is tracked, whether its memory is
    fresh or reused. One whose owner is a tracked object is tracked, so a cycle through that
    owner is still collected (test_gc_cycles.py)."""
    for _ in range(3):  # the first round allocates, the next ones reuse released memory
        arrays = [np.arange(6.0) for _ in range(10)]
        views = [m.from_dlpack(a) for a in arrays]
        assert not any(gc.is_tracked(v) for v in views), "a view of a numpy array is untracked"
        again = [m.from_dlpack(v) for v in views]
        assert not any(gc.is_tracked(v) for v in again), "a view of an untracked Tensor too"
        for a, v in zip(arrays, again):
            np.testing.assert_array_equal(np.from_dlpack(v), a)
        owners = [_ArrayInterfaceOwner() for _ in range(10)]
        held = [m.from_dlpack(o) for o in owners]
        assert all(gc.is_tracked(v) for v in held), "a view of a tracked object is tracked"
        del views, again, held
    # A Tensor that owns its memory is made by PyO3 (tracked); a view of it is tracked too.
    own = Tensor.arange(6, dtype="float32")
    assert gc.is_tracked(own) and gc.is_tracked(m.from_dlpack(own))
    # gc.get_referents still sees an untracked view's owner.
    a = np.arange(3.0)
    v = m.from_dlpack(a)
    assert not gc.is_tracked(v) and any(r is a for r in gc.get_referents(v))


def test_weak_references_die_with_the_tensor_and_never_see_the_next_one():
    t = Tensor.arange(4, dtype="float32")
    a = m.from_dlpack(t)
    r = weakref.ref(a)
    assert r() is a
    addr = id(a)
    del a
    assert r() is None
    b = m.from_dlpack(t)
    assert id(b) == addr, "LIFO reuse of the same memory"
    assert r() is None, "the dead weak reference does not see the new occupant"
    r2 = weakref.ref(b)
    assert r2() is b
    del b
    assert r2() is None


def test_sources_are_released_exactly_with_their_views():
    t = Tensor.arange(16, dtype="float32")
    base = sys.getrefcount(t)
    views = [m.from_dlpack(t) for _ in range(50)]
    assert sys.getrefcount(t) == base + 50
    del views
    assert sys.getrefcount(t) == base
    for _ in range(1000):
        m.from_dlpack(t)
    assert sys.getrefcount(t) == base
    w = weakref.ref(t)
    v = m.from_dlpack(t)
    del t
    assert w() is not None, "the view keeps its source alive"
    del v
    assert w() is None, "released with the last view"


def test_gc_collect_with_tensors_in_and_out_of_the_list():
    t = Tensor.arange(4, dtype="float32")
    views = [m.from_dlpack(t) for _ in range(30)]
    gc.collect()
    del views[::2]
    gc.collect()
    more = [m.from_dlpack(t) for _ in range(30)]
    gc.collect()
    assert all(v.data_ptr == t.data_ptr for v in views + more)

