"""The cudarc adapter (dlbind feature `cudarc`) through `dlbind_demo.adapters.cudarc_*`, which the
demo has only when built with its `cuda` feature, and which need a CUDA driver and GPU: a
`CudaSlice` exported with its stream as the producer stream, read back by dlbind's own import
and by the adapter's `import_on_stream` + `ImportedSlice` (a `CudaView`). The stream handshake
itself is tested on the recording fake in runtime/tests/adapter_cudarc.rs."""
from __future__ import annotations

import numpy as np
import pytest

import dlbind_demo as dd

ad = dd.adapters
pytestmark = pytest.mark.skipif(not hasattr(ad, "cudarc_arange"),
                                reason="dlbind_demo built without its `cuda` feature "
                                       "(the cudarc adapter needs it)")


@pytest.fixture(scope="module")
def gpu():
    try:
        ad.cudarc_arange([1])
    except BufferError as e:
        pytest.skip(f"no usable CUDA GPU: {e}")


def test_cudarc_slice_exported_with_its_stream(gpu):
    a = ad.cudarc_arange([2, 3])
    assert a.__dlpack_device__() == (2, 0)
    assert a.stream not in (None, 0, 1, 2), "a stream of its own"
    host = dd.from_dlpack(a, device=(1, 0))            # dlbind's device-to-host copy
    np.testing.assert_array_equal(np.from_dlpack(host), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert ad.cudarc_read(a) == [0, 1, 2, 3, 4, 5]     # the adapter's import, another stream


def test_cudarc_reads_dlbind_gpu_tensors(gpu):
    t = dd.Tensor.zeros((4,), "float32", device=(2, 0))
    assert ad.cudarc_read(t) == [0.0] * 4


def test_cudarc_refuses_host_memory_and_other_dtypes(gpu):
    with pytest.raises(BufferError, match="kDLCUDA"):
        ad.cudarc_read(np.zeros(3, np.float32))
    t = dd.Tensor.zeros((4,), "int32", device=(2, 0))
    with pytest.raises(BufferError, match=r"^cudarc: tensor dtype is int32, wanted float32$"):
        ad.cudarc_read(t)
