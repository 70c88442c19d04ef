use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
