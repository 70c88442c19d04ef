use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(stride)]
    strides: Vec<isize>,
}

fn main() {}
