use std::sync::Arc;

use dlbind::device::Device;
use dlbind::ffi::DLDataType;
use dlbind::prelude::*;
use dlbind::storage::Buffer;

// Vec<T> data, shape, strides; the user's own #[pymethods] block sits beside the derive's.
#[pyclass]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(strides)]
    strides: Vec<isize>,
}

#[pymethods]
impl Image {
    fn width(&self) -> usize {
        self.dims[1]
    }
}

// Box<[T]> of half::bf16, fixed-size shape, device field, readonly field.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Half {
    #[dlpack(data)]
    values: Box<[half::bf16]>,
    #[dlpack(shape)]
    shape: [u32; 2],
    #[dlpack(device)]
    device: Device,
    #[dlpack(readonly)]
    readonly: bool,
}

// Arc<[T]> raw storage with a struct-level dtype and struct-level readonly.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float8_e4m3fn", readonly)]
struct Raw {
    #[dlpack(data)]
    bytes: Arc<[u8]>,
    #[dlpack(shape)]
    len: [i64; 1],
}

// A DataSource (Buffer) with a dynamic dtype and every optional field.
#[pyclass(frozen)]
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

// An owned ndarray array: shape, strides and dtype come from it.
#[pyclass]
#[derive(DLPackExport)]
struct Grid {
    #[dlpack(array)]
    values: ndarray::ArrayD<f64>,
}

// Tuple struct.
#[pyclass]
#[derive(DLPackExport)]
struct Pair(#[dlpack(data)] Vec<i32>, #[dlpack(shape)] Vec<u64>);

fn assert_source<T: dlbind::export::DLPackSource>() {}

fn main() {
    assert_source::<Image>();
    assert_source::<Half>();
    assert_source::<Raw>();
    assert_source::<Tensor>();
    assert_source::<Grid>();
    assert_source::<Pair>();
}
