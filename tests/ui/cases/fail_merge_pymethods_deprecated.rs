// Issue 51: `#[dlpack(merge_pymethods)]` is what every derive does now; a crate that wrote it
// still builds, with a `deprecated` warning at the key in its own crate (denied here, so that
// this case pins that the lint reaches the user's crate through the derive's output).
#![deny(deprecated)]
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
impl Samples {
    fn total(&self) -> f32 {
        self.values.iter().sum()
    }
}

fn main() {}
