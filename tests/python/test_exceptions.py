"""Every error of issue 3, with the exception class read from the spec's failure mapping."""
import gc
import sys

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import readonly_view

EXC = H.SPEC.exc


# ---------------------------------------------------------------- argument types
def test_positional_args_rejected(Tensor):
    t = Tensor.zeros((2,))
    with pytest.raises(TypeError):
        t.__dlpack__(None)
    with pytest.raises(TypeError):
        t.__dlpack__(None, (1, 3))


def test_unknown_kwarg_rejected(Tensor):
    with pytest.raises(TypeError):
        Tensor.zeros((2,)).__dlpack__(foo=1)


def test_from_dlpack_kwonly(m):
    a = np.zeros(2)
    with pytest.raises(TypeError):
        m.from_dlpack(a, None)
    with pytest.raises(TypeError):
        m.from_dlpack(a, None, None)
    with pytest.raises(TypeError):
        m.from_dlpack(x=a)
    with pytest.raises(TypeError):
        m.from_dlpack(a, bogus=1)


@pytest.mark.parametrize("bad", [1, [1, 0], (1,), (1, 0, 0), "1.3", (1, "3"), (1.0, 3), {1: 3}])
def test_bad_max_version_type(Tensor, bad):
    with pytest.raises(EXC("BadArgumentType")):
        Tensor.zeros((2,)).__dlpack__(max_version=bad)


@pytest.mark.parametrize("bad", [[1, 0], (1,), (1, 0, 0), "cpu", 1, (1.0, 0), ("1", "0")])
def test_bad_dl_device_type(Tensor, bad):
    with pytest.raises(EXC("BadArgumentType")):
        Tensor.zeros((2,)).__dlpack__(max_version=(1, 3), dl_device=bad)


def test_dl_device_method_object_rejected(Tensor):
    t = Tensor.zeros((2,))
    with pytest.raises(EXC("BadArgumentType")):
        t.__dlpack__(dl_device=t.__dlpack_device__)


@pytest.mark.parametrize("bad", ["yes", 1.5, [], "True", 2])
def test_bad_copy_type(Tensor, bad):
    with pytest.raises(EXC("BadArgumentType")):
        Tensor.zeros((2,)).__dlpack__(max_version=(1, 3), copy=bad)


@pytest.mark.parametrize("bad", [object(), "1", 1.5, (1,), b"\x01"])
def test_bad_stream_type(Tensor, bad):
    with pytest.raises(EXC("BadArgumentType")):
        Tensor.zeros((2,)).__dlpack__(stream=bad)


# ---------------------------------------------------------------- streams
@pytest.mark.parametrize("stream", [-1, 0, 1, 2, 3, 12345, -2])
@pytest.mark.parametrize("mv", [None, (1, 3)])
def test_stream_on_cpu(Tensor, stream, mv):
    """CPU is stream-less in the spec: only stream=None is accepted (case 51)."""
    assert not H.SPEC.cpu_stream_ok(stream)
    with pytest.raises(EXC("InvalidStream")):
        Tensor.zeros((2,)).__dlpack__(stream=stream, max_version=mv)


def test_stream_none_ok(Tensor):
    assert H.capsule_name(Tensor.zeros((2,)).__dlpack__(stream=None)) == H.LEGACY


def test_stream_error_is_not_consumed_or_leaked(m, Tensor):
    t = Tensor.zeros((2,))
    base, live = sys.getrefcount(t), m._testing.live_exports()
    for _ in range(50):
        with pytest.raises(EXC("InvalidStream")):
            t.__dlpack__(stream=1)
    assert sys.getrefcount(t) == base and m._testing.live_exports() == live


# ---------------------------------------------------------------- read-only
def test_readonly_legacy_without_copy_rejected(Tensor):
    """A legacy capsule cannot say read-only: with copy=False nothing can serve the request."""
    t = readonly_view(Tensor.zeros((3,)))
    assert t.readonly
    with pytest.raises(EXC("ReadOnlyLegacy"), match="max_version"):
        t.__dlpack__(copy=False)
    with pytest.raises(EXC("ReadOnlyLegacy"), match="copy=False"):
        t.__dlpack__(max_version=(0, 8), copy=False)


def test_readonly_legacy_copy_none_is_a_copy(Tensor):
    """copy=None: reuse is not possible, so a private copy (decision 0024)."""
    for t in (readonly_view(Tensor.arange(3)),
              Tensor.from_bytes(b"\1" * 8, (2,), "float32", readonly=True)):
        for req in ({}, {"max_version": (0, 8)}, {"copy": None}):
            info = H.inspect_capsule(t.__dlpack__(**req))
            assert not info.versioned and info.data != t.data_ptr, req
    t = Tensor.from_bytes(b"\0" * 8, (2,), "float32", readonly=True)
    with pytest.raises(EXC("ReadOnlyLegacy")):
        t.__dlpack__(copy=False)


