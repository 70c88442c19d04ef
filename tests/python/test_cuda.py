"""Devices and streams (issue 4). Without a CUDA driver only the BufferError paths run;
the GPU tests skip with a message and run as-is the day a driver is present."""
import ctypes

import numpy as np
import pytest

import dlpack_helpers as H

EXC = H.SPEC.exc


def _cuda_driver_present() -> bool:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            count = ctypes.c_int(0)
            return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
        except AttributeError:
            return False
    return False


HAS_CUDA = _cuda_driver_present()
CUDA, CUDA_HOST, CUDA_MANAGED = (H.SPEC.device_type(n) for n in ("kDLCUDA", "kDLCUDAHost", "kDLCUDAManaged"))
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA driver/device on this machine (GPU suite skipped)")


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA driver is present")
@pytest.mark.parametrize("dev", [(CUDA, 0), (CUDA_HOST, 0), (CUDA_MANAGED, 0)])
def test_zeros_on_gpu_without_driver_is_buffererror(Tensor, dev):
    with pytest.raises(EXC("DeviceUnavailable")):
        Tensor.zeros((4,), "float32", device=dev)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA driver is present")
def test_export_to_cuda_without_driver_is_buffererror(Tensor):
    with pytest.raises(BufferError):
        Tensor.zeros((4,)).__dlpack__(max_version=(1, 3), dl_device=(CUDA, 0))


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
