"""Property tests: random shapes / strides / dtypes round-trip through DLPack both ways."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlpack_helpers as H
from conftest import tensor_from_np

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NP_NAMES = [d.name for d in H.NUMPY_DTYPES]


@st.composite
def numpy_views(draw):
    """A numpy view with random shape, dtype, steps (incl. negative), permutation, broadcast."""
    name = draw(st.sampled_from(NP_NAMES))
    dt = H.SPEC.dtype(name)
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    base = H.sample_values(dt, (int(np.prod(shape, dtype=np.int64)) * 3 + 1,))
    a = base[: int(np.prod(shape, dtype=np.int64))].reshape(shape) if shape else base[:1].reshape(())
    for ax in range(ndim):
        if a.shape[ax] > 1 and draw(st.booleans()):
            step = draw(st.sampled_from([-2, -1, 2, 3]))
            a = a[(slice(None),) * ax + (slice(None, None, step),)]
    if ndim > 1:
        a = a.transpose(draw(st.permutations(range(ndim))))
    if ndim and a.shape[-1] >= 1 and draw(st.integers(0, 4)) == 0:
        a = np.broadcast_to(a[..., :1], a.shape[:-1] + (draw(st.integers(0, 3)),))
    if ndim and a.size and draw(st.booleans()):
        a = a[(slice(None),) * (ndim - 1) + (slice(1, None),)] if a.shape[-1] > 1 else a
    return a


@SETTINGS
@given(numpy_views())
def test_numpy_view_roundtrip(m, a):
    t = m.from_dlpack(a)
    assert tuple(t.shape) == a.shape
    assert t.dtype == np.dtype(a.dtype).name or H.SPEC.dtype(t.dtype).np_dtype == a.dtype
    assert t.tobytes() == a.tobytes()
    if a.size:
        assert t.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)
    np.testing.assert_array_equal(b, a)
    if a.size:
        assert np.shares_memory(a, b)
    c = m.from_dlpack(a, copy=True)
    assert c.tobytes() == a.tobytes()
    assert c.readonly is False


@st.composite
def tensor_ops(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    ops = []
    nd = len(shape)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["reversed", "transpose", "slice"]))
        if kind == "reversed":
            ops.append(("reversed", draw(st.integers(0, nd - 1))))
        elif kind == "transpose":
            ops.append(("transpose",))
        else:
            ax = draw(st.integers(0, nd - 1))
            step = draw(st.sampled_from([1, 2, -1, -2, 3]))
            start = draw(st.one_of(st.none(), st.integers(-6, 6)))
            stop = draw(st.one_of(st.none(), st.integers(-6, 6)))
            ops.append(("slice", ax, start, stop, step))
    return shape, draw(st.sampled_from(["int8", "int32", "float64", "complex64", "uint16"])), ops


@SETTINGS
@given(tensor_ops())
def test_tensor_views_match_numpy(Tensor, case):
    shape, name, ops = case
    a = np.arange(int(np.prod(shape))).astype(name).reshape(shape)
    t = tensor_from_np(a)
    for op in ops:
        if op[0] == "reversed":
            t = t.reversed(op[1])
            a = np.flip(a, op[1])
        elif op[0] == "transpose":
            t = t.transpose()
            a = a.T
        else:
            _, ax, start, stop, step = op
            t = t.slice(ax, start, stop, step)
            a = a[(slice(None),) * ax + (slice(start, stop, step),)]
    assert tuple(t.shape) == a.shape
    for n, s_t, s_a in zip(a.shape, t.strides, a.strides):
        if n > 1:
            assert s_t == s_a // a.itemsize, (tuple(t.strides), a.strides)
    assert t.tobytes() == a.tobytes()
    for mv in (None, (1, 3)):
        info = H.inspect_capsule(t.__dlpack__(max_version=mv))
        assert info.shape == a.shape and info.byte_offset == 0
    np.testing.assert_array_equal(np.from_dlpack(t), a)
