//! `dlbind_demo.adapters.image_*`: the image adapter (`dlbind::adapters::image`). Images built
//! in Rust leave as height × width × channels `Tensor`s without a copy; `(H, W, C)` arrays come
//! in as `ImageBuffer`s over the producer's memory.

use dlbind::adapters::image::image::flat::SampleLayout;
use dlbind::adapters::image::image::{FlatSamples, ImageBuffer, Luma, Pixel, Rgb, RgbImage, Rgba};
use dlbind::adapters::image::{export, export_flat, export_sub_image, import, import_mut};
use dlbind::prelude::*;
use pyo3::exceptions::PyValueError;

use crate::Tensor;

fn tensor(py: Python<'_>, t: Result<ImportedTensor, DlpackError>) -> PyResult<Tensor> {
    <Tensor as FromDLPack>::from_imported(py, t?)
}

/// A `width` x `height` gradient: `rgb8` (pixel `(x, y)` = `[x, y, x + y]`), `luma16`
/// (`1000 * x + y`) or `rgba32f` (`[x, y, 0.5, 1.0]`), as an `(H, W, C)` `Tensor`.
#[pyfunction]
#[pyo3(signature = (width, height, kind = "rgb8"))]
fn image_gradient(py: Python<'_>, width: u32, height: u32, kind: &str) -> PyResult<Tensor> {
    let t = match kind {
        "rgb8" => export(RgbImage::from_fn(width, height, |x, y| {
            Rgb([x as u8, y as u8, (x + y) as u8])
        })),
        "luma16" => export(ImageBuffer::<Luma<u16>, Vec<u16>>::from_fn(
            width,
            height,
            |x, y| Luma([(1000 * x + y) as u16]),
        )),
        "rgba32f" => export(ImageBuffer::<Rgba<f32>, Vec<f32>>::from_fn(
            width,
            height,
            |x, y| Rgba([x as f32, y as f32, 0.5, 1.0]),
        )),
        other => {
            return Err(PyValueError::new_err(format!(
                "image_gradient: no kind {other:?}"
            )));
        }
    };
    tensor(py, t)
}

/// Planar (channel-major) RGB samples `0, 1, 2, ...` as `FlatSamples`, exported with their
/// strides: an `(H, W, 3)` `Tensor` with strides `(W, 1, W * H)`.
#[pyfunction]
fn image_planar(py: Python<'_>, width: u32, height: u32) -> PyResult<Tensor> {
    let (w, h) = (width as usize, height as usize);
    let flat = FlatSamples {
        samples: (0..3 * w * h).map(|k| k as u8).collect::<Vec<u8>>(),
        layout: SampleLayout {
            channels: 3,
            channel_stride: w * h,
            width,
            width_stride: 1,
            height,
            height_stride: w,
        },
        color_hint: None,
    };
    tensor(py, export_flat(flat))
}

/// A frozen class holding an RGB image; `crop(...)` exports `SubImage`s of it.
#[pyclass(frozen, module = "dlbind_demo.adapters")]
struct ImageHolder {
    img: RgbImage,
}

#[pymethods]
impl ImageHolder {
    /// The `rgb8` gradient of `image_gradient`.
    #[new]
    fn new(width: u32, height: u32) -> Self {
        ImageHolder {
            img: RgbImage::from_fn(width, height, |x, y| Rgb([x as u8, y as u8, (x + y) as u8])),
        }
    }

    /// The `width` x `height` region at `(x, y)`, a read-only strided `Tensor` viewing this
    /// object's image (a region outside the image is a BufferError).
    fn crop(slf: &Bound<'_, Self>, x: u32, y: u32, width: u32, height: u32) -> PyResult<Tensor> {
        tensor(
            slf.py(),
            export_sub_image(slf, |h| {
                dlbind::adapters::image::image::SubImage::new(&h.img, x, y, width, height)
            }),
        )
    }
}

/// `(width, height, pixel (x, y))` of an `(H, W, 3)` uint8 array read as an `RgbImage`
/// (no copy).
#[pyfunction]
fn image_rgb_pixel(x: &Bound<'_, PyAny>, px: u32, py_: u32) -> PyResult<(u32, u32, [u8; 3])> {
    let img = import::<Rgb<u8>>(dlbind::from_dlpack(x, None, None)?)?;
    let (w, h) = img.dimensions();
    if px >= w || py_ >= h {
        return Err(PyValueError::new_err("pixel outside the image"));
    }
    Ok((w, h, img.get_pixel(px, py_).0))
}

/// The mean of a one-channel uint8 image, `(H, W)` or `(H, W, 1)`.
#[pyfunction]
fn image_luma_mean(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let img = import::<Luma<u8>>(dlbind::from_dlpack(x, None, None)?)?;
    let n = img.pixels().len().max(1);
    Ok(img
        .pixels()
        .map(|p| f64::from(p.channels()[0]))
        .sum::<f64>()
        / n as f64)
}

/// Inverts a writable `(H, W, 3)` uint8 array in place, through an `ImageBuffer` over it.
#[pyfunction]
fn image_invert(x: &Bound<'_, PyAny>) -> PyResult<()> {
    // SAFETY: the one handle of `x`'s memory this call made, used with the GIL held: no
    // Python code runs meanwhile, and no other handle of it lives in this module.
    let mut img = unsafe { import_mut::<Rgb<u8>>(dlbind::from_dlpack(x, None, None)?) }?;
    for p in img.pixels_mut() {
        p.invert();
    }
    Ok(())
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(image_gradient, m)?)?;
    m.add_function(wrap_pyfunction!(image_planar, m)?)?;
    m.add_function(wrap_pyfunction!(image_rgb_pixel, m)?)?;
    m.add_function(wrap_pyfunction!(image_luma_mean, m)?)?;
    m.add_function(wrap_pyfunction!(image_invert, m)?)?;
    m.add_class::<ImageHolder>()?;
    Ok(())
}
