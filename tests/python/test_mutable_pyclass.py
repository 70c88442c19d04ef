"""`#[derive(DLPackExport)]` on a plain (non-frozen) `#[pyclass]` (issue 21, point 7).

`dlbind_demo.Growable` has `&mut self` methods that reallocate its `Vec<f32>`. Every export of
it must hold a shared borrow of the object for as long as the consumer holds the export: the
mutating methods then raise PyO3's borrow error (`RuntimeError: Already borrowed`), the data
the consumer sees stays intact, and the methods work again once every export is released
(numpy refuses `resize` on a referenced array the same way). `live_export_borrows()` counts the
borrows dlbind's live exports hold.
"""
import ctypes
import gc
import sys
import threading
import time

import numpy as np
import pytest

import dlbind_demo as m
import dlpack_helpers as H
from dlbind_demo import Growable

BORROWED = r"Already borrowed"

# Every `&mut self` method of `Growable`, as a call that would succeed on an unborrowed object of
# 12 elements.
MUTATORS = {
    "resize": lambda g: g.resize(len(g) + 100),
    "push": lambda g: g.push(1.5),
    "fill": lambda g: g.fill(7.0),
    "reshape": lambda g: g.reshape(len(g), 1),
    "set_readonly": lambda g: g.set_readonly(False),
}


@pytest.fixture(autouse=True)
def _borrows_return_to_baseline():
    """Each test leaves no borrow and no export behind."""
    gc.collect()
    borrows, exports = m._testing.live_export_borrows(), m._testing.live_exports()
    yield
    gc.collect()
    assert (m._testing.live_export_borrows(), m._testing.live_exports()) == (borrows, exports)


def g12():
    return Growable(np.arange(12, dtype=np.float32).tolist())


def assert_borrowed(g):
    """Every mutator raises PyO3's borrow error and changes nothing."""
    before = (g.tolist(), g.shape, g.data_ptr, g.readonly)
    for name, f in MUTATORS.items():
        with pytest.raises(RuntimeError, match=BORROWED):
            f(g)
    assert (g.tolist(), g.shape, g.data_ptr, g.readonly) == before


def assert_free(g):
    """A reallocating mutation succeeds (and is undone in value)."""
    n = len(g)
    g.resize(n + 1000)
    assert len(g) == n + 1000
    g.resize(n)


def test_plain_pyclass_has_the_derived_protocol():
    g = g12()
    assert g.__dlpack_device__() == (1, 0)
    for name in ("__dlpack__", "__dlpack_device__", "__dlpack_c_exchange_api__", "__array_interface__"):
        assert hasattr(Growable, name), name
    g.push(3.0)  # an unexported object mutates freely
    assert len(g) == 13 and m._testing.live_export_borrows() == 0


def test_export_then_mutate_raises_and_the_data_stays_intact():
    g = g12()
    a = np.from_dlpack(g)
    assert a.ctypes.data == g.data_ptr
    assert m._testing.live_export_borrows() == 1
    assert_borrowed(g)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32))
    # A `Vec` is lent through `&`: `&self` methods may read it while the export lives, so the
    # export is read-only (decision 0016) and numpy refuses writes.
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[3] = 42.0
    assert g.tolist()[3] == 3.0
    del a
    assert m._testing.live_export_borrows() == 0
    for f in MUTATORS.values():
        f(g)
    assert g.shape == [len(g), 1] and g.tolist()[:12] == [7.0] * 12


def _table_export(g):
    """The C exchange table's owning export, called through ctypes; released by its deleter."""
    from test_exchange import FROM_PY, MTV_P, api_of

    api = api_of(type(g))
    out = MTV_P()
    assert FROM_PY(H.D.fn_address(api.managed_tensor_from_py_object_no_sync))(g, ctypes.byref(out)) == 0
    assert out.contents.dl_tensor.data == g.data_ptr

    class Held:
        def __del__(self):
            out.contents.deleter(out)

    return Held()


def _tvm(g):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    v = tvm_ffi.from_dlpack(g)
    assert v.data_ptr() == g.data_ptr
    return v