def test_readonly_versioned_flag(Tensor):
    t = readonly_view(Tensor.zeros((3,)))
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info.flags & H.FLAG_READ_ONLY
    a = np.from_dlpack(t)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1


def test_readonly_to_jax_is_a_copy(Tensor):
    """JAX only asks for legacy capsules (jax#40789), so a read-only tensor reaches JAX as a
    private copy (copy=None; decision 0024)."""
    jnp = pytest.importorskip("jax.numpy")
    t = readonly_view(Tensor.arange(3, "float32"))
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)), [0, 1, 2])


def test_readonly_copy_true_legacy_is_a_copy(Tensor):
    """copy=True of read-only data gives a fresh writable buffer: a legacy capsule (no flags)
    of it, never an alias."""
    t = readonly_view(Tensor.arange(3))
    info = H.inspect_capsule(t.__dlpack__(copy=True))
    assert not info.versioned and info.data != t.data_ptr


# ---------------------------------------------------------------- copy / dl_device
@pytest.mark.parametrize("dev", [
    pytest.param((2, 0), marks=pytest.mark.skipif(
        H.HAS_CUDA, reason="a CUDA driver is present: CPU → CUDA is a host-to-device copy (test_cuda.py)")),
    (13, 0), (10, 0), (4, 0), (9, 0), (1, 1), (1, 2 ** 30), (99, 0)])
def test_unsupported_dl_device(Tensor, dev):
    with pytest.raises(BufferError) as ei:
        Tensor.zeros((2,)).__dlpack__(max_version=(1, 3), dl_device=dev)
    assert ei.type in (EXC("UnsupportedDevice"), EXC("DeviceUnavailable"), EXC("CopyRequired"))


@pytest.mark.parametrize("dev", [(2, 0), (3, 0), (13, 0)])
def test_copy_false_cross_device_is_buffererror(Tensor, dev):
    with pytest.raises(EXC("CopyRequired")):
        Tensor.zeros((2,)).__dlpack__(max_version=(1, 3), dl_device=dev, copy=False)


def test_from_dlpack_copy_false_other_device(m):
    with pytest.raises(BufferError):
        m.from_dlpack(np.zeros(3), device=(2, 0), copy=False)


def test_dl_device_cpu_ok(Tensor):
    t = Tensor.zeros((2,))
    for dev in (None, (1, 0), (H.KDLCPU, 0)):
        info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=dev))
        assert info.device == (1, 0) and info.data == t.data_ptr


def test_from_dlpack_device_cpu_ok(m):
    a = np.arange(3.0)
    for dev in (None, (1, 0)):
        t = m.from_dlpack(a, device=dev)
        assert t.data_ptr == a.ctypes.data


def test_from_dlpack_device_string_cpu(m):
    """Case 47: from_dlpack(device="cpu") is accepted (array-API style device object)."""
    a = np.arange(3.0)
    t = m.from_dlpack(a, device="cpu")
    assert t.data_ptr == a.ctypes.data


def test_from_dlpack_device_unsupported(m):
    with pytest.raises((BufferError, ValueError, TypeError)):
        m.from_dlpack(np.arange(3.0), device="not-a-device")


# ---------------------------------------------------------------- capsule states
def test_version_too_new_not_consumed(m):
    """major=2 -> BufferError; the capsule keeps its name and is freed exactly once (case 7)."""
    a = np.arange(5, dtype=np.float32)
    base = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 0))
    assert sys.getrefcount(a) == base + 1
    H.versioned_struct_of(cap).version.major = 2
    w = H.W(cap)
    with pytest.raises(EXC("VersionTooNew")):
        m.from_dlpack(w)
    assert H.capsule_name(cap) == H.VERSIONED
    assert sys.getrefcount(a) == base + 1  # not freed yet: the capsule still owns it
    del w, cap
    assert sys.getrefcount(a) == base     # freed exactly once by the capsule destructor


def test_double_consumption(m):
    a = np.arange(4, dtype=np.int16)
    base = sys.getrefcount(a)
    for mv, used in ((None, H.LEGACY_USED), ((1, 0), H.VERSIONED_USED)):
        cap = a.__dlpack__(max_version=mv)
        w = H.W(cap)
        t = m.from_dlpack(w)
        assert H.capsule_name(cap) == used
        with pytest.raises(EXC("CapsuleConsumed")):
            m.from_dlpack(w)
        assert t.tobytes() == a.tobytes()
        del t, w, cap
        assert sys.getrefcount(a) == base


def test_consumed_by_numpy_then_us(m, Tensor):
    t = Tensor.arange(3)
    cap = t.__dlpack__(max_version=(1, 3))
    w = H.W(cap)
    a = np.from_dlpack(w)
    with pytest.raises(EXC("CapsuleConsumed")):
        m.from_dlpack(w)
    np.testing.assert_array_equal(a, [0, 1, 2])


