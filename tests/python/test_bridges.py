"""Issue 5 bridges: import through the CUDA array interface, the SYCL USM interface,
`__array_interface__` and the buffer protocol (objects without `__dlpack__`), and export of the
buffer protocol / `__array_interface__` / `__cuda_array_interface__` on the demo's Tensor."""
import array
import ctypes
import gc
import sys
import weakref

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import readonly_view, tensor_from_np

CPU, CUDA, ONEAPI = 1, 2, 14


def EXC(kind):
    return H.SPEC.exc(kind)


OnlyArrayInterface = H.OnlyArrayInterface
OnlyCAI = H.OnlyCAI


class OnlySUAI:
    def __init__(self, a, offset=0):
        self._a = a
        ai = a.__array_interface__
        strides = None if ai["strides"] is None else tuple(s // a.itemsize for s in ai["strides"])
        self.__sycl_usm_array_interface__ = {"shape": ai["shape"], "typestr": ai["typestr"], "data": ai["data"],
                                             "strides": strides, "offset": offset, "version": 1, "syclobj": None}


PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_ND, PyBUF_STRIDES, PyBUF_C_CONTIGUOUS = 0, 0x1, 0x8, 0x18, 0x38


def get_buffer(obj, flags):
    """PyObject_GetBuffer with exactly `flags` (raises what the exporter raises)."""
    view = (ctypes.c_char * 256)()  # >= sizeof(Py_buffer)
    api = ctypes.pythonapi
    api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    api.PyBuffer_Release.argtypes = [ctypes.c_void_p]
    api.PyObject_GetBuffer(obj, view, flags)
    api.PyBuffer_Release(view)


def as_np(t):
    return np.from_dlpack(t)


# ------------------------------------------------------------------ import: buffer protocol
def test_memoryview_of_numpy(m):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = m.from_dlpack(memoryview(a))
    assert t.shape == (3, 4) and t.dtype == "float32"
    assert t.data_ptr == a.ctypes.data
    assert t.__dlpack_device__() == (CPU, 0)
    np.testing.assert_array_equal(as_np(t), a)


@pytest.mark.parametrize("dt", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "complex64", "complex128", "bool"])
def test_memoryview_dtypes(m, dt):
    a = (np.arange(6) % 2).astype(dt)
    t = m.from_dlpack(memoryview(a))
    assert t.dtype == dt
    assert t.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(as_np(t), a)


