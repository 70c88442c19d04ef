use dlbind::prelude::*;

// A non-frozen class hands out `&mut self`: `grow` could reallocate `pixels` while an export
// (capsule, memoryview, numpy array) still points into it. The derive requires `frozen`.
#[pyclass]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
}

#[pymethods]
impl Image {
    fn grow(&mut self) {
        self.pixels.resize(1 << 20, 0);
        self.dims = vec![1 << 20];
    }
}

fn main() {}
