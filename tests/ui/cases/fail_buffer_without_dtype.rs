use dlbind::prelude::*;
use dlbind::Buffer;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Tensor {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

fn main() {}
