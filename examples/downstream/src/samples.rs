//! `Samples`: a plain (non-frozen) `#[pyclass]` with `&mut self` methods, as most PyO3 users
//! write. While an export is alive it holds a shared borrow of the object, so `push` or `resize`
//! raise PyO3's borrow error instead of reallocating memory a consumer still reads.

use dlbind::prelude::*;

#[pyclass(module = "dlbind_downstream")]
#[derive(DLPackExport)]
pub struct Samples {
    #[dlpack(data)]
    values: Vec<f64>,
    #[dlpack(shape)]
    len: [usize; 1],
}

#[pymethods]
impl Samples {
    #[new]
    fn new(values: Vec<f64>) -> Self {
        let len = [values.len()];
        Samples { values, len }
    }

    /// Appends a value (may reallocate).
    fn push(&mut self, x: f64) {
        self.values.push(x);
        self.len = [self.values.len()];
    }

    /// Resizes to `n` values, new ones 0.0 (reallocates and frees the old memory).
    fn resize(&mut self, n: usize) {
        self.values.resize(n, 0.0);
        self.values.shrink_to_fit();
        self.len = [n];
    }

    fn tolist(&self) -> Vec<f64> {
        self.values.clone()
    }

    fn __len__(&self) -> usize {
        self.values.len()
    }
}
