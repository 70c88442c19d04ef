// Issue 51: a derived class with no `#[dlbind::pymethods]` block at all (its derived
// `__dlpack__` would be missing) fails with ONE error, dlbind's, saying what to add.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Frame {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: [u32; 3],
}

#[pymodule(gil_used = true)]
fn frames(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Frame>()
}

fn main() {}