def test_wrong_capsule_name(m):
    import datetime  # noqa: F401  (makes sure the datetime C API capsule exists)
    import _datetime
    cap = _datetime.datetime_CAPI
    with pytest.raises(EXC("CapsuleWrongName")):
        m.from_dlpack(H.W(cap))


def test_not_a_capsule(m):
    with pytest.raises((TypeError, ValueError)):
        m.from_dlpack(H.W(42))


@pytest.mark.parametrize("obj", [object(), [1, 2, 3], 3.0, "abc"], ids=["object", "list", "float", "str"])  # bytes: buffer protocol (test_bridges)
def test_no_protocol(m, obj):
    with pytest.raises(EXC("NoProtocol")):
        m.from_dlpack(obj)


@pytest.mark.parametrize("devtype", [2, 4, 10])
def test_choice_foreign_device_capsule_is_a_device_tagged_view(m, devtype):
    """dlbind's documented choice for case 49 (README "Choices"): device memory is imported as
    a view that keeps its device (and the producer's data pointer), not refused."""
    a = np.arange(3, dtype=np.float32)
    p = H.fresh_producer(lambda: H.device_tagged_capsule(a, devtype), dev=(devtype, 0))
    t = m.from_dlpack(p)
    assert tuple(t.device) == (devtype, 0) and t.data_ptr == a.ctypes.data
    # A device with streams is asked again with the consumer's stream (the first export,
    # asked without one, is released); every capsule handed out was consumed.
    assert len(p.caps) == (2 if devtype in H.SPEC.stream_device_types() else 1)
    assert all(H.capsule_name(c) == H.VERSIONED_USED for c in p.caps)
    del t, p


@pytest.mark.parametrize("devtype", [2, 4, 10])  # device memory the host cannot read
def test_foreign_device_import(m, devtype):
    """Case 49: a capsule describing non-CPU memory is either refused (BufferError, capsule not
    consumed) or imported as an opaque view that keeps its device and never reads the memory on
    the host; either way the producer is freed exactly once."""
    a = np.arange(3, dtype=np.float32)
    base = sys.getrefcount(a)
    p = H.fresh_producer(lambda: H.device_tagged_capsule(a, devtype), dev=(devtype, 0))
    try:
        t = m.from_dlpack(p)
    except BufferError:
        assert H.capsule_name(p.caps[-1]) == H.VERSIONED
    else:
        assert tuple(t.device) == (devtype, 0)
        assert tuple(t.__dlpack_device__()) == (devtype, 0)
        with pytest.raises(BufferError):
            t.tobytes()
        with pytest.raises((BufferError, RuntimeError)):
            np.from_dlpack(t)  # numpy must not be handed non-CPU memory as CPU memory
        del t
    del p
    assert sys.getrefcount(a) == base


@pytest.mark.parametrize("copy", [None, True, False])
def test_foreign_device_to_cpu_needs_copy(m, copy):
    """device=(1, 0) for a producer that hands back CUDA memory: a device-to-host copy is needed;
    with copy=False, or without a CUDA driver, that is a BufferError (and nothing leaks)."""
    a = np.arange(3, dtype=np.float32)
    base = sys.getrefcount(a)

    class CudaProducer:  # ignores dl_device, hands out a fresh "CUDA" capsule per call
        calls = 0

        def __dlpack__(self, **kw):
            CudaProducer.calls += 1
            cap = a.__dlpack__(max_version=(1, 0))
            H.dl_tensor_of(cap).device.device_type = 2
            return cap

        def __dlpack_device__(self):
            return (2, 0)

    try:
        import test_cuda
        has_cuda = test_cuda.HAS_CUDA
    except ImportError:
        has_cuda = False
    if copy is False or not has_cuda:
        with pytest.raises(BufferError):
            m.from_dlpack(CudaProducer(), device=(1, 0), copy=copy)
    assert CudaProducer.calls <= 2
    gc.collect()
    assert sys.getrefcount(a) == base


def test_producer_exception_propagates(m):
    class Boom:
        def __dlpack__(self, **kw):
            raise BufferError("boom from producer")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match="boom from producer"):
        m.from_dlpack(Boom())


def test_producer_valueerror_not_retried(m):
    calls = []

    class P:
        def __dlpack__(self, **kw):
            calls.append(kw)
            raise ValueError("nope")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(ValueError, match="nope"):
        m.from_dlpack(P())
    assert len(calls) == 1, "only TypeError may trigger the legacy retry"


def test_pyarrow_errors_propagate(m):
    pa = pytest.importorskip("pyarrow")
    for arr in (pa.array([True, False]), pa.array([1, None, 3]), pa.array([[1], [2]])):
        with pytest.raises(pa.ArrowTypeError):
            m.from_dlpack(arr)
