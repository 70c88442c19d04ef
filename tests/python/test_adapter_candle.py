"""The candle adapter (dlbind feature `candle`) through `dlbind_demo.adapters.candle_*`: candle
CPU tensors leave as read-only zero-copy DLPack tensors with candle's layout (offsets,
transposes, broadcasts), and DLPack producers (numpy, JAX, pyarrow) come in as candle tensors
(always a copy: candle cannot own foreign memory) that candle reads back correctly."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import dlbind_demo as dd

ad = dd.adapters
pytestmark = pytest.mark.skipif(not hasattr(ad, "candle_arange"),
                                reason="dlbind_demo built without the `candle` feature")


def test_export_is_a_read_only_zero_copy_view():
    t = ad.candle_arange(2, 3)
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
    t = ad.candle_arange(3, 4, layout=layout)
    assert t.strides == expect_strides
    np.testing.assert_array_equal(np.from_dlpack(t), want)


@pytest.mark.parametrize("cdtype,name", [("u8", "uint8"), ("u32", "uint32"), ("i16", "int16"),
                                         ("i32", "int32"), ("i64", "int64"), ("f16", "float16"),
                                         ("f64", "float64"), ("bf16", "bfloat16"),
                                         ("f8e4m3", "float8_e4m3fn")])
def test_dtypes(cdtype, name):
    t = ad.candle_arange(1, 4, dtype=cdtype)
    assert t.dtype == name
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


def test_export_to_jax_needs_a_copy():
    """JAX imports through legacy capsules, which cannot carry read-only: refused, and a copy
    goes through."""
    jnp = pytest.importorskip("jax.numpy")
    t = ad.candle_arange(2, 2)
    with pytest.raises(BufferError, match="read-only"):
        jnp.from_dlpack(t)
    c = dd.from_dlpack(t, copy=True)
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(c)), [[0, 1], [2, 3]])


def test_export_to_pyarrow_through_the_arrow_adapter():
    pa = pytest.importorskip("pyarrow")
    if not hasattr(ad, "arrow_to_pyarrow"):
        pytest.skip("dlbind_demo built without the `arrow` feature")
    t = ad.candle_arange(2, 3, dtype="f64")
    p = ad.arrow_to_pyarrow(t)
    assert p.to_pylist() == [[0, 1, 2], [3, 4, 5]]
    assert p.values.buffers()[1].address == t.data_ptr, "candle's storage, viewed by pyarrow"


def test_bad_input_is_a_typed_error():
    for bad in (np.array([True, False]), np.zeros(2, np.int8), np.zeros(2, np.uint16),
                np.zeros(2, np.complex64)):
        with pytest.raises(BufferError, match="candle has no dtype"):
            ad.candle_import(bad)
    with pytest.raises(ValueError, match="unknown candle dtype"):
        ad.candle_arange(1, 1, dtype="f128")
