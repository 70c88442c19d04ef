//! `Growable`: a plain (non-frozen) `#[pyclass]` with `&mut self` methods that reallocate its
//! data, exported through the same derive as the frozen `Tensor`.
//!
//! Every export of a `Growable` (`__dlpack__` capsules, the C exchange table's owning export,
//! memoryviews, `__array_interface__` arrays) holds a shared borrow of the object until the
//! consumer releases it, so `resize` / `push` / `fill` / `reshape` / `set_readonly` raise PyO3's
//! borrow error (`RuntimeError: Already borrowed`) while any export is alive, instead of
//! reallocating memory a consumer still points at; they work again once every export is gone.
//! Nothing here is `unsafe`: the derive and the runtime take care of the borrow.

use dlbind::prelude::*;
use pyo3::exceptions::PyValueError;

/// A 1-d or 2-d `float32` array that can grow (`Vec<f32>`), exported zero-copy through DLPack.
#[pyclass(module = "dlbind_demo")]
#[derive(DLPackExport)]
pub struct Growable {
    #[dlpack(data)]
    data: Vec<f32>,
    /// `i64` dims: the exchange table could lend them, but a non-frozen class's table has no
    /// non-owning fill (it could not hold the borrow).
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(readonly)]
    readonly: bool,
}

impl Growable {
    /// A 1-d array over `data`.
    fn flat(data: Vec<f32>) -> Growable {
        let n = data.len() as i64;
        Growable {
            data,
            shape: vec![n],
            strides: vec![1],
            readonly: false,
        }
    }

    /// Back to 1-d over the current data (after a length change).
    fn flatten(&mut self) {
        self.shape = vec![self.data.len() as i64];
        self.strides = vec![1];
    }
}

#[dlbind::pymethods]
impl Growable {
    /// A 1-d array holding `values` (any iterable of floats; empty by default).
    #[new]
    #[pyo3(signature = (values = Vec::new()))]
    fn new(values: Vec<f32>) -> Growable {
        Growable::flat(values)
    }

    /// `n` zeros.
    #[staticmethod]
    fn zeros(n: usize) -> Growable {
        Growable::flat(vec![0.0; n])
    }

    /// Sets the length to `n` (new elements are `value`), then releases spare capacity: the
    /// data is reallocated whenever the length changes. The array becomes 1-d.
    #[pyo3(signature = (n, value = 0.0))]
    fn resize(&mut self, n: usize, value: f32) {
        self.data.resize(n, value);
        self.data.shrink_to_fit();
        self.flatten();
    }

    /// Appends `x` (reallocating when the capacity is full). The array becomes 1-d.
    fn push(&mut self, x: f32) {
        self.data.push(x);
        self.flatten();
    }

    /// Sets every element to `x` (in place).
    fn fill(&mut self, x: f32) {
        self.data.fill(x);
    }

    /// Views the data as `rows × cols` (C order); the element count must not change.
    fn reshape(&mut self, rows: i64, cols: i64) -> PyResult<()> {
        if rows < 0 || cols < 0 || rows.checked_mul(cols) != Some(self.data.len() as i64) {
            return Err(PyValueError::new_err(format!(
                "cannot view {} elements as {rows} x {cols}",
                self.data.len()
            )));
        }
        self.shape = vec![rows, cols];
        self.strides = vec![cols, 1];
        Ok(())
    }

    /// Whether exports are read-only (a `&mut self` method like the others).
    fn set_readonly(&mut self, readonly: bool) {
        self.readonly = readonly;
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// Address of element 0 (changes when the data is reallocated).
    #[getter]
    fn data_ptr(&self) -> usize {
        self.data.as_ptr() as usize
    }

    /// The elements in order.
    fn tolist(&self) -> Vec<f32> {
        self.data.clone()
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    fn __repr__(&self) -> String {
        format!("Growable(shape={:?}, data={:?})", self.shape, self.data)
    }
}
