"""Shared helpers for the dlbind pytest suite: the spec tables, ctypes views of
DLPack capsules, and small producer wrappers.

Nothing here hard-codes dtypes or exception choices: they come from
``spec/dlpack.yaml`` (override with ``DLBIND_SPEC=/path/to/spec.yaml``), with a
fallback to ``generated/docs/dtypes.md`` for the dtype table.
"""
from __future__ import annotations

import builtins
import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SPEC_PATH = Path(os.environ.get("DLBIND_SPEC", ROOT / "spec" / "dlpack.yaml"))


# --------------------------------------------------------------------- spec
def _load_yaml(path: Path) -> dict:
    import yaml  # pinned in scripts/requirements-test.txt

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


@dataclass(frozen=True)
class DType:
    name: str               # spec Python name ("float32", "bfloat16", ...)
    code: int               # DLDataTypeCode value
    code_name: str          # "kDLFloat"
    bits: int
    lanes: int
    numpy: Optional[str]    # numpy typestr, None where numpy has none

    @property
    def np_dtype(self) -> Optional[np.dtype]:
        """numpy dtype: the spec's typestr, else the ml_dtypes type of the same name."""
        if self.numpy:
            return np.dtype(self.numpy)
        try:
            import ml_dtypes
        except ImportError:  # pragma: no cover
            return None
        t = getattr(ml_dtypes, self.name, None)
        return None if t is None else np.dtype(t)

    @property
    def subbyte(self) -> bool:
        return self.bits % 8 != 0

    def nbytes(self, numel: int, padded: bool = False) -> int:
        if self.subbyte and not padded:
            return (numel * self.bits * self.lanes + 7) // 8
        return numel * ((self.bits * self.lanes + 7) // 8)

    def __repr__(self) -> str:  # nicer pytest ids
        return self.name


class Spec:
    def __init__(self, path: Path = SPEC_PATH):
        self.path = path
        self.raw: dict = _load_yaml(path) if path.exists() else {}
        self.version = self._version()
        self.enums = self._enums()
        self.dtypes = self._dtypes()
        self.failures = self._failures()
        self.capsule_names = self._capsules()
        self.stream_rules = self.raw.get("streams", {})

    # -- pieces
    def _version(self) -> tuple[int, int]:
        v = self.raw.get("version") or {"major": 1, "minor": 3}
        return int(v["major"]), int(v["minor"])

    def _enums(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t in self.raw.get("types", []) or []:
            if isinstance(t, dict) and "enum" in t:
                out[t["enum"]] = {v["name"]: int(v["value"]) for v in t.get("values", [])}
        return out

    def device_type(self, name: str) -> int:
        return self.enums["DLDeviceType"][name]

    def host_accessible(self, name: str) -> bool:
        """Whether the spec marks a device type `host_accessible` (the CPU reads its memory)."""
        for t in self.raw.get("types", []) or []:
            if isinstance(t, dict) and t.get("enum") == "DLDeviceType":
                return any(v["name"] == name and v.get("host_accessible", False) for v in t["values"])
        return False

    def _dtypes(self) -> list[DType]:
        codes = self.enums.get("DLDataTypeCode", {})
        rows = self.raw.get("dtypes")
        if rows:
            out = []
            for r in rows:
                code = r["code"]
                code_val = codes[code] if isinstance(code, str) else int(code)
                code_name = code if isinstance(code, str) else next(
                    (k for k, v in codes.items() if v == code_val), str(code_val))
                out.append(DType(str(r["name"]), code_val, code_name, int(r["bits"]),
                                 int(r.get("lanes", 1)), r.get("numpy") or r.get("numpy_typestr")))
            return out
        return _dtypes_from_markdown(ROOT / "generated" / "docs" / "dtypes.md", codes)

    def _failures(self) -> dict[str, type]:
        out = {}
        for f in self.raw.get("failures", []) or []:
            exc = getattr(builtins, f["exception"])
            assert isinstance(exc, type) and issubclass(exc, BaseException), f
            out[_norm(f["kind"])] = exc
        return out

    def _capsules(self) -> dict[str, str]:
        names = {c["name"]: c["value"] for c in self.raw.get("capsules", []) or []}
        return {
            "legacy": names.get("DLPACK_CAPSULE_NAME", "dltensor"),
            "legacy_used": names.get("DLPACK_USED_CAPSULE_NAME", "used_dltensor"),
            "versioned": names.get("DLPACK_VERSIONED_CAPSULE_NAME", "dltensor_versioned"),
            "versioned_used": names.get("DLPACK_VERSIONED_USED_CAPSULE_NAME", "used_dltensor_versioned"),
        }

    @property
    def exchange_legacy_attrs(self) -> list[str]:
        """Legacy names of the exchange-table attribute (``exchange_api.legacy_attributes``)."""
        x = self.raw.get("exchange_api") or {}
        return [a["value"] for a in x.get("legacy_attributes", []) or []]

    # -- queries
    def exc(self, kind: str) -> type:
        """The exception class the spec maps a failure kind to (e.g. "InvalidStream")."""
        try:
            return self.failures[_norm(kind)]
        except KeyError:
            raise AssertionError(f"spec {self.path} has no failure kind {kind!r}; "
                                 f"known: {sorted(self.failures)}") from None

    def dtype(self, name: str) -> DType:
        for d in self.dtypes:
            if d.name == name:
                return d
        raise KeyError(name)

    def stream_device_types(self) -> set[int]:
        """The device type values the spec has stream rules for (CUDA, ROCm)."""
        return {self.device_type(r["device"]) for r in self.stream_rules.get("rules", [])}

    def consumer_default_stream(self, device: str):
        """The stream the spec says a consumer passes on `device` when it has none current."""
        for r in self.stream_rules.get("rules", []):
            if r.get("device") == device:
                return r.get("consumer_default")
        return None

    def cpu_stream_ok(self, value) -> bool:
        """Whether the spec's stream rules accept `value` on a stream-less device (CPU)."""
        rules = {r.get("device") for r in self.stream_rules.get("rules", [])}
        assert "kDLCPU" not in rules, "spec grew a CPU stream rule; update the tests"
        return value is None


def _dtypes_from_markdown(path: Path, codes: dict[str, int]) -> list[DType]:
    if not path.exists():
        return []
    lines = [l for l in path.read_text(encoding="utf-8").splitlines() if l.startswith("|")]
    if len(lines) < 3:
        return []
    head = [_norm(c) for c in lines[0].strip("|").split("|")]

    def col(*names):
        for n in names:
            if n in head:
                return head.index(n)
        return None

    i_name, i_code, i_bits = col("name", "python", "pythonname"), col("code", "codevalue"), col("bits")
    i_lanes, i_np = col("lanes"), col("numpy", "numpytypestr", "typestr")
    out = []
    for l in lines[2:]:
        cells = [c.strip().strip("`") for c in l.strip("|").split("|")]
        code = cells[i_code]
        m = re.search(r"\d+", code)
        code_val = codes.get(code, int(m.group()) if m else -1)
        np_ts = cells[i_np] if i_np is not None and cells[i_np] not in ("", "-", "—") else None
        out.append(DType(cells[i_name], code_val, code, int(cells[i_bits]),
                         int(cells[i_lanes]) if i_lanes is not None else 1, np_ts))
    return out


SPEC = Spec()
DTYPES = SPEC.dtypes
NUMPY_DTYPES = [d for d in DTYPES if d.numpy]
ML_DTYPES = [d for d in DTYPES if not d.numpy]
BYTE_DTYPES = [d for d in DTYPES if not d.subbyte]
LEGACY = SPEC.capsule_names["legacy"]
VERSIONED = SPEC.capsule_names["versioned"]
LEGACY_USED = SPEC.capsule_names["legacy_used"]
VERSIONED_USED = SPEC.capsule_names["versioned_used"]
KDLCPU = SPEC.device_type("kDLCPU") if SPEC.enums else 1


def cuda_driver_present() -> bool:
    """Whether a CUDA driver with at least one device is loadable (the GPU tests run then)."""
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


HAS_CUDA = cuda_driver_present()
NO_CUDA_REASON = "no CUDA driver/device on this machine (GPU suite skipped)"


# ------------------------------------------------------------- ctypes ABI
def _load_generated_ctypes():
    """generated/python/dlpack_ctypes.py, generated from the same spec (structures, constants,
    capsule names and pointer helpers); loaded by path, registered as `dlpack_ctypes`."""
    import importlib.util
    import sys

    if "dlpack_ctypes" in sys.modules:
        return sys.modules["dlpack_ctypes"]
    path = ROOT / "generated" / "python" / "dlpack_ctypes.py"
    spec = importlib.util.spec_from_file_location("dlpack_ctypes", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dlpack_ctypes"] = mod
    spec.loader.exec_module(mod)
    return mod


D = _load_generated_ctypes()
DLDevice, DLDataType, DLTensor = D.DLDevice, D.DLDataType, D.DLTensor
DLPackVersion, DLManagedTensor, DLManagedTensorVersioned = (
    D.DLPackVersion, D.DLManagedTensor, D.DLManagedTensorVersioned)
FLAG_READ_ONLY = D.DLPACK_FLAG_BITMASK_READ_ONLY
FLAG_IS_COPIED = D.DLPACK_FLAG_BITMASK_IS_COPIED
FLAG_SUBBYTE_PADDED = D.DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_CheckExact = None  # macro, not exported


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def capsule_name(cap) -> Optional[str]:
    n = _api.PyCapsule_GetName(cap)
    return None if n is None else n.decode()


def _struct_ptr(cap) -> int:
    name = _api.PyCapsule_GetName(cap)
    p = _api.PyCapsule_GetPointer(cap, name)
    assert p, "capsule holds NULL"
    return p


@dataclass
class CapsuleInfo:
    name: str
    versioned: bool
    version: Optional[tuple[int, int]]
    flags: Optional[int]
    data: Optional[int]
    device: tuple[int, int]
    ndim: int
    code: int
    bits: int
    lanes: int
    shape: Optional[tuple[int, ...]]
    strides: Optional[tuple[int, ...]]
    byte_offset: int
    has_deleter: bool
    struct_addr: int


def inspect_capsule(cap) -> CapsuleInfo:
    """Read a (possibly used) DLPack capsule's struct through ctypes without consuming it."""
    name = capsule_name(cap)
    versioned = name in (VERSIONED, VERSIONED_USED)
    addr = _struct_ptr(cap)
    if versioned:
        m = DLManagedTensorVersioned.from_address(addr)
        t, version, flags, deleter = m.dl_tensor, (m.version.major, m.version.minor), m.flags, m.deleter
        if version[0] != 1:  # must not read other fields
            return CapsuleInfo(name, True, version, None, None, (0, 0), 0, 0, 0, 0, None, None, 0,
                               bool(deleter), addr)
    else:
        m = DLManagedTensor.from_address(addr)
        t, version, flags, deleter = m.dl_tensor, None, None, m.deleter
    nd = t.ndim
    shape = tuple(t.shape[i] for i in range(nd)) if t.shape else None
    strides = tuple(t.strides[i] for i in range(nd)) if t.strides else None
    return CapsuleInfo(name, versioned, version, flags, t.data, (t.device.device_type, t.device.device_id),
                       nd, t.dtype.code, t.dtype.bits, t.dtype.lanes, shape, strides, t.byte_offset,
                       bool(deleter), addr)


def dl_tensor_of(cap) -> DLTensor:
    """A writable ctypes view of the capsule's DLTensor (for patching test capsules)."""
    addr = _struct_ptr(cap)
    if capsule_name(cap) in (VERSIONED, VERSIONED_USED):
        return DLManagedTensorVersioned.from_address(addr).dl_tensor
    return DLManagedTensor.from_address(addr).dl_tensor


def versioned_struct_of(cap) -> DLManagedTensorVersioned:
    assert capsule_name(cap) == VERSIONED
    return DLManagedTensorVersioned.from_address(_struct_ptr(cap))


# --------------------------------------------------------------- producers
class W:
    """A producer that hands out a prepared capsule and records the kwargs it was called with."""

    def __init__(self, cap, dev=(1, 0)):
        self.cap, self.dev, self.calls = cap, dev, []

    def __dlpack__(self, *args, **kw):
        assert not args, f"consumer passed positional args {args}"
        self.calls.append(dict(kw))
        return self.cap

    def __dlpack_device__(self):
        return self.dev


class Fresh:
    """A producer that makes a new capsule with `make()` for each `__dlpack__` call, as real
    producers do, and keeps every capsule and the call's kwargs."""

    def __init__(self, make, dev=(1, 0)):
        self.make, self.dev, self.caps, self.calls, self.device_calls = make, dev, [], [], 0

    def __dlpack__(self, *args, **kw):
        assert not args, f"consumer passed positional args {args}"
        self.calls.append(dict(kw))
        self.caps.append(self.make())
        return self.caps[-1]

    def __dlpack_device__(self):
        self.device_calls += 1
        return self.dev


_FRESH_TYPES: list[type] = []


def fresh_producer(make, dev=(1, 0)) -> Fresh:
    """A `Fresh` producer of a brand-new type, so that no per-type memory of the consumer
    (exchange-table cache, GPU producer type) carries over from other tests. The types are kept
    alive: a freed type's address could be reused by the next one, and the consumer remembers
    types by address."""
    _FRESH_TYPES.append(type("FreshProducer", (Fresh,), {}))
    return _FRESH_TYPES[-1](make, dev)


def device_tagged_capsule(arr, device_type, legacy=False):
    """A fresh numpy capsule whose DLTensor claims `device_type` memory (host memory all the
    same: for consumer tests that must not read it)."""
    cap = arr.__dlpack__() if legacy else arr.__dlpack__(max_version=(1, 0))
    dl_tensor_of(cap).device.device_type = device_type
    return cap


class OnlyArrayInterface:
    """Exposes nothing but numpy's __array_interface__ (keeps the array alive itself)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class OnlyCAI:
    """Exposes nothing but a __cuda_array_interface__ dict over a numpy array's memory (a host
    pointer, on purpose: without a driver it imports as CUDA-tagged memory)."""

    def __init__(self, a, **extra):
        self._a = a
        ai = a.__array_interface__
        self.__cuda_array_interface__ = {"shape": ai["shape"], "typestr": ai["typestr"], "data": ai["data"],
                                         "strides": ai["strides"], "version": 3, **extra}


class Spy:
    """Forwards to a real producer and records every __dlpack__ / __dlpack_device__ call."""

    def __init__(self, inner):
        self.inner, self.calls, self.device_calls = inner, [], 0

    def __dlpack__(self, *args, **kw):
        self.calls.append((args, dict(kw)))
        return self.inner.__dlpack__(*args, **kw)

    def __dlpack_device__(self):
        self.device_calls += 1
        return self.inner.__dlpack_device__()


class Forward:
    """A plain Python producer over a numpy array: `__dlpack__` (any keywords) and
    `__dlpack_device__` forwarded to it. Subclass it per test for class-attribute experiments
    (each subclass is its own type, with its own exchange-table cache entry)."""

    def __init__(self, arr):
        self.a = arr

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class LegacyOnly:
    """An old producer: `__dlpack__(self, stream=None)` only (DLPack < 1.0 era)."""

    def __init__(self, arr):
        self.arr, self.calls = arr, []

    def __dlpack__(self, stream=None):
        self.calls.append(stream)
        return self.arr.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def np_aligned(shape, dtype, align=64, fill=None) -> np.ndarray:
    """A C-contiguous numpy array whose data is `align`-byte aligned."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(n + align, dtype=np.uint8)
    off = (-buf.ctypes.data) % align
    a = buf[off:off + n].view(dtype).reshape(shape)
    if fill is not None:
        a[...] = fill
    return a


def sample_values(dt: DType, shape) -> np.ndarray:
    """Deterministic, exactly representable values of dtype `dt` (numpy or ml_dtypes)."""
    npdt = dt.np_dtype
    n = int(np.prod(shape, dtype=np.int64))
    base = np.arange(n) % 7
    if npdt.kind == "b":
        return (base % 2 == 1).reshape(shape)
    if npdt.kind in "iu":
        return (base + 1).astype(npdt).reshape(shape)
    if npdt.kind == "c":
        return (base + 1j * (base % 3)).astype(npdt).reshape(shape)
    vals = np.array([0.0, 1.0, 2.0, 0.5, 1.5, 4.0, 3.0], dtype=np.float32)
    if dt.name.startswith("float8_e8m0"):  # exponent only: powers of two, no zero
        vals = np.array([1.0, 2.0, 0.5, 4.0, 0.25, 8.0, 1.0], dtype=np.float32)
    return vals[base].astype(npdt).reshape(shape)
