"""The DLPack 1.3 C exchange API (`type(x).__dlpack_c_exchange_api__`), both directions.

Producer: the table is read and every entry is called through ctypes. Consumer:
`dlbind_demo.from_dlpack` takes the table path (observable through `exchange_imports()` and
through a type whose `__dlpack__` raises), tvm-ffi consumes our table, torch when installed.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import dlbind_demo as m
import dlpack_helpers as H
from dlbind_demo import Tensor

EXC = H.SPEC.exc  # exception classes from the spec's failure mapping

D = H.D  # the generated ctypes module (generated/python/dlpack_ctypes.py)
ATTR = D.DLPACK_EXCHANGE_API_ATTR
CAPSULE_NAME = D.DLPACK_EXCHANGE_API_CAPSULE_NAME

DLPackVersion, DLDevice, DLDataType, DLTensor = D.DLPackVersion, D.DLDevice, D.DLDataType, D.DLTensor
DLManagedTensorVersioned = D.DLManagedTensorVersioned
DELETER = D.field_type(DLManagedTensorVersioned, "deleter")
MTV_P = ctypes.POINTER(DLManagedTensorVersioned)
ExchangeAPI = D.DLPackExchangeAPI

SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# PYFUNCTYPE: the GIL stays held and a Python exception set by the callee is raised.
FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(MTV_P))
FROM_PY_RAW = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(MTV_P))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, MTV_P, ctypes.POINTER(ctypes.c_void_p))
FILL = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
# The allocator needs no GIL (it takes it itself); errors go through SetError.
ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(MTV_P), ctypes.c_void_p, SET_ERROR)
STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = [ctypes.c_void_p]
_decref.restype = None


def api_of(cls=Tensor) -> ExchangeAPI:
    cap = getattr(cls, ATTR)
    return ExchangeAPI.from_address(_get_pointer(cap, CAPSULE_NAME))


def fns(cls=Tensor):
    api = api_of(cls)
    return dict(
        from_py=FROM_PY(D.fn_address(api.managed_tensor_from_py_object_no_sync)),
        from_py_raw=FROM_PY_RAW(D.fn_address(api.managed_tensor_from_py_object_no_sync)),
        to_py=TO_PY(D.fn_address(api.managed_tensor_to_py_object_no_sync)),
        fill=FILL(D.fn_address(api.dltensor_from_py_object_no_sync)),
        alloc=ALLOC(D.fn_address(api.managed_tensor_allocator)),
        stream=STREAM(D.fn_address(api.current_work_stream)),
    )


def take_object(p: int):
    """A PyObject* new reference (from to_py_object) as a Python object (reference stolen)."""
    obj = ctypes.cast(p, ctypes.py_object).value
    _decref(p)
    return obj


def dims(ptr, n):
    return tuple(ptr[i] for i in range(n))


@pytest.fixture(autouse=True)
def no_leaks():
    gc.collect()
    before = m._testing.live_exports()
    yield
    gc.collect()
    assert m._testing.live_exports() == before


# --- the table ---------------------------------------------------------------------------------

def test_capsule_on_the_type():
    t = Tensor.arange(4)
    cap = type(t).__dlpack_c_exchange_api__
    assert type(cap).__name__ == "PyCapsule"
    assert _get_name(cap) == CAPSULE_NAME
    # The same process-lifetime table every time (instance lookups reach the class attribute).
    assert _get_pointer(t.__dlpack_c_exchange_api__, CAPSULE_NAME) == _get_pointer(cap, CAPSULE_NAME)
    api = api_of()
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert not api.header.prev_api  # NULL
    for f in ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
              "managed_tensor_to_py_object_no_sync", "dltensor_from_py_object_no_sync", "current_work_stream"):
        assert getattr(api, f), f  # Tensor's Dims deref to [i64]: the non-owning fill is there too


# --- managed_tensor_from_py_object_no_sync -------------------------------------------------------

def test_owning_export_fields_and_lifetime():
    f = fns()
    t = Tensor.arange(12).slice(0, 1, 11, 2)  # shape (5,), stride 2
    rc = sys.getrefcount(t)
    out = MTV_P()
    assert f["from_py"](t, ctypes.byref(out)) == 0
    mt = out.contents
    assert (mt.version.major, mt.version.minor) == (1, 3)
    dl = mt.dl_tensor
    assert dl.data == t.data_ptr and dl.byte_offset == 0
    assert (dl.device.device_type, dl.device.device_id) == (1, 0)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert dl.ndim == 1 and dims(dl.shape, 1) == (5,) and dims(dl.strides, 1) == (2,)
    assert mt.flags == 0
    assert m._testing.live_exports() >= 1
    assert sys.getrefcount(t) == rc + 1  # the managed tensor keeps the producer alive
    mt.deleter(out)
    assert sys.getrefcount(t) == rc


def test_owning_export_read_only_flag():
    f = fns()
    t = Tensor.arange(3).set_readonly()
    out = MTV_P()
    assert f["from_py"](t, ctypes.byref(out)) == 0
    assert out.contents.flags & 1  # DLPACK_FLAG_BITMASK_READ_ONLY
    out.contents.deleter(out)


def test_owning_export_zero_dim():
    f = fns()
    t = Tensor.zeros(())
    out = MTV_P()
    assert f["from_py"](t, ctypes.byref(out)) == 0
    assert out.contents.dl_tensor.ndim == 0
    out.contents.deleter(out)


def test_owning_export_wrong_type_sets_exception():
    f = fns()
    out = MTV_P()
    with pytest.raises(EXC("BadArgumentType"), match="expected a 'Tensor' object"):
        f["from_py"](np.arange(3.0), ctypes.byref(out))
    assert not out
    with pytest.raises(EXC("BadArgumentValue"), match="NULL"):
        f["from_py_raw"](None, ctypes.byref(out))
    with pytest.raises(EXC("BadArgumentValue"), match="out is NULL"):
        FROM_PY(D.fn_address(api_of().managed_tensor_from_py_object_no_sync))(Tensor.arange(2), None)


# --- managed_tensor_to_py_object_no_sync ---------------------------------------------------------

def test_to_py_object_round_trip():
    f = fns()
    t = Tensor.arange(6).transpose()
    t2 = Tensor.from_bytes(np.arange(6, dtype=np.int16).tobytes(), (2, 3), "int16").transpose()
    for src in (t, t2):
        rc = sys.getrefcount(src)
        out = MTV_P()
        assert f["from_py"](src, ctypes.byref(out)) == 0
        obj = ctypes.c_void_p()
        assert f["to_py"](out, ctypes.byref(obj)) == 0  # takes ownership of `out`
        u = take_object(obj.value)
        assert type(u) is Tensor
        assert (u.data_ptr, u.shape, u.strides, u.dtype, u.readonly) == \
            (src.data_ptr, src.shape, src.strides, src.dtype, src.readonly)
        assert u.tobytes() == src.tobytes()
        assert sys.getrefcount(src) == rc + 1
        del u
        gc.collect()
        assert sys.getrefcount(src) == rc


def test_to_py_object_errors():
    f = fns()
    obj = ctypes.c_void_p()
    with pytest.raises(EXC("BadArgumentValue"), match="tensor is NULL"):
        f["to_py"](None, ctypes.byref(obj))
    # A tensor whose major version is too new is refused, and deleted (ownership was transferred).
    t = Tensor.arange(2)
    rc = sys.getrefcount(t)
    out = MTV_P()
    assert f["from_py"](t, ctypes.byref(out)) == 0
    out.contents.version.major = 99
    with pytest.raises(EXC("VersionTooNew")):
        f["to_py"](out, ctypes.byref(obj))
    assert sys.getrefcount(t) == rc


# --- dltensor_from_py_object_no_sync -------------------------------------------------------------

def test_non_owning_fill():
    f = fns()
    t = Tensor.arange(24).slice(0, 0, 24, 1)
    t = Tensor.from_bytes(t.tobytes(), (2, 3, 4), "float32").reversed(1)
    rc = sys.getrefcount(t)
    live = m._testing.live_exports()
    dl = DLTensor()
    assert f["fill"](t, ctypes.byref(dl)) == 0
    assert dl.data == t.data_ptr and dl.byte_offset == 0
    assert dl.ndim == 3 and dims(dl.shape, 3) == t.shape and dims(dl.strides, 3) == t.strides
    assert (dl.dtype.code, dl.dtype.bits) == (2, 32)
    assert m._testing.live_exports() == live  # nothing allocated, no reference taken
    assert sys.getrefcount(t) == rc
    # Shape/strides point into the object: a second fill gives the same addresses.
    dl2 = DLTensor()
    assert f["fill"](t, ctypes.byref(dl2)) == 0
    assert ctypes.addressof(dl.shape.contents) == ctypes.addressof(dl2.shape.contents)


def test_non_owning_fill_zero_dim_and_errors():
    f = fns()
    dl = DLTensor()
    assert f["fill"](Tensor.zeros(()), ctypes.byref(dl)) == 0
    assert dl.ndim == 0 and not dl.shape and not dl.strides
    with pytest.raises(EXC("BadArgumentType"), match="expected a 'Tensor' object"):
        f["fill"](b"bytes", ctypes.byref(dl))


def test_non_owning_fill_refuses_read_only_data():
    """A bare DLTensor has no READ_ONLY flag, so read-only data is refused (a kernel consumer
    would write through it); the owning export of the same object sets the flag instead."""
    f = fns()
    t = Tensor.arange(4).set_readonly()
    dl = DLTensor()
    with pytest.raises(EXC("ReadOnlyLegacy"), match="read-only"):
        f["fill"](t, ctypes.byref(dl))
    assert not dl.data and dl.ndim == 0, "nothing written on refusal"
    assert f["fill"](Tensor.arange(4), ctypes.byref(dl)) == 0 and dl.ndim == 1


# --- managed_tensor_allocator --------------------------------------------------------------------

def _prototype(shape, code=2, bits=32, device=(1, 0)):
    arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    p = DLTensor(None, DLDevice(*device), len(shape), DLDataType(code, bits, 1), arr, None, 0)
    return p, arr


def test_allocator():
    f = fns()
    errors = []
    cb = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    proto, _keep = _prototype((2, 3))
    out = MTV_P()
    assert f["alloc"](ctypes.byref(proto), ctypes.byref(out), None, cb) == 0, errors
    dl = out.contents.dl_tensor
    assert dims(dl.shape, 2) == (2, 3) and dims(dl.strides, 2) == (3, 1)
    assert (dl.dtype.code, dl.dtype.bits) == (2, 32) and out.contents.flags & 1 == 0
    assert dl.data % 64 == 0
    assert bytes((ctypes.c_char * 24).from_address(dl.data)) == bytes(24)
    # The allocated tensor becomes a Tensor through to_py_object.
    obj = ctypes.c_void_p()
    assert f["to_py"](out, ctypes.byref(obj)) == 0
    u = take_object(obj.value)
    assert (u.shape, u.dtype, u.strides, u.data_ptr) == ((2, 3), "float32", (3, 1), dl.data)
    np.testing.assert_array_equal(np.from_dlpack(u), np.zeros((2, 3), np.float32))
    del u


def test_allocator_errors_go_through_set_error():
    f = fns()
    errors = []
    cb = SET_ERROR(lambda ctx, kind, msg: errors.append((kind.decode(), msg.decode())))
    out = MTV_P()
    proto, _keep = _prototype((4,), device=(2, 0))  # kDLCUDA
    assert f["alloc"](ctypes.byref(proto), ctypes.byref(out), None, cb) == -1
    assert errors[-1][0] == EXC("UnsupportedDevice").__name__ and "CPU" in errors[-1][1]
    proto, _keep = _prototype((4,), code=200, bits=8)  # unknown type code
    assert f["alloc"](ctypes.byref(proto), ctypes.byref(out), None, cb) == -1
    assert errors[-1][0] == EXC("UnsupportedDtype").__name__
    proto, _keep = _prototype((-1,))
    assert f["alloc"](ctypes.byref(proto), ctypes.byref(out), None, cb) == -1
    assert f["alloc"](None, ctypes.byref(out), None, cb) == -1
    assert errors[-1][0] == EXC("BadArgumentValue").__name__
    assert not out


# --- current_work_stream -------------------------------------------------------------------------

def test_current_work_stream():
    f = fns()
    s = ctypes.c_void_p(12345)
    assert f["stream"](1, 0, ctypes.byref(s)) == 0  # kDLCPU
    assert s.value is None
    s = ctypes.c_void_p(12345)
    assert f["stream"](2, 0, ctypes.byref(s)) == 0  # kDLCUDA: no current stream set -> default
    with pytest.raises(EXC("BadArgumentValue"), match="out_current_stream is NULL"):
        f["stream"](1, 0, None)


# --- consumer side -------------------------------------------------------------------------------

@pytest.fixture
def through_the_table():
    """`from_dlpack(t)` of a Tensor calls Tensor's table (the same-type shortcut off)."""
    m._testing.set_same_type_views(False)
    try:
        yield
    finally:
        m._testing.set_same_type_views(True)


