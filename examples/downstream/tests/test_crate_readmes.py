"""The registry pages: the README.md packaged in each .crate (what crates.io shows), read from
packaged/ (scripts/downstream.sh unpacks the .crate files there). Their Rust blocks are this
crate's src/image.rs and src/matrix.rs (tests/python/test_crate_readmes.py in the repository
checks them byte for byte); here their Python sessions run as doctests against those modules,
and the types are exercised beyond what a session shows."""

import doctest
import gc
import re
from pathlib import Path

import numpy as np
import pytest

import downstream_checks as checks
import images
import matrices

PACKAGED = Path(__file__).resolve().parents[1] / "packaged"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def readmes() -> dict[str, str]:
    found = {p.parent.name: p.read_text(encoding="utf-8") for p in PACKAGED.glob("*/README.md")}
    assert "dlbind-0.1.0" in found, f"no packaged dlbind README under {PACKAGED}"
    return found


def sessions():
    for crate, text in sorted(readmes().items()):
        for i, block in enumerate(BLOCK.findall(text)):
            if ">>>" in block:
                yield pytest.param(block, id=f"{crate}#{i}")


def test_the_runtime_readme_has_sessions():
    # Both sections (exporting, importing) show one; a fence change would skip them silently.
    assert len([s for s in sessions() if "dlbind-0.1.0" in s.id]) == 2


@pytest.mark.parametrize("text", list(sessions()))
def test_packaged_readme_session(text):
    test = doctest.DocTestParser().get_doctest(text, {}, "README.md", "README.md", 0)
    assert test.examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = []
    runner.run(test, out=out.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(out)


def test_image_exports_what_it_holds():
    for h, w in ((0, 4), (1, 1), (7, 5)):
        img = images.Image(h, w)
        a = np.from_dlpack(img)
        assert a.shape == (h, w) and a.dtype == np.uint8 and not a.any()
        assert a.strides == (w, 1) and not a.flags.writeable
        assert bytes(memoryview(img)) == bytes(h * w)
        assert np.from_dlpack(img).ctypes.data == a.ctypes.data  # the same Vec each time
    del a
    gc.collect()
    assert checks.live_exports() == 0


def test_matrix_imports_views_and_refuses_what_it_cannot_hold():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for view in (a, a.T, a[::2, 1:], a[:, ::-1]):
        m = matrices.from_dlpack(view)
        assert isinstance(m, matrices.Matrix)
        b = np.from_dlpack(m)
        assert b.ctypes.data == view.ctypes.data and b.strides == view.strides
        np.testing.assert_array_equal(b, view)
    b[0, 0] = -1.0  # writable: the producer's memory
    assert a[0, 3] == -1.0
    assert matrices.Matrix.from_dlpack(a).__class__ is matrices.Matrix
    ro = np.zeros((2, 2), np.float32)
    ro.flags.writeable = False
    for bad in (np.zeros((2, 2)), np.zeros(3, np.float32), np.zeros((1, 1, 1), np.float32), ro):
        with pytest.raises(BufferError, match="Matrix"):
            matrices.from_dlpack(bad)
    c = np.from_dlpack(matrices.from_dlpack(ro, copy=True))
    assert c.ctypes.data != ro.ctypes.data and c.flags.writeable and c.flags.c_contiguous
    del m, b, c
    gc.collect()
    assert checks.live_exports() == 0
