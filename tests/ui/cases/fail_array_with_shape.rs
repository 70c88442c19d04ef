use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Grid {
    #[dlpack(array)]
    values: ndarray::ArrayD<f32>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

fn main() {}