def _demo_from_dlpack(g):
    n = m._testing.exchange_imports()
    t = m.from_dlpack(g)
    assert m._testing.exchange_imports() == n + 1, "dlbind's consumer took Growable's exchange table"
    assert t.data_ptr == g.data_ptr
    return t


def _only_array_interface(g):
    a = np.asarray(H.OnlyArrayInterface(g))  # the wrapper (and its dict) goes right away
    assert a.ctypes.data == g.data_ptr and type(a.base).__name__ == "ExportBorrow"
    return a


def _numpy_view_of_an_export(g):
    return np.from_dlpack(g)[::2]  # the base array goes, the view keeps it (and the borrow)


def _reexport_of_a_tensor(g):
    return np.from_dlpack(m.from_dlpack(g))  # the Tensor goes, numpy keeps it


EXPORTS = {
    "capsule_versioned": lambda g: g.__dlpack__(max_version=(1, 3)),
    "capsule_versioned_copy_false": lambda g: g.__dlpack__(max_version=(1, 3), copy=False),
    "np_from_dlpack": np.from_dlpack,
    "memoryview": memoryview,
    "np_asarray_buffer_protocol": np.asarray,
    "np_asarray_array_interface": _only_array_interface,
    "array_interface_dict": lambda g: g.__array_interface__,
    "exchange_table_owning_export": _table_export,
    "tvm_ffi_from_dlpack": _tvm,
    "dlbind_demo_from_dlpack": _demo_from_dlpack,
    "numpy_view_of_an_export": _numpy_view_of_an_export,
    "numpy_reexport_of_a_tensor": _reexport_of_a_tensor,
}


@pytest.mark.parametrize("kind", list(EXPORTS))
def test_every_export_kind_holds_the_borrow_until_released(kind):
    g = g12()
    held = EXPORTS[kind](g)
    assert m._testing.live_export_borrows() == 1
    assert_borrowed(g)
    del held
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


def test_a_second_export_keeps_the_borrow_after_the_first_goes():
    g = g12()
    a, mv, cap = np.from_dlpack(g), memoryview(g), g.__dlpack__(max_version=(1, 3))
    assert m._testing.live_export_borrows() == 3
    del a
    assert_borrowed(g)
    mv.release()
    assert_borrowed(g)
    del cap
    assert_free(g)


def test_legacy_capsules_of_a_vec_are_copies_and_hold_no_borrow():
    """A `Vec` field is exported read-only, which the legacy capsule cannot say: a legacy request
    gets a private copy under copy=None (JAX 0.10, which asks only for legacy capsules, reads
    it) and BufferError under copy=False; either way nothing stays borrowed."""
    g = g12()
    with pytest.raises(BufferError, match="read-only"):
        g.__dlpack__(copy=False)
    assert m._testing.live_export_borrows() == 0
    cap = g.__dlpack__()
    assert m._testing.live_export_borrows() == 0, "a copy keeps no borrow"
    assert_free(g)
    assert H.inspect_capsule(cap).data != np.from_dlpack(g).ctypes.data
    del cap
    jnp = pytest.importorskip("jax.numpy")
    j = jnp.from_dlpack(g)
    np.testing.assert_array_equal(np.asarray(j), np.arange(12, dtype=np.float32))
    assert m._testing.live_export_borrows() == 0
    assert_free(g)
    del j
    gc.collect()


def test_a_consumed_capsule_holds_the_borrow_until_the_array_goes():
    g = g12()
    cap = g.__dlpack__(max_version=(1, 3))
    a = np.from_dlpack(H.W(cap))
    del cap  # consumed: the array owns the tensor now
    assert_borrowed(g)
    del a
    assert_free(g)


def test_an_unconsumed_capsule_releases_the_borrow():
    g = g12()
    for kw in ({"max_version": (1, 3)}, {"max_version": (1, 0), "copy": False}):
        cap = g.__dlpack__(**kw)
        assert m._testing.live_export_borrows() == 1
        del cap
        assert m._testing.live_export_borrows() == 0
        g.push(1.0)


