// src/lib.rs
use dlbind::prelude::*;

#[pyclass]                      // plain or frozen
#[derive(DLPackExport)]
struct Samples {
    #[dlpack(data)]  values: Vec<f64>,   // Vec<T>, Box<[T]>, Arc<[T]>, a dlbind Buffer, ndarray
    #[dlpack(shape)] len: [usize; 1],    // any integer type
}

#[dlbind::pymethods]            // replaces #[pymethods]: the derived methods go in it too
impl Samples {
    #[new]
    fn new(values: Vec<f64>) -> Self { let len = [values.len()]; Samples { values, len } }
    fn push(&mut self, x: f64) { self.values.push(x); self.len = [self.values.len()]; }
}

#[pymodule(gil_used = true)]     // dlbind relies on the GIL
fn my_arrays(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Samples>()
}
