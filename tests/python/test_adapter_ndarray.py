"""The ndarray adapter (dlbind::adapters::ndarray) through the demo's `dlbind_demo.adapters`:
arrays built in Rust against numpy (and JAX), Python arrays read as ndarray views, every
refusal mapped to the spec's exception, every adapter tensor released once. Also runs the
Python sessions of docs/manual/adapters-a.md."""
from __future__ import annotations

import doctest
import gc
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import demo

A = demo.adapters
MANUAL = Path(__file__).resolve().parents[2] / "docs" / "manual" / "adapters-a.md"


@pytest.fixture(autouse=True)
def _adapter_tensors_released():
    """Every adapter tensor over Rust memory a test made is released by its end (deleter once)."""
    gc.collect()
    before = A.live_rust_owned_tensors()
    yield
    gc.collect()
    assert A.live_rust_owned_tensors() == before


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool", "complex128"])
@pytest.mark.parametrize("reversed_", [False, True])
def test_grid_matches_numpy(dtype, reversed_):
    k = np.arange(12).reshape(3, 4)
    want = {"float64": k.astype(np.float64), "float32": k.astype(np.float32),
            "int64": k.astype(np.int64), "bool": k % 2 == 1,
            "complex128": (k - 1j * k).astype(np.complex128)}[dtype]
    if reversed_:
        want = want[::-1, ::-1]
    t = A.ndarray_grid(3, 4, dtype, reversed_)
    assert t.dtype == dtype
    assert not t.readonly
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, want)
    assert a.dtype == want.dtype
    if reversed_:
        assert t.strides == (-4, -1)
        assert a.strides == (-4 * a.itemsize, -a.itemsize)
    assert a.ctypes.data == t.data_ptr, "zero-copy"


def test_export_is_writable_and_shared_with_the_consumer():
    t = A.ndarray_grid(2, 3)
    a = np.from_dlpack(t)
    a[1, 2] = -5.0
    np.testing.assert_array_equal(np.from_dlpack(t)[1, 2], -5.0)


def test_jax_reads_the_export():
    jnp = pytest.importorskip("jax.numpy")
    # C-contiguous (JAX refuses negative strides: "only trivial (compact) striding").
    t = A.ndarray_grid(3, 4, "float32")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)),
                                  np.arange(12, dtype=np.float32).reshape(3, 4))
    # And JAX arrays come in as ndarray views.
    assert A.ndarray_count_true(jnp.array([[True, False], [True, True]])) == 3
    with pytest.raises(BufferError, match=r"^ndarray: tensor dtype is float32, wanted float64$"):
        A.ndarray_sum(jnp.arange(6.0, dtype=jnp.float32))


def test_arc_array_read_only_while_shared_and_released_once():
    A.ndarray_arc_release()
    t = A.ndarray_arc(5, shared=True)
    assert t.readonly
    a = np.from_dlpack(t)
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, np.arange(5.0))
    with pytest.raises(BufferError):
        t.__dlpack__(copy=False)  # known read-only: no legacy capsule without a copy
    assert H.inspect_capsule(t.__dlpack__()).data != a.ctypes.data  # copy=None: a copy
    u = A.ndarray_arc(3, shared=False)
    assert not u.readonly
    del t, a, u
    gc.collect()
    assert A.ndarray_arc_release() == [True], "the tensor's clone was dropped"


def test_cow_owned_and_borrowed():
    o = np.from_dlpack(A.ndarray_cow(False))
    np.testing.assert_array_equal(o, np.add.outer(10 * np.arange(3), np.arange(4)))
    b = A.ndarray_cow(True)
    assert b.strides == (2, 1), "the borrowed view was copied C-contiguous"
    np.testing.assert_array_equal(np.from_dlpack(b), o[:, 1:3])


def test_view_of_a_frozen_object_keeps_it_alive():
    g = A.NdGrid(4, 3)
    rc = sys.getrefcount(g)
    v = g.rows(0, 4, -2)
    assert sys.getrefcount(g) == rc + 1
    assert v.readonly and v.strides == (-6, 1)
    want = np.arange(12, dtype=np.float32).reshape(4, 3)[::-1][::2]
    a = np.from_dlpack(v)
    np.testing.assert_array_equal(a, want)
    del g
    gc.collect()
    np.testing.assert_array_equal(a, want)   # the view still holds the object
    del v, a
    gc.collect()


def test_imports_sum_trace_scale():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert A.ndarray_sum(x) == x.sum()
    assert A.ndarray_sum(x[:, ::-1, ::2]) == x[:, ::-1, ::2].sum()
    assert A.ndarray_trace(np.arange(9.0).reshape(3, 3)[::-1]) == 2 + 4 + 6
    y = np.arange(6.0).reshape(2, 3)[:, ::-1]
    A.ndarray_scale(y, 2.0)
    np.testing.assert_array_equal(y, (2 * np.arange(6.0)).reshape(2, 3)[:, ::-1])
    assert A.ndarray_count_true(np.array([[True, False], [True, True]])[::-1]) == 3
    z = np.array([1 + 2j, 3 - 1j, -1j])
    assert A.ndarray_complex_sum(z[::-1]) == z.sum()
    # Through another producer: a demo Tensor, and JAX when installed.
    assert A.ndarray_sum(demo.Tensor.arange(5, dtype="float64")) == 10.0


