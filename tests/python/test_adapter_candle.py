"""The candle adapter (dlbind feature `candle`) through `dlbind_demo.adapters.candle_*`: candle
CPU tensors leave as copies dlbind owns (C-contiguous, writable; candle's in-place writes
afterwards do not reach them) or, with `view=True` (the adapter's `unsafe` view), as read-only
zero-copy tensors with candle's layout (offsets, transposes, broadcasts); DLPack producers
(numpy, JAX, pyarrow) come in as candle tensors (always a copy: candle cannot own foreign
memory) that candle reads back correctly; empty and 0-d tensors go both ways."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import dlbind_demo as dd
import dlpack_helpers as H

ad = dd.adapters
pytestmark = pytest.mark.skipif(not hasattr(ad, "candle_arange"),
                                reason="dlbind_demo built without the `candle` feature")


def test_export_is_a_writable_copy():
    t = ad.candle_arange(2, 3)
    assert (t.shape, t.strides, t.dtype, t.readonly) == ((2, 3), (3, 1), "float32", False)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr and a.flags.writeable
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32).reshape(2, 3))
    a[0, 0] = 9
    np.testing.assert_array_equal(np.from_dlpack(t)[0], [9, 1, 2])


@pytest.mark.parametrize("op,after", [
    ("zero_set", [0] * 6), ("const_set", [7] * 6), ("slice_set", [0, 1, 2, 1, 1, 1]),
    ("var_set", [9] * 6)])
def test_in_place_candle_writes_do_not_reach_the_export(op, after):
    t, candle_after = ad.candle_write_after_export(op)
    assert candle_after == after, "candle wrote its storage in place"
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(6).reshape(2, 3))


def test_view_is_a_read_only_zero_copy_view():
    t = ad.candle_arange(2, 3, view=True)
    assert (t.shape, t.strides, t.dtype, t.readonly) == ((2, 3), (3, 1), "float32", True)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr and not a.flags.writeable
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1


@pytest.mark.parametrize("layout,expect_strides", [
    ("t", (1, 4)), ("broadcast", (0, 4, 1)), ("narrow", (4, 1))])
def test_layouts(layout, expect_strides):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = {"t": base.T, "broadcast": np.broadcast_to(base, (2, 3, 4)), "narrow": base[1:]}[layout]
    v = ad.candle_arange(3, 4, layout=layout, view=True)
    assert v.strides == expect_strides
    np.testing.assert_array_equal(np.from_dlpack(v), want)
    c = ad.candle_arange(3, 4, layout=layout)
    assert c.strides == tuple(s // 4 for s in np.ascontiguousarray(want).strides), \
        "a copy is C-contiguous"
    np.testing.assert_array_equal(np.from_dlpack(c), want)


@pytest.mark.parametrize("cdtype,name", [("u8", "uint8"), ("u32", "uint32"), ("i16", "int16"),
                                         ("i32", "int32"), ("i64", "int64"), ("f16", "float16"),
                                         ("f64", "float64"), ("bf16", "bfloat16"),
                                         ("f8e4m3", "float8_e4m3fn")])
@pytest.mark.parametrize("view", [False, True])
def test_dtypes(cdtype, name, view):
    t = ad.candle_arange(1, 4, dtype=cdtype, view=view)
    assert (t.dtype, t.readonly) == (name, view)
    # Back into candle (f8e4m3 read through f32: candle's f8e4m3 -> f64 crashes).
    dtype, shape, values, _ = ad.candle_import(t)
    assert (dtype, shape, values) == (cdtype, [1, 4], [0, 1, 2, 3])
    if name in ("bfloat16", "float8_e4m3fn"):
        ml_dtypes = pytest.importorskip("ml_dtypes")
        np.testing.assert_array_equal(t.numpy().astype(np.float32), [[0, 1, 2, 3]])
        assert ml_dtypes is not None
    else:
        np.testing.assert_array_equal(np.from_dlpack(t), np.arange(4).reshape(1, 4))


def test_import_copies_and_candle_reads_it():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1)
    before = sys.getrefcount(src)
    dtype, shape, values, back = ad.candle_import(src)
    assert (dtype, shape) == ("f32", [2, 4, 3])
    assert values == src.ravel().astype(np.float64).tolist()
    assert back.data_ptr != src.ctypes.data, "candle owns a copy"
    assert back.strides == (12, 3, 1), "C-contiguous"
    np.testing.assert_array_equal(np.from_dlpack(back), src)
    del back
    gc.collect()
    assert sys.getrefcount(src) == before, "the producer was released after the copy"


def test_import_from_jax_and_pyarrow():
    jnp = pytest.importorskip("jax.numpy")
    pa = pytest.importorskip("pyarrow")
    dtype, shape, values, _ = ad.candle_import(jnp.arange(6, dtype=jnp.int32).reshape(2, 3))
    assert (dtype, shape, values) == ("i32", [2, 3], [0, 1, 2, 3, 4, 5])
    dtype, shape, values, _ = ad.candle_import(pa.array([1.5, 2.5], type=pa.float64()))
    assert (dtype, shape, values) == ("f64", [2], [1.5, 2.5])


def test_export_to_jax():
    """JAX imports through legacy capsules, which cannot carry read-only: the copy goes through
    as it is, the read-only view as a private copy (copy=None; decision 0024), and copy=False
    refuses it."""
    jnp = pytest.importorskip("jax.numpy")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(ad.candle_arange(2, 2))),
                                  [[0, 1], [2, 3]])
    v = ad.candle_arange(2, 2, view=True)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(v)), [[0, 1], [2, 3]])
    assert H.inspect_capsule(v.__dlpack__()).data != v.data_ptr, "a legacy capsule of a view copies"
    with pytest.raises(BufferError, match="read-only"):
        v.__dlpack__(copy=False)
    c = dd.from_dlpack(v, copy=True)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(c)), [[0, 1], [2, 3]])


def test_export_to_pyarrow_through_the_arrow_adapter():
    pa = pytest.importorskip("pyarrow")
    if not hasattr(ad, "arrow_to_pyarrow"):
        pytest.skip("dlbind_demo built without the `arrow` feature")
    for view in (False, True):
        t = ad.candle_arange(2, 3, dtype="f64", view=view)
        p = ad.arrow_to_pyarrow(t)
        assert p.to_pylist() == [[0, 1, 2], [3, 4, 5]]
        assert p.values.buffers()[1].address == t.data_ptr, "the export, viewed by pyarrow"


NUMPY_DTYPES = [("u8", np.uint8), ("u32", np.uint32), ("i16", np.int16), ("i32", np.int32),
                ("i64", np.int64), ("f16", np.float16), ("f32", np.float32),
                ("f64", np.float64)]


@pytest.mark.parametrize("cdtype,npdtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (0, 0), (3, 0)])
def test_empty_and_0d_tensors_go_both_ways(cdtype, npdtype, shape):
    src = np.full(shape, 5, dtype=npdtype)
    dtype, got_shape, values, back = ad.candle_import(src)
    assert (dtype, got_shape) == (cdtype, list(shape))
    assert values == [5.0] * src.size
    assert (back.shape, back.dtype, back.readonly) == (shape, np.dtype(npdtype).name, False)
    np.testing.assert_array_equal(np.from_dlpack(back), src)
    assert np.from_dlpack(back).shape == shape


@pytest.mark.parametrize("view", [False, True])
@pytest.mark.parametrize("rows,cols,layout", [(0, 3, "c"), (3, 0, "t"), (0, 0, "broadcast"),
                                              (1, 4, "narrow")])
def test_empty_candle_tensors_export(view, rows, cols, layout):
    t = ad.candle_arange(rows, cols, layout=layout, view=view)
    a = np.from_dlpack(t)
    assert a.size == 0 and a.shape == t.shape
    _, shape, values, _ = ad.candle_import(t)
    assert (shape, values) == (list(t.shape), [])


def test_bad_input_is_a_typed_error():
    for bad in (np.array([True, False]), np.zeros(2, np.int8), np.zeros(2, np.uint16),
                np.zeros(2, np.complex64)):
        with pytest.raises(BufferError, match=r"^candle: tensor dtype is \w+, wanted one candle has \("):
            ad.candle_import(bad)
    with pytest.raises(ValueError, match="unknown candle dtype"):
        ad.candle_arange(1, 1, dtype="f128")
    with pytest.raises(ValueError, match="unknown op"):
        ad.candle_write_after_export("add_")
