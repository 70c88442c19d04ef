"""The manual's adapter examples (issue 43): each `// examples/tensor/src/adapters/examples/X.rs`
block of docs/manual/adapters-a.md and adapters-b.md is that file of the demo, byte for byte (so
the code the manual shows is code that compiles: the demo builds it), and its functions, under
`dlbind_demo.adapters.examples`, take the crate's type to Python and back."""
from __future__ import annotations

import gc
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import demo

ROOT = Path(__file__).resolve().parents[2]
MANUAL = ROOT / "docs" / "manual"
EXAMPLES = ROOT / "examples" / "tensor" / "src" / "adapters" / "examples"
ADAPTERS = ["ndarray", "image", "safetensors", "arrow", "candle", "cudarc"]
E = demo.adapters.examples


def manual_blocks() -> dict[str, list[str]]:
    """Every Rust block of the adapter pages that opens with an examples file's path, by file."""
    found: dict[str, list[str]] = {}
    for page in sorted(MANUAL.glob("adapters*.md")):
        for block in re.findall(r"```rust\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            m = re.match(r"// examples/tensor/src/adapters/examples/(\w+)\.rs\n", block)
            if m:
                found.setdefault(m.group(1), []).append(block)
    return found


def test_one_example_per_adapter_in_the_manual():
    found = manual_blocks()
    assert sorted(found) == sorted(ADAPTERS)
    assert all(len(v) == 1 for v in found.values()), {k: len(v) for k, v in found.items()}
    files = {p.stem for p in EXAMPLES.glob("*.rs")} - {"mod"}
    assert files == set(ADAPTERS), "each example file is shown in the manual"


@pytest.mark.parametrize("name", ADAPTERS)
def test_manual_block_is_the_demo_file(name):
    (block,) = manual_blocks()[name]
    source = (EXAMPLES / f"{name}.rs").read_text(encoding="utf-8")
    assert source == block, (
        f"examples/tensor/src/adapters/examples/{name}.rs differs from the manual's block: the "
        f"manual shows a user's code, and the demo builds exactly that code (copy the file)")


@pytest.fixture(autouse=True)
def _released():
    gc.collect()
    before = demo.adapters.live_rust_owned_tensors()
    yield
    gc.collect()
    assert demo.adapters.live_rust_owned_tensors() == before


def test_ndarray_example():
    f = E.ndarray_table(3, 4)
    a = np.from_dlpack(f)
    want = np.add.outer(10 * np.arange(3), np.arange(4)).astype(np.float64)
    np.testing.assert_array_equal(a, want)
    assert not f.readonly
    a[0, 0] = 100.0                                   # writable, and the Array2's own memory
    assert E.ndarray_row_sums(f)[0] == want[0].sum() + 100.0
    x = np.arange(12.0).reshape(3, 4)[:, ::-2]        # a strided numpy view, not copied
    assert E.ndarray_row_sums(x) == list(x.sum(axis=1))
    with pytest.raises(BufferError, match=r"^ndarray: tensor dtype is float32, wanted float64$"):
        E.ndarray_row_sums(np.ones((2, 2), np.float32))
    with pytest.raises(BufferError, match=r"^ndarray: the tensor has 1 dimension"):
        E.ndarray_row_sums(np.ones(3))


def test_image_example():
    if not hasattr(E, "image_make"):
        pytest.skip("dlbind_demo built without the image feature")
    img = E.image_make(5, 3)
    a = np.from_dlpack(img)
    assert a.shape == (3, 5, 3) and a.dtype == np.uint8 and not img.readonly
    for x, y in [(0, 0), (4, 2), (2, 1)]:
        assert list(a[y, x]) == [x, y, x + y]
        assert E.image_pixel(img, x, y) == bytes([x, y, x + y])
    a[1, 2] = [7, 8, 9]                                # numpy writes the image's own buffer
    assert E.image_pixel(img, 2, 1) == b"\x07\x08\x09"
    with pytest.raises(IndexError):
        E.image_pixel(img, 5, 0)
    with pytest.raises(BufferError, match=r"^image: "):
        E.image_pixel(np.zeros((2, 2, 4), np.uint8), 0, 0)


def test_safetensors_example(tmp_path):
    if not hasattr(E, "safetensors_load"):
        pytest.skip("dlbind_demo built without the safetensors feature")
    st = pytest.importorskip("safetensors.numpy")
    path = str(tmp_path / "x.safetensors")
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T   # any layout: written in C order
    E.safetensors_save(path, "x", x)
    np.testing.assert_array_equal(st.load_file(path)["x"], x)   # the Python package reads it
    f = E.safetensors_load(path, "x")
    assert f.readonly
    np.testing.assert_array_equal(np.from_dlpack(f), x)
    st.save_file({"w": np.arange(6, dtype=np.float64)}, str(tmp_path / "w.safetensors"))
    np.testing.assert_array_equal(
        np.from_dlpack(E.safetensors_load(str(tmp_path / "w.safetensors"), "w")), np.arange(6.0))
    with pytest.raises(ValueError, match="no tensor named"):
        E.safetensors_load(path, "nope")


def test_arrow_example():
    if not hasattr(E, "arrow_to_frame"):
        pytest.skip("dlbind_demo built without the arrow feature")
    pa = pytest.importorskip("pyarrow")
    a = pa.array(np.arange(5, dtype=np.int32))
    f = E.arrow_to_frame(a)
    v = np.from_dlpack(f)
    assert f.readonly and v.ctypes.data == a.buffers()[1].address, "a view of pyarrow's buffer"
    np.testing.assert_array_equal(v, np.arange(5))
    with pytest.raises(BufferError, match="nulls"):
        E.arrow_to_frame(pa.array([1, None]))
    c = E.arrow_to_frame(pa.array([1, None, 3]), copy=True)
    assert not c.readonly and np.from_dlpack(c).tolist() == [1, 0, 3]
    n = np.arange(4.0)
    p = E.arrow_from_dlpack(n)
    assert p.type == pa.float64() and p.to_pylist() == [0.0, 1.0, 2.0, 3.0]
    assert p.buffers()[1].address == n.ctypes.data, "pyarrow views numpy's memory"
    back = np.from_dlpack(E.arrow_to_frame(E.arrow_from_dlpack(n)))   # and around again
    assert back.ctypes.data == n.ctypes.data


def test_candle_example():
    if not hasattr(E, "candle_matmul"):
        pytest.skip("dlbind_demo built without the candle feature")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32).T      # strided: copied into candle
    m = E.candle_matmul(a, b)
    assert not m.readonly
    np.testing.assert_allclose(np.from_dlpack(m), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(BufferError, match=r"^candle: "):
        E.candle_matmul(np.zeros((2, 2), np.int8), np.zeros((2, 2), np.int8))


def _gpu_reason() -> str | None:
    if not hasattr(E, "cudarc_upload"):
        return "dlbind_demo built without its cuda feature (the cudarc example is not compiled in)"
    try:
        E.cudarc_upload([])
    except BufferError as e:
        return f"no CUDA driver or GPU here: {e}"
    return None


def test_cudarc_example():
    reason = _gpu_reason()
    if reason:
        pytest.skip(reason)
    g = E.cudarc_upload([1.0, 2.0, 3.5])
    assert g.__dlpack_device__()[0] == 2                       # kDLCUDA
    assert E.cudarc_download(g) == [1.0, 2.0, 3.5]
    try:
        import cupy as cp
    except ImportError:
        return                                                  # the round trip above suffices
    x = cp.arange(4, dtype=cp.float32) * 2
    assert E.cudarc_download(x) == [0.0, 2.0, 4.0, 6.0]
    np.testing.assert_array_equal(cp.asnumpy(cp.from_dlpack(g)), [1.0, 2.0, 3.5])


IS_COPIED = 1 << 1   # DLPACK_FLAG_BITMASK_IS_COPIED


def test_a_copy_your_type_holds_leaves_without_is_copied():
    """An adapter that copied says so in Rust (`CandleTensor::is_copied`, `ArrowTensor::is_copied`,
    `ImportedTensor::is_copied`), but a `#[derive(DLPackExport)]` type holding that copy exports
    it without IS_COPIED: the flag tells the consumer it owns the data outright, and the object
    keeps the memory and lends it again to every later export. Were it set, dlbind's own
    `from_dlpack(x, copy=True)`, which first asks for a view and copies only when IS_COPIED is
    clear, would return memory that `x` shares (docs/manual/adapters-b.md, "IS_COPIED")."""
    import dlpack_helpers as H
    if not hasattr(E, "candle_matmul"):
        pytest.skip("dlbind_demo built without the candle feature")
    m = E.candle_matmul(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32))
    info = H.inspect_capsule(m.__dlpack__(max_version=(1, 3)))
    assert info.versioned and info.flags & IS_COPIED == 0
    view = np.from_dlpack(m)
    c = demo.from_dlpack(m, copy=True)
    assert c.data_ptr != view.ctypes.data, "copy=True never aliases the object's memory"
    view[0, 0] = 5.0
    assert np.from_dlpack(c)[0, 0] == 1.0
