"""ctypes inspection of the capsules we export (names, version, flags, strides, offsets)."""
import sys

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import readonly_view, tensor_from_np


@pytest.mark.parametrize("mv", [None, (1, 3)])
def test_capsule_fields(Tensor, mv):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = tensor_from_np(a)
    info = H.inspect_capsule(t.__dlpack__(max_version=mv))
    assert info.name == (H.VERSIONED if mv else H.LEGACY)
    assert info.ndim == 3
    assert info.shape == (2, 3, 4)
    assert info.strides == (12, 4, 1), "strides must be filled (DLPack >= 1.2) and count elements"
    assert info.byte_offset == 0
    assert info.data == t.data_ptr
    assert info.device == (H.KDLCPU, 0)
    assert info.has_deleter
    if mv:
        assert info.version == H.SPEC.version
        assert info.flags == 0


def test_capsule_flags_subset(Tensor):
    allowed = H.FLAG_READ_ONLY | H.FLAG_IS_COPIED | H.FLAG_SUBBYTE_PADDED
    for t in (Tensor.zeros((2,)), readonly_view(Tensor.zeros((2,)))):
        for copy in (None, True):
            info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), copy=copy))
            assert info.flags & ~allowed == 0
            assert bool(info.flags & H.FLAG_IS_COPIED) is bool(copy)
            assert bool(info.flags & H.FLAG_READ_ONLY) is (t.readonly and not copy)


def test_capsule_is_fresh_each_call(Tensor):
    t = Tensor.zeros((2,))
    c1, c2 = t.__dlpack__(), t.__dlpack__()
    assert c1 is not c2
    assert H.inspect_capsule(c1).struct_addr != H.inspect_capsule(c2).struct_addr


def test_shape_strides_storage_not_shared_with_tensor(Tensor):
    """Mutating the exported struct must not corrupt the tensor (the manager owns its own arrays)."""
    t = Tensor.zeros((2, 3))
    cap = t.__dlpack__(max_version=(1, 3))
    dl = H.dl_tensor_of(cap)
    dl.shape[0] = 7
    assert tuple(t.shape) == (2, 3)
    del dl, cap


def test_capsule_refcount_and_live_exports(m, Tensor):
    t = Tensor.zeros((2,))
    base, live = sys.getrefcount(t), m._testing.live_exports()
    cap = t.__dlpack__(max_version=(1, 3))
    assert m._testing.live_exports() == live + 1
    assert sys.getrefcount(t) == base + 1, "the manager holds exactly one reference to the owner"
    del cap
    assert m._testing.live_exports() == live
    assert sys.getrefcount(t) == base


def test_renamed_capsule_not_freed_by_destructor(m, Tensor):
    """After a consumer renames the capsule the destructor must not call the deleter."""
    t = Tensor.arange(3)
    live = m._testing.live_exports()
    cap = t.__dlpack__(max_version=(1, 3))
    a = np.from_dlpack(H.W(cap))
    assert H.capsule_name(cap) == H.VERSIONED_USED
    del cap
    assert m._testing.live_exports() == live + 1  # still owned by numpy
    np.testing.assert_array_equal(a, [0, 1, 2])
    del a
    assert m._testing.live_exports() == live


def test_numpy_sees_used_capsule_legacy(Tensor):
    t = Tensor.arange(3)
    cap = t.__dlpack__()
    a = np.from_dlpack(H.W(cap))
    assert H.capsule_name(cap) == H.LEGACY_USED
    np.testing.assert_array_equal(a, [0, 1, 2])
