use dlbind::prelude::*;   // DLPackExport, FromDLPack, Buffer, Dims, Device, DLDataType, pyo3's prelude, …

#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
struct Frame {
    #[dlpack(data)]     buf: Buffer,         // owned aligned memory or an imported tensor
    #[dlpack(dtype)]    dtype: DLDataType,   // any dtype, known at run time
    #[dlpack(shape)]    shape: Dims,         // inline up to 6 dims (a Vec<i64> works, and allocates)
    #[dlpack(strides)]  strides: Dims,
    #[dlpack(device)]   device: Device,
    #[dlpack(readonly)] readonly: bool,
}

#[dlbind::pymethods] impl Frame {}   // its one block, empty: the derived methods go in it

#[pymodule(gil_used = true)]
fn frames(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Frame>()?;
    dlbind::add_from_dlpack::<Frame>(m)   // frames.from_dlpack(x, *, device=None, copy=None) and Frame.from_dlpack
}
