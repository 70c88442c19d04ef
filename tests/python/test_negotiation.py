"""max_version negotiation, consumer kwargs and fallbacks, copy semantics (cases 1-13, 44-47)."""
import numpy as np
import pytest

import dlpack_helpers as H
from conftest import readonly_view, tensor_from_np

OUR_VERSION = H.SPEC.version


@pytest.mark.parametrize("kw", [{}, {"max_version": None}, {"max_version": (0, 8)}, {"max_version": (0, 0)},
                                {"max_version": (0, 99)}, {"stream": None}])
def test_legacy_default(Tensor, kw):
    cap = Tensor.zeros((2,)).__dlpack__(**kw)
    assert H.is_capsule(cap)
    assert H.capsule_name(cap) == H.LEGACY
    assert not H.inspect_capsule(cap).versioned


@pytest.mark.parametrize("mv", [(1, 0), (1, 1), (1, 3), (1, 7)])
def test_versioned(Tensor, mv):
    cap = Tensor.zeros((2,)).__dlpack__(max_version=mv)
    info = H.inspect_capsule(cap)
    assert info.name == H.VERSIONED
    assert info.version == OUR_VERSION, f"exported version {info.version}, spec says {OUR_VERSION}"
    assert info.flags == 0  # writable, not copied


@pytest.mark.parametrize("mv", [(2, 0), (10, 10), (100, 3)])
def test_future_max_version(Tensor, mv):
    info = H.inspect_capsule(Tensor.zeros((2,)).__dlpack__(max_version=mv))
    assert info.name == H.VERSIONED and info.version == OUR_VERSION


def test_consumer_kwargs_spy(m, Tensor):
    """Case 8/52: one keyword-only call with max_version=(1, 3), no stream for a CPU producer."""
    spy = H.Spy(Tensor.arange(4))
    t = m.from_dlpack(spy)
    assert len(spy.calls) == 1
    args, kw = spy.calls[0]
    assert args == ()
    assert tuple(kw["max_version"]) == OUR_VERSION
    assert kw.get("stream") is None
    assert kw.get("dl_device") in (None, (1, 0))
    assert kw.get("copy") is None
    assert set(kw) <= {"max_version", "dl_device", "copy", "stream"}
    assert t.data_ptr == spy.inner.data_ptr


@pytest.mark.parametrize("device", ["kDLCUDA", "kDLROCM"])
def test_consumer_passes_its_stream_to_a_gpu_producer(m, device):
    """A producer asked without a stream (the call names no device) whose capsule is on a
    device with streams is asked again with the consumer's stream for it (the spec's consumer
    default when none is current): torch reads stream=None as "no synchronisation". The first
    export is released (its deleter runs; the autouse fixture checks nothing leaks)."""
    dev = (H.SPEC.device_type(device), 0)
    p = H.fresh_producer(lambda: H.device_tagged_capsule(np.arange(3.0), dev[0]), dev=dev)
    t = m.from_dlpack(p)
    assert tuple(t.device) == dev
    assert len(p.calls) == 2 and "stream" not in p.calls[0]
    assert p.calls[1]["stream"] == H.SPEC.consumer_default_stream(device)
    assert p.calls[1]["stream"] not in (None, -1)
    assert p.device_calls == 0


def test_a_gpu_producer_type_is_asked_its_device_first_next_time(m):
    """After a type's first GPU export (asked without a stream, then again with one), its next
    objects are asked `__dlpack_device__` first and exported once, with the stream; a host object
    of that type then gets one export without a stream."""
    cuda = H.SPEC.device_type("kDLCUDA")
    first = H.fresh_producer(lambda: H.device_tagged_capsule(np.arange(3.0), cuda), dev=(cuda, 0))
    m.from_dlpack(first)
    assert len(first.calls) == 2
    again = type(first)(lambda: H.device_tagged_capsule(np.arange(3.0), cuda), (cuda, 0))
    assert tuple(m.from_dlpack(again).device) == (cuda, 0)
    assert again.device_calls == 1 and len(again.calls) == 1
    assert again.calls[0]["stream"] == H.SPEC.consumer_default_stream("kDLCUDA")
    host = type(first)(lambda: np.arange(2.0).__dlpack__(max_version=(1, 0)), (1, 0))
    assert tuple(m.from_dlpack(host).device) == (1, 0)
    assert host.device_calls == 1 and len(host.calls) == 1 and "stream" not in host.calls[0]


