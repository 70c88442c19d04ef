"""The downstream crate (the README's code, built against dlbind's packaged crates) with numpy
and JAX. `my_arrays` and `frames` are the README's modules exactly as it writes them, so every
check goes through what they offer: the derived protocols, `from_dlpack` and `Samples.push`;
`downstream_checks` (src/checks.rs) adds the C side and dlbind's export counter."""

import gc
import threading

import numpy as np
import pytest

import downstream_checks as checks
import frames
import my_arrays

jax = pytest.importorskip("jax", reason="JAX is a pinned test peer (scripts/requirements-test.txt)")
jnp = jax.numpy


def ptr(x) -> int:
    """Element 0's address, as numpy sees an export of `x`."""
    return np.from_dlpack(x).ctypes.data


def test_frame_exports_to_numpy_and_jax():
    src = np.zeros((3, 4), np.float32)
    f = frames.from_dlpack(src, copy=True)  # owned, aligned memory
    assert isinstance(f, frames.Frame)
    a = np.from_dlpack(f)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.writeable
    assert a.ctypes.data != src.ctypes.data and a.ctypes.data == ptr(f)
    a[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
    j = jnp.from_dlpack(f)
    np.testing.assert_array_equal(np.asarray(j), a)
    del a, j
    gc.collect()
    assert checks.live_exports() == 0


def test_from_dlpack_imports_numpy_and_jax_zero_copy():
    a = np.arange(20, dtype=np.float64).reshape(4, 5)[:, ::2]
    f = frames.from_dlpack(a)
    assert isinstance(f, frames.Frame)
    assert frames.Frame.from_dlpack(a).__class__ is frames.Frame
    back = np.from_dlpack(f)
    assert back.shape == (4, 3) and back.strides == a.strides
    assert back.ctypes.data == a.ctypes.data and back.flags.writeable
    np.testing.assert_array_equal(back, a)
    back[0, 0] = 99.0
    assert a[0, 0] == 99.0  # same memory
    ro = np.ones(3, np.int16)
    ro.flags.writeable = False
    assert not np.from_dlpack(frames.from_dlpack(ro)).flags.writeable
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    fj = frames.from_dlpack(x)
    np.testing.assert_array_equal(np.from_dlpack(fj), np.asarray(x))
    np.testing.assert_array_equal(
        np.asarray(jnp.from_dlpack(frames.from_dlpack(np.arange(5.0)))), np.arange(5.0)
    )
    del f, back, fj
    gc.collect()
    assert checks.live_exports() == 0


def test_frame_from_frame_is_a_view_and_imports_repeat():
    # The derived import's same-type view, and repeated imports (a frozen type gets a free list:
    # later instances are released ones, written in place).
    a = np.arange(12.0).reshape(3, 4)
    f = frames.from_dlpack(a)
    for i in range(1, 60):
        g = frames.from_dlpack(f)
        assert g is not f and np.from_dlpack(g).shape == (3, 4)
        assert ptr(g) == ptr(f) and np.from_dlpack(g).flags.writeable
        h = frames.from_dlpack(np.arange(i, dtype=np.int8).__dlpack__(max_version=(1, 3)))
        np.testing.assert_array_equal(np.from_dlpack(h), np.arange(i, dtype=np.int8))
    np.testing.assert_array_equal(np.from_dlpack(g), a)
    with pytest.raises(BufferError):
        frames.from_dlpack(np.zeros(3, dtype=np.float32).view(np.dtype([("x", np.float32)])))
    del f, g, h
    gc.collect()
    assert checks.live_exports() == 0


def test_c_code_shares_the_runtime_abi():
    c, rust = checks.abi_layouts()
    assert c == rust
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in (a, a.T, a[1:, ::-2], a[::3]):
        assert checks.c_sum_f32(view) == pytest.approx(float(view.sum()))
    f = frames.from_dlpack(a[::2])
    assert checks.c_sum_f32(f) == pytest.approx(float(a[::2].sum()))
    with pytest.raises(TypeError):
        checks.c_sum_f32(np.arange(3))  # int64: refused by the C code, not misread
    assert checks.live_exports() == 0


def test_plain_pyclass_holds_a_borrow_while_exported():
    s = my_arrays.Samples([1.0, 2.0, 3.0])
    a = np.from_dlpack(s)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Already borrowed"):
            s.push(4.0)
    np.testing.assert_array_equal(a, [1.0, 2.0, 3.0])  # intact, still readable
    # A `Vec` is lent through `&`: the export is read-only (decision 0016).
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 10.0
    del a
    s.push(4.0)  # released: mutation works again
    assert np.from_dlpack(s).tolist() == [1.0, 2.0, 3.0, 4.0]
    gc.collect()
    s.push(5.0)
    assert np.from_dlpack(s)[-1] == 5.0
    assert checks.c_sum_f32(frames.from_dlpack(np.asarray([1.5, 2.5], np.float32))) == 4.0
    assert checks.live_exports() == 0


def test_jax_reads_samples_through_a_private_copy():
    """The README's first type to JAX 0.10, which asks for a legacy capsule: that capsule cannot
    say read-only, so under copy=None it is a private, writable copy (decision 0024). JAX reads
    the values, a consumer writing its capsule never reaches the Vec, the copy holds no borrow
    (push works while JAX holds it), and copy=False is refused."""
    import ctypes

    s = my_arrays.Samples([1.0, 2.0, 3.0])
    j = jnp.from_dlpack(s)
    np.testing.assert_array_equal(np.asarray(j), [1.0, 2.0, 3.0])
    s.push(4.0)  # the copy keeps no borrow of `s`
    np.testing.assert_array_equal(np.asarray(j), [1.0, 2.0, 3.0])
    vec = np.from_dlpack(s)  # versioned: zero-copy, read-only
    assert not vec.flags.writeable
    cap = s.__dlpack__()  # what JAX asked for
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)

    class Cap:  # hands numpy that capsule
        def __dlpack__(self, **_):
            return cap

        def __dlpack_device__(self):
            return (1, 0)

    view = np.from_dlpack(Cap())
    assert view.ctypes.data != vec.ctypes.data, "a legacy capsule of the Vec is a copy"
    ctypes.memset(view.ctypes.data, 0xFF, view.nbytes)  # a consumer writes what it was given
    assert vec.tolist() == [1.0, 2.0, 3.0, 4.0], "the Vec is never written"
    with pytest.raises(BufferError, match="copy=False"):
        s.__dlpack__(copy=False)
    del j, vec, view, cap
    gc.collect()
    s.push(5.0)
    assert checks.live_exports() == 0
    assert checks.c_sum_f32(frames.from_dlpack(np.asarray([1.5, 2.5], np.float32))) == 4.0
    assert checks.live_exports() == 0


def test_plain_pyclass_threads():
    s = my_arrays.Samples([float(i) for i in range(64)])
    errors = []

    def export_many():
        for _ in range(300):
            a = np.from_dlpack(s)
            assert a.sum() == sum(range(64))
            del a

    def mutate_many():
        for _ in range(300):
            try:
                s.push(0.0)  # keeps the sum; reallocates now and then
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
    values = np.from_dlpack(s).tolist()
    assert values[:64] == [float(i) for i in range(64)] and not any(values[64:])
    assert checks.live_exports() == 0