@pytest.mark.parametrize("kw", [{"max_version": (1, 3), "copy": True}, {"copy": True}])
def test_a_copy_holds_no_borrow(kw):
    """`copy=True`: the export owns a finished host copy and keeps nothing of the object, so the
    object mutates freely while the copy lives (a decision: the borrow protects memory the
    consumer aliases, and a copy aliases none)."""
    g = g12()
    cap = g.__dlpack__(**kw)
    info = H.inspect_capsule(cap)
    assert info.data != g.data_ptr
    if info.versioned:
        assert info.flags & H.FLAG_IS_COPIED
    assert m._testing.live_export_borrows() == 0
    g.resize(1000)
    g.fill(-1.0)
    np.testing.assert_array_equal(np.from_dlpack(H.W(cap)), np.arange(12, dtype=np.float32))


def test_copying_consumers_hold_no_borrow():
    g = g12()
    a = np.from_dlpack(g, copy=True)
    t = m.from_dlpack(g, copy=True)
    assert m._testing.live_export_borrows() == 0
    g.fill(5.0)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32))
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(12, dtype=np.float32))


def test_a_failed_export_leaves_no_borrow():
    """An export refused before or after its borrow guard was made leaves no borrow behind."""
    g = g12()
    g.set_readonly(True)
    failing = [
        lambda: g.__dlpack__(copy=False),  # read-only data needs a versioned capsule
        lambda: g.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False),  # needs a copy
        lambda: ctypes.c_char.from_buffer(g),  # a writable buffer of read-only data (TypeError)
    ]
    for f in failing:
        with pytest.raises((BufferError, TypeError)):
            f()
        assert m._testing.live_export_borrows() == 0
        g.set_readonly(True)  # a `&mut self` call: works, nothing is borrowed
    g.set_readonly(False)


def test_read_only_exports_and_2d_layout():
    g = g12()
    g.reshape(3, 4)
    g.set_readonly(True)
    a = np.asarray(H.OnlyArrayInterface(g))
    assert a.shape == (3, 4) and not a.flags.writeable
    b = np.from_dlpack(g)
    assert b.shape == (3, 4) and not b.flags.writeable
    mv = memoryview(g)
    assert mv.readonly and mv.shape == (3, 4)
    assert m._testing.live_export_borrows() == 3
    assert_borrowed(g)
    del a, b
    mv.release()
    g.set_readonly(False)
    g.push(1.0)
    assert g.shape == [13]


def test_mutation_in_progress_blocks_exports():
    """While a `&mut self` call is running (here: its argument conversion calls back into Python
    and tries to export), the object is mutably borrowed and the export fails the same way."""
    g = g12()
    seen = []

    class Evil:
        def __float__(self):
            for f in (lambda: g.__dlpack__(), lambda: memoryview(g), lambda: g.__array_interface__):
                try:
                    f()
                except RuntimeError as e:
                    seen.append(str(e))
            return 2.0

    g.fill(Evil())
    assert len(seen) == 3 and all("borrowed" in s for s in seen), seen
    assert g.tolist() == [2.0] * 12
    assert m._testing.live_export_borrows() == 0


def test_cuda_and_sycl_interfaces_are_not_offered():
    g = g12()
    for attr in ("__cuda_array_interface__", "__sycl_usm_array_interface__"):
        assert not hasattr(g, attr)
    assert m._testing.live_export_borrows() == 0


def test_exchange_table_has_no_non_owning_fill():
    """The table's `dltensor_from_py_object_no_sync` is NULL for a non-frozen class (a bare
    DLTensor cannot hold the borrow), while the frozen `Tensor` with the same kind of i64 dims
    has one; the other entries are there."""
    from test_exchange import api_of

    api = api_of(Growable)
    assert not api.dltensor_from_py_object_no_sync  # NULL
    assert api.managed_tensor_from_py_object_no_sync and api.managed_tensor_allocator
    assert api.managed_tensor_to_py_object_no_sync and api.current_work_stream
    assert api_of(m.Tensor).dltensor_from_py_object_no_sync  # not NULL


