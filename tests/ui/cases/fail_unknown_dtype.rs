use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "bfloat17")]
struct Raw {
    #[dlpack(data)]
    bytes: Vec<u16>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
