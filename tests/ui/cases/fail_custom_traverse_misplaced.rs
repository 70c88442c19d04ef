use dlbind::spec::types::DLDataType;
use dlbind::prelude::*;
use dlbind::Buffer;

// `custom_traverse` is struct-level and takes no value.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(custom_traverse = "yes")]
struct Valued {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct OnAField {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(custom_traverse)]
    extra: Py<PyAny>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(custom_traverse, custom_traverse)]
struct Twice {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

fn main() {}
