"""Issue 6, hostile input: DLPack tensors written by hand with ctypes, malformed in every way a
producer can get them wrong, fed to `from_dlpack` through a capsule (legacy and versioned) and
through the C exchange API's `managed_tensor_to_py_object_no_sync`.

For each case: the exception is the spec's (`H.SPEC.exc(kind)`), the message names the field
(`DLTensor.<field>`), a rejected capsule keeps its unused name (never half-consumed), and the
producer's deleter runs exactly once — from the capsule's destructor when ownership was not
taken, from dlbind when it was (the exchange API transfers ownership on the call).
"""
from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlpack_helpers as H

m = pytest.importorskip("conftest").demo
EXC = H.SPEC.exc
CPU = (H.SPEC.device_type("kDLCPU"), 0)
FLOAT = H.SPEC.enums["DLDataTypeCode"]["kDLFloat"]
UNKNOWN_CODE = max(H.SPEC.enums["DLDataTypeCode"].values()) + 1
UNKNOWN_DEVICE = max(H.SPEC.enums["DLDeviceType"].values()) + 1

_api = ctypes.pythonapi
# Separate prototypes (c_void_p arguments) so the capsule destructor can run on a dying object
# without building a Python reference to it.
_get_name_raw = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))

DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Capsule names must outlive the capsules (PyCapsule keeps the pointer): module-level buffers.
NAME_BUFS = {n: ctypes.create_string_buffer(n.encode()) for n in (H.LEGACY, H.VERSIONED, "not_a_dltensor")}
DELETER_OFFSET = {H.VERSIONED: H.DLManagedTensorVersioned.deleter.offset,
                  H.LEGACY: H.DLManagedTensor.deleter.offset}


@DESTRUCTOR
def _capsule_destructor(cap):
    """What a C producer's destructor does: call the deleter only while the name is unused.

    Tests keep every capsule referenced until the consumer's error has been caught: CPython
    releases a call's arguments after the callee set its error, and a Python-level callback
    cannot save and restore that pending error the way a C destructor (numpy's) does."""
    name = _get_name_raw(cap)
    name = name.decode() if name else None
    if name in DELETER_OFFSET:
        p = _get_pointer_raw(cap, NAME_BUFS[name])
        d = ctypes.c_void_p.from_address(p + DELETER_OFFSET[name]).value
        if d:
            DELETER(d)(p)


