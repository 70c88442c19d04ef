"""The arrow adapter (dlbind feature `arrow`) through the demo's `dlbind_demo.adapters.arrow_*`:
pyarrow arrays reach arrow-rs through arrow's C data interface and leave as DLPack tensors,
DLPack producers (numpy, JAX, pyarrow's own `__dlpack__`) become arrow-rs arrays and then
pyarrow arrays, all without a copy unless `copy=True`; nulls, bit-packed booleans and layouts
arrow cannot view are refused with BufferError. Memory is checked by pointer identity, pyarrow's
allocation counter, reference counts and `live_exports()` (the autouse fixture)."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

import dlbind_demo as dd  # noqa: E402
import dlpack_helpers as H  # noqa: E402

ad = dd.adapters
pytestmark = pytest.mark.skipif(not hasattr(ad, "arrow_from_pyarrow"),
                                reason="dlbind_demo built without the `arrow` feature")


def values_address(arr):
    """Address of a pyarrow primitive array's value buffer (element 0 for offset 0)."""
    return arr.buffers()[1].address


# ------------------------------------------------------------------------- arrow -> DLPack

def test_primitive_array_is_a_zero_copy_read_only_view():
    a = pa.array(np.arange(6, dtype=np.float32))
    t = ad.arrow_from_pyarrow(a)
    assert (t.shape, t.strides, t.dtype) == ((6,), (1,), "float32")
    assert t.data_ptr == values_address(a)
    assert t.readonly
    n = np.from_dlpack(t)
    assert not n.flags.writeable
    np.testing.assert_array_equal(n, np.arange(6, dtype=np.float32))
    # A slice views its offset.
    s = ad.arrow_from_pyarrow(a.slice(2, 3))
    assert s.data_ptr == values_address(a) + 2 * 4
    np.testing.assert_array_equal(np.from_dlpack(s), [2, 3, 4])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64"])
def test_every_primitive_type(dtype):
    src = np.arange(5).astype(dtype)
    t = ad.arrow_from_pyarrow(pa.array(src))
    assert t.dtype == dtype
    np.testing.assert_array_equal(np.from_dlpack(t), src)


def test_pyarrow_memory_lives_until_the_tensor_drops():
    gc.collect()
    base = pa.total_allocated_bytes()
    a = pa.array(range(1000), type=pa.float64())  # allocated by pyarrow's pool
    assert pa.total_allocated_bytes() >= base + 8000
    t = ad.arrow_from_pyarrow(a)
    ptr = t.data_ptr
    del a
    gc.collect()
    assert pa.total_allocated_bytes() >= base + 8000, "the tensor keeps pyarrow's buffer"
    n = np.from_dlpack(t)
    assert n.ctypes.data == ptr and n[999] == 999.0
    del t
    assert pa.total_allocated_bytes() >= base + 8000, "numpy's view keeps it through the tensor"
    del n
    gc.collect()
    assert pa.total_allocated_bytes() == base, "released once the last view dropped"


def test_fixed_size_list_is_2d_and_nested_lists_n_d():
    flat = np.arange(12, dtype=np.int32)
    lst = pa.FixedSizeListArray.from_arrays(pa.array(flat), 3)
    t = ad.arrow_from_pyarrow(lst)
    assert (t.shape, t.strides) == ((4, 3), (3, 1))
    assert t.data_ptr == values_address(lst.values)
    np.testing.assert_array_equal(np.from_dlpack(t), flat.reshape(4, 3))
    nested = pa.FixedSizeListArray.from_arrays(lst, 2)
    t3 = ad.arrow_from_pyarrow(nested)
    assert t3.shape == (2, 2, 3)
    np.testing.assert_array_equal(np.from_dlpack(t3), flat.reshape(2, 2, 3))
    sliced = ad.arrow_from_pyarrow(lst.slice(1, 2))
    np.testing.assert_array_equal(np.from_dlpack(sliced), flat.reshape(4, 3)[1:3])