@pytest.mark.parametrize("make", [
    lambda: Tensor.arange(5),
    lambda: Tensor.arange(12, dtype="int16").reversed(),
    lambda: Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").transpose().slice(0, 1, None, 2),
    lambda: Tensor.zeros((), dtype="float32"),
    lambda: Tensor.arange(5).set_readonly(),
], ids=["1d", "reversed", "strided", "0d", "readonly"])
def test_from_dlpack_uses_the_table(through_the_table, make):
    t = make()
    n, v, live = m._testing.exchange_imports(), m._testing.same_type_views(), m._testing.live_exports()
    rc = sys.getrefcount(t)
    u = m.from_dlpack(t)
    assert (m._testing.exchange_imports(), m._testing.same_type_views()) == (n + 1, v), "the table was called"
    assert (u.data_ptr, u.shape, u.strides, u.dtype, u.readonly) == (t.data_ptr, t.shape, t.strides, t.dtype, t.readonly)
    if t.readonly:
        # The non-owning fill refuses read-only data (a bare DLTensor has no flag): the owning export.
        assert m._testing.live_exports() == live + 1, "a managed tensor from the table backs the view"
    else:
        # Tensor's own, frozen type: its table lends (the non-owning fill, the view holds t).
        assert m._testing.live_exports() == live, "no managed tensor: the table's non-owning fill"
    assert sys.getrefcount(t) == rc + 1, "it holds the source"
    del u
    assert m._testing.live_exports() == live and sys.getrefcount(t) == rc, "the view released the source"
    # numpy has no table: the __dlpack__ path, counter unchanged.
    m.from_dlpack(np.arange(3.0))
    assert m._testing.exchange_imports() == n + 1


