"""Layouts both ways: 0-d, zero-size, size-1 dims, negative / zero / permuted strides,
offsets, high ndim, NULL strides and byte_offset on import (cases 26-39)."""
import sys

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import dlpack_helpers as H
from conftest import tensor_from_np


def _elem_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


def check_import(m, a, *, readonly=None):
    """m.from_dlpack(a) is a zero-copy view equal to `a` with the same element strides."""
    t = m.from_dlpack(a)
    assert tuple(t.shape) == a.shape
    assert t.ndim == a.ndim
    if a.size > 1:
        for n, s_t, s_a in zip(a.shape, t.strides, _elem_strides(a)):
            if n > 1:
                assert s_t == s_a, f"strides {tuple(t.strides)} != {_elem_strides(a)}"
    if a.size:
        assert t.data_ptr == a.ctypes.data
    assert t.tobytes() == a.tobytes()
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    if readonly is not None:
        assert t.readonly is readonly
    return t


# ---------------------------------------------------------------- 0-d
def test_0d_export(Tensor):
    t = Tensor.zeros((), "float64")
    assert tuple(t.shape) == () and tuple(t.strides) == () and t.ndim == 0
    for mv in (None, (1, 3)):
        info = H.inspect_capsule(t.__dlpack__(max_version=mv))
        assert info.ndim == 0
    a = np.from_dlpack(t)
    assert a.shape == () and a.item() == 0.0


def test_0d_import(m):
    a = np.array(5.25)
    t = m.from_dlpack(a)
    assert tuple(t.shape) == () and t.ndim == 0
    assert t.tobytes() == a.tobytes()
    assert np.from_dlpack(t).item() == 5.25


# ---------------------------------------------------------------- zero-size
@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0), (2, 0, 3)])
def test_zero_size_export(Tensor, shape):
    t = Tensor.zeros(shape, "float32")
    assert t.nbytes == 0 and t.tobytes() == b""
    for mv in (None, (1, 3)):
        info = H.inspect_capsule(t.__dlpack__(max_version=mv))
        assert info.shape == shape and info.strides is not None
    a = np.from_dlpack(t)
    assert a.shape == shape and a.size == 0


@pytest.mark.parametrize("shape", [(0,), (0, 4), (3, 0)])
def test_zero_size_import(m, shape):
    a = np.zeros(shape, np.int32)
    t = m.from_dlpack(a)
    assert tuple(t.shape) == shape and t.nbytes == 0 and t.tobytes() == b""
    assert np.from_dlpack(t).shape == shape


def test_zero_size_null_data_import(m):
    """A capsule with data=NULL for a size-0 tensor (pyarrow does this) is accepted."""
    a = np.zeros((0, 3), np.float32)
    cap = a.__dlpack__(max_version=(1, 0))
    H.dl_tensor_of(cap).data = None
    t = m.from_dlpack(H.W(cap))
    assert tuple(t.shape) == (0, 3) and t.tobytes() == b""


# ---------------------------------------------------------------- size-1 dims
def test_size1_dims_any_stride_import(m):
    base = np.arange(200, dtype=np.float32)
    x = as_strided(base, shape=(10, 5, 1), strides=(8, 80, 4))
    t = m.from_dlpack(x)
    assert tuple(t.shape) == (10, 5, 1)
    assert tuple(t.strides)[:2] == (2, 20)
    assert t.tobytes() == x.tobytes()


def test_size1_dims_odd_stride_roundtrip(m):
    base = np.arange(64, dtype=np.int64)
    x = as_strided(base, shape=(1, 4, 1), strides=(8 * 37, 8 * 3, 8 * 11))
    t = m.from_dlpack(x)
    np.testing.assert_array_equal(np.from_dlpack(t), x)


# ---------------------------------------------------------------- negative strides
@pytest.mark.parametrize("view", [lambda a: a[::-1], lambda a: a[::-2], lambda a: a[:, ::-1],
                                  lambda a: a[::-1, ::-1], lambda a: a[::-1].T],
                         ids=["rev0", "rev0_step2", "rev1", "rev_both", "rev_T"])
def test_negative_strides_import(m, view):
    a = np.arange(30, dtype=np.float64).reshape(6, 5)
    check_import(m, view(a))


def test_negative_strides_1d_import(m):
    x = np.arange(6, dtype=np.int32)[::-1]
    t = check_import(m, x)
    assert tuple(t.strides) == (-1,)


@pytest.mark.parametrize("mv", [None, (1, 3)])
def test_negative_strides_export(Tensor, mv):
    t = Tensor.arange(6, "int32").reversed(0)
    info = H.inspect_capsule(t.__dlpack__(max_version=mv))
    assert info.strides == (-1,), f"strides {info.strides} (cupy#10172 wrote 2**63-1)"
    assert info.data + info.byte_offset == t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(6)[::-1])


def test_negative_strides_2d_export(Tensor):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tensor_from_np(a).reversed(1)
    assert tuple(t.strides) == (4, -1)
    np.testing.assert_array_equal(np.from_dlpack(t), a[:, ::-1])
    t0 = tensor_from_np(a).reversed(0)
    np.testing.assert_array_equal(np.from_dlpack(t0), a[::-1])


# ---------------------------------------------------------------- broadcast (zero strides)
def test_broadcast_import(m):
    a = np.arange(3, dtype=np.float32)
    x = np.broadcast_to(a, (4, 3))
    t = m.from_dlpack(x)
    assert tuple(t.strides) == (0, 1)
    assert t.readonly is True  # numpy flags broadcast views READ_ONLY
    assert t.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(np.from_dlpack(t), x)