def test_fixed_shape_tensor_permutation_becomes_strides():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1)  # (2, 4, 3)
    arr = pa.FixedShapeTensorArray.from_numpy_ndarray(src)
    assert arr.type.permutation == [1, 0] and arr.type.shape == [3, 4]
    t = ad.arrow_from_pyarrow(arr)
    assert (t.shape, t.strides) == ((2, 4, 3), (12, 1, 4))
    n = np.from_dlpack(t)
    np.testing.assert_array_equal(n, src)
    np.testing.assert_array_equal(n, arr.to_numpy_ndarray())
    assert t.data_ptr == values_address(arr.storage.values)


def test_fixed_shape_tensor_dim_names_follow_the_permutation():
    ty = pa.fixed_shape_tensor(pa.float32(), [2, 3], dim_names=["H", "W"], permutation=[1, 0])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 6)
    arr = pa.ExtensionArray.from_storage(ty, storage)
    assert ad.arrow_dim_names(arr) == ["W", "H"]
    t = ad.arrow_from_pyarrow(arr)
    np.testing.assert_array_equal(np.from_dlpack(t), arr.to_numpy_ndarray())
    plain = pa.FixedShapeTensorArray.from_numpy_ndarray(np.zeros((1, 2, 2), np.float32))
    assert ad.arrow_dim_names(plain) is None


def test_nulls_are_refused_unless_copy():
    a = pa.array([1, None, 3], type=pa.int64())
    with pytest.raises(BufferError, match="nulls.*copy=True"):
        ad.arrow_from_pyarrow(a)
    t = ad.arrow_from_pyarrow(a, copy=True)
    assert not t.readonly and t.data_ptr != values_address(a)
    np.testing.assert_array_equal(np.from_dlpack(t), [1, 0, 3])
    # A null row of a list, and a null inside one.
    lst = pa.array([[1.0, 2.0], None, [3.0, None]], type=pa.list_(pa.float32(), 2))
    with pytest.raises(BufferError, match="nulls"):
        ad.arrow_from_pyarrow(lst)
    np.testing.assert_array_equal(np.from_dlpack(ad.arrow_from_pyarrow(lst, copy=True)),
                                  [[1, 2], [0, 0], [3, 0]])


def test_booleans_are_refused_unless_copy():
    a = pa.array([True, False, True])
    with pytest.raises(BufferError, match="bit-packed"):
        ad.arrow_from_pyarrow(a)
    t = ad.arrow_from_pyarrow(a, copy=True)
    assert t.dtype == "bool"
    np.testing.assert_array_equal(np.from_dlpack(t), [True, False, True])


def test_types_without_a_dlpack_dtype_are_refused():
    for bad in (pa.array(["a", "b"]), pa.array([1], type=pa.date32()),
                pa.array([[1, 2]], type=pa.list_(pa.int32()))):
        with pytest.raises(BufferError, match="no DLPack equivalent"):
            ad.arrow_from_pyarrow(bad, copy=True)
    with pytest.raises(TypeError, match="pyarrow.Array"):
        ad.arrow_from_pyarrow(np.zeros(3))


# ------------------------------------------------------------------------- DLPack -> arrow

def test_numpy_to_pyarrow_zero_copy_keeps_numpy_alive():
    src = np.arange(8, dtype=np.float64)
    before = sys.getrefcount(src)
    p = ad.arrow_to_pyarrow(src)
    assert p.type == pa.float64()
    assert values_address(p) == src.ctypes.data
    assert sys.getrefcount(src) > before, "the arrow buffer keeps numpy's array"
    addr = src.ctypes.data
    del src
    gc.collect()
    assert values_address(p) == addr
    assert p.to_pylist() == list(map(float, range(8)))
    del p
    gc.collect()


def test_numpy_refcount_returns_after_pyarrow_drops():
    src = np.arange(4, dtype=np.int32)
    before = sys.getrefcount(src)
    for _ in range(20):
        p = ad.arrow_to_pyarrow(src)
        q = ad.arrow_to_pyarrow(src.reshape(2, 2))
        del p, q
    gc.collect()
    assert sys.getrefcount(src) == before


