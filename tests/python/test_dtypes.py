"""Every dtype of the spec table, both directions (cases 14-19)."""
import numpy as np
import pytest

import dlpack_helpers as H
from conftest import tensor_from_np

SHAPE = (2, 3)


def _legacy(t):
    return H.W(t.__dlpack__())


@pytest.mark.parametrize("dt", H.NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize("path", ["versioned", "legacy"])
def test_numpy_from_tensor(dt, path):
    a = H.sample_values(dt, SHAPE)
    t = tensor_from_np(a, dt.name)
    src = t if path == "versioned" else _legacy(t)
    b = np.from_dlpack(src)
    assert b.dtype == dt.np_dtype
    assert b.shape == SHAPE
    np.testing.assert_array_equal(b, a)
    assert b.ctypes.data == t.data_ptr, "numpy import is not zero-copy"
    if path == "legacy":
        assert not b.flags.writeable  # numpy imports legacy read-only
    del b, src


@pytest.mark.parametrize("dt", H.NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize("path", ["versioned", "legacy"])
def test_tensor_from_numpy(m, dt, path):
    a = H.np_aligned(SHAPE, dt.np_dtype, fill=H.sample_values(dt, SHAPE))
    src = a if path == "versioned" else H.W(a.__dlpack__())
    t = m.from_dlpack(src)
    assert isinstance(t, m.Tensor)
    assert t.dtype == dt.name
    assert tuple(t.shape) == SHAPE and tuple(t.strides) == (3, 1)
    assert t.data_ptr == a.ctypes.data, "import is not zero-copy"
    assert t.tobytes() == a.tobytes()
    # legacy capsules cannot say "writable": the issue imports them read-only
    assert t.readonly is (path == "legacy")


@pytest.mark.parametrize("dt", H.DTYPES, ids=str)
@pytest.mark.parametrize("max_version", [None, (1, 3)])
def test_capsule_dtype_metadata(Tensor, dt, max_version):
    t = Tensor.zeros((4,), dt.name)
    info = H.inspect_capsule(t.__dlpack__(max_version=max_version))
    assert (info.code, info.bits, info.lanes) == (dt.code, dt.bits, dt.lanes)


def test_bool_is_kdlbool_not_uint8(Tensor):
    info = H.inspect_capsule(Tensor.zeros((3,), "bool").__dlpack__())
    d = H.SPEC.dtype("bool")
    assert (info.code, info.bits, info.lanes) == (H.SPEC.enums["DLDataTypeCode"]["kDLBool"], 8, 1) == (d.code, d.bits, 1)


@pytest.mark.parametrize("dt", [d for d in H.ML_DTYPES if not d.subbyte], ids=str)
def test_ml_dtypes_from_bytes_roundtrip_metadata(Tensor, dt):
    """bfloat16 / float8: values survive Tensor.from_bytes and the capsule metadata matches."""
    vals = H.sample_values(dt, (5,))
    t = Tensor.from_bytes(vals.tobytes(), (5,), dt.name)
    assert t.dtype == dt.name and t.tobytes() == vals.tobytes()
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert (info.code, info.bits, info.lanes) == (dt.code, dt.bits, 1)
    assert info.data == t.data_ptr


@pytest.mark.parametrize("dt", [d for d in H.ML_DTYPES if d.subbyte], ids=str)
def test_subbyte_metadata(Tensor, dt):
    t = Tensor.zeros((8,), dt.name)
    for mv in (None, (1, 3)):
        info = H.inspect_capsule(t.__dlpack__(max_version=mv))
        assert (info.code, info.bits, info.lanes) == (dt.code, dt.bits, 1)
        assert info.shape == (8,)


@pytest.mark.parametrize("dt", [d for d in H.ML_DTYPES if not d.subbyte], ids=str)
def test_numpy_refuses_ml_dtypes_cleanly(Tensor, dt):
    """numpy has no DLPack code for bf16/float8: a clean exception, not a crash (case 17)."""
    t = Tensor.zeros((3,), dt.name)
    with pytest.raises((BufferError, RuntimeError, TypeError)):
        np.from_dlpack(t)


def test_numpy_ml_dtype_export_refused_propagates(m):
    """numpy refuses to export its ml_dtypes arrays. dlbind reads whole-byte ones from numpy's
    header (test_interop_edges.py); a sub-byte one, and any one through numpy's own capsule,
    gets numpy's BufferError."""
    import ml_dtypes
    with pytest.raises(BufferError):
        m.from_dlpack(np.zeros(3, ml_dtypes.float4_e2m1fn))
    with pytest.raises(BufferError):
        m.from_dlpack(H.LegacyOnly(np.zeros(3, ml_dtypes.bfloat16)))


@pytest.mark.parametrize("bad", ["datetime64[s]", "O", "V8", ">i4", "longdouble"])
def test_numpy_unsupported_dtype_propagates(m, bad):
    a = np.zeros(3, dtype=bad)
    with pytest.raises(BufferError):
        m.from_dlpack(a)


@pytest.mark.parametrize("patch", [{"code": 3}, {"bits": 12}, {"lanes": 2}, {"code": 17, "bits": 8},
                                   {"code": 200}])
def test_import_bad_dtype_not_consumed(m, patch):
    """A capsule with a dtype we cannot represent -> the spec's UnsupportedDtype exception,
    and the capsule keeps its name (its destructor frees it exactly once)."""
    import sys
    a = np.arange(4, dtype=np.float32)
    base = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 0))
    t = H.dl_tensor_of(cap)
    for k, v in patch.items():
        setattr(t.dtype, k, v)
    with pytest.raises((H.SPEC.exc("UnsupportedDtype"), H.SPEC.exc("UnsupportedLayout"))):
        m.from_dlpack(H.W(cap))
    assert H.capsule_name(cap) == H.VERSIONED, "capsule consumed although import failed"
    del cap, t
    assert sys.getrefcount(a) == base


@pytest.mark.parametrize("dt", [d for d in H.ML_DTYPES if d.subbyte], ids=str)
def test_subbyte_packed_roundtrip(m, Tensor, dt):
    """Sub-byte types are packed by default: 8 elements of 4 bits = 4 bytes (6 bits: 6 bytes)."""
    n = 8
    nbytes = dt.nbytes(n)
    data = bytes((17 * i + 5) & 0xFF for i in range(nbytes))
    t = Tensor.from_bytes(data, (n,), dt.name)
    assert t.dtype == dt.name and tuple(t.shape) == (n,)
    assert t.nbytes == nbytes and t.tobytes() == data
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert not info.flags & H.FLAG_SUBBYTE_PADDED
    u = m.from_dlpack(t)
    assert u.dtype == dt.name and u.data_ptr == t.data_ptr and u.tobytes() == data
    c = m.from_dlpack(t, copy=True)
    assert c.data_ptr != t.data_ptr and c.tobytes() == data
