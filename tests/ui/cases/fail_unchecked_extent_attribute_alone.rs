// Issue 42: `#[dlpack(unchecked_extent)]` tells the derive to skip the span check, but a safe
// attribute alone never does: the type must also `unsafe impl dlbind::UncheckedExtent`.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(unchecked_extent)]
struct Claims {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Claims {}

fn main() {}
