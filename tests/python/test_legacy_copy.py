"""Issue 51, item 1: `copy=None` copies when reuse is not possible (decision 0024).

A legacy capsule (no `max_version`, or a major below 1: what JAX 0.10 asks for) has no READ_ONLY
flag, so read-only memory cannot be reused through one. The array API's `copy=None` means "reuse
the existing memory buffer if possible and copy otherwise": such a request gets a private,
writable copy, `copy=False` the spec's ReadOnlyLegacy (BufferError), and a versioned request
keeps the zero-copy read-only export. Checked here on the demo's `Growable` (a plain `#[pyclass]`
over a `Vec<f32>`, like the README's `Samples`), a read-only import, derived ndarray fields (an
owned array and a shared `ArcArray`) and a read-only `Tensor`; the README's `Samples` itself in
examples/downstream/tests/test_downstream.py. Each: JAX's own import reads the values, a consumer
writing into what a legacy request got never reaches the original memory, and every export's
deleter runs once (the conftest fixture's `live_exports()` check).
"""

import ctypes
import gc

import numpy as np
import pytest

import dlpack_helpers as H
import dlbind_demo as dd
from conftest import readonly_view

jax = pytest.importorskip("jax", reason="JAX is a pinned test peer (scripts/requirements-test.txt)")
jnp = jax.numpy

EXC = H.SPEC.exc


def _ro_numpy():
    a = np.arange(6, dtype=np.float64).reshape(2, 3) * 1.5
    a.flags.writeable = False
    return a


# name -> (make the source, the values it holds, the memory it must never see written)
SOURCES = {
    "Growable": lambda: (dd.Growable([1.0, 2.0, 3.0]), np.array([1, 2, 3], np.float32)),
    "read-only import": lambda: (lambda a: (dd.from_dlpack(a), a))(_ro_numpy()),
    "ndarray field": lambda: (dd.hygiene.grid(), np.arange(6, dtype=np.float64).reshape(2, 3)),
    "shared ArcArray field": lambda: (dd.hygiene.bytes(), np.arange(1, 6, dtype=np.uint8)),
    "read-only Tensor": lambda: (readonly_view(dd.Tensor.arange(4, dtype="int32")),
                                 np.arange(4, dtype=np.int32)),
}


@pytest.fixture(params=sorted(SOURCES))
def source(request):
    x, want = SOURCES[request.param]()
    versioned = x.__dlpack__(max_version=(1, 0))
    info = H.inspect_capsule(versioned)
    assert info.flags & H.FLAG_READ_ONLY, f"{request.param} must export read-only (the premise)"
    yield x, want, info.data
    del versioned


def test_jax_reads_read_only_sources(source):
    x, want, _ = source
    spy = H.Spy(x)
    j = jnp.from_dlpack(spy)
    # JAX without x64 keeps 64-bit values as 32-bit ones: the values are what is compared.
    np.testing.assert_array_equal(np.asarray(j), want.astype(np.asarray(j).dtype))
    # The premise: the pinned JAX (0.10) asks for a legacy capsule, without copy.
    (_, kw), = spy.calls
    assert "max_version" not in kw and "copy" not in kw, kw


def test_a_legacy_request_gets_a_private_writable_copy(source):
    x, want, data = source
    for req in ({}, {"max_version": None}, {"max_version": (0, 8)}, {"copy": None},
                {"dl_device": (1, 0)}):
        cap = x.__dlpack__(**req)
        info = H.inspect_capsule(cap)
        assert not info.versioned, req
        assert info.data != data, f"{req}: a legacy capsule of read-only memory must be a copy"
        del cap
    # A legacy consumer may write what it got (the capsule has no READ_ONLY flag; torch does):
    # write every byte of the copy, as such a consumer would.
    cap = x.__dlpack__()
    info = H.inspect_capsule(cap)
    ctypes.memset(info.data + info.byte_offset, 0x5A, want.nbytes)
    written = np.from_dlpack(H.W(cap))
    np.testing.assert_array_equal(written.reshape(-1).view(np.uint8), np.full(want.nbytes, 0x5A, np.uint8))
    # ... and the original memory is untouched: its versioned, zero-copy view still holds it.
    again = np.from_dlpack(x)
    assert again.ctypes.data == data and not again.flags.writeable
    np.testing.assert_array_equal(again, want)


def test_copy_false_refuses_what_only_a_copy_could_serve(source):
    x, _, _ = source
    for req in ({"copy": False}, {"copy": False, "max_version": (0, 9)}):
        with pytest.raises(EXC("ReadOnlyLegacy"), match="copy=False"):
            x.__dlpack__(**req)
    # Versioned, copy=False: the zero-copy read-only export.
    info = H.inspect_capsule(x.__dlpack__(max_version=(1, 0), copy=False))
    assert info.flags & H.FLAG_READ_ONLY and not info.flags & H.FLAG_IS_COPIED


def test_versioned_copy_none_stays_zero_copy(source):
    x, _, data = source
    info = H.inspect_capsule(x.__dlpack__(max_version=(1, 3), copy=None))
    assert info.versioned and info.data == data
    assert info.flags & H.FLAG_READ_ONLY and not info.flags & H.FLAG_IS_COPIED


def test_a_copy_holds_no_borrow_of_a_plain_pyclass():
    """The copy owns its memory: `Growable.push` works while JAX holds it (a zero-copy export
    still blocks it: `&mut self` must not move memory a consumer reads)."""
    g = dd.Growable([1.0, 2.0])
    j = jnp.from_dlpack(g)
    g.push(3.0)
    np.testing.assert_array_equal(np.asarray(j), [1.0, 2.0])
    a = np.from_dlpack(g)
    with pytest.raises(RuntimeError, match="Already borrowed"):
        g.push(4.0)
    del a
    gc.collect()
    g.push(4.0)
    np.testing.assert_array_equal(np.from_dlpack(g), [1.0, 2.0, 3.0, 4.0])


def test_writable_and_unknown_memory_still_leave_zero_copy():
    """Only memory known to be read-only is copied: a writable Tensor, and a view of JAX's
    legacy capsule (unknown writability: it loses nothing it had), leave as they are."""
    t = dd.Tensor.arange(4, dtype="float32")
    info = H.inspect_capsule(t.__dlpack__())
    assert not info.versioned and info.data == t.data_ptr
    v = dd.from_dlpack(jnp.arange(5.0, dtype=jnp.float32))
    assert v.writability == "unknown"
    info = H.inspect_capsule(v.__dlpack__())
    assert not info.versioned and info.data == v.data_ptr
