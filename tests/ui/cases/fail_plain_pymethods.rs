// Issue 51: a derived class whose own block is a plain `#[pymethods]`, as every PyO3 guide writes
// it, fails with ONE error, dlbind's, saying what to write (not PyO3's E0119 "conflicting
// implementations of `PyMethods<Samples>`", which names neither dlbind nor the fix).
use dlbind::prelude::*;

#[pyclass]
#[derive(DLPackExport)]
struct Samples {
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

    fn push(&mut self, x: f64) {
        self.values.push(x);
        self.len = [self.values.len()];
    }
}

#[pymodule(gil_used = true)]
fn my_arrays(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Samples>()
}

fn main() {}
