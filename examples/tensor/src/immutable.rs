//! `Fixed`: a frozen class declared `immutable_type` (issue 42), built only with the demo's
//! `immutable-type` feature (PyO3 accepts `immutable_type` in a full-API build, or in an abi3
//! build for 3.14 and later: `abi3-py314`). In an abi3 build dlbind cannot re-bind `__dlpack__`
//! on such a type (a `setattr` the type refuses): the derived methods keep working, unbound.

use dlbind::DLPackExport;
use pyo3::prelude::*;

/// A read-only float32 vector whose type object cannot be changed.
#[pyclass(frozen, immutable_type, module = "dlbind_demo")]
#[derive(DLPackExport)]
pub struct Fixed {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    len: [usize; 1],
}

#[dlbind::pymethods]
impl Fixed {
    #[new]
    fn new(values: Vec<f32>) -> Self {
        let len = [values.len()];
        Fixed { values, len }
    }
}
