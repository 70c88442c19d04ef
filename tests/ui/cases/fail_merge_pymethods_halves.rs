// Issue 43: each half of the merge without the other is a compile error naming the missing one:
// `merge_pymethods` without a `#[dlbind::pymethods]` block (the derived methods would be
// missing), and `#[dlbind::pymethods]` on a type whose derive emits its own block.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(merge_pymethods)]
struct NoBlock {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct NotMerged {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl NotMerged {
    fn one(&self) -> i32 {
        1
    }
}

fn main() {}