def test_numpy_2d_is_a_fixed_size_list_and_n_d_a_fixed_shape_tensor():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    lists = ad.arrow_to_pyarrow(src)
    assert lists.type == pa.list_(pa.list_(pa.float32(), 4), 3)
    assert lists.to_pylist()[1][2] == [20, 21, 22, 23]
    perm = src.transpose(0, 2, 1)
    ten = ad.arrow_to_pyarrow(perm, tensor=True)
    ref = pa.FixedShapeTensorArray.from_numpy_ndarray(perm)
    assert ten.type == ref.type, "the same shape and permutation as pyarrow's own conversion"
    assert values_address(ten.storage.values) == src.ctypes.data
    np.testing.assert_array_equal(ten.to_numpy_ndarray(), perm)
    plain = ad.arrow_to_pyarrow(src, tensor=True)
    assert plain.type.permutation is None and plain.type.shape == [3, 4]


def test_pyarrow_dlpack_round_trip():
    """pyarrow's own producer (`pa.Array.__dlpack__`) into arrow-rs and back to pyarrow."""
    a = pa.array(np.arange(5, dtype=np.int64))
    p = ad.arrow_to_pyarrow(a)
    assert values_address(p) == values_address(a)
    assert p.equals(a)
    t = dd.from_dlpack(a)
    assert t.data_ptr == values_address(a)
    back = ad.arrow_round_trip(a)
    assert back.data_ptr == values_address(a)
    np.testing.assert_array_equal(np.from_dlpack(back), np.arange(5))


def test_round_trip_through_arrow_rs_is_zero_copy():
    src = np.arange(12, dtype=np.int16).reshape(3, 4)
    t = ad.arrow_round_trip(src)
    assert t.data_ptr == src.ctypes.data and t.shape == (3, 4) and t.readonly
    perm = np.arange(24, dtype=np.float64).reshape(2, 3, 4).transpose(0, 2, 1)
    t = ad.arrow_round_trip(perm, tensor=True)
    assert t.strides == tuple(s // 8 for s in perm.strides)
    np.testing.assert_array_equal(np.from_dlpack(t), perm)


def test_primitive_import_checks_dtype_and_rank():
    src = np.arange(4, dtype=np.float32)
    t = ad.arrow_primitive(src, "float32")
    assert t.data_ptr == src.ctypes.data
    assert t.readonly, "arrow shares the producer's memory: never handed out writable"
    with pytest.raises(BufferError, match=r"^arrow: tensor dtype is float32, wanted int64"):
        ad.arrow_primitive(src, "int64")
    with pytest.raises(BufferError, match="1-D"):
        ad.arrow_primitive(src.reshape(2, 2), "float32")
    c = ad.arrow_primitive(src[::-1], "float32", copy=True)
    np.testing.assert_array_equal(np.from_dlpack(c), [3, 2, 1, 0])


def test_layouts_arrow_cannot_view_need_copy():
    src = np.arange(10, dtype=np.float32)
    with pytest.raises(BufferError, match="C-contiguous.*copy=True"):
        ad.arrow_to_pyarrow(src[::2])
    p = ad.arrow_to_pyarrow(src[::2], copy=True)
    assert p.to_pylist() == [0, 2, 4, 6, 8]
    assert values_address(p) != src.ctypes.data
    with pytest.raises(BufferError, match="not outermost"):
        ad.arrow_to_pyarrow(src.reshape(2, 5).T, tensor=True)
    with pytest.raises(BufferError, match="rank >= 2"):
        ad.arrow_to_pyarrow(src, tensor=True)
    with pytest.raises(BufferError, match="0-d"):
        ad.arrow_to_pyarrow(np.float32(1.0).reshape(()))


def test_bool_and_unsupported_dtypes():
    b = np.array([True, False, True])
    with pytest.raises(BufferError, match="bit-packed"):
        ad.arrow_to_pyarrow(b)
    p = ad.arrow_to_pyarrow(b, copy=True)
    assert p.type == pa.bool_() and p.to_pylist() == [True, False, True]
    with pytest.raises(BufferError, match="no arrow equivalent"):
        ad.arrow_to_pyarrow(np.zeros(2, np.complex64))


# ------------------------------------------------------------------------------------- JAX

def test_jax_both_ways():
    jnp = pytest.importorskip("jax.numpy")
    # A Rust-built arrow array has no other holder: writable, so JAX's legacy import takes it.
    t = ad.arrow_arange(5)
    assert not t.readonly
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)), np.arange(5, dtype=np.float32))
    # A view of pyarrow memory is read-only, which a legacy capsule cannot say: JAX gets a
    # private copy (copy=None; decision 0024), copy=False is refused.
    a = pa.array(np.arange(3, dtype=np.float32))
    v = ad.arrow_from_pyarrow(a)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(v)), [0, 1, 2])
    assert H.inspect_capsule(v.__dlpack__()).data != a.buffers()[1].address
    with pytest.raises(BufferError, match="read-only"):
        v.__dlpack__(copy=False)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(ad.arrow_from_pyarrow(a, copy=True))),
                                  [0, 1, 2])
    # JAX into arrow.
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    p = ad.arrow_to_pyarrow(x)
    assert p.to_pylist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.slow
