// examples/tensor/src/adapters/examples/image.rs
use dlbind::adapters::image::image::{Rgb, RgbImage};
use dlbind::adapters::image::{export, import};
use dlbind::prelude::*;

use super::Frame; // the README's `Frame`

/// Rust -> Python: an `RgbImage` made here moves into a `Frame` of shape (height, width, 3),
/// uint8 (no copy; writable). Pixel (x, y) is [x, y, x + y].
#[pyfunction]
fn image_make(py: Python<'_>, width: u32, height: u32) -> PyResult<Frame> {
    let img = RgbImage::from_fn(width, height, |x, y| Rgb([x as u8, y as u8, (x + y) as u8]));
    Frame::from_imported(py, export(img)?)
}

/// Python -> Rust: a C-contiguous (height, width, 3) uint8 producer as an `ImageBuffer` over
/// its memory (no copy): the pixel at (x, y).
#[pyfunction]
fn image_pixel(array: &Bound<'_, PyAny>, x: u32, y: u32) -> PyResult<[u8; 3]> {
    let img = import::<Rgb<u8>>(dlbind::from_dlpack(array, None, None)?)?;
    match img.get_pixel_checked(x, y) {
        Some(p) => Ok(p.0),
        None => Err(pyo3::exceptions::PyIndexError::new_err(
            "pixel outside the image",
        )),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(image_make, m)?)?;
    m.add_function(wrap_pyfunction!(image_pixel, m)?)
}
