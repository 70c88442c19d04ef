use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Names {
    #[dlpack(data)]
    names: Vec<String>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

#[dlbind::pymethods]
impl Names {}

fn main() {}
