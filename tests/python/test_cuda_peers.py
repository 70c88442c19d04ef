"""CUDA memory between dlbind and the GPU peers: torch, CuPy and JAX (issues 4 and 5 on a GPU).

Zero-copy both ways, the CUDA array interface both ways, the C exchange table with CUDA
tensors, and stream ordering: work a producer queued on a side stream is visible to dlbind's
later copies, whether the import went through `__dlpack__` (dlbind asks with its stream, and the
producer orders its streams) or through torch's table (whose export does not synchronise:
dlbind orders the producer's current work stream before its own default stream), and a view
handed on to a consumer on yet another stream is waited for there.

Every test here needs a CUDA driver and a device, plus the peer with GPU support; none of that
is in CI's pinned set, so they skip there with the reason. Run them on a machine with a GPU:
`JAX_PLATFORMS= pytest tests/python/test_cuda_peers.py` (conftest.py defaults JAX to its CPU
backend; an empty JAX_PLATFORMS lets it find the GPU).
"""
import numpy as np
import pytest

import dlpack_helpers as H

pytestmark = pytest.mark.skipif(not H.HAS_CUDA, reason=H.NO_CUDA_REASON)

import dlbind_demo as m  # noqa: E402

CUDA = H.SPEC.device_type("kDLCUDA")
CPU = (H.KDLCPU, 0)


def to_gpu(a: np.ndarray):
    """numpy → a dlbind Tensor in CUDA memory (a host-to-device copy made by dlbind)."""
    return m.from_dlpack(m.from_dlpack(a), device=(CUDA, 0))


def to_host(t) -> np.ndarray:
    """A dlbind Tensor in CUDA memory → numpy (a device-to-host copy made by dlbind)."""
    return np.from_dlpack(m.from_dlpack(t, device=CPU))


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="torch is not installed (optional GPU peer)")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA support")
    return torch


@pytest.fixture(scope="module")
def cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (optional GPU peer)")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CuPy raises its own runtime error types
        pytest.skip(f"CuPy cannot use the GPU: {e}")
    return cupy


@pytest.fixture(scope="module")
def jax_gpu():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        dev = jax.devices("gpu")[0]
    except RuntimeError as e:
        pytest.skip(f"JAX has no GPU backend here ({e}); conftest.py defaults JAX_PLATFORMS to cpu, "
                    "run with JAX_PLATFORMS= to use the GPU")
    return jax, dev


# ------------------------------------------------------------------------------ torch
def test_torch_cuda_to_dlbind_zero_copy(torch):
    x = torch.arange(24, dtype=torch.float32, device="cuda").reshape(2, 3, 4)
    for v in [x, x.transpose(0, 2), x[:, 1:, ::2], x[1, 2, 3]]:
        u = m.from_dlpack(v)
        assert tuple(u.device) == (CUDA, 0)
        assert u.data_ptr == v.data_ptr()
        assert u.shape == tuple(v.shape) and u.strides == tuple(v.stride())
        # The device-to-host copy of a strided view runs dlbind's NVRTC gather kernel.
        np.testing.assert_array_equal(to_host(u), v.cpu().numpy())


def test_torch_cuda_import_uses_the_table_when_torch_has_one(torch):
    x = torch.ones(5, dtype=torch.int64, device="cuda")
    n = m._testing.exchange_imports()
    u = m.from_dlpack(x)
    has_table = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    assert m._testing.exchange_imports() == n + int(has_table)
    np.testing.assert_array_equal(to_host(u), np.ones(5, np.int64))


@pytest.mark.parametrize("table", [True, False], ids=["table", "dunder"])
def test_torch_side_stream_work_is_ordered_before_dlbind_reads(torch, table):
    """torch fills a tensor on a side stream after ~0.1 s of GPU sleep; dlbind imports it while
    that stream is current and copies it to the host. The copy must see the fill: through
    `__dlpack__(stream=None)` torch makes the legacy stream wait; through torch's table (no
    synchronisation) dlbind does it from the table's `current_work_stream`."""
    n = 1 << 22
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    obj = x if table else H.Forward(x)
    side = torch.cuda.Stream()
    before = m._testing.exchange_imports()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.fill_(3.0)
        u = m.from_dlpack(obj)
    through_table = m._testing.exchange_imports() - before
    assert through_table == int(table and hasattr(torch.Tensor, "__dlpack_c_exchange_api__"))
    host = to_host(u)
    assert host.shape == (n,)
    assert (host == 3.0).all(), f"{int((host != 3.0).sum())} of {n} elements read before torch's fill"
    torch.cuda.synchronize()


@pytest.mark.parametrize("table", [True, False], ids=["table", "dunder"])
def test_a_view_is_waited_for_by_a_consumer_on_another_stream(torch, table):
    """dlbind imports a tensor torch is still filling on side stream s1 (ordered on the legacy
    stream dlbind asks for), then torch imports the view on side stream s2 (non-blocking, so the
    legacy stream does not order it): dlbind takes data with no recorded stream to be ready on
    the legacy stream and makes s2 wait for it (an event) instead of handing it over as is."""
    n = 1 << 22
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(s1):
        torch.cuda._sleep(200_000_000)
        x.fill_(3.0)
        u = m.from_dlpack(x if table else H.Forward(x))
    with torch.cuda.stream(s2):
        y = torch.from_dlpack(u)
        bad = int((y != 3.0).sum().item())
    assert bad == 0, f"{bad} of {n} elements read on s2 before torch's fill on s1"
    torch.cuda.synchronize()


