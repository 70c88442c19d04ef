"""The image adapter (dlbind::adapters::image) through `dlbind_demo.adapters`: ImageBuffers as
(H, W, C) tensors against numpy, FlatSamples and SubImage views with their strides, numpy
arrays read as ImageBuffers, refusals mapped to the spec's exceptions, nothing leaked."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from conftest import demo

A = demo.adapters


@pytest.fixture(autouse=True)
def _adapter_tensors_released():
    gc.collect()
    before = A.live_rust_owned_tensors()
    yield
    gc.collect()
    assert A.live_rust_owned_tensors() == before


def gradient(w, h):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x, y, x + y], axis=-1).astype(np.uint8)


def test_rgb8_is_hwc_uint8():
    t = A.image_gradient(5, 3)
    assert t.shape == (3, 5, 3) and t.strides == (15, 3, 1) and t.dtype == "uint8"
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, gradient(5, 3))
    assert a.flags.writeable and a.ctypes.data == t.data_ptr


@pytest.mark.parametrize(("kind", "shape", "dtype"), [("luma16", (2, 4, 1), np.uint16),
                                                      ("rgba32f", (2, 4, 4), np.float32)])
def test_other_pixels(kind, shape, dtype):
    a = np.from_dlpack(A.image_gradient(4, 2, kind))
    assert a.shape == shape and a.dtype == dtype
    y, x = np.mgrid[0:2, 0:4]
    if kind == "luma16":
        np.testing.assert_array_equal(a[..., 0], 1000 * x + y)
    else:
        np.testing.assert_array_equal(a[..., 0], x)
        np.testing.assert_array_equal(a[..., 2], 0.5)


def test_planar_flat_samples_keep_their_strides():
    t = A.image_planar(3, 2)
    assert t.shape == (2, 3, 3) and t.strides == (3, 1, 6)
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(np.moveaxis(a, -1, 0).ravel(), np.arange(18))


def test_sub_image_view_keeps_its_holder():
    h = A.ImageHolder(6, 4)
    rc = sys.getrefcount(h)
    c = h.crop(1, 2, 3, 2)
    assert sys.getrefcount(h) == rc + 1
    assert c.readonly and c.shape == (2, 3, 3) and c.strides == (18, 3, 1)
    a = np.from_dlpack(c)
    assert not a.flags.writeable
    np.testing.assert_array_equal(a, gradient(6, 4)[2:4, 1:4])
    del h
    gc.collect()
    np.testing.assert_array_equal(a, gradient(6, 4)[2:4, 1:4])
    with pytest.raises(BufferError, match=r"^image: SubImage at \(1, 1\) of 2 x 1, wanted one inside its 2 x 2 parent$"):
        A.ImageHolder(2, 2).crop(1, 1, 2, 1)


def test_numpy_arrays_read_as_images():
    g = gradient(7, 5)
    assert A.image_rgb_pixel(g, 3, 4) == (7, 5, bytes([3, 4, 7]))
    assert A.image_luma_mean(np.full((3, 4), 9, np.uint8)) == 9.0
    assert A.image_luma_mean(np.full((3, 4, 1), 2, np.uint8)) == 2.0
    x = g.copy()
    A.image_invert(x)
    np.testing.assert_array_equal(x, 255 - g)
    # A round trip: an image made in Rust, read back by the adapter.
    assert A.image_rgb_pixel(A.image_gradient(4, 2), 1, 1) == (4, 2, bytes([1, 1, 2]))


def test_incompatible_arrays_are_refused():
    g = gradient(4, 3)
    with pytest.raises(BufferError, match=r"^image: shape .*, wanted \(height, width, 3\)$"):
        A.image_rgb_pixel(g[..., :2], 0, 0)
    with pytest.raises(BufferError, match=r"^image: tensor dtype is \w+, wanted uint8$"):
        A.image_rgb_pixel(g.astype(np.uint16), 0, 0)
    with pytest.raises(BufferError, match="contiguous"):
        A.image_rgb_pixel(g[:, ::-1], 0, 0)
    with pytest.raises(BufferError, match="contiguous"):
        A.image_rgb_pixel(g.transpose(1, 0, 2), 0, 0)
    ro = g.copy()
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        A.image_invert(ro)
    with pytest.raises(BufferError, match=r"^image: shape .*, wanted \(height, width, 1\) or \(height, width\)$"):
        A.image_luma_mean(np.zeros(4, np.uint8))


def test_jax_reads_images():
    jnp = pytest.importorskip("jax.numpy")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(A.image_gradient(3, 2))),
                                  gradient(3, 2))


# ------------------------------------------------------------------------ empty images (issue 41)

@pytest.mark.parametrize("kind, channels, dtype", [
    ("rgb8", 3, np.uint8), ("luma16", 1, np.uint16), ("rgba32f", 4, np.float32)])
@pytest.mark.parametrize("w, h", [(0, 0), (0, 3), (4, 0)])
def test_empty_images_leave_as_empty_tensors(kind, channels, dtype, w, h):
    t = A.image_gradient(w, h, kind)
    assert t.shape == (h, w, channels)
    n = np.from_dlpack(t)
    assert n.shape == (h, w, channels) and n.dtype == dtype and n.size == 0


def test_empty_planar_samples_and_sub_images():
    assert A.image_planar(0, 2).shape == (2, 0, 3)
    assert A.image_planar(3, 0).shape == (0, 3, 3)
    h = A.ImageHolder(4, 3)
    assert h.crop(1, 1, 0, 2).shape == (2, 0, 3)
    assert h.crop(4, 3, 0, 0).shape == (0, 0, 3)           # at the corner, nothing addressed


def test_empty_arrays_import_as_images_and_0d_is_refused():
    assert A.image_luma_mean(np.zeros((0, 5), np.uint8)) == 0.0
    assert A.image_luma_mean(np.zeros((3, 0, 1), np.uint8)) == 0.0
    with pytest.raises(ValueError, match="outside the image"):   # imported: 0 x 2, no pixel
        A.image_rgb_pixel(np.zeros((2, 0, 3), np.uint8), 0, 0)
    A.image_invert(np.zeros((0, 4, 3), np.uint8))
    with pytest.raises(BufferError, match=r"^image: shape \[\], wanted"):
        A.image_luma_mean(np.array(3, np.uint8))
    with pytest.raises(BufferError, match=r"^image: shape \[2, 2, 0\], wanted"):
        A.image_rgb_pixel(np.zeros((2, 2, 0), np.uint8), 0, 0)
