"""Property tests: random shapes / strides / dtypes round-trip through DLPack both ways."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
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


def _peer_source(via, a):
    """`a` as the peer `via` holds it, and the values dlbind must then show (a peer may convert:
    JAX without x64 narrows 64-bit types); `None` when the peer cannot hold `a` at all."""
    if via == "numpy":
        return a, a
    if via == "array_interface":
        return H.OnlyArrayInterface(a), a
    if via == "memoryview":
        c = np.ascontiguousarray(a)
        return memoryview(c), c
    try:
        if via == "tvm_ffi":
            import tvm_ffi

            src = tvm_ffi.from_dlpack(a)
            return src, np.from_dlpack(src)
        if via == "jax":
            import jax.numpy as jnp

            src = jnp.asarray(a)
            return src, np.asarray(src)
        if via == "array_api_strict":
            import array_api_strict as xp

            return xp.asarray(a), a
    except (BufferError, TypeError, ValueError, RuntimeError):
        return None
    raise AssertionError(via)


@SETTINGS
@given(
    numpy_views(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["numpy", "array_interface", "memoryview", "tvm_ffi", "jax", "array_api_strict"]),
)
def test_random_views_round_trip_through_peers(m, a, readonly, same_type, via):
    """A random numpy view (any spec dtype, negative/zero strides, read-only or not) reaches dlbind
    through each import path and peer, then leaves it through the same-type view or `Tensor`'s
    exchange table, `__dlpack__`, numpy and tvm-ffi with its values (and, for numpy's own
    memory, its address and read-only flag)."""
    pytest.importorskip("jax")
    pytest.importorskip("tvm_ffi")
    pytest.importorskip("array_api_strict")
    import tvm_ffi

    if readonly:
        a = a.copy()
        a.flags.writeable = False
    held = _peer_source(via, a)
    assume(held is not None)
    src, ref = held
    m._testing.set_same_type_views(same_type)
    try:
        t = m.from_dlpack(src)
        assert tuple(t.shape) == ref.shape and t.tobytes() == ref.tobytes()
        if via in ("numpy", "array_interface"):
            assert t.readonly == (not a.flags.writeable)  # broadcast views are read-only too
            if a.size:
                assert t.data_ptr == a.ctypes.data
        before = (m._testing.same_type_views(), m._testing.exchange_imports())
        again = m.from_dlpack(t)
        # The switch picked the path: the same-type view, or a call of Tensor's table.
        assert (m._testing.same_type_views() - before[0], m._testing.exchange_imports() - before[1]) == (
            (1, 0) if same_type else (0, 1)
        )
        assert tuple(again.shape) == ref.shape and again.tobytes() == ref.tobytes()
        assert again.readonly == t.readonly
        if ref.size:
            assert again.data_ptr == t.data_ptr
        via_capsule = m.from_dlpack(t.__dlpack__(max_version=(1, 3)))
        assert via_capsule.tobytes() == ref.tobytes() and via_capsule.readonly == t.readonly
        out = np.from_dlpack(t)
        np.testing.assert_array_equal(out, ref)
        assert out.flags.writeable == (not t.readonly)
        if not t.readonly:  # tvm-ffi refuses read-only exports (it has no read-only tensors)
            np.testing.assert_array_equal(np.from_dlpack(tvm_ffi.from_dlpack(t)), ref)
        copied = m.from_dlpack(t, copy=True)
        assert copied.tobytes() == ref.tobytes() and not copied.readonly
        if ref.size:
            assert copied.data_ptr != t.data_ptr
    finally:
        m._testing.set_same_type_views(True)
