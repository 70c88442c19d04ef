// examples/tensor/src/adapters/examples/arrow.rs
use dlbind::adapters::arrow::arrow_array::ffi::{
    FFI_ArrowArray, FFI_ArrowSchema, from_ffi, to_ffi,
};
use dlbind::adapters::arrow::arrow_array::{Array, make_array};
use dlbind::adapters::arrow::{ArrowTensor, to_arrow};
use dlbind::prelude::*;

use super::Frame; // the README's `Frame`

fn arrow_err(e: impl std::fmt::Display) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("arrow: {e}"))
}

/// Python -> Rust -> Python: a pyarrow array reaches arrow-rs through arrow's C data interface
/// (`_export_to_c`; no copy), and its values leave as a `Frame` (a read-only view of pyarrow's
/// buffer; nulls and booleans need `copy`).
#[pyfunction]
#[pyo3(signature = (array, *, copy = false))]
fn arrow_to_frame(array: &Bound<'_, PyAny>, copy: bool) -> PyResult<Frame> {
    let (mut c_array, mut c_schema) = (FFI_ArrowArray::empty(), FFI_ArrowSchema::empty());
    array.call_method1(
        "_export_to_c",
        (&raw mut c_array as usize, &raw mut c_schema as usize),
    )?;
    // SAFETY: pyarrow filled both structs; `from_ffi` takes the array over (pyarrow's memory is
    // released when the last arrow buffer drops).
    let data = unsafe { from_ffi(c_array, &c_schema) }.map_err(arrow_err)?;
    let t = ArrowTensor::from_array(make_array(data).as_ref(), copy)?;
    let (dtype, readonly) = (t.dtype(), t.readonly());
    let (shape, strides) = (Dims::from_slice(t.shape()), Dims::from_slice(t.strides()));
    Ok(Frame {
        buf: t.into_buffer(),
        dtype,
        shape,
        strides,
        device: Device::CPU,
        readonly,
    })
}

/// Python -> Rust -> Python: any 1-D DLPack producer as an arrow-rs array over its memory (no
/// copy: the producer lives until pyarrow lets go), handed to pyarrow (`_import_from_c`).
#[pyfunction]
fn arrow_from_dlpack<'py>(x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let array = to_arrow(dlbind::from_dlpack(x, None, None)?, false)?;
    let (c_array, c_schema) = to_ffi(&array.to_data()).map_err(arrow_err)?;
    let (mut c_array, mut c_schema) = (Box::new(c_array), Box::new(c_schema));
    // pyarrow moves both structs out (their drops then release nothing).
    x.py().import("pyarrow")?.getattr("Array")?.call_method1(
        "_import_from_c",
        (&raw mut *c_array as usize, &raw mut *c_schema as usize),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(arrow_to_frame, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_from_dlpack, m)?)
}