def test_a_host_to_device_copy_is_waited_for_by_a_consumer_on_another_stream(torch):
    a = np.full(1 << 26, 7.25, np.float32)  # 256 MiB through dlbind's host-to-device copy
    g = to_gpu(a)
    with torch.cuda.stream(torch.cuda.Stream()):
        y = torch.from_dlpack(g)
        bad = int((y != 7.25).sum().item())
    assert bad == 0


def test_dlbind_cuda_to_torch_zero_copy_and_writes(torch):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    g = to_gpu(a)
    y = torch.from_dlpack(g)
    assert y.device.type == "cuda" and y.data_ptr() == g.data_ptr
    np.testing.assert_array_equal(y.cpu().numpy(), a)
    yt = torch.from_dlpack(g.transpose())
    assert tuple(yt.stride()) == (1, 4) and yt.data_ptr() == g.data_ptr
    np.testing.assert_array_equal(yt.cpu().numpy(), a.T)
    y[0, 0] = 42.0
    torch.cuda.synchronize()  # torch's write is queued on torch's stream, unknown to dlbind
    assert to_host(g)[0, 0] == 42.0


def test_dlbind_cuda_to_torch_on_a_side_stream(torch):
    a = np.arange(1 << 16, dtype=np.int32)
    g = to_gpu(a)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.from_dlpack(g)  # torch passes its current (side) stream
        total = int(y.sum().item())
    assert total == int(a.sum())


# ------------------------------------------------------------------------------- CuPy
def test_cupy_to_dlbind_dlpack_and_cai(cupy):
    c = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)[:, ::2]
    u = m.from_dlpack(c)
    assert tuple(u.device) == (CUDA, 0) and u.data_ptr == c.data.ptr
    np.testing.assert_array_equal(to_host(u), cupy.asnumpy(c))

    class OnlyCAI:
        def __init__(self, arr):
            self.__cuda_array_interface__ = arr.__cuda_array_interface__
            self.arr = arr

    w = m.from_dlpack(OnlyCAI(c))  # a real device pointer: the driver names its device
    assert tuple(w.device) == (CUDA, 0) and w.data_ptr == c.data.ptr
    assert w.strides == tuple(s // c.itemsize for s in c.strides)
    np.testing.assert_array_equal(to_host(w), cupy.asnumpy(c))


def test_dlbind_cuda_to_cupy_dlpack_and_cai(cupy):
    a = np.arange(20, dtype=np.int16).reshape(4, 5)
    g = to_gpu(a)
    c = cupy.from_dlpack(g)
    assert c.data.ptr == g.data_ptr
    np.testing.assert_array_equal(cupy.asnumpy(c), a)
    cai = g.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"] == (g.data_ptr, False) and cai["shape"] == (4, 5)
    d = cupy.asarray(g.transpose())  # through __cuda_array_interface__
    assert d.data.ptr == g.data_ptr
    np.testing.assert_array_equal(cupy.asnumpy(d), a.T)
    c[0, 0] = 7
    cupy.cuda.runtime.deviceSynchronize()
    assert to_host(g)[0, 0] == 7


def test_cai_export_of_a_view_is_waited_for_by_cupy_on_another_stream(torch, cupy):
    """The `__cuda_array_interface__` of a view with no recorded stream names the legacy
    stream (1), so CuPy on a non-blocking stream waits for torch's fill that the legacy stream
    was ordered after."""
    n = 1 << 22
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.cuda._sleep(200_000_000)
        x.fill_(5.0)
        u = m.from_dlpack(H.Forward(x))
    assert u.__cuda_array_interface__["stream"] == 1
    with cupy.cuda.Stream(non_blocking=True):
        c = cupy.asarray(u)  # through __cuda_array_interface__
        bad = int((c != 5.0).sum())
    assert c.data.ptr == x.data_ptr() and bad == 0, f"{bad} of {n} elements read before the fill"
    torch.cuda.synchronize()


def test_cupy_refuses_a_host_copy_and_dlbind_refuses_copy_false(cupy):
    g = to_gpu(np.ones(3, np.float32))
    with pytest.raises(H.SPEC.exc("CopyRequired")):
        g.__dlpack__(max_version=(1, 3), dl_device=CPU, copy=False)
    # dlbind's pinned-memory copy is importable by numpy and equal
    np.testing.assert_array_equal(to_host(m.from_dlpack(cupy.ones(3, dtype=cupy.float32))), np.ones(3, np.float32))


# -------------------------------------------------------------------------------- JAX
def test_jax_gpu_both_ways(jax_gpu):
    jax, dev = jax_gpu
    import jax.numpy as jnp

    a = np.arange(10, dtype=np.float32)
    g = to_gpu(a)
    y = jnp.from_dlpack(g)
    assert y.devices() == {dev}
    np.testing.assert_array_equal(np.asarray(y), a)
    z = jax.device_put(jnp.arange(6, dtype=jnp.int32).reshape(2, 3), dev)
    u = m.from_dlpack(z)
    assert tuple(u.device) == (CUDA, dev.id)
    np.testing.assert_array_equal(to_host(u), np.arange(6, dtype=np.int32).reshape(2, 3))
