use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    dims: Vec<usize>,
}

fn main() {}