@pytest.mark.parametrize("kw", [{}, {"device": "cpu"}, {"device": (1, 0), "copy": False}, {"copy": None}],
                         ids=["no-keywords", "device", "device-and-copy", "copy-none"])
@pytest.mark.parametrize("f", [m.from_dlpack, Tensor.from_dlpack], ids=["module", "staticmethod"])
def test_every_entry_point_takes_the_table(through_the_table, f, kw):
    """The argument-free fast path and the keyword path both import through the table (its
    non-owning fill for Tensor's writable data, the view holding t; the owning export for
    read-only data). copy=True of host memory takes the table's view too and copies it in
    dlbind (the source is released as soon as the copy is made)."""
    t = Tensor.arange(6, dtype="int32").reversed()
    n, live, rc = m._testing.exchange_imports(), m._testing.live_exports(), sys.getrefcount(t)
    u = f(t, **kw)
    assert m._testing.exchange_imports() == n + 1 and m._testing.live_exports() == live and sys.getrefcount(t) == rc + 1
    assert (u.data_ptr, u.shape, u.strides) == (t.data_ptr, t.shape, t.strides)
    del u
    assert m._testing.live_exports() == live and sys.getrefcount(t) == rc
    r = t.set_readonly()
    u = f(r, **kw)
    assert m._testing.exchange_imports() == n + 2 and m._testing.live_exports() == live + 1 and u.readonly
    del u
    assert m._testing.live_exports() == live
    n, rc = m._testing.exchange_imports(), sys.getrefcount(t)
    c = f(t, copy=True)
    assert m._testing.exchange_imports() == n + 1 and m._testing.live_exports() == live and sys.getrefcount(t) == rc
    assert c.data_ptr != t.data_ptr and c.tobytes() == t.tobytes() and not c.readonly


