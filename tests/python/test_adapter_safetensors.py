"""The safetensors adapter (dlbind::adapters::safetensors) through `dlbind_demo.adapters`,
against files written by the `safetensors` Python package itself (`safetensors.numpy`,
`safetensors.serialize`): every dtype the package writes, read-only zero-copy tensors of the
memory map compared with numpy / ml_dtypes, misaligned data copied, bad files and names
refused, nothing leaked. fp6 files are written by hand (the package cannot write them)."""
from __future__ import annotations

import gc
import json
import struct

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import demo

st = pytest.importorskip("safetensors")
from safetensors.numpy import save, save_file  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")
A = demo.adapters


@pytest.fixture(autouse=True)
def _adapter_tensors_released():
    gc.collect()
    before = A.live_rust_owned_tensors()
    yield
    gc.collect()
    assert A.live_rust_owned_tensors() == before


NUMPY = {
    "float64": np.float64, "float32": np.float32, "float16": np.float16, "int64": np.int64,
    "uint64": np.uint64, "int32": np.int32, "uint32": np.uint32, "int16": np.int16,
    "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
    "complex64": np.complex64,
}
ML = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz",
      "float8_e5m2fnuz"]


def sample(name, shape=(3, 4)):
    k = np.arange(int(np.prod(shape))).reshape(shape)
    if name == "bool":
        return k % 3 == 0
    if name == "complex64":
        return (k - 2j * k).astype(np.complex64)
    if name in ML:
        return (k % 8).astype(getattr(ml_dtypes, name))
    return k.astype(NUMPY[name])


def test_every_numpy_dtype_zero_copy_read_only(tmp_path):
    tensors = {name: sample(name) for name in NUMPY}
    path = tmp_path / "np.safetensors"
    save_file(tensors, str(path))
    f = A.safetensors_open(str(path))
    assert len(f) == len(tensors) and set(f.keys()) == set(tensors)
    for name, want in tensors.items():
        t = f.get(name)
        assert t.dtype == name and t.readonly and t.shape == want.shape
        a = np.from_dlpack(t)
        assert not a.flags.writeable
        np.testing.assert_array_equal(a, want)
        assert a.dtype == want.dtype


def test_ml_dtypes_bfloat16_and_fp8(tmp_path):
    tensors = {name: sample(name, (2, 5)) for name in ML}
    path = tmp_path / "ml.safetensors"
    save_file(tensors, str(path))
    f = A.safetensors_open(str(path))
    for name, want in tensors.items():
        t = f.get(name)
        assert t.dtype == name and t.readonly
        got = t.numpy()                      # the demo's ml_dtypes-typed view
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_fp4_packed_as_the_package_writes_it(tmp_path):
    packed = np.array([0x21, 0x43, 0x65], np.uint8)    # fp4 codes 1, 2, 3, 4, 5, 6
    data = bytes(st.serialize({"x": st.TensorSpec(dtype="float4_e2m1fn_x2", shape=(3,),
                                                  data_ptr=packed.ctypes.data, data_len=3)}))
    path = tmp_path / "fp4.safetensors"
    path.write_bytes(data)
    t = A.safetensors_open(str(path)).get("x")
    assert t.dtype == "float4_e2m1fn" and t.shape == (6,)
    assert t.tobytes() == packed.tobytes(), "packed two per byte, as in the file"
    cap = t.__dlpack__(max_version=(1, 3))
    import dlpack_helpers as H
    info = H.inspect_capsule(cap)
    assert info.flags & 4 == 0, "IS_SUBBYTE_TYPE_PADDED clear: packed"
    # ml_dtypes' unpacked values: element i is nibble i (low nibble first).
    codes = np.array([(b >> s) & 0xF for b in packed for s in (0, 4)], np.uint8)
    np.testing.assert_array_equal(codes, [1, 2, 3, 4, 5, 6])


def handmade(entries, header_len=None):
    """A safetensors file from (name, dtype, shape, bytes) in order."""
    header, off = {}, 0
    for name, dt, shape, data in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":"))
    if header_len is not None:
        h = h.ljust(header_len)
    return struct.pack("<Q", len(h)) + h.encode() + b"".join(e[3] for e in entries)


