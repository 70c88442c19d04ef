"""A pure-Python stand-in for `dlbind_demo` built on numpy + ctypes.

Only for checking the suite itself (``DLBIND_DEMO_MODULE=fake_dlbind_demo pytest
tests/python``) while the Rust demo is not built; it is never used by
scripts/test.sh. It follows issue 3's documented semantics closely enough for the
main paths; sub-byte dtypes are not supported.
"""
from __future__ import annotations

import weakref

import numpy as np

import dlpack_helpers as H

_LIVE = [0]
_NUMPY_CODES = {(d.code, d.bits) for d in H.NUMPY_DTYPES}


def live_exports() -> int:
    return _LIVE[0]


def _carrier(dt: H.DType) -> np.dtype:
    if dt.numpy:
        return np.dtype(dt.numpy)
    if dt.subbyte:
        raise NotImplementedError("fake: sub-byte dtypes")
    return np.dtype(f"u{dt.bits // 8}")


def _spec_dtype(name: str) -> H.DType:
    try:
        return H.SPEC.dtype(name)
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _pair(x, what):
    if x is None:
        return None
    if not (type(x) is tuple and len(x) == 2 and all(_is_int(v) for v in x)):
        raise TypeError(f"{what} must be None or a tuple of two ints")
    return x


class _Holder:
    def __init__(self, arr, owner, readonly):
        self.owner = owner
        d = dict(arr.__array_interface__)
        d["data"] = (arr.ctypes.data, bool(readonly))
        self.__array_interface__ = d
        self._keep = arr


def _aligned_copy(a):
    out = H.np_aligned(a.shape, a.dtype)
    out[...] = a
    return out


class Tensor:
    def __init__(self, arr, dt: H.DType, readonly: bool):
        self._a, self._dt, self._ro = arr, dt, bool(readonly)

    # -- constructors
    @staticmethod
    def zeros(shape, dtype="float32"):
        dt = _spec_dtype(dtype)
        return Tensor(H.np_aligned(tuple(shape), _carrier(dt), fill=0), dt, False)

    @staticmethod
    def arange(n, dtype="float32"):
        dt = _spec_dtype(dtype)
        return Tensor(H.np_aligned((n,), _carrier(dt), fill=np.arange(n)), dt, False)

    @staticmethod
    def from_bytes(data, shape, dtype, readonly=False):
        dt = _spec_dtype(dtype)
        c = _carrier(dt)
        shape = tuple(shape)
        if len(data) != int(np.prod(shape, dtype=np.int64)) * c.itemsize:
            raise ValueError("size mismatch")
        a = H.np_aligned(shape, c)
        a.reshape(-1).view(np.uint8)[:] = np.frombuffer(bytes(data), np.uint8)
        return Tensor(a, dt, readonly)

    # -- properties
    shape = property(lambda s: tuple(s._a.shape))
    strides = property(lambda s: tuple(x // s._a.itemsize for x in s._a.strides))
    dtype = property(lambda s: s._dt.name)
    device = property(lambda s: (1, 0))
    readonly = property(lambda s: s._ro)
    data_ptr = property(lambda s: s._a.ctypes.data)
    ndim = property(lambda s: s._a.ndim)
    nbytes = property(lambda s: s._a.size * s._a.itemsize)

    def tobytes(self):
        return self._a.tobytes()

    def reversed(self, axis=0):
        return Tensor(np.flip(self._a, axis), self._dt, self._ro)

    def transpose(self):
        return Tensor(self._a.T, self._dt, self._ro)

    def slice(self, axis, start=None, stop=None, step=1):
        return Tensor(self._a[(slice(None),) * axis + (slice(start, stop, step),)], self._dt, self._ro)

    def set_readonly(self):
        return Tensor(self._a, self._dt, True)

    # -- protocol
    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and not _is_int(stream):
            raise TypeError("stream must be an int or None")
        max_version = _pair(max_version, "max_version")
        dl_device = _pair(dl_device, "dl_device")
        if copy is not None and not isinstance(copy, bool):
            raise TypeError("copy must be a bool or None")
        if stream is not None:
            raise ValueError("CPU: only stream=None")
        if dl_device is not None and dl_device != (1, 0):
            raise BufferError("unsupported dl_device")
        versioned = max_version is not None and max_version[0] >= 1
        src, ro = self._a, self._ro
        if copy:
            src, ro = _aligned_copy(self._a), False
        if ro and not versioned:
            raise BufferError("read-only: legacy capsule cannot signal it")
        holder = _Holder(src, self, ro)
        v = np.asarray(holder)
        _LIVE[0] += 1
        weakref.finalize(holder, _LIVE.__setitem__, 0, None) if False else weakref.finalize(holder, _dec)
        del holder
        cap = v.__dlpack__(max_version=(1, 0) if versioned else None)
        del v
        dl = H.dl_tensor_of(cap)
        dl.dtype.code, dl.dtype.bits = self._dt.code, self._dt.bits
        if versioned:
            s = H.versioned_struct_of(cap)
            s.version.minor = H.SPEC.version[1]
            if copy:
                s.flags |= H.FLAG_IS_COPIED
        return cap

    @staticmethod
    def from_dlpack(x, /, *, device=None, copy=None):
        return from_dlpack(x, device=device, copy=copy)


def _dec():
    _LIVE[0] -= 1


def from_dlpack(x, /, *, device=None, copy=None):
    if copy is not None and not isinstance(copy, bool):
        raise TypeError("copy")
    if device is not None and device != "cpu":
        device = _pair(device, "device")
        if device != (1, 0):
            raise BufferError("device")
    if device == "cpu":
        device = (1, 0)
    meth = type(x).__dlpack__  # AttributeError when missing
    try:
        cap = meth(x, max_version=H.SPEC.version, dl_device=device, copy=copy)
    except TypeError:
        cap = meth(x)
    if not H.is_capsule(cap):
        raise TypeError("__dlpack__ did not return a capsule")
    name = H.capsule_name(cap)
    if name in (H.LEGACY_USED, H.VERSIONED_USED):
        raise ValueError("capsule already consumed")
    if name not in (H.LEGACY, H.VERSIONED):
        raise ValueError(f"not a DLPack capsule: {name!r}")
    copied = False
    if name == H.VERSIONED:
        s = H.versioned_struct_of(cap)
        if s.version.major > 1:
            raise BufferError("major version too new")
        copied = bool(s.flags & H.FLAG_IS_COPIED)
    info = H.inspect_capsule(cap)
    if info.device != (1, 0):
        raise BufferError("not CPU memory")
    dt = next((d for d in H.DTYPES if (d.code, d.bits, d.lanes) == (info.code, info.bits, info.lanes)), None)
    if dt is None or dt.subbyte:
        raise BufferError("unsupported dtype")
    if (dt.code, dt.bits) not in _NUMPY_CODES:
        dl = H.dl_tensor_of(cap)
        dl.dtype.code, dl.dtype.bits = 1, dt.bits
    arr = np.from_dlpack(H.W(cap))
    if copy:
        arr = _aligned_copy(arr)
    return Tensor(arr, dt, not arr.flags.writeable)
