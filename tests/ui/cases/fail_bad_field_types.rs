use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<f32>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Flags {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(readonly)]
    readonly: u8,
}

#[dlbind::pymethods]
impl Flags {}

fn main() {}
