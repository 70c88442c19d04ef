use dlbind::spec::types::DLDataType;
use dlbind::prelude::*;
use dlbind::Buffer;
use pyo3::{PyTraverseError, PyVisit};

// The derive emits `__traverse__` for a DataSource data field; a type that writes its own needs
// `#[dlpack(custom_traverse)]` (see pass.rs), else the two definitions collide.

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Tensor {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    extra: Py<PyAny>,
}

#[dlbind::pymethods]
impl Tensor {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.extra)
    }
}

fn main() {}
