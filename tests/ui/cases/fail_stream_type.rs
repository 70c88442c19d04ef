use dlbind::prelude::*;

// `#[dlpack(stream)]` takes an `Option<u64>`: the raw stream with pending work, or None.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Pending {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(stream)]
    stream: u64,
}

#[dlbind::pymethods]
impl Pending {}

fn main() {}