def test_host_producer_is_called_once_without_a_device_query(m, Tensor):
    """Host producers (the common case) pay nothing for the GPU ordering: one `__dlpack__`
    call, no stream, no `__dlpack_device__` call."""
    spy = H.Spy(Tensor.arange(4))
    m.from_dlpack(spy)
    assert len(spy.calls) == 1 and "stream" not in spy.calls[0][1]
    assert spy.device_calls == 0


class LegacyCuda:
    """An old producer (`__dlpack__(self, stream=None)`) whose capsules say CUDA memory. Defined
    at import, so no type the consumer remembered can have had its address."""

    def __init__(self):
        self.calls, self.arr = [], np.arange(4.0)

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return H.device_tagged_capsule(self.arr, H.SPEC.device_type("kDLCUDA"), legacy=True)

    def __dlpack_device__(self):
        return (H.SPEC.device_type("kDLCUDA"), 0)


def test_legacy_gpu_producer_retry_keeps_the_stream(m):
    """An old producer (`__dlpack__(self, stream=None)`) on CUDA: the retry without the 2023.12
    keywords still passes the consumer's stream."""
    q = LegacyCuda()
    assert m.from_dlpack(q).shape == (4,)
    assert q.calls == [None, H.SPEC.consumer_default_stream("kDLCUDA")]


@pytest.mark.parametrize("copy", [True, False])
def test_consumer_forwards_copy(m, copy):
    spy = H.Spy(np.arange(4.0))
    t = m.from_dlpack(spy, copy=copy)
    # copy=False must reach the producer; copy=True may be forwarded or done by the consumer
    assert spy.calls[0][1].get("copy") in ((True, None) if copy else (False,))
    assert (t.data_ptr == spy.inner.ctypes.data) is (not copy)


def test_consumer_forwards_device(m):
    spy = H.Spy(np.arange(4.0))
    m.from_dlpack(spy, device=(1, 0))
    assert tuple(spy.calls[0][1].get("dl_device")) == (1, 0)


def test_legacy_producer_fallback(m):
    """Case 9: __dlpack__(self, stream=None) only -> TypeError -> retry without new kwargs."""
    a = np.arange(6, dtype=np.float32)
    p = H.LegacyOnly(a)
    t = m.from_dlpack(p)
    assert len(p.calls) == 1  # the first (kwargs) call failed before reaching the body
    assert t.data_ptr == a.ctypes.data
    assert t.readonly is True  # legacy capsule: imported read-only
    assert t.tobytes() == a.tobytes()


def test_legacy_producer_copy_request(m):
    """Case 10: copy=True with a legacy-only producer -> TypeError or a real copy, never an alias."""
    a = np.arange(6, dtype=np.float32)
    try:
        t = m.from_dlpack(H.LegacyOnly(a), copy=True)
    except TypeError:
        return
    assert t.data_ptr != a.ctypes.data
    assert t.tobytes() == a.tobytes()


def test_choice_legacy_producer_copy_true_is_copied(m):
    """dlbind's documented choice for case 10 (README "Choices": from_dlpack(copy=True) asks for
    a view and copies it itself), pinned: a real copy, not a TypeError."""
    a = np.arange(6, dtype=np.float32)
    p = H.LegacyOnly(a)
    t = m.from_dlpack(p, copy=True)
    assert t.data_ptr != a.ctypes.data and t.tobytes() == a.tobytes()
    assert p.calls == [None], "the old signature was called once, without a stream"


