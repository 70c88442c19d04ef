use dlbind::prelude::*;

#[pyclass]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
