use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
#[dlpack(dtype = "float32")]             // other dtypes are refused by name
struct Matrix {
    #[dlpack(data)]    buf: Buffer,      // the imported tensor itself: no copy
    #[dlpack(shape)]   shape: [usize; 2],
    #[dlpack(strides)] strides: [isize; 2],
}

#[dlbind::pymethods] impl Matrix {}      // its one block, empty: the derived methods go in it

#[pymodule(gil_used = true)]
fn matrices(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Matrix>()?;
    dlbind::add_from_dlpack::<Matrix>(m)   // matrices.from_dlpack(x, *, device=None, copy=None)
}