def test_choice_copy_true_legacy_capsule_copies_without_flag(Tensor):
    """dlbind's documented choice for case 46 (numpy's): a legacy capsule for copy=True holds
    a copy (there is no IS_COPIED flag to set), not a BufferError."""
    t = Tensor.arange(5)
    cap = t.__dlpack__(copy=True)
    assert H.capsule_name(cap) == H.LEGACY and H.inspect_capsule(cap).data != t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(H.W(cap)), np.arange(5))


def test_versioned_only_producer(m):
    """Case 11: a producer that refuses legacy requests still imports (we ask for (1, 3))."""
    a = np.arange(3, dtype=np.int64)

    class VOnly:
        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            if max_version is None or max_version[0] < 1:
                raise BufferError("versioned only")
            return a.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)

        def __dlpack_device__(self):
            return (1, 0)

    t = m.from_dlpack(VOnly())
    assert t.data_ptr == a.ctypes.data and t.readonly is False


def test_versioned_import_writable_flag(m):
    """Case 42: a versioned capsule without READ_ONLY gives a writable view that writes through."""
    a = np.zeros(4, np.int32)
    t = m.from_dlpack(a)
    assert t.readonly is False
    b = np.from_dlpack(t)
    assert b.flags.writeable
    b[1] = 9
    assert a[1] == 9


def test_readonly_import(m):
    """Case 43: a read-only numpy array is never imported writable."""
    a = np.arange(4.0)
    a.flags.writeable = False
    t = m.from_dlpack(a)
    assert t.readonly is True
    assert not np.from_dlpack(t).flags.writeable


@pytest.mark.parametrize("ctor", ["from_dlpack", "Tensor.from_dlpack"])
def test_self_roundtrip(m, Tensor, ctor):
    f = m.from_dlpack if ctor == "from_dlpack" else Tensor.from_dlpack
    t = Tensor.arange(8, "float64").slice(0, 1, 8, 2)
    u = f(t)
    assert isinstance(u, Tensor)
    assert u.data_ptr == t.data_ptr and tuple(u.shape) == tuple(t.shape)
    assert tuple(u.strides) == tuple(t.strides) and u.dtype == t.dtype
    assert u.readonly is False and u.tobytes() == t.tobytes()


# ---------------------------------------------------------------- copy
@pytest.mark.parametrize("copy", [None, False])
def test_copy_none_false_share(Tensor, copy):
    t = Tensor.arange(5)
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), copy=copy))
    assert info.data == t.data_ptr and not info.flags & H.FLAG_IS_COPIED
    a = np.from_dlpack(t, copy=copy)
    assert a.ctypes.data == t.data_ptr


def test_copy_true_export(Tensor):
    t = readonly_view(Tensor.arange(6, "int32").reversed(0))
    cap = t.__dlpack__(max_version=(1, 3), copy=True)
    info = H.inspect_capsule(cap)
    assert info.flags & H.FLAG_IS_COPIED
    assert not info.flags & H.FLAG_READ_ONLY, "a fresh copy is writable"
    assert info.data != t.data_ptr
    b = np.from_dlpack(H.W(cap))
    np.testing.assert_array_equal(b, np.arange(6)[::-1])
    assert b.flags.writeable
    b[0] = 100
    assert np.from_dlpack(t)[0] == 5  # the source did not change


@pytest.mark.parametrize("flag", [np.True_, np.False_], ids=["np.True_", "np.False_"])
def test_copy_takes_numpy_bools(Tensor, m, flag):
    """`copy=` takes numpy bool scalars, as numpy's own `from_dlpack` does (users pass
    `copy=a.ndim > 0` with numpy values): each means what the Python bool means."""
    t = Tensor.arange(5)
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), copy=flag))
    assert bool(info.flags & H.FLAG_IS_COPIED) == bool(flag)
    assert (info.data == t.data_ptr) != bool(flag)
    for f in (m.from_dlpack, Tensor.from_dlpack):
        v = f(t, copy=flag)
        assert (v.data_ptr == t.data_ptr) != bool(flag)
        a = np.arange(3.0)
        w = f(a, copy=flag)
        assert (w.data_ptr == a.ctypes.data) != bool(flag)
        np.testing.assert_array_equal(np.from_dlpack(w), a)