class Fake:
    """A hand-written managed tensor (float32 by default) over a ctypes buffer.

    Keyword overrides write raw field values: `ndim`, `shape` (None = NULL), `strides`
    (None = NULL, "c" = C-contiguous), `data` (None = NULL, int = that address), `byte_offset`,
    `dtype` (code, bits, lanes), `device` (type, id), `deleter` (False = NULL), `version`.
    """

    def __init__(self, versioned=True, shape=(2, 3), strides="c", dtype=(FLOAT, 32, 1), device=CPU,
                 data="buffer", byte_offset=0, ndim=None, deleter=True, version=(1, 3), flags=0):
        self.versioned = versioned
        self.deleted = 0
        n = int(np.prod([d for d in shape if d >= 0], dtype=np.float64)) if shape is not None else 0
        self.buf = (ctypes.c_float * max(1, min(n, 1 << 16)))(*range(min(n, 1 << 16)))
        self.shape_arr = None if shape is None else (ctypes.c_int64 * max(1, len(shape)))(*shape)
        if strides == "c" and shape is not None:
            st, acc = [], 1
            for d in reversed(shape):
                st.append(acc)
                acc *= max(d, 1)
            strides = tuple(reversed(st))
        self.strides_arr = None if strides is None or strides == "c" else (
            ctypes.c_int64 * max(1, len(strides)))(*strides)
        self.s = H.DLManagedTensorVersioned() if versioned else H.DLManagedTensor()
        t = self.s.dl_tensor
        t.data = ctypes.addressof(self.buf) if data == "buffer" else data
        t.device.device_type, t.device.device_id = device
        t.ndim = len(shape) if ndim is None else ndim
        t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
        if self.shape_arr is not None:
            t.shape = ctypes.cast(self.shape_arr, ctypes.POINTER(ctypes.c_int64))
        if self.strides_arr is not None:
            t.strides = ctypes.cast(self.strides_arr, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = byte_offset
        if versioned:
            self.s.version.major, self.s.version.minor = version
            self.s.flags = flags
        self._deleter = DELETER(self._on_delete)
        fn_t = H.D.field_type(type(self.s), "deleter")
        self.s.deleter = ctypes.cast(self._deleter, fn_t) if deleter else fn_t()

    def _on_delete(self, p):
        assert p == ctypes.addressof(self.s), "deleter called with another tensor"
        self.deleted += 1

    @property
    def addr(self) -> int:
        return ctypes.addressof(self.s)

    def capsule(self, name=None):
        name = name or (H.VERSIONED if self.versioned else H.LEGACY)
        return _capsule_new(self.addr, NAME_BUFS[name], ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class Producer:
    """An object whose `__dlpack__` hands out one prepared capsule (or returns/raises `ret`)."""

    def __init__(self, ret, device=CPU):
        self.ret, self.dev, self.calls = ret, device, 0

    def __dlpack__(self, **kw):
        self.calls += 1
        if isinstance(self.ret, BaseException):
            raise self.ret
        return self.ret

    def __dlpack_device__(self):
        return self.dev


BIG = 1 << 62
# (id, Fake kwargs, failure kind, field named in the message)
MALFORMED = [
    ("null-data", dict(data=None), "MalformedTensor", "DLTensor.data"),
    ("null-shape", dict(shape=None, strides=None, ndim=2), "MalformedTensor", "DLTensor.shape"),
    ("negative-ndim", dict(ndim=-1), "MalformedTensor", "DLTensor.ndim"),
    ("ndim-65", dict(ndim=65), "MalformedTensor", "DLTensor.ndim"),
    ("ndim-int32-max", dict(ndim=2**31 - 1), "MalformedTensor", "DLTensor.ndim"),
    ("negative-dim", dict(shape=(2, -3), strides=(3, 1)), "MalformedTensor", "DLTensor.shape"),
    ("numel-overflows-i64", dict(shape=(BIG, 4), strides=(4, 1)), "MalformedTensor", "DLTensor.shape"),
    ("numel-overflows-zero-size", dict(shape=(0, BIG, 4), strides=(1, 1, 1)), "MalformedTensor",
     "DLTensor.shape"),
    ("bytes-overflow-contiguous", dict(shape=(1 << 61,), strides=None), "MalformedTensor", "DLTensor.shape"),
    ("bytes-overflow-strided", dict(shape=(2, 2), strides=(BIG, 1)), "MalformedTensor", "DLTensor.strides"),
    ("strides-wrap-below-zero", dict(shape=(1 << 20,), strides=(-(1 << 40),)), "MalformedTensor",
     "DLTensor.strides"),
    ("strides-wrap-above-max", dict(shape=(2,), strides=(1 << 40,), data=(1 << 64) - (1 << 20)),
     "MalformedTensor", "DLTensor.strides"),
    ("byte-offset-wraps", dict(byte_offset=(1 << 64) - 1), "MalformedTensor", "DLTensor.byte_offset"),
    ("unknown-dtype-code", dict(dtype=(UNKNOWN_CODE, 32, 1)), "UnsupportedDtype", "DLTensor.dtype"),
    ("lanes-4", dict(dtype=(FLOAT, 32, 4)), "UnsupportedDtype", "DLTensor.dtype"),
    ("zero-bits", dict(dtype=(FLOAT, 0, 1)), "UnsupportedDtype", "DLTensor.dtype"),
    ("float-12-bits", dict(dtype=(FLOAT, 12, 1)), "UnsupportedDtype", "DLTensor.dtype"),
    ("unknown-device-type", dict(device=(UNKNOWN_DEVICE, 0)), "MalformedTensor", "DLTensor.device"),
    ("negative-device-id", dict(device=(CPU[0], -1)), "MalformedTensor", "DLTensor.device"),
]


def _check_message(err, field):
    assert field in str(err), f"message does not name {field}: {err}"


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
@pytest.mark.parametrize("kw,kind,field", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_capsule(versioned, kw, kind, field):
    fake = Fake(versioned=versioned, **kw)
    cap = fake.capsule()
    prod = Producer(cap, device=kw.get("device", CPU))
    with pytest.raises(EXC(kind)) as ei:
        m.from_dlpack(prod)
    _check_message(ei.value, field)
    # Not half-consumed: the name is still the unused one, nothing was deleted yet.
    assert H.capsule_name(cap) == (H.VERSIONED if versioned else H.LEGACY)
    assert fake.deleted == 0
    # Importing the capsule object directly gives the same answer (and still consumes nothing).
    with pytest.raises(EXC(kind)):
        m.from_dlpack(Producer(cap, device=kw.get("device", CPU)))
    del cap, prod, ei
    gc.collect()
    assert fake.deleted == 1, "the capsule's destructor must run the deleter exactly once"


@pytest.mark.parametrize("kw,kind,field", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_through_exchange_api(kw, kind, field):
    """`managed_tensor_to_py_object_no_sync` takes ownership: on error the deleter already ran."""
    import test_exchange as X
    to_py = X.fns()["to_py"]
    fake = Fake(versioned=True, **kw)
    out = ctypes.c_void_p()
    with pytest.raises(EXC(kind)) as ei:
        to_py(ctypes.cast(fake.addr, X.MTV_P), ctypes.byref(out))
    _check_message(ei.value, field)
    assert not out.value, "no object may be returned on error"
    assert fake.deleted == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_valid_fake_is_accepted_and_deleted_once(versioned):
    """The control case: the same helper with nothing broken imports zero-copy and is freed once."""
    fake = Fake(versioned=versioned, shape=(2, 3), strides=(1, 2))
    cap = fake.capsule()
    t = m.from_dlpack(Producer(cap))
    assert H.capsule_name(cap) == (H.VERSIONED_USED if versioned else H.LEGACY_USED)
    assert t.shape == (2, 3) and t.strides == (1, 2) and t.data_ptr == ctypes.addressof(fake.buf)
    assert np.from_dlpack(t).tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
    del cap
    gc.collect()
    assert fake.deleted == 0, "a consumed capsule's destructor must not delete"
    del t
    gc.collect()
    assert fake.deleted == 1


@pytest.mark.parametrize("shape", [(0,), (0, 1 << 40), (3, 0)])
def test_zero_size_with_null_data_is_fine(shape):
    """A tensor without elements may have NULL data and any strides (nothing is addressed)."""
    fake = Fake(shape=shape, data=None, strides=(1 << 62,) * len(shape))
    t = m.from_dlpack(Producer(fake.capsule()))
    assert t.shape == shape
    del t
    gc.collect()
    assert fake.deleted == 1


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_null_deleter_is_allowed(versioned):
    """DLPack allows a NULL deleter ("no way to provide a reasonable destructor"): the import
    works and nothing calls through the NULL pointer, neither on drop nor on a rejected import."""
    fake = Fake(versioned=versioned, deleter=False)
    t = m.from_dlpack(Producer(fake.capsule()))
    assert t.shape == (2, 3)
    del t
    bad = Fake(versioned=versioned, deleter=False, ndim=-5)
    prod = Producer(bad.capsule())  # held: see the note on `_capsule_destructor`
    with pytest.raises(EXC("MalformedTensor")):
        m.from_dlpack(prod)
    del prod
    gc.collect()
    assert fake.deleted == 0 and bad.deleted == 0


def test_version_too_new_left_unconsumed():
    fake = Fake(version=(2, 0), ndim=-1)  # fields beyond the version must not even be read
    cap = fake.capsule()
    with pytest.raises(EXC("VersionTooNew")):
        m.from_dlpack(Producer(cap))
    assert H.capsule_name(cap) == H.VERSIONED
    del cap
    gc.collect()
    assert fake.deleted == 1


def test_wrong_capsule_name():
    fake = Fake()
    cap = fake.capsule("not_a_dltensor")
    with pytest.raises(EXC("CapsuleWrongName")) as ei:
        m.from_dlpack(Producer(cap))
    assert "not_a_dltensor" in str(ei.value)
    assert H.capsule_name(cap) == "not_a_dltensor"
    del cap
    gc.collect()
    assert fake.deleted == 0  # not a DLPack capsule: its destructor does not own the tensor


@pytest.mark.parametrize("ret", [None, 7, "dltensor", b"x", object(), np.zeros(3)],
                         ids=["None", "int", "str", "bytes", "object", "ndarray"])
def test_dlpack_returns_a_non_capsule(ret):
    with pytest.raises(EXC("BadArgumentType")) as ei:
        m.from_dlpack(Producer(ret))
    assert type(ret).__name__ in str(ei.value)


@pytest.mark.parametrize("exc", [RuntimeError("producer broke"), BufferError("no"), ValueError("bad"),
                                 MemoryError(), KeyError("k")])
def test_dlpack_raises_is_propagated(exc):
    with pytest.raises(type(exc)):
        m.from_dlpack(Producer(exc))


def test_dlpack_raises_type_error_retried_once_then_propagated():
    """TypeError is the old-producer signal: one legacy retry, then the error propagates."""
    p = Producer(TypeError("really broken"))
    with pytest.raises(TypeError, match="really broken"):
        m.from_dlpack(p)
    assert p.calls == 2


def test_capsule_reuse_after_failure_is_still_safe():
    """A rejected capsule can be retried by another consumer; the first failure left no trace."""
    fake = Fake(dtype=(UNKNOWN_CODE, 32, 1))
    cap = fake.capsule()
    # The count before the failures, read the same way: what `sys.getrefcount` adds for its own
    # argument differs between versions (3.14 borrows it, so `cap` alone counts 1 there).
    before = sys.getrefcount(cap)
    for _ in range(3):
        with pytest.raises(EXC("UnsupportedDtype")):
            m.from_dlpack(Producer(cap))
    assert sys.getrefcount(cap) == before
    fake.s.dl_tensor.dtype.code = FLOAT  # the producer fixes its tensor: now it imports
    t = m.from_dlpack(Producer(cap))
    assert t.dtype == "float32"
    del t, cap
    gc.collect()
    assert fake.deleted == 1


class Iface:
    """An object exposing only an interface dict (`__array_interface__` by default)."""

    def __init__(self, d, attr="__array_interface__"):
        setattr(self, attr, d)


def _ai(**kw):
    d = dict(data=(4096, False), shape=(3,), typestr="<f4", version=3)
    d.update(kw)
    return d


IFACE_CASES = [
    ("null-data", _ai(data=(0, False)), "MalformedTensor", "DLTensor.data"),
    ("negative-shape", _ai(shape=(-3,)), "MalformedTensor", "DLTensor.shape"),
    ("numel-overflow", _ai(shape=(BIG, 4)), "MalformedTensor", "DLTensor.shape"),
    ("ndim-100", _ai(shape=(1,) * 100), "MalformedTensor", "DLTensor.ndim"),
    ("address-wrap", _ai(data=((1 << 64) - 8, False)), "MalformedTensor", "DLTensor.strides"),
    ("unknown-typestr", _ai(typestr="<x9"), "UnsupportedDtype", "typestr"),
    ("stride-not-multiple", _ai(strides=(3,)), "UnsupportedLayout", "stride"),
    ("shape-not-tuple", _ai(shape=3), "BadArgumentValue", "shape"),
    ("missing-typestr", {k: v for k, v in _ai().items() if k != "typestr"}, "BadArgumentValue", "typestr"),
]


# The CUDA array interface goes through the same dict reader; its stride rule is covered once.
IFACE_PARAMS = [pytest.param(attr, *c[1:], id=f"{attr.strip('_')}-{c[0]}")
                for attr in ("__array_interface__", "__cuda_array_interface__") for c in IFACE_CASES
                if not (attr == "__cuda_array_interface__" and c[2] == "UnsupportedLayout")]


@pytest.mark.parametrize("attr,d,kind,word", IFACE_PARAMS)
def test_malformed_interface_dict(attr, d, kind, word):
    """The bridges build a DLTensor from the dict and run the same validation: a clear error,
    nothing dereferenced (the addresses above are never mapped)."""
    with pytest.raises(EXC(kind)) as ei:
        m.from_dlpack(Iface(d, attr))
    assert word in str(ei.value), str(ei.value)


def test_interface_not_a_dict():
    with pytest.raises(EXC("BadArgumentType"), match="must be a dict"):
        m.from_dlpack(Iface(5))
