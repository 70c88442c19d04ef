"""Devices and streams (issue 4). Without a CUDA driver only the BufferError paths run;
the GPU tests skip with a message and run as-is the day a driver is present."""
import numpy as np
import pytest

import dlpack_helpers as H

EXC = H.SPEC.exc


HAS_CUDA = H.HAS_CUDA
CUDA, CUDA_HOST, CUDA_MANAGED = (H.SPEC.device_type(n) for n in ("kDLCUDA", "kDLCUDAHost", "kDLCUDAManaged"))
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason=H.NO_CUDA_REASON)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA driver is present")
@pytest.mark.parametrize("dev", [(CUDA, 0), (CUDA_HOST, 0), (CUDA_MANAGED, 0)])
def test_zeros_on_gpu_without_driver_is_buffererror(Tensor, dev):
    with pytest.raises(EXC("DeviceUnavailable")):
        Tensor.zeros((4,), "float32", device=dev)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA driver is present")
def test_export_to_cuda_without_driver_is_buffererror(Tensor):
    # The host-to-device copy is planned, then needs a driver: DeviceUnavailable (BufferError).
    with pytest.raises(EXC("DeviceUnavailable"), match="not available"):
        Tensor.zeros((4,)).__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0), stream=1)
    with pytest.raises(EXC("CopyRequired"), match="copy=False"):
        Tensor.zeros((4,)).__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0), stream=1, copy=False)


@needs_gpu
def test_cuda_zeros_device_and_streams(Tensor):
    t = Tensor.zeros((4, 3), "float32", device=(CUDA, 0))
    assert tuple(t.__dlpack_device__()) == (CUDA, 0) and tuple(t.device) == (CUDA, 0)
    for s in (None, 1, 2, -1):
        info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), stream=s))
        assert info.device == (CUDA, 0)
    with pytest.raises(EXC("InvalidStream")):
        t.__dlpack__(max_version=(1, 3), stream=0)
    with pytest.raises(EXC("BadArgumentType")):
        t.__dlpack__(max_version=(1, 3), stream="1")


@needs_gpu
def test_cuda_to_cpu_copy(m, Tensor):
    t = Tensor.zeros((5,), "int32", device=(CUDA, 0))
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
    assert info.device == (1, 0) and info.flags & H.FLAG_IS_COPIED
    with pytest.raises(EXC("CopyRequired")):
        t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    u = m.from_dlpack(t, device=(1, 0))
    assert tuple(u.device) == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(u), np.zeros(5, np.int32))


@needs_gpu
@pytest.mark.parametrize("kind", [CUDA_HOST, CUDA_MANAGED])
def test_host_visible_memory_exports_to_cpu_without_copy(Tensor, kind):
    t = Tensor.zeros((8,), "float64", device=(kind, 0))
    info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False))
    assert info.data == t.data_ptr and not info.flags & H.FLAG_IS_COPIED


@needs_gpu
def test_host_to_device_strided_device_to_host_round_trip(m):
    # numpy → dlbind (CPU) → __dlpack__(dl_device=CUDA): a host-to-device copy on stream 1 →
    # transposed CUDA view → from_dlpack(device=CPU): the NVRTC strided kernel + a D2H copy.
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    cpu = m.from_dlpack(a)
    cap = cpu.__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0), stream=1)
    info = H.inspect_capsule(cap)
    assert info.device == (CUDA, 0) and info.flags & H.FLAG_IS_COPIED
    g = m.from_dlpack(cap)
    assert tuple(g.device) == (CUDA, 0)
    back = m.from_dlpack(g.transpose(), device=(1, 0))
    assert tuple(back.device) == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(back), a.T)
    # A same-device copy is a new buffer with the same contents.
    c = g.__dlpack__(max_version=(1, 3), copy=True, stream=1)
    ci = H.inspect_capsule(c)
    assert ci.device == (CUDA, 0) and ci.flags & H.FLAG_IS_COPIED and ci.data != g.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(m.from_dlpack(m.from_dlpack(c), device=(1, 0))), a)


@needs_gpu
def test_cuda_copy_false_and_foreign_gpu_are_buffererrors(m):
    g = m.from_dlpack(m.from_dlpack(np.ones(4, np.int16)).__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0), stream=1))
    with pytest.raises(EXC("CopyRequired")):
        g.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError):
        g.__dlpack__(max_version=(1, 3), dl_device=(CUDA, 1 << 20), stream=1)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA driver is present")
def test_from_dlpack_to_cuda_without_driver_is_buffererror(m):
    # from_dlpack asks the producer (a dlbind Tensor) for dl_device=CUDA with stream 1: the
    # producer plans a host-to-device copy, which needs a driver.
    with pytest.raises(EXC("DeviceUnavailable"), match="not available"):
        m.from_dlpack(m.from_dlpack(np.arange(3.0)), device=(CUDA, 0))


@needs_gpu
def test_from_dlpack_to_cuda_and_back(m):
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    g = m.from_dlpack(m.from_dlpack(a), device=(CUDA, 0))
    assert tuple(g.device) == (CUDA, 0)
    np.testing.assert_array_equal(np.from_dlpack(m.from_dlpack(g, device=(1, 0))), a)
    with pytest.raises(EXC("CopyRequired")):
        m.from_dlpack(m.from_dlpack(a), device=(CUDA, 0), copy=False)


@needs_gpu
@pytest.mark.parametrize("f", ["module", "static"])
def test_from_dlpack_device_cuda_takes_the_keyword_path(m, Tensor, f):
    """`from_dlpack(t, device=CUDA)` of a CPU Tensor (whose type has a C exchange table) is a
    host-to-device copy through `__dlpack__`, for both spellings of from_dlpack."""
    fn = m.from_dlpack if f == "module" else Tensor.from_dlpack
    t = Tensor.arange(6, dtype="float32")
    g = fn(t, device=(CUDA, 0))
    assert tuple(g.device) == (CUDA, 0) and g.data_ptr != t.data_ptr
    np.testing.assert_array_equal(np.from_dlpack(fn(g, device=(1, 0))), np.arange(6, dtype=np.float32))
    with pytest.raises(EXC("CopyRequired")):
        fn(t, device=(CUDA, 0), copy=False)
