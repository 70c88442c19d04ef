// Issues 43 and 51: every derived class has one block marked `#[dlbind::pymethods]` (in place of
// `#[pymethods]`), and the derive's methods are merged into it: no PyO3 `multiple-pymethods`
// (this crate does not enable it). Attributes on the block are kept; a type in another module is
// found through the block's path; a class with no methods of its own has an empty block; the old
// `#[dlpack(merge_pymethods)]` still builds (a deprecation warning, see
// `fail_merge_pymethods_deprecated`).
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
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

#[dlbind::pymethods]
impl Plain {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(merge_pymethods)]
struct Keyed {
    #[dlpack(data)]
    values: Vec<f64>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Keyed {}

#[pymodule(gil_used = true)]
fn merged(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Samples>()?;
    m.add_class::<inner::Nested>()?;
    m.add_class::<Plain>()?;
    m.add_class::<Keyed>()
}

fn main() {}
