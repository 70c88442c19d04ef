// Issue 33: `UncheckedExtent` is a promise (the type keeps every value's dtype valid and its shape
// and strides inside its data), not a tuning knob: it lives at the crate root, and a safe
// implementation does not compile.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Claims {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Claims {}

impl dlbind::UncheckedExtent for Claims {}

fn main() {}