def test_broadcast_scalar_import(m):
    x = np.broadcast_to(np.float64(2.5), (3, 2))
    t = m.from_dlpack(x)
    assert tuple(t.strides) == (0, 0)
    assert t.tobytes() == x.tobytes()


# ---------------------------------------------------------------- permuted / sliced
def test_transposed_import(m):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = check_import(m, a.transpose(2, 0, 1))
    assert tuple(t.strides) == (1, 12, 4)


def test_fortran_import(m):
    a = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    t = check_import(m, a)
    assert tuple(t.strides) == (1, 3)


def test_transposed_export(Tensor):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = tensor_from_np(a).transpose()
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info.shape == (4, 3) and info.strides == (1, 4)
    b = np.from_dlpack(t)
    np.testing.assert_array_equal(b, a.T)
    assert b.strides == a.T.strides


@pytest.mark.parametrize("view", [lambda a: a[0], lambda a: a[:, 0], lambda a: a[1, :],
                                  lambda a: a.T, lambda a: a[::3][:1], lambda a: a[1:, 2:],
                                  lambda a: a[1::2, 3::2]],
                         ids=["row0", "col0", "row1", "T", "step3", "offset", "offset_step"])
def test_noncontiguous_views_import(m, view):
    a = np.arange(7 * 6, dtype=np.int64).reshape(7, 6)
    check_import(m, view(a))


@pytest.mark.parametrize("mv", [None, (1, 3)])
def test_sliced_export_byte_offset_folded(Tensor, mv):
    a = np.arange(40, dtype=np.float32).reshape(5, 8)
    t = tensor_from_np(a)
    s = t.slice(1, 3, 8, 2).slice(0, 1, 5, 1)
    assert s.data_ptr == t.data_ptr + (1 * 8 + 3) * 4
    info = H.inspect_capsule(s.__dlpack__(max_version=mv))
    assert info.byte_offset == 0
    assert info.data == s.data_ptr
    assert info.shape == (4, 3) and info.strides == (8, 2)
    np.testing.assert_array_equal(np.from_dlpack(s), a[1:5, 3:8:2])


def test_slice_negative_step_export(Tensor):
    a = np.arange(10, dtype=np.int16)
    s = tensor_from_np(a).slice(0, 8, 1, -3)
    np.testing.assert_array_equal(np.from_dlpack(s), a[8:1:-3])


# ---------------------------------------------------------------- high ndim
@pytest.mark.parametrize("k", [0, 1, 5, 16, 31, 32])
def test_high_ndim_roundtrip(m, Tensor, k):
    shape = (1,) * k
    t = Tensor.zeros(shape, "float32")
    a = np.from_dlpack(t)
    assert a.shape == shape
    back = m.from_dlpack(a)
    assert tuple(back.shape) == shape and back.ndim == k
    b = m.from_dlpack(np.ones(shape, np.int8))
    assert tuple(b.shape) == shape


def test_high_ndim_nontrivial(m):
    a = np.arange(2 ** 10, dtype=np.uint8).reshape((2,) * 10)[..., ::-1].transpose(range(9, -1, -1))
    check_import(m, a)


# ---------------------------------------------------------------- raw struct imports
@pytest.mark.parametrize("mv", [None, (1, 0)])
def test_byte_offset_import(m, mv):
    """data=base, byte_offset=16: element 0 is at base+16 (case 36)."""
    a = np.arange(12, dtype=np.float32)
    base = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=mv)
    dl = H.dl_tensor_of(cap)
    dl.byte_offset = 16
    dl.shape[0] = 8
    t = m.from_dlpack(H.W(cap))
    assert t.data_ptr == a.ctypes.data + 16
    assert tuple(t.shape) == (8,)
    np.testing.assert_array_equal(np.frombuffer(t.tobytes(), np.float32), a[4:])
    del t, cap, dl
    assert sys.getrefcount(a) == base


def test_null_strides_import(m):
    """strides=NULL from a <=1.1 / legacy producer means C-contiguous (case 38)."""
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    cap = a.__dlpack__()
    H.dl_tensor_of(cap).strides = None
    t = m.from_dlpack(H.W(cap))
    assert tuple(t.strides) == (4, 1)
    assert t.tobytes() == a.tobytes()


def test_unaligned_import(m):
    buf = np.zeros(17, np.uint8)
    buf[1:] = np.arange(16)
    x = buf[1:]
    assert x.ctypes.data % 2 == 1 or x.ctypes.data % 64 != 0
    t = m.from_dlpack(x)
    assert t.data_ptr == x.ctypes.data
    assert t.tobytes() == bytes(range(16))
    y = buf[1:].view(np.uint8)[3:11].view(np.float32)
    t2 = m.from_dlpack(y)
    assert t2.data_ptr == y.ctypes.data and t2.tobytes() == y.tobytes()


def test_unaligned_export_to_numpy(m):
    buf = np.arange(33, dtype=np.uint8)
    t = m.from_dlpack(buf[1:])
    b = np.from_dlpack(t)
    assert b.ctypes.data == buf.ctypes.data + 1
    np.testing.assert_array_equal(b, buf[1:])


def test_bad_stride_multiple_propagates(m):
    """numpy refuses strides that are not a multiple of the itemsize; that BufferError propagates."""
    a = np.zeros(4, dtype=[("a", np.int8), ("b", np.int32)])["b"]
    with pytest.raises(BufferError):
        m.from_dlpack(a)