def test_no_leak_over_many_round_trips():
    gc.collect()
    base = pa.total_allocated_bytes()
    src = np.arange(64, dtype=np.float32).reshape(4, 4, 4)
    rc = sys.getrefcount(src)
    for _ in range(300):
        a = pa.array(range(16), type=pa.float32())
        t = ad.arrow_from_pyarrow(a)
        p = ad.arrow_to_pyarrow(t)
        q = ad.arrow_to_pyarrow(src, tensor=True)
        r = ad.arrow_from_pyarrow(q)
        del a, t, p, q, r
    gc.collect()
    assert pa.total_allocated_bytes() == base
    assert sys.getrefcount(src) == rc


# ------------------------------------------------- empty tensors, 0-d, no panics (issue 41)

NUMERIC = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
           np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 4), (2, 3, 0)])
def test_empty_tensors_of_every_type_go_to_pyarrow_and_back(dtype, shape):
    x = np.zeros(shape, dtype)
    p = ad.arrow_to_pyarrow(x)
    assert len(p) == shape[0]                  # (3, 0) is three empty lists, not none
    t = ad.arrow_round_trip(x)
    assert (t.shape, t.dtype) == (shape, np.dtype(dtype).name)
    back = ad.arrow_from_pyarrow(p)
    assert back.shape == shape
    np.testing.assert_array_equal(np.from_dlpack(back), x)
    if len(shape) >= 2:
        p = ad.arrow_to_pyarrow(x, tensor=True)
        assert len(p) == shape[0]
        assert ad.arrow_round_trip(x, tensor=True).shape == shape


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("copy", [False, True])
def test_empty_primitive_arrays_never_panic(dtype, copy):
    # Was a panic inside arrow (a dangling pointer at address 1 given to ScalarBuffer), seen
    # in Python as SystemError.
    t = ad.arrow_primitive(np.zeros(0, dtype), dtype, copy=copy)
    assert (t.shape, t.dtype) == ((0,), dtype)


def test_empty_bool_and_pyarrow_arrays():
    p = ad.arrow_to_pyarrow(np.zeros((0,), np.bool_), copy=True)
    assert p.type == pa.bool_() and len(p) == 0
    p = ad.arrow_to_pyarrow(np.zeros((2, 0), np.bool_), copy=True)
    assert len(p) == 2
    for typ in [pa.int8(), pa.uint64(), pa.float16(), pa.float64()]:
        t = ad.arrow_from_pyarrow(pa.array([], typ))
        assert t.shape == (0,)
    t = ad.arrow_from_pyarrow(pa.array([], pa.bool_()), copy=True)
    assert (t.shape, t.dtype) == ((0,), "bool")
    t = ad.arrow_from_pyarrow(pa.array([1.0, 2.0]).slice(2, 0))
    assert t.shape == (0,)


def test_zero_d_tensors_are_refused_by_name():
    for kw in [{}, {"copy": True}, {"tensor": True}]:
        with pytest.raises(BufferError):
            ad.arrow_to_pyarrow(np.array(1.5), **kw)
    with pytest.raises(BufferError, match="0-d tensor"):
        ad.arrow_round_trip(np.array(1.5))


def test_bool_bytes_other_than_0_and_1_are_refused_when_packed():
    b = np.array([1, 7, 0], np.uint8).view(np.bool_)
    with pytest.raises(BufferError, match=r"^arrow: bool element 1 \(C order\) holds the byte 7, wanted 0 or 1$"):
        ad.arrow_to_pyarrow(b, copy=True)
