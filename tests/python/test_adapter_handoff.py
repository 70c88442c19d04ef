"""`dlbind::adapters::Handoff` (issue 43): an adapter's export handed to Python once, keeping its
DLPack flags. A derived type holding the export lends its memory to every consumer and so never
says IS_COPIED; a Handoff moves the tensor itself into the first capsule, IS_COPIED when the
adapter copied and READ_ONLY when the memory is shared, and refuses every later export. Every
tensor it makes is released exactly once (the adapters' live-tensor counter)."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import demo

A = demo.adapters
pa = pytest.importorskip("pyarrow", reason="the arrow handoff rows need pyarrow (pinned in the test command)")


@pytest.fixture(autouse=True)
def _tensors_released():
    gc.collect()
    before = A.live_rust_owned_tensors()
    yield
    gc.collect()
    assert A.live_rust_owned_tensors() == before


def flags_of(h, **kw):
    cap = h.__dlpack__(max_version=(1, 0), **kw)
    assert H.capsule_name(cap) == H.VERSIONED
    return cap, H.versioned_struct_of(cap).flags


def test_a_copy_says_is_copied_and_a_move_does_not():
    cap, flags = flags_of(A.ndarray_cow_handoff(True))     # a borrowed CowArray: copied
    assert flags & H.FLAG_IS_COPIED
    del cap
    cap, flags = flags_of(A.ndarray_cow_handoff(False))    # an owned array moves: no copy
    assert not flags & H.FLAG_IS_COPIED
    del cap


def test_numpy_takes_the_tensor_once_and_the_values_are_the_arrays():
    h = A.ndarray_cow_handoff(True)
    assert h.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(h)
    want = (10 * np.arange(3)[:, None] + np.arange(4)[None, :]).astype(np.int32)[:, 1:3]
    np.testing.assert_array_equal(a, want)
    with pytest.raises(ValueError, match="handed over already"):     # the spec's "consumed"
        np.from_dlpack(h)
    del a


def test_dlbind_copy_true_takes_an_is_copied_tensor_as_it_is():
    # IS_COPIED tells a consumer the data is its own: dlbind's `copy=True` import keeps it
    # instead of copying again (the same memory afterwards), and may write it.
    h = A.ndarray_cow_handoff(True)
    cap = h.__dlpack__(max_version=(1, 0))
    ptr = H.versioned_struct_of(cap).dl_tensor.data
    t = demo.from_dlpack(H.W(cap), copy=True)
    assert t.data_ptr == ptr
    del t, cap


def test_arrow_views_are_read_only_and_copies_are_copied():
    arr = pa.array(np.arange(6, dtype=np.float32))
    cap, flags = flags_of(A.arrow_handoff(arr))
    assert flags & H.FLAG_READ_ONLY and not flags & H.FLAG_IS_COPIED
    del cap
    cap, flags = flags_of(A.arrow_handoff(arr, copy=True))
    assert flags & H.FLAG_IS_COPIED and not flags & H.FLAG_READ_ONLY
    del cap
    b = np.from_dlpack(A.arrow_handoff(pa.array([True, False, True]), copy=True))
    np.testing.assert_array_equal(b, [True, False, True])


def test_requests_a_handoff_cannot_serve_are_refused_and_leave_it_unused():
    h = A.ndarray_cow_handoff(False)
    with pytest.raises(BufferError, match="wanted the CPU"):
        h.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(ValueError, match="wanted None"):
        h.__dlpack__(max_version=(1, 0), stream=1)
    a = np.from_dlpack(h)                                # still there after the refusals
    assert a.shape == (3, 4)


def test_a_legacy_request_takes_writable_memory_as_it_is():
    """A legacy capsule has no flags: writable memory leaves in one as it is (IS_COPIED is
    dropped, as numpy's legacy copies carry none), once."""
    h = A.ndarray_cow_handoff(False)
    cap = h.__dlpack__()
    assert H.capsule_name(cap) == "dltensor"
    with pytest.raises(ValueError, match="handed over already"):
        h.__dlpack__(max_version=(1, 0))
    a = np.from_dlpack(H.W(cap))
    np.testing.assert_array_equal(a, 10 * np.arange(3)[:, None] + np.arange(4)[None, :])
    del a, cap


def test_a_legacy_request_of_read_only_memory_gets_a_copy():
    """Read-only memory (a view of pyarrow's) cannot leave in a legacy capsule: copy=None gets a
    private, writable copy (decision 0024), copy=False the spec's ReadOnlyLegacy with the
    handoff left unused, and JAX 0.10 (legacy only) reads the values."""
    arr = pa.array(np.arange(4, dtype=np.float32))
    h = A.arrow_handoff(arr)
    with pytest.raises(H.SPEC.exc("ReadOnlyLegacy"), match="copy=False"):
        h.__dlpack__(copy=False)
    cap = h.__dlpack__()                                 # still there after the refusal
    info = H.inspect_capsule(cap)
    assert not info.versioned and info.data != arr.buffers()[1].address
    np.testing.assert_array_equal(np.from_dlpack(H.W(cap)), np.arange(4, dtype=np.float32))
    del cap
    jnp = pytest.importorskip("jax.numpy")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(A.arrow_handoff(arr))),
                                  np.arange(4, dtype=np.float32))
    assert arr.to_pylist() == [0, 1, 2, 3]


def test_copy_true_on_a_moved_tensor_copies_and_says_so():
    cap, flags = flags_of(A.ndarray_cow_handoff(False), copy=True)
    assert flags & H.FLAG_IS_COPIED
    del cap


def test_an_unconsumed_capsule_frees_the_tensor():
    h = A.ndarray_cow_handoff(True)
    cap = h.__dlpack__(max_version=(1, 0))
    del cap, h                                            # the fixture checks the release