def test_fp6_handmade(tmp_path):
    path = tmp_path / "fp6.safetensors"
    path.write_bytes(handmade([("a", "F6_E2M3", (4,), b"\xff\x00\x0f"),
                               ("b", "F6_E3M2", (2, 4), bytes(range(6)))], 120))
    f = A.safetensors_open(str(path))
    a, b = f.get("a"), f.get("b")
    assert (a.dtype, a.shape, a.tobytes()) == ("float6_e2m3fn", (4,), b"\xff\x00\x0f")
    assert (b.dtype, b.shape, b.tobytes()) == ("float6_e3m2fn", (2, 4), bytes(range(6)))


def test_misaligned_data_is_copied(tmp_path):
    x = np.array([1.5, -2.5, 3.25], np.float32)
    # One uint8 first: x starts at an odd offset. The package reads it too (numpy frombuffer).
    data = handmade([("pad", "U8", (1,), b"\xab"), ("x", "F32", (3,), x.tobytes())], 128)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(data)
    assert st.safe_open(str(path), "np").get_tensor("x").tolist() == x.tolist()
    t = A.safetensors_open(str(path)).get("x")
    assert t.data_ptr % 4 == 0 and t.readonly
    np.testing.assert_array_equal(np.from_dlpack(t), x)


def test_tensors_keep_the_map_alive(tmp_path):
    path = tmp_path / "keep.safetensors"
    save_file({"w": np.arange(1000, dtype=np.float64)}, str(path))
    a = np.from_dlpack(A.safetensors_open(str(path)).get("w"))   # the file object is gone
    gc.collect()
    assert a.sum() == 999 * 1000 / 2


def test_from_bytes_and_bad_input(tmp_path):
    f = A.safetensors_from_bytes(save({"a": np.eye(2, dtype=np.int32)}))
    np.testing.assert_array_equal(np.from_dlpack(f.get("a")), np.eye(2, dtype=np.int32))
    with pytest.raises(ValueError, match='no tensor named "b"'):
        f.get("b")
    with pytest.raises(BufferError, match=r"^safetensors: malformed header \(.*\), wanted a safetensors file$"):
        A.safetensors_from_bytes(b"not a safetensors file")
    with pytest.raises(BufferError, match=r"^safetensors: malformed header \(.*\), wanted a safetensors file$"):
        A.safetensors_from_bytes(save({"a": np.zeros(4)})[:-8])
    with pytest.raises(FileNotFoundError):
        A.safetensors_open(str(tmp_path / "missing.safetensors"))


def test_jax_takes_read_only_tensors_as_copies(tmp_path):
    """JAX 0.10 asks only for legacy capsules, which cannot say read-only: a mapped tensor goes
    to JAX as a private copy (copy=None; decision 0024), never as a flagless view of the file's
    mapping; copy=False refuses (the spec's ReadOnlyLegacy)."""
    jnp = pytest.importorskip("jax.numpy")
    path = tmp_path / "j.safetensors"
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(path))
    t = A.safetensors_open(str(path)).get("w")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(t)),
                                  np.arange(6, dtype=np.float32).reshape(2, 3))
    assert H.inspect_capsule(t.__dlpack__()).data != np.from_dlpack(t).ctypes.data
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(np.from_dlpack(t))),
                                  np.arange(6, dtype=np.float32).reshape(2, 3))


# ------------------------------------------------------------- empty and 0-d tensors (issue 41)

EMPTY_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                np.int64, np.uint64, np.float16, np.float32, np.float64, np.complex64]


@pytest.mark.parametrize("dtype", EMPTY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_empty_and_zero_d_tensors_of_every_dtype(tmp_path, dtype):
    arrays = {
        "e0": np.zeros((0,), dtype),
        "e1": np.zeros((0, 3), dtype),
        "e2": np.zeros((3, 0), dtype),
        "s": np.array(1, dtype),
        "z": np.zeros((2, 0, 5), dtype),
    }
    path = tmp_path / "e.safetensors"
    save_file(arrays, str(path))
    f = A.safetensors_open(str(path))
    for name, want in arrays.items():
        t = f.get(name)
        assert t.shape == want.shape and t.readonly, name
        got = np.from_dlpack(t)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want)
    # The same bytes in memory, misaligned by an odd header: copies, same values.
    raw = bytearray(path.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + n].rstrip(b" ") + b" "
    if len(header) % 2 == 0:
        header += b" "
    data = raw[8 + n:]
    g = A.safetensors_from_bytes(bytes(struct.pack("<Q", len(header)) + header + data))
    for name, want in arrays.items():
        np.testing.assert_array_equal(np.from_dlpack(g.get(name)), want)