def test_memoryview_strided_and_negative(m):
    a = np.arange(20, dtype=np.int64).reshape(4, 5)
    for v in (a[::2, 1::2], a[::-1], a.T):
        t = m.from_dlpack(memoryview(v))
        assert t.data_ptr == v.ctypes.data
        assert t.strides == tuple(s // 8 for s in v.strides)
        np.testing.assert_array_equal(as_np(t), v)


def test_bytes_zero_copy_readonly(m):
    b = b"\x01\x02\x03\x04\x05"
    t = m.from_dlpack(b)
    assert t.dtype == "uint8" and t.shape == (5,)
    assert t.readonly
    assert t.data_ptr == np.frombuffer(b, np.uint8).ctypes.data
    assert t.tobytes() == b
    r = as_np(t)
    assert not r.flags.writeable


def test_bytearray_zero_copy_writable(m):
    b = bytearray(b"abcdef")
    t = m.from_dlpack(b)
    assert not t.readonly
    assert t.data_ptr == ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
    r = as_np(t)
    r[0] = ord("z")
    assert b[0] == ord("z")


@pytest.mark.parametrize("code,dt", [("d", "float64"), ("f", "float32"), ("i", "int32"), ("B", "uint8"),
                                     ("q", "int64"), ("l", "int64" if ctypes.sizeof(ctypes.c_long) == 8 else "int32")])
def test_array_array(m, code, dt):
    a = array.array(code, [1, 2, 3])
    t = m.from_dlpack(a)
    assert t.dtype == dt and t.shape == (3,)
    assert t.data_ptr == a.buffer_info()[0]
    assert not t.readonly
    assert as_np(t).tolist() == [1, 2, 3]


def test_readonly_numpy_through_memoryview(m):
    a = np.arange(4, dtype=np.float64)
    a.flags.writeable = False
    t = m.from_dlpack(memoryview(a))
    assert t.readonly
    assert not as_np(t).flags.writeable


def test_buffer_keeps_exporter_alive(m):
    a = np.arange(1000, dtype=np.float32)
    mv = memoryview(a)
    w = weakref.ref(a)
    t = m.from_dlpack(mv)
    with pytest.raises(BufferError):
        mv.release()  # our view holds a buffer of it
    del a, mv
    gc.collect()
    assert w() is not None
    np.testing.assert_array_equal(as_np(t), np.arange(1000, dtype=np.float32))
    del t
    gc.collect()
    assert w() is None


def test_buffer_held_while_imported(m):
    """The exporter cannot be resized while our view holds its buffer."""
    b = bytearray(b"0123")
    t = m.from_dlpack(b)
    with pytest.raises(BufferError):
        b.extend(b"xx")
    del t
    gc.collect()
    b.extend(b"xx")


def test_big_endian_buffer_refused(m):
    a = np.arange(3, dtype=">i4")
    with pytest.raises(BufferError, match="byte order"):
        m.from_dlpack(memoryview(a))


# ------------------------------------------------------------------ import: __array_interface__
def test_array_interface_only(m):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    w = OnlyArrayInterface(a)
    assert not hasattr(w, "__dlpack__")
    t = m.from_dlpack(w)
    assert t.data_ptr == a.ctypes.data
    assert t.shape == (2, 3) and t.dtype == "int32"
    np.testing.assert_array_equal(as_np(t), a)


def test_array_interface_strided(m):
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, ::-3]
    t = m.from_dlpack(OnlyArrayInterface(a))
    assert t.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(as_np(t), a)


def test_array_interface_readonly(m):
    a = np.arange(3, dtype=np.float32)
    a.flags.writeable = False
    t = m.from_dlpack(OnlyArrayInterface(a))
    assert t.readonly
    assert not as_np(t).flags.writeable
    a2 = np.arange(3, dtype=np.float32)
    assert not m.from_dlpack(OnlyArrayInterface(a2)).readonly


def test_array_interface_keeps_exporter_alive(m):
    w = OnlyArrayInterface(np.arange(5, dtype=np.float32))
    ref = weakref.ref(w)
    base = sys.getrefcount(w)
    t = m.from_dlpack(w)
    assert sys.getrefcount(w) == base + 1
    del w
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(as_np(t), np.arange(5, dtype=np.float32))
    del t
    gc.collect()
    assert ref() is None


def test_array_interface_big_endian_refused(m):
    with pytest.raises(BufferError):
        m.from_dlpack(OnlyArrayInterface(np.arange(3, dtype=">f8")))


def test_array_interface_native_equals(m):
    a = np.arange(3, dtype=np.float32)

    class W:
        __array_interface__ = dict(a.__array_interface__, typestr="=f4")
    t = m.from_dlpack(W())
    assert t.dtype == "float32"


# ------------------------------------------------------------------ import: CAI / SUAI
@pytest.mark.parametrize("extra", [{}, {"stream": None}])
def test_cai_only_is_device_cuda(m, extra):
    a = np.arange(4, dtype=np.float32)
    w = OnlyCAI(a, **extra)
    t = m.from_dlpack(w)
    assert t.__dlpack_device__() == (CUDA, 0)
    assert t.data_ptr == a.ctypes.data
    assert t.shape == (4,) and t.dtype == "float32"
    # device memory: never dereferenced on the host
    with pytest.raises(BufferError):
        t.tobytes()
    with pytest.raises((BufferError, RuntimeError, ValueError, TypeError)):
        np.from_dlpack(t)


def test_cai_wins_over_array_interface(m):
    a = np.arange(4, dtype=np.float32)

    class Both(OnlyCAI):
        __array_interface__ = a.__array_interface__
    assert m.from_dlpack(Both(a)).__dlpack_device__() == (CUDA, 0)


