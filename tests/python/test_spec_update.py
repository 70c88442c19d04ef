"""Values a spec update adds (issue 24: upstream main after v1.3) work from regeneration alone.

Nothing in the runtime, the derive or the bridges names them: the dtype comes from the
generated table (`Tensor.zeros`/`from_bytes` by name, the capsule's code and bits; the
parametrised dtype tests of test_dtypes.py cover bcomplex32 with the other ml_dtypes types),
host accessibility from the spec's `host_accessible` flag (through the generated
`DLDeviceType::is_host_accessible`). Expectations are read from the spec too.
"""
import sys

import numpy as np
import pytest

import dlpack_helpers as H

NEW_DEVICES = [n for n in ("kDLTPU", "kDLTPUHost", "kDLAscend") if n in H.SPEC.enums.get("DLDeviceType", {})]


def test_the_spec_follows_upstream_main():
    """The four values of dmlc/dlpack main after v1.3, with upstream's numbers."""
    assert H.SPEC.version == (1, 3), "upstream keeps the version macros at 1.3"
    dev = H.SPEC.enums["DLDeviceType"]
    assert (dev["kDLTPU"], dev["kDLTPUHost"], dev["kDLAscend"]) == (19, 20, 21)
    assert H.SPEC.enums["DLDataTypeCode"]["kDLBcomplex"] == 18
    assert H.SPEC.host_accessible("kDLTPUHost") and H.SPEC.host_accessible("kDLCUDAHost")
    assert not H.SPEC.host_accessible("kDLTPU") and not H.SPEC.host_accessible("kDLAscend")


@pytest.mark.parametrize("dt", [d for d in H.DTYPES if d.code_name == "kDLBcomplex"], ids=str)
def test_bcomplex_travels_both_ways(m, Tensor, dt):
    """kDLBcomplex (ml_dtypes.bcomplex32): values and metadata survive export and a zero-copy
    import; numpy, which has no DLPack code for it, refuses the capsule cleanly."""
    vals = H.sample_values(dt, (5,))
    t = Tensor.from_bytes(vals.tobytes(), (5,), dt.name)
    assert t.dtype == dt.name and t.tobytes() == vals.tobytes() and t.nbytes == 5 * 4
    for mv in (None, (1, 3)):
        info = H.inspect_capsule(t.__dlpack__(max_version=mv))
        assert (info.code, info.bits, info.lanes) == (dt.code, 32, 1)
    u = m.from_dlpack(t)
    assert u.dtype == dt.name and u.data_ptr == t.data_ptr and u.tobytes() == vals.tobytes()
    c = m.from_dlpack(t, copy=True)
    assert c.data_ptr != t.data_ptr and c.tobytes() == vals.tobytes()
    with pytest.raises((BufferError, RuntimeError, TypeError)):
        np.from_dlpack(t)


@pytest.mark.parametrize("name", NEW_DEVICES)
def test_new_device_import_follows_the_spec(m, name):
    """A capsule tagged with a device type added after v1.3 imports as a view that keeps its
    device; the host reads it exactly when the spec marks the type host-accessible."""
    devtype = H.SPEC.device_type(name)
    a = np.arange(3, dtype=np.float32)
    base = sys.getrefcount(a)
    p = H.fresh_producer(lambda: H.device_tagged_capsule(a, devtype), dev=(devtype, 0))
    t = m.from_dlpack(p)
    assert tuple(t.device) == (devtype, 0) and t.data_ptr == a.ctypes.data
    assert len(p.caps) == 1, "stream-less per the spec: asked once"
    if H.SPEC.host_accessible(name):
        assert t.tobytes() == a.tobytes()
        assert bytes(memoryview(t)) == a.tobytes()
        # exported to the CPU without a copy (dl_device=(kDLCPU, 0))
        assert np.from_dlpack(t, device="cpu").ctypes.data == a.ctypes.data
    else:
        with pytest.raises(BufferError):
            t.tobytes()
        with pytest.raises((BufferError, RuntimeError)):
            np.from_dlpack(t)
    del t, p
    assert sys.getrefcount(a) == base


@pytest.mark.parametrize("name", NEW_DEVICES)
def test_new_device_is_stream_less(m, name):
    """No stream rule upstream: only stream=None is accepted (the spec's InvalidStream otherwise)."""
    devtype = H.SPEC.device_type(name)
    a = np.arange(3, dtype=np.float32)
    p = H.fresh_producer(lambda: H.device_tagged_capsule(a, devtype), dev=(devtype, 0))
    t = m.from_dlpack(p)
    t.__dlpack__(stream=None)
    with pytest.raises(H.SPEC.exc("InvalidStream")):
        t.__dlpack__(stream=1)
    del t, p
