use dlbind::Device;
use dlbind::spec::types::DLDataType;
use dlbind::prelude::*;
use dlbind::Buffer;

// A plain (non-frozen) #[pyclass] with `&mut self` methods and a setter in the user's own
// #[pymethods] block: the derive accepts it, and every export holds a shared borrow of the
// object, so `grow` and the setter raise PyO3's borrow error while an export is alive.
#[pyclass]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[pyo3(get, set)]
    label: String,
}

#[dlbind::pymethods]
impl Image {
    #[new]
    fn new(n: usize) -> Self {
        Image {
            pixels: vec![0; n],
            dims: vec![n],
            label: String::new(),
        }
    }

    fn grow(&mut self) {
        self.pixels.resize(1 << 20, 0);
        self.dims = vec![1 << 20];
    }

    fn fill(&mut self, v: u8) {
        self.pixels.fill(v);
    }

    fn len(&self) -> usize {
        self.pixels.len()
    }
}

// Non-frozen with i64 dims (the exchange table's non-owning fill is NULL for it), a DataSource
// (so the derive emits `__traverse__`, which PyO3 runs under a non-blocking shared borrow) and
// every optional field.
#[pyclass]
#[derive(DLPackExport)]
struct Tensor {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(device)]
    device: Device,
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl Tensor {
    fn set_readonly(&mut self, readonly: bool) {
        self.readonly = readonly;
    }
}

// An ndarray array in a non-frozen class.
#[pyclass]
#[derive(DLPackExport)]
struct Grid {
    #[dlpack(array)]
    values: ndarray::ArrayD<f64>,
}

#[dlbind::pymethods]
impl Grid {
    fn reshape(&mut self, n: usize) {
        self.values = ndarray::ArrayD::zeros(vec![n]);
    }
}

fn main() {}