def test_dlbind_from_dlpack_never_lends_a_non_frozen_object():
    """dlbind's consumer imports a `Growable` through its table's owning export (a managed
    tensor holding the borrow), never as a lent view."""
    g = g12()
    n = m._testing.live_exports()
    t = m.from_dlpack(g)
    assert m._testing.live_exports() == n + 1, "the owning export's managed tensor"
    del t
    assert m._testing.live_exports() == n


def test_a_capsule_in_a_garbage_cycle_releases_the_borrow_when_collected():
    g = g12()

    class Box:
        pass

    b = Box()
    b.cap, b.arr, b.me = g.__dlpack__(max_version=(1, 3)), np.from_dlpack(g), b
    del b
    assert m._testing.live_export_borrows() == 2
    assert_borrowed(g)
    gc.collect()
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


def test_gc_collect_keeps_live_exports_borrowed():
    g = g12()
    a = np.from_dlpack(g)
    mv = memoryview(g)
    gc.collect()
    assert_borrowed(g)
    np.testing.assert_array_equal(a, np.frombuffer(mv, dtype=np.float32))
    del a
    mv.release()
    assert_free(g)


def test_threads_export_and_mutate():
    """Several threads export and release while another mutates: the mutator only ever sees
    the borrow error, every export sees a consistent snapshot, and the final state is exactly
    the mutations that succeeded."""
    g = Growable([0.0] * 16)
    expected = g.tolist()
    errors, stop = [], threading.Event()
    done = {"mut": 0, "refused": 0, "exports": 0}

    def exporter(kind):
        try:
            while not stop.is_set():
                if kind == 0:
                    a = np.from_dlpack(g)
                    snap = g.tolist()
                    assert a.tolist() == snap
                    del a
                elif kind == 1:
                    with memoryview(g) as mv:
                        assert mv.tolist() == g.tolist()
                elif kind == 2:
                    cap = g.__dlpack__(max_version=(1, 3))
                    del cap
                else:
                    t = m.from_dlpack(g)
                    assert np.from_dlpack(t).tolist() == g.tolist()
                    del t
                done["exports"] += 1
                time.sleep(0.0002 * (kind + 1))  # leave the mutator windows without exports
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def mutator():
        try:
            deadline = time.monotonic() + 20
            i = 0
            while (done["mut"] < 300 or done["refused"] < 300) and time.monotonic() < deadline:
                i += 1
                try:
                    if i % 3 == 0:
                        g.push(float(i))
                        expected.append(float(i))
                    elif i % 3 == 1:
                        g.fill(float(i))
                        expected[:] = [float(i)] * len(expected)
                    else:
                        g.resize(len(expected) + 1, float(i))
                        expected.append(float(i))
                    done["mut"] += 1
                except RuntimeError as e:
                    assert BORROWED in str(e), e
                    done["refused"] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=exporter, args=(k,)) for k in range(4)]
        threads.append(threading.Thread(target=mutator))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert done["mut"] > 0 and done["refused"] > 0 and done["exports"] > 0, done
    assert g.tolist() == expected
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


# ------------------------------------------------------------------ where the borrow lives
# A capsule (legacy or versioned) and the exchange table's owning export keep their borrow in
# the managed tensor's own manager block (decision 0011): no guard object is made, and the
# tensor's deleter ends the borrow. Memoryviews and `__array_interface__` arrays need an owner
# *object* and keep a guard (an `ExportBorrow`, GC-tracked, so the collector lists it).

def _guards_alive():
    """The `ExportBorrow` guard objects alive (made after conftest's `gc.freeze()`)."""
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "ExportBorrow")


GUARDLESS = {k: EXPORTS[k] for k in (
    "capsule_versioned", "np_from_dlpack", "exchange_table_owning_export",
    "dlbind_demo_from_dlpack", "tvm_ffi_from_dlpack",
)}


@pytest.mark.parametrize("kind", list(GUARDLESS))
def test_managed_tensor_exports_make_no_guard_object(kind):
    g = g12()
    guards = _guards_alive()
    held = GUARDLESS[kind](g)
    assert m._testing.live_export_borrows() == 1
    assert _guards_alive() == guards
    assert_borrowed(g)
    del held
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


