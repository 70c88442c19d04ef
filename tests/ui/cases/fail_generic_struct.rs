use dlbind::prelude::*;

#[derive(DLPackExport)]
struct Image<T> {
    #[dlpack(data)]
    pixels: Vec<T>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
