// Issue 50: the machinery behind `#[dlpack(unchecked_extent)]` cannot be satisfied by a safe
// impl of a hidden trait: only `unsafe impl UncheckedExtent` skips the span check.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(unchecked_extent)]
struct Forged {
    #[dlpack(data)]
    v: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

impl dlbind::__private::VouchesForExtent for Forged {}

fn main() {}
