use std::sync::Arc;

use dlbind::Device;
use dlbind::spec::types::DLDataType;
use dlbind::prelude::*;
use dlbind::Buffer;

// Vec<T> data, shape, strides; the user's own block (`#[dlbind::pymethods]`) holds the
// derive's methods too: no PyO3 `multiple-pymethods`. A class with no methods of its own has an
// empty one.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    dims: Vec<usize>,
    #[dlpack(strides)]
    strides: Vec<isize>,
}

#[dlbind::pymethods]
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

#[dlbind::pymethods]
impl Half {}

// Vec of kDLBcomplex elements (upstream main after v1.3): the derive knows the type from the
// generated dtype table alone.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct BComplex {
    #[dlpack(data)]
    values: Vec<num_complex::Complex<half::bf16>>,
    #[dlpack(shape)]
    len: [usize; 1],
}

#[dlbind::pymethods]
impl BComplex {}

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

#[dlbind::pymethods]
impl Raw {}

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

#[dlbind::pymethods]
impl Tensor {}

// An owned ndarray array: shape, strides and dtype come from it.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Grid {
    #[dlpack(array)]
    values: ndarray::ArrayD<f64>,
}

#[dlbind::pymethods]
impl Grid {}

// Tuple struct.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Pair(#[dlpack(data)] Vec<i32>, #[dlpack(shape)] Vec<u64>);

#[dlbind::pymethods]
impl Pair {}

// A custom shape type: any named type that derefs to `[I]` (here: inline, no allocation).
struct Dims4([u32; 4], usize);

impl std::ops::Deref for Dims4 {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0[..self.1]
    }
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Inline {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Dims4,
}

#[dlbind::pymethods]
impl Inline {}

// A type holding Python objects of its own besides its Buffer: it writes `__traverse__` itself
// (reporting the Buffer's references through `DataSource::visit_python_refs`), so the derive
// emits none.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(custom_traverse)]
struct Annotated {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    meta: Py<PyAny>,
}

#[dlbind::pymethods]
impl Annotated {
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        dlbind::DataSource::visit_python_refs(&self.buf, &visit)?;
        visit.call(&self.meta)
    }
}

fn assert_source<T: dlbind::DLPackSource>() {}

fn main() {
    assert_source::<Image>();
    assert_source::<Half>();
    assert_source::<BComplex>();
    assert_source::<Raw>();
    assert_source::<Tensor>();
    assert_source::<Grid>();
    assert_source::<Pair>();
    assert_source::<Inline>();
    assert_source::<Annotated>();

    // The derived description, read back through the trait.
    let img = Image { pixels: vec![0; 6], dims: vec![2, 3], strides: vec![3, 1] };
    let mut shape = [0i64; 2];
    let mut strides = [0i64; 2];
    img.dlpack_fill_shape(&mut shape);
    assert!(img.dlpack_fill_strides(&mut strides));
    assert_eq!((img.dlpack_ndim(), shape, strides), (2, [2, 3], [3, 1]));
    assert_eq!(img.dlpack_dtype(), <u8 as DLPackElement>::DTYPE);
    assert_eq!(img.dlpack_data_ptr() as *const u8, img.pixels.as_ptr());
    assert!(img.dlpack_readonly(), "a Vec is lent through &: exported read-only");
    let _ = img.width();

    let raw = Raw { bytes: Arc::from(vec![0u8; 4]), len: [4] };
    assert!(raw.dlpack_readonly());
    let mut one = [0i64; 1];
    assert!(!raw.dlpack_fill_strides(&mut one));
    assert_eq!(raw.dlpack_device(), Device::CPU);

    let grid = Grid { values: ndarray::ArrayD::zeros(ndarray::IxDyn(&[2, 3])) };
    let mut s = [0i64; 2];
    assert!(grid.dlpack_fill_strides(&mut s));
    assert_eq!(s, [3, 1]);
    assert_eq!(grid.dlpack_dtype(), <f64 as DLPackElement>::DTYPE);

    let zero_one = num_complex::Complex::new(half::bf16::ZERO, half::bf16::ONE);
    let bc = BComplex { values: vec![zero_one; 3], len: [3] };
    let code = dlbind::spec::types::DLDataTypeCode::kDLBcomplex.0;
    assert_eq!(bc.dlpack_dtype(), DLDataType { code, bits: 32, lanes: 1 });
    assert_eq!(bc.__dlbind_storage(), Some((dlbind::Extent::from_start(12), Device::CPU)));
    assert!(!bc.dlpack_writability().is_writable(), "a Vec is lent through &: read-only");

    let inline = Inline { values: vec![0.0; 3], shape: Dims4([3, 0, 0, 0], 1) };
    assert_eq!(inline.dlpack_ndim(), 1);
}
