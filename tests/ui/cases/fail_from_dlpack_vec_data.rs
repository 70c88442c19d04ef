// `#[derive(FromDLPack)]` keeps the import in the data field, so that field must be a
// `dlbind::Buffer`: a `Vec<f32>` cannot hold a producer's memory without a copy.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
struct Samples {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    len: [usize; 1],
}

#[dlbind::pymethods]
impl Samples {}

fn main() {}
