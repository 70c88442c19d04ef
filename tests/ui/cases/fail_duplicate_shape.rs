use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(shape)]
    size: [usize; 2],
}

fn main() {}