def test_cai_readonly_and_strides(m):
    a = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    a.flags.writeable = False
    t = m.from_dlpack(OnlyCAI(a))
    assert t.readonly
    assert t.strides == (4, 2)


@pytest.mark.parametrize("stream", [0, -1, "1", 1.0])
def test_cai_stream_invalid_refused(m, stream):
    """CAI v3: stream 0 is disallowed; the key is None or a (positive) int."""
    with pytest.raises(ValueError, match="stream"):
        m.from_dlpack(OnlyCAI(np.arange(2, dtype=np.float32), stream=stream))


@pytest.mark.parametrize("stream", [1, 2])
def test_cai_stream_int_accepted_without_driver(m, stream):
    """Without a GPU runtime nothing can be synchronised; the view is still device-tagged and
    never read on the host."""
    t = m.from_dlpack(OnlyCAI(np.arange(2, dtype=np.float32), stream=stream))
    assert t.__dlpack_device__() == (CUDA, 0)


def test_suai_only_is_device_oneapi(m):
    a = np.arange(6, dtype=np.float64)
    t = m.from_dlpack(OnlySUAI(a, offset=2))
    assert t.__dlpack_device__() == (ONEAPI, 0)
    assert t.data_ptr == a.ctypes.data + 2 * 8
    with pytest.raises(BufferError):
        t.tobytes()


# ------------------------------------------------------------------ import: none
@pytest.mark.parametrize("obj", [object(), 3.5, "text", [1, 2]], ids=["object", "float", "str", "list"])
def test_no_protocol_names_all(m, obj):
    with pytest.raises(AttributeError) as ei:
        m.from_dlpack(obj)
    msg = str(ei.value)
    for p in ("__dlpack__", "__cuda_array_interface__", "__sycl_usm_array_interface__", "__array_interface__",
              "buffer protocol"):
        assert p in msg, msg


# ------------------------------------------------------------------ export on Tensor
def test_tensor_array_interface(Tensor):
    t = Tensor.arange(6, "float32")
    ai = t.__array_interface__
    assert ai["version"] == 3
    assert ai["shape"] == (6,)
    assert ai["typestr"] == H.SPEC.dtype("float32").numpy == "<f4"
    assert ai["data"] == (t.data_ptr, False)
    assert ai["strides"] is None


def test_tensor_array_interface_strided_readonly(Tensor):
    t = readonly_view(tensor_from_np(np.arange(12, dtype=np.int16).reshape(3, 4)).reversed(1))
    ai = t.__array_interface__
    assert ai["data"] == (t.data_ptr, True)
    assert ai["strides"] == (8, -2)
    a = np.asarray(t)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::-1])
    assert not a.flags.writeable


def test_np_asarray_tensor_zero_copy(Tensor):
    t = tensor_from_np(np.arange(6, dtype=np.float64).reshape(2, 3))
    a = np.asarray(t)
    assert a.ctypes.data == t.data_ptr
    assert a.base is not None
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float64).reshape(2, 3))
    a[0, 0] = 42
    assert np.from_dlpack(t)[0, 0] == 42


def test_np_asarray_keeps_tensor_alive(Tensor):
    t = Tensor.arange(4, "int32")
    w = weakref.ref(t)
    a = np.asarray(t)
    del t
    gc.collect()
    assert w() is not None
    assert a.tolist() == [0, 1, 2, 3]
    del a
    gc.collect()
    assert w() is None


def test_memoryview_tensor(Tensor):
    t = tensor_from_np(np.arange(6, dtype=np.float32).reshape(2, 3))
    mv = memoryview(t)
    assert mv.format == "f" and mv.itemsize == 4
    assert mv.shape == (2, 3) and mv.strides == (12, 4)
    assert not mv.readonly
    assert mv.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert mv.obj is t
    mv.release()


def test_memoryview_tensor_readonly(Tensor):
    t = readonly_view(Tensor.arange(3, "int64"))
    mv = memoryview(t)
    assert mv.readonly
    with pytest.raises(TypeError):
        mv[0] = 1
    # a writable request on read-only data is refused with BufferError
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(t, PyBUF_WRITABLE | PyBUF_STRIDES)
    get_buffer(t, PyBUF_STRIDES)
    get_buffer(Tensor.arange(3, "int64"), PyBUF_WRITABLE | PyBUF_STRIDES)


