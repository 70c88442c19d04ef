"""The generated bindings other than Rust and C, used for real (issue 24):

- generated/cython/dlpack.pxd: a Cython module cimports it, is compiled against the generated
  header and reads a dlbind capsule (every fixture's .pxd compiles too);
- generated/python/dlpack_ctypes.py: imported here and by dlpack_helpers.py, which the whole
  suite uses (its sizes and offsets are checked against the C probe by codegen/tests/abi.rs);
- generated/python/dlpack.pyi: mypy accepts examples/tensor/dlbind_demo.pyi against its
  protocols, and rejects a class that declares `__dlpack__` as an attribute.

Cython, mypy and a C compiler come with the test venv (scripts/requirements-test.txt); where
one is missing the test skips saying so, except under CI (CI=true), where it fails.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import dlpack_helpers as H
from dlbind_demo import Growable, Tensor

ROOT = H.ROOT
FIXTURES = sorted(p.parent for p in (ROOT / "tests" / "fixtures").glob("*/spec.yaml"))
OUTPUTS = [ROOT / "generated"] + FIXTURES


def need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI installs it: scripts/requirements-test.txt)")
        pytest.skip(why)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _cc() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------- Cython
READER_PYX = """
# cython: language_level=3
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from dlpack cimport (DLManagedTensorVersioned, DLManagedTensor, DLTensor, DLDataTypeCode,
                     DLPACK_VERSIONED_CAPSULE_NAME, DLPACK_CAPSULE_NAME, DLPACK_MAJOR_VERSION,
                     DLPACK_FLAG_BITMASK_READ_ONLY, kDLCPU, kDLFloat, kDLBcomplex, kDLTPUHost)

def read(cap):
    cdef DLManagedTensorVersioned* m
    cdef DLManagedTensor* legacy
    cdef DLTensor* t
    flags = None
    if PyCapsule_IsValid(cap, DLPACK_VERSIONED_CAPSULE_NAME):
        m = <DLManagedTensorVersioned*>PyCapsule_GetPointer(cap, DLPACK_VERSIONED_CAPSULE_NAME)
        if m.version.major != DLPACK_MAJOR_VERSION:
            raise BufferError("unknown major version")
        t = &m.dl_tensor
        flags = m.flags
        has_deleter = m.deleter != NULL
    else:
        legacy = <DLManagedTensor*>PyCapsule_GetPointer(cap, DLPACK_CAPSULE_NAME)
        t = &legacy.dl_tensor
        has_deleter = legacy.deleter != NULL
    return dict(
        shape=tuple(t.shape[i] for i in range(t.ndim)),
        strides=tuple(t.strides[i] for i in range(t.ndim)) if t.strides != NULL else None,
        cpu=t.device.device_type == kDLCPU,
        dtype=(t.dtype.code, t.dtype.bits, t.dtype.lanes),
        data=<size_t>t.data + t.byte_offset,
        read_only=None if flags is None else bool(flags & DLPACK_FLAG_BITMASK_READ_ONLY),
        has_deleter=has_deleter,
    )

CODES = {"kDLFloat": kDLFloat, "kDLBcomplex": kDLBcomplex, "kDLTPUHost": kDLTPUHost}
"""

ALL_PYX = """
# cython: language_level=3
from dlpack cimport *

def version():
    return DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION
"""


def _build_cython(tmp: Path, name: str, source: str, out: Path) -> Path:
    """cython + cc: `name.pyx` against out/cython/dlpack.pxd and out/include/dlpack.h."""
    need(_has("Cython"), "Cython is not installed")
    cc = _cc()
    need(cc is not None, "no C compiler (cc) found")
    pyx = tmp / f"{name}.pyx"
    pyx.write_text(source)
    c = tmp / f"{name}.c"
    subprocess.run([sys.executable, "-m", "cython", "-3", "-I", str(out / "cython"), str(pyx),
                    "-o", str(c)], check=True, capture_output=True, text=True)
    so = tmp / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([cc, "-shared", "-fPIC", "-O0", "-w", f"-I{sysconfig.get_paths()['include']}",
                    f"-I{out / 'include'}", str(c), "-o", str(so)],
                   check=True, capture_output=True, text=True)
    return so


def test_cython_module_reads_a_dlbind_capsule(tmp_path):
    so = _build_cython(tmp_path, "dlbind_pxd_reader", READER_PYX, ROOT / "generated")
    reader = _load(so, "dlbind_pxd_reader")
    assert reader.CODES == {"kDLFloat": H.SPEC.enums["DLDataTypeCode"]["kDLFloat"],
                            "kDLBcomplex": 18, "kDLTPUHost": 20}
    t = Tensor.from_bytes(np.arange(6, dtype=np.float32).tobytes(), (2, 3), "float32")
    r = reader.read(t.__dlpack__(max_version=(1, 3)))
    assert r == dict(shape=(2, 3), strides=(3, 1), cpu=True, dtype=(2, 32, 1), data=t.data_ptr,
                     read_only=False, has_deleter=True)
    legacy = reader.read(t.__dlpack__())
    assert legacy["shape"] == (2, 3) and legacy["read_only"] is None and legacy["data"] == t.data_ptr
    g = Growable([1.0, 2.0])
    assert reader.read(g.__dlpack__(max_version=(1, 3)))["shape"] == (2,)
    ro = Tensor.from_bytes(b"\0" * 8, (2,), "float32", readonly=True)
    assert reader.read(ro.__dlpack__(max_version=(1, 3)))["read_only"] is True


@pytest.mark.parametrize("out", OUTPUTS, ids=lambda p: p.name)
def test_every_generated_pxd_compiles(tmp_path, out):
    """`from dlpack cimport *` of each generated .pxd, compiled against its own header."""
    name = f"pxd_{out.name.replace('-', '_').replace('.', '_')}"
    mod = _load(_build_cython(tmp_path, name, ALL_PYX, out), name)
    spec = H._load_yaml(out / "spec.yaml" if out != ROOT / "generated" else H.SPEC_PATH)
    assert mod.version() == (spec["version"]["major"], spec["version"]["minor"])


# ------------------------------------------------------------------------- ctypes
@pytest.mark.parametrize("out", OUTPUTS, ids=lambda p: p.name)
def test_every_ctypes_module_imports(out):
    mod = _load(out / "python" / "dlpack_ctypes.py", f"ctypes_{out.name}")
    spec = H._load_yaml(out / "spec.yaml" if out != ROOT / "generated" else H.SPEC_PATH)
    for t in spec["types"]:
        if "enum" in t:
            names = getattr(mod, f"{t['enum']}_names")
            assert {v["name"]: v["value"] for v in t["values"]} == {n: k for k, n in names.items()}
    for c in spec.get("capsules", []):
        assert getattr(mod, c["name"]) == c["value"].encode()


def test_ctypes_helpers_read_capsules_and_the_exchange_table():
    D = H.D
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    for cap in (a.__dlpack__(max_version=(1, 3)), a.__dlpack__()):
        t = D.dl_tensor(cap)
        assert D.shape_of(t) == (3, 2) and D.strides_of(t) == (4, 2)
        assert D.data_address(t) == a.ctypes.data and t.device.device_type == D.kDLCPU
    t = Tensor.from_bytes(bytes(range(8)), (4,), "bfloat16")
    cap = t.__dlpack__(max_version=(1, 3))
    m = D.managed_tensor(cap)
    assert isinstance(m, D.DLManagedTensorVersioned) and D.fn_address(m.deleter) != 0
    assert (m.version.major, m.version.minor) == (D.DLPACK_MAJOR_VERSION, D.DLPACK_MINOR_VERSION)
    assert D.DLDataTypeCode_names[m.dl_tensor.dtype.code] == "kDLBfloat"
    with pytest.raises(ValueError):
        D.managed_tensor(D._PyCapsule_GetName)  # not a capsule at all
    api = D.exchange_api(t)
    assert api is not None and D.exchange_api(Tensor) is not None and D.exchange_api(a) is None
    assert api.header.version.major == D.DLPACK_MAJOR_VERSION
    for name, _ in D.DLPackExchangeAPI._fields_[1:]:
        f = getattr(api, name)
        assert isinstance(f, D.field_type(D.DLPackExchangeAPI, name))
        if name != "dltensor_from_py_object_no_sync":  # may be NULL
            assert D.fn_address(f) != 0, name


# -------------------------------------------------------------------------- mypy
CHECK_DEMO = """
import dlbind_demo
from dlpack import FromDLPack, SupportsDLPack, SupportsDLPackDevice, SupportsDLPackExchangeAPI

t: SupportsDLPack = dlbind_demo.Tensor.zeros((3,))
d: SupportsDLPackDevice = dlbind_demo.Growable([1.0])
g: SupportsDLPack = dlbind_demo.Growable([1.0])
x: type[SupportsDLPackExchangeAPI] = dlbind_demo.Tensor
f: FromDLPack = dlbind_demo.from_dlpack
"""

# mlx#4371: `__dlpack__` declared as an attribute is not a DLPack producer.
CHECK_ATTRIBUTE = """
from dlpack import SupportsDLPack

class Attr:
    __dlpack__: int = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

y: SupportsDLPack = Attr()
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    need(_has("mypy"), "mypy is not installed")
    f = tmp_path / "check.py"
    f.write_text(source)
    env = dict(os.environ, MYPYPATH=os.pathsep.join([str(ROOT / "generated" / "python"),
                                                     str(ROOT / "examples" / "tensor")]))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--cache-dir", str(tmp_path / ".mypy_cache"), str(f)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def test_mypy_accepts_the_demo_stub_against_the_protocols(tmp_path):
    r = _mypy(tmp_path, CHECK_DEMO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_rejects_dlpack_declared_as_an_attribute(tmp_path):
    r = _mypy(tmp_path, CHECK_ATTRIBUTE)
    assert r.returncode == 1 and "__dlpack__" in r.stdout, r.stdout + r.stderr
