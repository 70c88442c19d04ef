// examples/tensor/src/adapters/examples/ndarray.rs
use dlbind::adapters::ndarray::ndarray::{Array2, Ix2};
use dlbind::adapters::ndarray::{export, view};
use dlbind::prelude::*;

use super::Frame; // the README's `Frame`

/// Rust -> Python: an `Array2` made here moves into a `Frame` (no copy; writable).
#[pyfunction]
fn ndarray_table(py: Python<'_>, rows: usize, cols: usize) -> PyResult<Frame> {
    let a = Array2::from_shape_fn((rows, cols), |(i, j)| (10 * i + j) as f64);
    Frame::from_imported(py, export(a)?)
}

/// Python -> Rust: any float64 2-D producer (numpy, torch, a `Frame`) as an `ArrayView2` of
/// its memory (no copy), summed along each row.
#[pyfunction]
fn ndarray_row_sums(x: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let t = dlbind::from_dlpack(x, None, None)?;
    let v = view::<f64, Ix2>(&t)?;
    Ok(v.rows().into_iter().map(|row| row.sum()).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ndarray_table, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_row_sums, m)?)
}