def test_memoryview_tensor_negative_strides(Tensor):
    t = Tensor.arange(5, "int32").reversed(0)
    mv = memoryview(t)
    assert mv.strides == (-4,)
    assert mv.tolist() == [4, 3, 2, 1, 0]
    for flags in (PyBUF_SIMPLE, PyBUF_ND, PyBUF_C_CONTIGUOUS):  # contiguous requests on a reversed view
        with pytest.raises(BufferError, match="contiguous"):
            get_buffer(t, flags)
    get_buffer(t, PyBUF_STRIDES)


def test_buffer_protocol_roundtrip_through_import(m, Tensor):
    t = Tensor.arange(4, "float32")
    u = m.from_dlpack(memoryview(t))
    assert u.data_ptr == t.data_ptr


def test_no_buffer_format_dtype(Tensor):
    t = Tensor.zeros((2,), "bfloat16")
    with pytest.raises(BufferError, match="bfloat16"):
        memoryview(t)
    assert not hasattr(t, "__array_interface__")


def test_cpu_tensor_has_no_device_interfaces(Tensor):
    t = Tensor.zeros((2,))
    assert hasattr(t, "__array_interface__")
    assert not hasattr(t, "__cuda_array_interface__")
    assert not hasattr(t, "__sycl_usm_array_interface__")


def test_exported_getters_raise_attribute_error_message(Tensor):
    with pytest.raises(AttributeError, match="not CUDA memory"):
        Tensor.zeros((2,)).__cuda_array_interface__


def test_cuda_tagged_tensor_exports_cai_only(m):
    """A Tensor holding CUDA-tagged memory (imported through a CAI wrapper) exports
    __cuda_array_interface__ and none of the host protocols."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = m.from_dlpack(OnlyCAI(a))
    assert t.__dlpack_device__() == (CUDA, 0)
    cai = t.__cuda_array_interface__
    # no recorded stream: CUDA data is taken to be ready on the stream `stream=None` stands for
    assert cai["version"] == 3 and cai["stream"] == H.SPEC.consumer_default_stream("kDLCUDA") == 1
    assert cai["data"] == (a.ctypes.data, False)
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f4" and cai["strides"] is None
    assert not hasattr(t, "__array_interface__")
    assert not hasattr(t, "__sycl_usm_array_interface__")
    with pytest.raises(BufferError):
        memoryview(t)
    # and it round-trips through the CAI import again (device kept, same pointer)
    u = m.from_dlpack(OnlyCAIFrom(t))
    assert u.__dlpack_device__() == (CUDA, 0) and u.data_ptr == a.ctypes.data


class OnlyCAIFrom:
    def __init__(self, t):
        self.__cuda_array_interface__ = t.__cuda_array_interface__
        self._t = t


def test_oneapi_tagged_tensor_exports_suai(m):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    t = m.from_dlpack(OnlySUAI(a))
    assert t.__dlpack_device__() == (ONEAPI, 0)
    su = t.__sycl_usm_array_interface__
    assert su["version"] == 1 and su["offset"] == 0 and su["syclobj"] is None
    assert su["strides"] == (4, 2)  # elements
    assert su["data"] == (a.ctypes.data, False)
    assert not hasattr(t, "__cuda_array_interface__") and not hasattr(t, "__array_interface__")


class ByteArrayWithAI(bytearray):
    """A buffer exporter whose __array_interface__ has no data pointer (numpy: data=None means
    the object's own buffer, from `offset` bytes)."""


def _addr(b):
    return ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))


def test_array_interface_without_pointer_uses_own_buffer(m):
    b = ByteArrayWithAI(np.arange(4, dtype=np.int32).tobytes())
    b.__array_interface__ = {"shape": (2,), "typestr": "<i4", "version": 3, "offset": 4}
    t = m.from_dlpack(b)
    assert t.data_ptr == _addr(b) + 4
    assert as_np(t).tolist() == [1, 2]
    b.__array_interface__ = {"shape": (4,), "typestr": "<i4", "version": 3, "offset": 4}
    with pytest.raises(BufferError, match="outside"):
        m.from_dlpack(b)


