// `#[derive(FromDLPack)]` on the README's `Frame`, on a fixed-dtype type with fields of its own,
// and on a plain (not frozen) class.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
struct Frame {
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
impl Frame {}

#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
#[dlpack(dtype = "uint8", readonly)]
struct Image {
    #[dlpack(data)]
    pixels: Buffer,
    #[dlpack(shape)]
    hwc: [u32; 3],
    name: String,
    #[dlpack(stream)]
    stream: Option<u64>,
}

#[dlbind::pymethods]
impl Image {}

#[pyclass]
#[derive(DLPackExport, FromDLPack)]
struct Plain(
    #[dlpack(data)] Buffer,
    #[dlpack(dtype)] DLDataType,
    #[dlpack(shape)] Box<[usize]>,
);

#[dlbind::pymethods]
impl Plain {}

#[pymodule(gil_used = true)]
fn frames(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Frame>()?;
    dlbind::add_from_dlpack::<Frame>(m)?;
    m.add_class::<Image>()?;
    m.add_class::<Plain>()?;
    for (name, add) in [
        ("plain", dlbind::add_from_dlpack::<Plain> as fn(&Bound<'_, PyModule>) -> PyResult<()>),
        ("image", dlbind::add_from_dlpack::<Image>),
    ] {
        let sub = PyModule::new(m.py(), name)?;
        add(&sub)?;
        m.add_submodule(&sub)?;
    }
    Ok(())
}

fn main() {}