def test_table_import_of_cuda_memory_is_ordered_or_falls_back(through_the_table):
    """A table's export does not synchronise: for CUDA memory the consumer makes its default
    stream wait for the table's `current_work_stream` (with a driver), and without a GPU runtime
    it drops that export and goes through `__dlpack__` instead (the producer orders its
    streams). Either way the view is the same memory on the same device, and nothing leaks."""
    a = np.arange(6, dtype=np.float32)
    t = m.from_dlpack(H.OnlyCAI(a))  # host memory tagged CUDA (no driver reads it)
    cuda = (H.SPEC.device_type("kDLCUDA"), 0)
    assert tuple(t.device) == cuda
    n, live = m._testing.exchange_imports(), m._testing.live_exports()
    u = m.from_dlpack(t)
    assert tuple(u.device) == cuda and u.data_ptr == a.ctypes.data
    # The lending fill is not used for memory on a device with streams (nothing orders a lent
    # view): with a driver, the owning export backs the view; without one, the capsule does.
    assert m._testing.live_exports() == live + 1
    assert m._testing.exchange_imports() == n + (1 if H.HAS_CUDA else 0)
    del u


def test_same_type_shortcut_gives_what_the_table_gives(through_the_table):
    srcs = [Tensor.arange(6, dtype="float64"), Tensor.arange(6, dtype="int8").reversed().set_readonly(),
            Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").transpose()]
    via_table = [m.from_dlpack(t) for t in srcs]
    m._testing.set_same_type_views(True)
    v = m._testing.same_type_views()
    direct = [m.from_dlpack(t) for t in srcs]
    assert m._testing.same_type_views() == v + len(srcs)
    for a, b in zip(via_table, direct):
        assert (a.data_ptr, a.shape, a.strides, a.dtype, a.device, a.readonly) == \
               (b.data_ptr, b.shape, b.strides, b.dtype, b.device, b.readonly)
        assert a.tobytes() == b.tobytes()


def test_table_is_preferred_over_dunder():
    cap = Tensor.__dlpack_c_exchange_api__

    class Fake:
        __dlpack_c_exchange_api__ = cap

        def __dlpack__(self, **kw):
            raise RuntimeError("the __dlpack__ path was taken")

        def __dlpack_device__(self):
            return (1, 0)

    # The table's from_py_object refuses a foreign type: that error proves the table was used.
    with pytest.raises(EXC("BadArgumentType"), match="expected a 'Tensor' object"):
        m.from_dlpack(Fake())


def test_table_without_usable_version_falls_back():
    class Other:
        # A capsule with another name is not an exchange table: ignored, __dlpack__ used.
        __dlpack_c_exchange_api__ = np.arange(2).__dlpack__()

        def __init__(self):
            self.a = np.arange(4.0)

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    n = m._testing.exchange_imports()
    o = Other()
    u = m.from_dlpack(o)
    assert m._testing.exchange_imports() == n and u.shape == (4,)


def test_from_dlpack_device_and_copy_with_table():
    t = Tensor.arange(6)
    c = m.from_dlpack(t, copy=True)
    assert c.data_ptr != t.data_ptr and c.tobytes() == t.tobytes()
    v = m.from_dlpack(t, copy=False, device="cpu")
    assert v.data_ptr == t.data_ptr
    with pytest.raises(EXC("UnsupportedDevice")):
        m.from_dlpack(t, device=(4, 0))  # kDLOpenCL: no copy to it, driver or not


def test_tvm_ffi_consumes_the_table():
    tvm_ffi = pytest.importorskip("tvm_ffi")
    t = Tensor.arange(8).reversed()
    v = tvm_ffi.from_dlpack(t)
    assert v.data_ptr() == t.data_ptr
    assert tuple(v.shape) == t.shape and tuple(v.strides) == t.strides
    np.testing.assert_array_equal(np.from_dlpack(v), np.arange(8, dtype=np.float32)[::-1])
    cap = Tensor.__dlpack_c_exchange_api__

    class Fake:
        __dlpack_c_exchange_api__ = cap

        def __dlpack__(self, **kw):
            raise RuntimeError("the __dlpack__ path was taken")

    with pytest.raises(EXC("BadArgumentType"), match="expected a 'Tensor' object"):
        tvm_ffi.from_dlpack(Fake())
    del v


def test_tvm_ffi_builds_our_type_through_to_py_object():
    """tvm-ffi's `convert_func(..., tensor_cls=Tensor)` hands tensor arguments to the callback
    as `Tensor`s built by our table's `managed_tensor_to_py_object_no_sync`."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    if not hasattr(tvm_ffi, "convert_func"):
        pytest.skip("this tvm_ffi has no convert_func(tensor_cls=...)")
    got = []

    def cb(x):
        got.append((type(x), x.shape, x.data_ptr))
        return 0

    f = tvm_ffi.convert_func(cb, tensor_cls=Tensor)
    t = Tensor.arange(5)
    v = tvm_ffi.from_dlpack(t)
    f(v)
    assert got == [(Tensor, (5,), t.data_ptr)]
    del v, f, got
    gc.collect()


def test_torch_when_installed():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    t = Tensor.arange(6)
    x = torch.from_dlpack(t)
    assert x.data_ptr() == t.data_ptr
    n = m._testing.exchange_imports()
    u = m.from_dlpack(x)
    assert u.data_ptr == x.data_ptr()
    if hasattr(type(x), ATTR) and type(getattr(type(x), ATTR)).__name__ == "PyCapsule":
        assert m._testing.exchange_imports() == n + 1


_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _table_capsule(table):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(table), CAPSULE_NAME, None)


@pytest.mark.parametrize("major,prev_major", [(2, None), (2, 3), (0, None)])
def test_table_of_an_unknown_major_falls_back_to_dunder_dlpack(major, prev_major):
    """A real `dlpack_exchange_api` capsule whose table (and `prev_api` chain) has no major 1:
    never called (its entries are NULL), `__dlpack__` is used instead, end to end."""
    called = []
    entry = _ENTRY(lambda obj, out: called.append(1) or -1)

    def make(mj):
        t = D.DLPackExchangeAPI()
        t.header.version.major, t.header.version.minor = mj, 0
        for name, fn_t in D.DLPackExchangeAPI._fields_[1:]:
            setattr(t, name, ctypes.cast(entry, fn_t))
        return t
    prev = None if prev_major is None else make(prev_major)
    table = make(major)
    if prev is not None:
        table.header.prev_api = ctypes.pointer(prev.header)
    calls = []

    class Newer:
        __dlpack_c_exchange_api__ = _table_capsule(table)
        _keep = (table, prev, entry)

        def __init__(self):
            self.a = np.arange(5.0)

        def __dlpack__(self, **kw):
            calls.append(kw)
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return (1, 0)

    n = m._testing.exchange_imports()
    o = Newer()
    u = m.from_dlpack(o)
    assert m._testing.exchange_imports() == n and not called, "no entry of the table was called"
    assert len(calls) == 1, "__dlpack__ was"
    assert u.data_ptr == o.a.ctypes.data and u.shape == (5,)


def test_table_cache_follows_class_changes_and_alternating_types(through_the_table):
    class P(H.Forward):
        pass

    p, t, a = P(np.arange(3.0)), Tensor.arange(3), np.arange(4.0)
    n = m._testing.exchange_imports()
    for _ in range(3):  # alternating producer types: each keeps its own answer
        m.from_dlpack(p)
        m.from_dlpack(t)
        m.from_dlpack(a)
    assert m._testing.exchange_imports() == n + 3, "only the Tensor imports used a table"
    # The cache follows changes to the class (CPython bumps the type's version tag).
    P.__dlpack_c_exchange_api__ = Tensor.__dlpack_c_exchange_api__
    with pytest.raises(EXC("BadArgumentType"), match="expected a 'Tensor' object"):
        m.from_dlpack(p)  # Tensor's table refuses a P: proof the table was used
    del P.__dlpack_c_exchange_api__
    assert m.from_dlpack(p).shape == (3,)
    assert m._testing.exchange_imports() == n + 3
