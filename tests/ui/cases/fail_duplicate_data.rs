use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(data)]
    alpha: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
