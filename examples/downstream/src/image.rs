use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]  pixels: Vec<u8>,      // Vec<T>, Box<[T]>, Arc<[T]>, a dlbind Buffer, ndarray
    #[dlpack(shape)] dims: [usize; 2],     // any integer type
}

#[dlbind::pymethods]             // in place of #[pymethods]: the derived methods go in it too
impl Image {
    #[new]
    fn new(height: usize, width: usize) -> Self {
        Image { pixels: vec![0; height * width], dims: [height, width] }
    }
}

#[pymodule(gil_used = true)]     // dlbind relies on the GIL
fn images(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Image>()
}
