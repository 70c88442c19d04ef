"""Issue 50: the derives mean the same in every crate.

`dlbind_demo.hygiene` (examples/tensor/src/hygiene.rs) expands every derive form inside a
module that shadows what an unhygienic expansion would name: traits answering `len`, `as_ptr`,
`as_slice`, `into`, `clone`, `deref`, `dtype`, `narrow`, ... wrongly for `Dims`, slices, arrays,
`Vec`, `Box`, `Arc` and dlbind's types, aliases named `Vec`, `Option`, `Result`, `Box`,
`Array1`, `Array` and `f32` that name other types, and local `Ok`, `Some`, `None`. Each type must
export exactly what its storage holds: the dtype of the elements it really stores (not of how the
field is spelled), the rank of its shape field (not the shadowing `len`'s 3), element 0 (not the
shadowing `as_ptr`'s null), on every path, and import back.
"""

import numpy as np
import pytest

import dlbind_demo

h = dlbind_demo.hygiene


def every_path(x):
    """numpy through DLPack (versioned and legacy where allowed), the buffer protocol and
    `__array_interface__`, each as a numpy array."""
    out = {"dlpack": np.from_dlpack(x)}
    out["memoryview"] = np.asarray(memoryview(x))
    out["array_interface"] = np.asarray(x)
    return out


def check_all(x, want, writable):
    for path, a in every_path(x).items():
        assert a.dtype == want.dtype, (path, a.dtype)
        assert a.shape == want.shape, (path, a.shape)
        np.testing.assert_array_equal(a, want, err_msg=path)
        if path != "array_interface":  # numpy's asarray of an interface keeps its own flag
            assert a.flags.writeable == writable, (path, a.flags.writeable)


def test_samples_export_the_f64_values_the_aliases_store():
    s = h.Samples(4)
    # `Vec<f32>` there is `Box<[f64]>`: float64, rank 1 (the shadowing `len` says 3).
    check_all(s, np.arange(4) + 0.5, writable=False)
    assert s.__dlpack_device__() == (1, 0)


def test_frame_exports_its_dims_not_the_shadowing_traits():
    f = h.frame()
    want = np.arange(6, dtype=np.float32).reshape(2, 3).T
    check_all(f, want, writable=True)
    # Every export again (a frozen instance remembers its check): the same.
    check_all(f, want, writable=True)
    cap = f.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(cap)


def test_frame_and_plain_import_back():
    f = h.frame()
    g = h.Frame.from_dlpack(f)
    np.testing.assert_array_equal(np.from_dlpack(g), np.from_dlpack(f))
    a = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    g = h.Frame.from_dlpack(a)
    np.testing.assert_array_equal(np.from_dlpack(g), a)
    assert np.from_dlpack(g).dtype == np.float64

    p = h.plain()
    check_all(p, np.array([10, 20, 30, 40], dtype=np.int32), writable=True)
    q = h.Plain.from_dlpack(np.array([7, 8, 9], dtype=np.int32))
    check_all(q, np.array([7, 8, 9], dtype=np.int32), writable=True)
    with pytest.raises(BufferError):
        h.Plain.from_dlpack(np.zeros(3, dtype=np.float32))


def test_shared_arc_exports_its_strided_i64_values_read_only():
    s = h.shared()
    check_all(s, np.array([0, 2, 4], dtype=np.int64), writable=False)


def test_ndarray_fields_export_their_element_type():
    # `Array1<f32>` there is a 2-d array of f64.
    check_all(h.grid(), np.arange(6, dtype=np.float64).reshape(2, 3), writable=False)
    # `Array<u8, Ix1>` there is an `ArcArray`.
    check_all(h.bytes(), np.arange(1, 6, dtype=np.uint8), writable=False)


def test_vouched_exports_its_uint16_values():
    v = h.vouched()
    check_all(v, np.arange(6, dtype=np.uint16).reshape(2, 3), writable=True)
