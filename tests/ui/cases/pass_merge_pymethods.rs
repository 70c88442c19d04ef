// Issue 43: a type with its own `#[pymethods]` block and no PyO3 `multiple-pymethods` (this crate
// does not enable it): `#[dlpack(merge_pymethods)]` + `#[dlbind::pymethods]` put the derive's
// methods into the user's one block, attributes on the block kept; a type in another module is
// found through the block's path; a type without a block of its own still gets the derive's.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(merge_pymethods)]
struct Samples {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[dlbind::pymethods]
#[allow(clippy::new_without_default)]
impl Samples {
    #[new]
    fn new(n: usize) -> Self {
        Samples {
            values: vec![0.0; n],
            shape: [n],
        }
    }

    fn total(&self) -> f32 {
        self.values.iter().sum()
    }
}

mod inner {
    use dlbind::prelude::*;

    #[pyclass(frozen)]
    #[derive(DLPackExport)]
    #[dlpack(merge_pymethods)]
    pub struct Nested {
        #[dlpack(data)]
        pub values: Vec<u8>,
        #[dlpack(shape)]
        pub shape: Vec<i64>,
    }
}

#[dlbind::pymethods]
impl inner::Nested {
    fn len(&self) -> usize {
        self.values.len()
    }
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Plain {
    #[dlpack(data)]
    values: Vec<f64>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[pymodule(gil_used = true)]
fn merged(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Samples>()?;
    m.add_class::<inner::Nested>()?;
    m.add_class::<Plain>()
}

fn main() {}