def test_array_interface_data_is_a_buffer_object(m):
    raw = bytearray(np.arange(6, dtype=np.float64).tobytes())
    ro = bytes(raw)

    class W:
        def __init__(self, data):
            self.__array_interface__ = {"shape": (2, 3), "typestr": "<f8", "version": 3, "data": data,
                                        "strides": (8, 16)}
    t = m.from_dlpack(W(raw))
    assert t.data_ptr == _addr(raw) and not t.readonly
    np.testing.assert_array_equal(as_np(t), np.arange(6.0).reshape(3, 2).T)
    assert m.from_dlpack(W(ro)).readonly


# ------------------------------------------------------------------ import order, end to end
class OnlyDLPack:
    """A DLPack producer (numpy underneath) that also carries the given interface dicts."""

    def __init__(self, a, **interfaces):
        self._a = a
        for k, v in interfaces.items():
            setattr(self, k, v)

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_wins_over_every_interface(m):
    a = np.arange(4, dtype=np.float32)
    cai = OnlyCAI(a).__cuda_array_interface__
    suai = OnlySUAI(a).__sycl_usm_array_interface__
    o = OnlyDLPack(a, __cuda_array_interface__=cai, __sycl_usm_array_interface__=suai,
                   __array_interface__=a.__array_interface__)
    t = m.from_dlpack(o)
    assert t.__dlpack_device__() == (CPU, 0), "DLPack first: the CPU capsule, not the device dicts"
    assert t.data_ptr == a.ctypes.data


def test_cai_wins_over_suai(m):
    a = np.arange(4, dtype=np.float32)

    class Both(OnlyCAI):
        __sycl_usm_array_interface__ = OnlySUAI(a).__sycl_usm_array_interface__
    assert m.from_dlpack(Both(a)).__dlpack_device__() == (CUDA, 0)


def test_suai_wins_over_array_interface_and_buffer(m):
    a = np.arange(4, dtype=np.float32)

    class Both(OnlySUAI):
        __array_interface__ = a.__array_interface__

        def __buffer__(self, flags):  # Python 3.12+ only; harmless on 3.11
            return memoryview(a)
    assert m.from_dlpack(Both(a)).__dlpack_device__() == (ONEAPI, 0)


def test_array_interface_wins_over_buffer_protocol(m):
    # bytearray exports the buffer protocol; a subclass adding __array_interface__ of another
    # array must be imported through the interface.
    a = np.arange(4, dtype=np.int32)

    class BA(bytearray):
        __array_interface__ = a.__array_interface__
    o = BA(b"\x01" * 16)
    o._keep = a
    t = m.from_dlpack(o)
    assert t.data_ptr == a.ctypes.data and t.dtype == "int32"


def test_suai_version_other_than_1_refused(m):
    w = OnlySUAI(np.arange(2, dtype=np.float32))
    w.__sycl_usm_array_interface__ = dict(w.__sycl_usm_array_interface__, version=2)
    with pytest.raises(ValueError, match="version"):
        m.from_dlpack(w)


# ------------------------------------------------------------------ consumers read our dicts
def test_numpy_reads_our_array_interface(Tensor):
    """numpy consumes the Tensor's __array_interface__ itself (an object offering only that dict,
    so numpy cannot take the buffer protocol instead): zero-copy, strides and read-only kept."""
    t = Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").transpose()
    ro = t.set_readonly()
    for src, writable in [(t, True), (ro, False)]:
        holder = OnlyArrayInterface.__new__(OnlyArrayInterface)
        holder._a = src
        holder.__array_interface__ = src.__array_interface__
        a = np.asarray(holder)
        assert a.ctypes.data == src.data_ptr
        assert a.shape == src.shape
        assert a.strides == tuple(s * a.itemsize for s in src.strides)
        assert a.flags.writeable == writable
        np.testing.assert_array_equal(a, np.from_dlpack(src))
