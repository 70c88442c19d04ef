"""Interop edges that other projects' DLPack tests and real user flows found (issue 25).

1. Bridge offsets never wrap: `offset × itemsize` of `__sycl_usm_array_interface__` is computed
   exactly (BufferError when it leaves the address space); a property test drives every bridge
   (`__array_interface__` with a pointer or a buffer, CUDA and SYCL interfaces, the buffer
   protocol, numpy's header) with offsets, shapes and strides near the `i64` / `isize` limits.
2. Producers from before 2023 (`__dlpack__(self, stream=None)` only) are retried without the
   keywords also for `copy=False` and `device=`; the result is checked against the request.
3. A malformed `device` (a tuple of the wrong length) is a ValueError, as numpy's and dpctl's;
   a wrong type stays a TypeError.
4. Legacy data in, legacy data out: a view imported through a legacy capsule has *unknown*
   writability — exported READ_ONLY in versioned capsules, allowed through legacy ones — while
   known read-only data still refuses legacy export.
5. ml_dtypes arrays (bfloat16, float8) are imported zero-copy from numpy's header, and
   `Tensor.numpy()` gives an ml_dtypes-typed view back.

Every test runs under conftest's check that `live_exports()` returns to its start (each of
dlbind's deleters ran exactly once); producers here wrap dlbind's own capsules where a deleter
count matters.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlpack_helpers as H
import dlbind_demo as m

U64 = 1 << 64
ISIZE_MAX = (1 << 63) - 1


class SUAI:
    def __init__(self, d):
        self.__sycl_usm_array_interface__ = d


class CAI:
    def __init__(self, d):
        self.__cuda_array_interface__ = d


class AI:
    def __init__(self, d, keep=None):
        self.__array_interface__ = d
        self._keep = keep


# --------------------------------------------------------------------------- 1. offsets
@pytest.mark.parametrize("d", [
    {"data": (0x7F0000100000, False), "shape": (640,), "strides": (1,), "typestr": "<i8", "offset": 2**62,
     "version": 1},
    {"data": (0x7F0000100000, False), "shape": (4,), "strides": None, "typestr": "|u1", "offset": -2**63,
     "version": 1},
    {"data": (2**64 - 8, False), "shape": (1,), "strides": None, "typestr": "<i8", "offset": 1, "version": 1},
    {"data": (8, False), "shape": (1,), "strides": None, "typestr": "<i8", "offset": -2, "version": 1},
], ids=["2**62 x 8 wraps to 0", "-2**63 bytes", "past the top", "below 0"])
def test_sycl_offset_that_leaves_the_address_space_is_buffererror(d):
    with pytest.raises(BufferError, match="address space"):
        m.from_dlpack(SUAI(d))


def test_sycl_offset_in_range_moves_the_pointer():
    a = np.arange(8, dtype=np.int64)
    d = {"data": (a.ctypes.data, False), "shape": (4,), "strides": None, "typestr": "<i8", "offset": 3,
         "version": 1}
    t = m.from_dlpack(SUAI(d))
    assert t.data_ptr == a.ctypes.data + 3 * 8
    assert t.device == (14, 0)  # kDLOneAPI


@pytest.mark.parametrize("offset", [-1, -2**63, 17, 2**63 - 1])
def test_array_interface_buffer_offset_outside_the_buffer_even_when_empty(offset):
    buf = bytearray(16)
    for shape in [(0,), (2,)]:
        d = {"data": buf, "offset": offset, "shape": shape, "typestr": "|u1", "version": 3}
        with pytest.raises(BufferError, match="outside the 16-byte data buffer"):
            m.from_dlpack(AI(d))


def _extent(ptr, shape, strides, item):
    """Lowest and one-past-highest byte address the array reaches (Python ints, exact)."""
    if 0 in shape:
        return ptr, ptr
    lo = hi = 0
    for n, s in zip(shape, strides):
        r = (n - 1) * s
        if r < 0:
            lo += r
        else:
            hi += r
    return ptr + lo * item, ptr + (hi + 1) * item


def _fits(ptr, shape, strides, item):
    lo, hi = _extent(ptr, shape, strides, item)
    return 0 <= lo and hi <= U64 and hi - lo <= ISIZE_MAX


near_limits = st.one_of(
    st.integers(-4, 4),
    st.integers(-(2**63), -(2**63) + 4),
    st.integers(2**63 - 5, 2**63 - 1),
    st.integers(2**61, 2**62 + 4),
    st.integers(-(2**62) - 4, -(2**61)),
    st.integers(-(2**63), 2**63 - 1),
)
dims = st.one_of(st.integers(0, 4), st.integers(2**31, 2**32), st.integers(2**62, 2**63 - 1))
pointers = st.sampled_from([0, 8, 0x7F0000100000, 2**63, 2**64 - 64, 2**64 - 8])
typestrs = st.sampled_from([("|u1", 1), ("<i8", 8), ("<f4", 4)])
EDGE = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_pointer_bridge(make, ptr, shape, offset, item, device):
    """The import either fails with BufferError / ValueError (in-range requests may still be
    refused, e.g. by the span limit; any other exception fails the test), or describes exactly
    the requested memory, inside the address space, so an out-of-range request can only fail.
    Nothing is read: the pointers are arbitrary."""
    base = ptr + offset * item
    try:
        t = m.from_dlpack(make())
    except (BufferError, ValueError):
        return
    assert 0 <= base < U64, f"imported a pointer outside the address space: {base:#x}"
    assert t.data_ptr == base
    assert t.device[0] == device
    assert tuple(t.shape) == tuple(shape)
    assert _fits(base, shape, t.strides, item), (base, shape, t.strides)


@EDGE
@given(ptr=pointers, shape=st.lists(dims, min_size=1, max_size=3), data=st.data(), offset=near_limits,
       ts=typestrs)
def test_property_sycl_and_cuda_interfaces_never_wrap(ptr, shape, data, offset, ts):
    typestr, item = ts
    strides = data.draw(st.lists(near_limits, min_size=len(shape), max_size=len(shape)))
    suai = {"data": (ptr, False), "shape": tuple(shape), "strides": tuple(strides), "typestr": typestr,
            "offset": offset, "version": 1}
    _check_pointer_bridge(lambda: SUAI(suai), ptr, shape, offset, item, 14)
    cai = {"data": (ptr, False), "shape": tuple(shape), "strides": tuple(s * item for s in strides),
           "typestr": typestr, "version": 3}
    if all(-(2**63) <= s * item < 2**63 for s in strides):
        _check_pointer_bridge(lambda: CAI(cai), ptr, shape, 0, item, 2)


@EDGE
@given(ptr=pointers, shape=st.lists(dims, min_size=1, max_size=3), data=st.data(), ts=typestrs)
def test_property_array_interface_pointer_never_wraps(ptr, shape, data, ts):
    typestr, item = ts
    strides = data.draw(st.lists(near_limits, min_size=len(shape), max_size=len(shape)))
    byte_strides = tuple(s * item for s in strides)
    if not all(-(2**63) <= s < 2**63 for s in byte_strides):
        return
    d = {"data": (ptr, False), "shape": tuple(shape), "strides": byte_strides, "typestr": typestr, "version": 3}
    _check_pointer_bridge(lambda: AI(d), ptr, shape, 0, item, 1)


@EDGE
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data(), offset=near_limits, ts=typestrs)
def test_property_buffer_backed_views_stay_inside_the_buffer(shape, data, offset, ts):
    """`__array_interface__` with a buffer `data` and `offset` (a successful import lies inside
    the 64-byte buffer), and the buffer protocol and numpy's header over arrays made with
    `as_strided`, which checks nothing (a successful import never wraps)."""
    typestr, item = ts
    strides = data.draw(st.lists(near_limits, min_size=len(shape), max_size=len(shape)))
    raw = np.zeros(64, np.uint8)
    base = raw.ctypes.data
    byte_strides = tuple(s * item for s in strides)
    if not all(-(2**63) <= s < 2**63 for s in byte_strides):
        return

    def inside(t):
        lo, hi = _extent(t.data_ptr, tuple(t.shape), tuple(t.strides), item)
        return base <= lo and hi <= base + 64

    d = {"data": raw, "offset": offset, "shape": tuple(shape), "strides": byte_strides, "typestr": typestr,
         "version": 3}
    try:
        t = m.from_dlpack(AI(d, keep=raw))
    except (BufferError, ValueError):
        pass
    else:
        assert inside(t), (offset, shape, strides)
        del t
    try:
        arr = np.lib.stride_tricks.as_strided(raw[: item * 8].view(np.dtype(typestr)), shape=tuple(shape),
                                              strides=byte_strides)
    except (ValueError, OverflowError, TypeError):
        return  # numpy refuses to describe it at all
    # numpy's header and the buffer protocol describe memory dlbind cannot bound (as_strided
    # can point anywhere, as numpy itself would read): a successful import is exactly what the
    # array says, and inside the address space.
    for obj in (arr, memoryview(arr)):
        try:
            t = m.from_dlpack(obj)
        except (BufferError, ValueError, TypeError):
            continue
        assert t.data_ptr == arr.ctypes.data and tuple(t.shape) == tuple(shape)
        assert _fits(t.data_ptr, tuple(t.shape), tuple(t.strides), item), (type(obj), shape, strides)


# --------------------------------------------------------------------------- 2. old producers
@pytest.mark.parametrize("kw", [{"copy": False}, {"device": (1, 0)}, {"device": "cpu"}, {}],
                         ids=["copy=False", "device=(1,0)", "device=cpu", "none"])
def test_pre_2023_producer_is_retried_and_the_result_checked(Tensor, kw):
    """`__dlpack__(self, stream=None)` only: the keywords are dropped on the retry, and the
    result (a legacy capsule of host memory: a view) satisfies copy=False and device=CPU."""
    src = Tensor.from_bytes(np.arange(6, dtype=np.float32).tobytes(), (2, 3), "float32")
    p = H.LegacyOnly(src)
    before = m._testing.live_exports()
    t = m.from_dlpack(p, **kw)
    assert p.calls == [None], "the old signature was called once, without a stream for host memory"
    assert t.data_ptr == src.data_ptr, "a view"
    assert t.writability == "unknown"
    assert m._testing.live_exports() == before + 1
    del t
    assert m._testing.live_exports() == before, "the producer's deleter ran exactly once"


def test_pre_2023_producer_on_another_device_is_buffererror(Tensor):
    src = Tensor.zeros((3,), "float32")
    p = H.LegacyOnly(src)
    before = m._testing.live_exports()
    with pytest.raises(BufferError, match="not the requested") as ei:
        m.from_dlpack(p, device=(4, 0))  # kDLOpenCL: served by nobody here
    assert isinstance(ei.value.__cause__, TypeError) or ei.value.__cause__ is None
    assert p.calls == [None]
    assert m._testing.live_exports() == before


def test_pre_2023_producer_copy_true_is_copied_by_dlbind(Tensor):
    src = Tensor.from_bytes(np.arange(4, dtype=np.int32).tobytes(), (4,), "int32")
    p = H.LegacyOnly(src)
    t = m.from_dlpack(p, copy=True)
    assert t.data_ptr != src.data_ptr and t.writability == "writable"
    assert np.array_equal(np.from_dlpack(t), np.arange(4, dtype=np.int32))


# --------------------------------------------------------------------------- 3. device argument
@pytest.mark.parametrize("dev", [(1, 0, 0), (1,), ()], ids=str)
def test_device_tuple_of_the_wrong_length_is_valueerror_like_numpy(dev):
    a = np.arange(3.0)
    with pytest.raises(ValueError) as theirs:
        np.from_dlpack(a, device=dev)
    for f in (m.from_dlpack, m.Tensor.from_dlpack):
        with pytest.raises(ValueError, match="pair"):
            f(a, device=dev)
    assert type(theirs.value) is ValueError


@pytest.mark.parametrize("dev", [[1, 0], ("a", 0), 3, 1.5, (1.0, 0)], ids=repr)
def test_device_of_the_wrong_type_is_typeerror(dev):
    with pytest.raises(TypeError, match="device must be"):
        m.from_dlpack(np.arange(3.0), device=dev)


# --------------------------------------------------------------------------- 4. writability
def _legacy_capsule_of(Tensor):
    src = Tensor.from_bytes(np.arange(6, dtype=np.float32).tobytes(), (2, 3), "float32")
    return src, src.__dlpack__()


def test_legacy_import_has_unknown_writability_and_leaves_legacy_again(Tensor):
    src, cap = _legacy_capsule_of(Tensor)
    t = m.from_dlpack(cap)
    assert t.writability == "unknown" and t.readonly
    # legacy out: allowed, nothing lost
    info = H.inspect_capsule(t.__dlpack__())
    assert not info.versioned and info.data == src.data_ptr
    # versioned out: READ_ONLY, since nobody said it may be written
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 0)))
    assert info.versioned and info.flags & H.FLAG_READ_ONLY
    # views keep it; set_readonly makes it known read-only
    assert t.transpose().writability == "unknown"
    ro = t.set_readonly()
    assert ro.writability == "readonly"
    with pytest.raises(BufferError):
        ro.__dlpack__(copy=False)
    info = H.inspect_capsule(ro.__dlpack__())  # known read-only now: a legacy request copies
    assert not info.versioned and info.data != src.data_ptr
    # numpy, a legacy-capable consumer, reads it
    assert np.array_equal(np.from_dlpack(t), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_known_read_only_data_leaves_legacy_only_as_a_copy(Tensor):
    a = np.arange(4.0)
    a.flags.writeable = False
    t = m.from_dlpack(a)
    assert t.writability == "readonly"
    with pytest.raises(BufferError):
        t.__dlpack__(copy=False)
    info = H.inspect_capsule(t.__dlpack__())
    assert not info.versioned and info.data != a.ctypes.data
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 0)))
    assert info.flags & H.FLAG_READ_ONLY and info.data == a.ctypes.data
    ro = Tensor.from_bytes(b"\0" * 8, (2,), "float32", readonly=True)
    assert ro.writability == "readonly"
    with pytest.raises(BufferError):
        ro.__dlpack__(copy=False)
    assert H.inspect_capsule(ro.__dlpack__()).data != ro.data_ptr


def test_versioned_import_is_writable_or_read_only_as_flagged(Tensor):
    src = Tensor.zeros((3,), "float32")
    assert m.from_dlpack(src.__dlpack__(max_version=(1, 0))).writability == "writable"
    assert m.from_dlpack(src.set_readonly().__dlpack__(max_version=(1, 0))).writability == "readonly"


# --------------------------------------------------------------------------- 4b. JAX round trips
@pytest.mark.parametrize("name", ["float32", "bfloat16", "float8_e4m3fn"])
def test_jax_round_trip(name):
    jnp = pytest.importorskip("jax.numpy", reason="JAX is a pinned test peer; not installed here")
    dt = getattr(jnp, name)
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4).astype(dt)
    t = m.from_dlpack(x)
    assert t.dtype == name and t.writability == "unknown"
    y = jnp.from_dlpack(t)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert bool((y.astype(jnp.float32) == x.astype(jnp.float32)).all())


# --------------------------------------------------------------------------- 5. ml_dtypes
ML_NAMES = ["bfloat16", "bcomplex32", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
            "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]


@pytest.mark.parametrize("name", ML_NAMES)
def test_ml_dtypes_arrays_import_zero_copy_and_come_back_typed(name):
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is a pinned test peer; not installed here")
    if not hasattr(ml, name):
        pytest.skip(f"this ml_dtypes has no {name}")
    spec_names = {d.name for d in H.DTYPES}
    assert name in spec_names, "the spec's dtype table is the mapping"
    dt = getattr(ml, name)
    a = np.arange(1, 13, dtype=np.float32).reshape(3, 4).astype(dt)
    before = m._testing.numpy_fast_imports()
    t = m.from_dlpack(a)
    after = m._testing.numpy_fast_imports()
    assert after == before + 1, "read from numpy's header"
    assert t.dtype == name and t.data_ptr == a.ctypes.data and t.writability == "writable"
    wide = np.complex64 if "complex" in name else np.float32
    v = t.numpy()
    assert v.dtype == np.dtype(dt) and np.shares_memory(v, a)
    assert np.array_equal(v.astype(wide), a.astype(wide), equal_nan=True)
    # a strided view too
    s = a[:, ::2]
    ts = m.from_dlpack(s)
    assert tuple(ts.strides) == (4, 2) and ts.data_ptr == s.ctypes.data
    assert np.array_equal(ts.numpy().astype(wide), s.astype(wide), equal_nan=True)


def test_plain_void_dtypes_are_not_mistaken_for_ml_dtypes():
    with pytest.raises(BufferError):
        m.from_dlpack(np.zeros(3, dtype="V2"))


def test_sub_byte_ml_dtypes_stay_numpys_decision():
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is a pinned test peer; not installed here")
    with pytest.raises(BufferError):
        m.from_dlpack(np.zeros(4, dtype=ml.float4_e2m1fn))
