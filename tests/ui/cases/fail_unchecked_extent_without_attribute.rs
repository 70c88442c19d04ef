// Issue 42: an `unsafe impl UncheckedExtent` on a type whose derive is not told
// (`#[dlpack(unchecked_extent)]`) would skip nothing: a compile error that says which attribute
// to add, not a silent slow path.
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

// SAFETY: a test that must not compile.
unsafe impl dlbind::UncheckedExtent for Claims {}

fn main() {}