@pytest.mark.parametrize("bad", [np.int64(1), 1, 0, 2.0, np.float32(1)], ids=repr)
def test_copy_refuses_other_truthy_objects(Tensor, m, bad):
    """Only bools (Python or numpy) are flags: numpy would read `copy=0` as False and `copy=2.0`
    as True; here they are a TypeError."""
    with pytest.raises(TypeError, match="copy must be"):
        Tensor.arange(2).__dlpack__(max_version=(1, 3), copy=bad)
    with pytest.raises(TypeError, match="copy must be"):
        m.from_dlpack(Tensor.arange(2), copy=bad)


def test_numpy_copy_true_does_not_share(Tensor):
    t = Tensor.arange(5)
    a = np.from_dlpack(t, copy=True)
    assert a.ctypes.data != t.data_ptr
    np.testing.assert_array_equal(a, np.arange(5))


def test_copy_true_legacy(Tensor):
    """Case 46: copy=True with a legacy request copies (no flag to set) or raises BufferError."""
    t = Tensor.arange(5)
    try:
        cap = t.__dlpack__(copy=True)
    except BufferError:
        return
    assert H.capsule_name(cap) == H.LEGACY
    info = H.inspect_capsule(cap)
    assert info.data != t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(H.W(cap)), np.arange(5))


@pytest.mark.parametrize("src", ["contiguous", "transposed", "reversed", "readonly"])
def test_from_dlpack_copy_true(m, src):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = {"contiguous": a, "transposed": a.T, "reversed": a[::-1, ::-1], "readonly": np.broadcast_to(a[0], (3, 4))}[src]
    t = m.from_dlpack(x, copy=True)
    assert t.readonly is False
    if x.size:
        assert not (x.ctypes.data <= t.data_ptr < x.ctypes.data + x.nbytes + 64)
    assert t.tobytes() == x.tobytes()
    np.testing.assert_array_equal(np.from_dlpack(t), x)
    n = x.shape[1]
    assert tuple(t.strides) == (n, 1), "copies are C-contiguous"
    assert t.data_ptr % 64 == 0


def test_from_dlpack_copy_false_shares(m):
    a = np.arange(10.0)[::2]
    t = m.from_dlpack(a, copy=False)
    assert t.data_ptr == a.ctypes.data


def test_copy_true_pyarrow_is_writable(m):
    pa = pytest.importorskip("pyarrow")
    arr = pa.array(np.arange(5, dtype=np.int32))
    t = m.from_dlpack(arr, copy=True)
    assert t.readonly is False
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(5))


def test_strict_2022_12_producer_error_is_not_retried(m):
    """Case 13, older api_version: array-api-strict in 2022.12 mode raises ValueError for
    `max_version`. Only a TypeError means "old signature" (the retry rule), so the producer's
    ValueError reaches the caller unchanged, as it does from numpy's `from_dlpack`."""
    xp = pytest.importorskip("array_api_strict")
    with xp.ArrayAPIStrictFlags(api_version="2022.12"):
        y = xp.asarray([1, 2, 3])
        with pytest.raises(ValueError, match="2023.12") as ours:
            m.from_dlpack(y)
        with pytest.raises(ValueError) as theirs:
            np.from_dlpack(y)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


def test_strict_api_version_roundtrip(m, Tensor):
    """Case 13: array-api-strict consumer of a Tensor and Tensor consumer of an xp array."""
    xp = pytest.importorskip("array_api_strict")
    t = tensor_from_np(np.arange(6, dtype=np.float32).reshape(2, 3))
    x = xp.from_dlpack(t)
    assert x.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(x), np.arange(6).reshape(2, 3))
    y = xp.asarray([[1, 2], [3, 4]], dtype=xp.int64)
    u = m.from_dlpack(y)
    assert u.dtype == "int64" and tuple(u.shape) == (2, 2)
    assert np.frombuffer(u.tobytes(), np.int64).tolist() == [1, 2, 3, 4]
    assert tuple(y.__dlpack_device__()) == (1, 0)