def test_import_errors_are_the_spec_exceptions():
    with pytest.raises(BufferError, match=r"^ndarray: the tensor has 3 dimension\(s\) \(shape \[2, 2, 2\]\), wanted 2 for ndarray::Ix2$"):
        A.ndarray_trace(np.zeros((2, 2, 2)))
    with pytest.raises(BufferError, match=r"^ndarray: tensor dtype is float32, wanted float64$"):
        A.ndarray_sum(np.zeros(3, dtype=np.float32))
    with pytest.raises(BufferError, match="read-only"):
        ro = np.zeros(3)
        ro.flags.writeable = False
        A.ndarray_scale(ro, 2.0)
    with pytest.raises(BufferError, match="read-only"):
        A.ndarray_scale(np.broadcast_to(np.zeros(3), (2, 3)), 2.0)   # numpy's are read-only
    z = np.zeros(3)
    alias = np.lib.stride_tricks.as_strided(z, (2, 3), (0, 8))        # writable, row 0 == row 1
    with pytest.raises(BufferError, match="broadcast"):
        A.ndarray_scale(alias, 2.0)
    overlap = np.lib.stride_tricks.as_strided(np.zeros(4), (2, 3), (8, 8))
    with pytest.raises(BufferError, match="overlap"):
        A.ndarray_scale(overlap, 2.0)
    with pytest.raises(AttributeError):
        A.ndarray_sum(object())


@pytest.mark.parametrize("device", ["kDLCUDA", "kDLROCM"])
def test_device_memory_is_refused(device):
    # A capsule whose DLTensor claims device memory (host memory all the same, never read).
    cap = H.device_tagged_capsule(np.zeros(3), H.SPEC.device_type(device))
    with pytest.raises(BufferError, match=r"^ndarray: memory on device .* is not host-accessible, wanted host-accessible$"):
        A.ndarray_sum(cap)
    cap = H.device_tagged_capsule(np.zeros((2, 2)), H.SPEC.device_type(device))
    with pytest.raises(BufferError, match=r"^ndarray: memory on device .* is not host-accessible, wanted host-accessible$"):
        A.ndarray_trace(cap)


def test_held_import_keeps_the_producer():
    x = np.arange(6.0).reshape(2, 3).copy()      # owns its data
    rc = sys.getrefcount(x)
    h = A.NdHeld(x[::-1])                         # the view (x is its base) lives in h
    assert h.shape == [2, 3] and h.sum() == 15.0
    assert sys.getrefcount(x) == rc + 1
    x[0, 0] = 100.0
    assert h.sum() == 115.0, "a view, not a copy"
    del h
    gc.collect()
    assert sys.getrefcount(x) == rc


def test_repeated_round_trips_do_not_leak():
    before = demo._testing.live_exports()
    for _ in range(200):
        t = A.ndarray_grid(4, 4, "float32", True)
        a = np.from_dlpack(t)
        assert A.ndarray_sum(a.astype(np.float64)) == 120.0
        del t, a
    gc.collect()
    assert demo._testing.live_exports() == before


BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_manual_sessions():
    """docs/manual/adapters-a.md's Python sessions, in order, in one namespace (each page
    section goes on from the one before, as a reader's session would)."""
    blocks = [b for b in BLOCK.findall(MANUAL.read_text(encoding="utf-8")) if ">>>" in b]
    assert len(blocks) >= 3, "the page has a session per adapter"
    globs: dict = {}
    for i, text in enumerate(blocks):
        test = doctest.DocTestParser().get_doctest(text, globs, f"{MANUAL}#{i}", str(MANUAL), 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        out = []
        runner.run(test, out=out.append, clear_globs=False)
        assert runner.summarize(verbose=False).failed == 0, "".join(out)
        globs = test.globs
    globs.clear()
    import builtins
    builtins._ = None                 # the interactive `_` holds the last value shown
    gc.collect()


# ------------------------------------------------------------------ empty, 0-d and bool (issue 41)

@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool", "complex128"])
@pytest.mark.parametrize("rows, cols", [(0, 3), (3, 0), (0, 0)])
def test_empty_arrays_built_in_rust_reach_numpy(dtype, rows, cols):
    t = A.ndarray_grid(rows, cols, dtype)
    n = np.from_dlpack(t)
    assert n.shape == (rows, cols) and n.dtype == np.dtype(dtype) and n.size == 0


def test_empty_and_zero_d_numpy_arrays_come_in_as_views():
    assert A.ndarray_sum(np.zeros((0, 3))) == 0.0
    assert A.ndarray_sum(np.zeros((2, 0, 4))) == 0.0
    assert A.ndarray_sum(np.array(2.5)) == 2.5                       # 0-d
    assert A.ndarray_complex_sum(np.zeros((3, 0), np.complex128)) == 0j
    assert A.ndarray_complex_sum(np.array(1 - 2j)) == 1 - 2j
    assert A.ndarray_count_true(np.zeros((0, 5), np.bool_)) == 0
    assert A.ndarray_count_true(np.array(True)) == 1
    assert A.ndarray_trace(np.zeros((0, 0))) == 0.0


def test_bool_bytes_other_than_0_and_1_are_named_by_the_checked_copy():
    # `NdTensor<bool>` holds a checked copy (bool is never lent): the byte is named.
    b = np.array([1, 7, 0], np.uint8).view(np.bool_)
    with pytest.raises(BufferError, match=r"bool element 1 \(C order\) holds the byte 7"):
        A.ndarray_count_true(b)
    # Reversed: element 0 is the last byte.
    b = np.array([2, 1, 1], np.uint8).view(np.bool_)[::-1]
    with pytest.raises(BufferError, match=r"bool element 2 \(C order\) holds the byte 2"):
        A.ndarray_count_true(b)
    assert A.ndarray_count_true(np.array([[True, False], [True, True]])[:, ::-1]) == 3