@pytest.mark.parametrize("kind", ["memoryview", "np_asarray_buffer_protocol", "np_asarray_array_interface"])
def test_object_owner_exports_keep_a_guard(kind):
    g = g12()
    guards = _guards_alive()
    held = EXPORTS[kind](g)
    assert m._testing.live_export_borrows() == 1
    assert _guards_alive() == guards + 1
    assert_borrowed(g)
    del held
    assert (m._testing.live_export_borrows(), _guards_alive()) == (0, guards)
    assert_free(g)


def test_many_capsules_hold_one_borrow_each():
    g = g12()
    guards = _guards_alive()
    caps = [g.__dlpack__(**kw) for _ in range(5) for kw in ({"max_version": (1, 0)}, {"max_version": (1, 3)})]
    assert (m._testing.live_export_borrows(), _guards_alive()) == (10, guards)
    while caps:
        assert_borrowed(g)
        caps.pop()
        assert m._testing.live_export_borrows() == len(caps)
    assert_free(g)


def _set_capsule_name():
    f = ctypes.pythonapi.PyCapsule_SetName
    f.argtypes = [ctypes.py_object, ctypes.c_char_p]
    f.restype = ctypes.c_int
    return f


# Versioned only: a `Vec` is exported read-only, which a legacy capsule cannot carry.
@pytest.mark.parametrize("versioned", [True])
def test_a_consumed_capsule_released_from_a_thread_without_the_gil(versioned):
    """A consumer renames the capsule (it owns the tensor now) and calls the deleter later, on
    another thread and without the GIL (ctypes releases it around a CFUNCTYPE call): the borrow
    lasts until then, and the deleter (which takes the GIL itself) ends it."""
    g = g12()
    cap = g.__dlpack__(max_version=(1, 3)) if versioned else g.__dlpack__()
    name = H.VERSIONED if versioned else "dltensor"
    T = H.DLManagedTensorVersioned if versioned else H.DLManagedTensor
    p = ctypes.pythonapi.PyCapsule_GetPointer
    p.argtypes, p.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    addr = p(cap, name.encode())
    assert _set_capsule_name()(cap, b"used_" + name.encode()) == 0
    del cap  # renamed: its destructor leaves the tensor to us
    gc.collect()
    assert m._testing.live_export_borrows() == 1
    assert_borrowed(g)
    mt = T.from_address(addr)
    assert mt.dl_tensor.data == g.data_ptr
    th = threading.Thread(target=lambda: mt.deleter(ctypes.cast(addr, ctypes.POINTER(T))))
    th.start()
    th.join()
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


def test_gc_cycles_never_end_a_block_borrow_early():
    """The imported `Tensor` reports the borrowed object to the collector (as a plain strong
    reference of the tensor's block): collections while it is reachable, even inside a cycle,
    keep the borrow; the unreachable cycle releases it."""
    g = g12()

    class Box:
        pass

    guards = _guards_alive()
    b = Box()
    b.t, b.cap, b.me = m.from_dlpack(g), g.__dlpack__(max_version=(1, 3)), b
    assert (m._testing.live_export_borrows(), _guards_alive()) == (2, guards)
    for _ in range(3):
        gc.collect()
        assert_borrowed(g)
        np.testing.assert_array_equal(np.from_dlpack(b.t), np.arange(12, dtype=np.float32))
    del b
    gc.collect()
    assert m._testing.live_export_borrows() == 0
    assert_free(g)


def test_device_of_a_fixed_device_class_needs_no_borrow():
    """`Growable` has no device field: `__dlpack_device__` answers without borrowing the object,
    so it answers while the object is mutably borrowed too (the answer cannot change)."""
    g = g12()
    seen = []

    class Peek:
        def __float__(self):
            seen.append(g.__dlpack_device__())
            return 1.0

    g.fill(Peek())  # `fill(&mut self, ...)`: `g` is mutably borrowed while `__float__` runs
    assert seen == [(1, 0)]
    assert g.__dlpack_device__() == (1, 0) and m._testing.live_export_borrows() == 0
