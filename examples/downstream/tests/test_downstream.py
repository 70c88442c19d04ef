"""The downstream crate (built against dlbind's packaged crates) with numpy and JAX."""

import gc
import threading

import numpy as np
import pytest

import dlbind_downstream as dd

jax = pytest.importorskip("jax", reason="JAX is a pinned test peer (scripts/requirements-test.txt)")
jnp = jax.numpy


def test_frame_exports_to_numpy_and_jax():
    f = dd.Frame.zeros(3, 4)
    a = np.from_dlpack(f)
    assert a.shape == (3, 4) and a.dtype == np.float32
    assert a.ctypes.data == f.data_ptr
    a[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    j = jnp.from_dlpack(f)
    np.testing.assert_array_equal(np.asarray(j), a)
    del a, j
    gc.collect()
    assert dd.live_exports() == 0


def test_from_dlpack_imports_numpy_and_jax_zero_copy():
    a = np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2]
    f = dd.from_dlpack(a)
    assert isinstance(f, dd.Frame)
    assert f.shape == [4, 3] and f.data_ptr == a.ctypes.data and not f.readonly
    back = np.from_dlpack(f)
    np.testing.assert_array_equal(back, a)
    back[0, 0] = 99.0
    assert a[0, 0] == 99.0  # same memory
    ro = np.ones(3, np.int16)
    ro.flags.writeable = False
    assert dd.from_dlpack(ro).readonly
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    fj = dd.from_dlpack(x)
    np.testing.assert_array_equal(np.from_dlpack(fj), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(dd.from_dlpack(np.arange(5.0)))), np.arange(5.0))
    del f, back, fj
    gc.collect()
    assert dd.live_exports() == 0


def test_frame_from_frame_is_a_view_and_imports_repeat():
    # The derived import's same-type view, and repeated imports (a frozen type gets a free list:
    # later instances are released ones, written in place).
    a = np.arange(12.0).reshape(3, 4)
    f = dd.from_dlpack(a)
    for i in range(1, 60):
        g = dd.from_dlpack(f)
        assert g.shape == [3, 4] and g.data_ptr == f.data_ptr and not g.readonly
        h = dd.from_dlpack(np.arange(i, dtype=np.int8).__dlpack__(max_version=(1, 3)))
        assert h.shape == [i]
        np.testing.assert_array_equal(np.from_dlpack(h), np.arange(i, dtype=np.int8))
    np.testing.assert_array_equal(np.from_dlpack(g), a)
    with pytest.raises(BufferError):
        dd.from_dlpack(np.zeros(3, dtype=np.float32).view(np.dtype([("x", np.float32)])))
    del f, g, h
    gc.collect()
    assert dd.live_exports() == 0


def test_c_code_shares_the_runtime_abi():
    c, rust = dd.abi_layouts()
    assert c == rust
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in (a, a.T, a[1:, ::-2], a[::3]):
        assert dd.c_sum_f32(view) == pytest.approx(float(view.sum()))
    f = dd.from_dlpack(a[::2])
    assert dd.c_sum_f32(f) == pytest.approx(float(a[::2].sum()))
    with pytest.raises(TypeError):
        dd.c_sum_f32(np.arange(3))  # int64: refused by the C code, not misread
    assert dd.live_exports() == 0


def test_plain_pyclass_holds_a_borrow_while_exported():
    s = dd.Samples([1.0, 2.0, 3.0])
    a = np.from_dlpack(s)
    with pytest.raises(RuntimeError):
        s.resize(1000)
    with pytest.raises(RuntimeError):
        s.push(4.0)
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])  # intact, still readable
    a[0] = 10.0
    del a
    s.push(4.0)  # released: mutation works again
    assert s.tolist() == [10.0, 2.0, 3.0, 4.0]
    # JAX keeps the export (and so the borrow) when it can use the memory in place; for memory
    # it must align it copies and releases the capsule at once. Either way its values hold.
    j = jnp.from_dlpack(s)
    try:
        s.resize(0)
        s.resize(4)
    except RuntimeError:
        pass
    np.testing.assert_array_equal(np.asarray(j), [10.0, 2.0, 3.0, 4.0])
    del j
    gc.collect()
    s.resize(2)
    assert len(s) == 2
    assert dd.c_sum_f32(dd.from_dlpack(np.asarray([1.5, 2.5], np.float32))) == 4.0
    assert dd.live_exports() == 0


def test_plain_pyclass_threads():
    s = dd.Samples([float(i) for i in range(64)])
    errors = []

    def export_many():
        for _ in range(300):
            a = np.from_dlpack(s)
            assert a.sum() == sum(range(64))
            del a

    def mutate_many():
        for _ in range(300):
            try:
                s.resize(64)
            except RuntimeError:
                pass
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

    threads = [threading.Thread(target=export_many) for _ in range(3)]
    threads.append(threading.Thread(target=mutate_many))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert s.tolist() == [float(i) for i in range(64)]
    assert dd.live_exports() == 0
