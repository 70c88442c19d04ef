//! `dlbind_demo.adapters.arrow_*`: the arrow adapter (`dlbind::adapters::arrow`) between
//! pyarrow and DLPack. pyarrow arrays reach arrow-rs through arrow's C data interface
//! (`Array._export_to_c` / `Array._import_from_c`), so every function here is zero-copy unless
//! `copy=True`: pyarrow memory → arrow-rs → DLPack `Tensor`, and DLPack → arrow-rs → pyarrow.

use std::sync::Arc;

use dlbind::adapters::arrow::arrow_array::ffi::{
    FFI_ArrowArray, FFI_ArrowSchema, from_ffi, to_ffi,
};
use dlbind::adapters::arrow::arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use dlbind::adapters::arrow::arrow_array::{Array, PrimitiveArray, make_array};
use dlbind::adapters::arrow::arrow_schema::Field;
use dlbind::adapters::arrow::{self as adapter, ArrowTensor};
use dlbind::prelude::*;
use pyo3::exceptions::{PyTypeError, PyValueError};

use crate::Tensor;
use dlbind::Dims;

/// A `Tensor` over an adapter export's memory (no copy).
fn tensor_of(t: ArrowTensor) -> Tensor {
    let (dtype, readonly) = (t.dtype(), t.readonly());
    let (shape, strides) = (Dims::from_slice(t.shape()), Dims::from_slice(t.strides()));
    Tensor {
        buf: t.into_buffer(),
        dtype,
        shape,
        strides,
        device: Device::CPU,
        readonly: Writability::from_readonly(readonly),
    }
}

fn arrow_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("arrow: {e}"))
}

/// A pyarrow array as an arrow-rs array and its field (with any extension metadata), moved
/// through the C data interface: the arrow-rs array holds pyarrow's memory until it drops.
fn from_pyarrow(array: &Bound<'_, PyAny>) -> PyResult<(Field, Arc<dyn Array>)> {
    let mut ffi_array = FFI_ArrowArray::empty();
    let mut ffi_schema = FFI_ArrowSchema::empty();
    array
        .getattr("_export_to_c")
        .map_err(|_| PyTypeError::new_err("expected a pyarrow.Array"))?
        .call1((&raw mut ffi_array as usize, &raw mut ffi_schema as usize))?;
    let field = Field::try_from(&ffi_schema).map_err(arrow_err)?;
    // SAFETY: pyarrow filled both structs (the C data interface's export); `from_ffi` takes the
    // array over (its release callback runs when the last arrow buffer drops) and reads the
    // schema, which `ffi_schema`'s drop releases.
    let data = unsafe { from_ffi(ffi_array, &ffi_schema) }.map_err(arrow_err)?;
    Ok((field, make_array(data)))
}

/// A pyarrow array (`pa.array`, a `FixedShapeTensorArray`, fixed-size lists) as a DLPack
/// `Tensor` viewing pyarrow's memory; nulls and booleans need `copy=True`.
#[pyfunction]
#[pyo3(signature = (array, *, copy = false))]
fn arrow_from_pyarrow(array: &Bound<'_, PyAny>, copy: bool) -> PyResult<Tensor> {
    let (field, arr) = from_pyarrow(array)?;
    Ok(tensor_of(ArrowTensor::from_field(
        &field,
        arr.as_ref(),
        copy,
    )?))
}

/// The `dim_names` of a pyarrow `FixedShapeTensorArray` in the exported tensor's (logical)
/// order, read through the adapter (None without names).
#[pyfunction]
fn arrow_dim_names(array: &Bound<'_, PyAny>) -> PyResult<Option<Vec<String>>> {
    let (field, arr) = from_pyarrow(array)?;
    let t = ArrowTensor::from_field(&field, arr.as_ref(), true)?;
    Ok(t.dim_names().map(<[String]>::to_vec))
}

/// Any DLPack producer as a pyarrow array over its memory (arrow-rs in between): 1-D → a
/// primitive array, N-D → fixed-size lists, or with `tensor=True` a `FixedShapeTensorArray`
/// (any permutation of a C-contiguous layout). The producer stays alive until pyarrow releases
/// the array.
#[pyfunction]
#[pyo3(signature = (obj, *, copy = false, tensor = false))]
fn arrow_to_pyarrow<'py>(
    obj: &Bound<'py, PyAny>,
    copy: bool,
    tensor: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let t = dlbind::from_dlpack(obj, None, None)?;
    let (ffi_array, ffi_schema) = if tensor {
        let (field, list) = adapter::to_fixed_shape_tensor(t, copy)?;
        let schema = FFI_ArrowSchema::try_from(&field).map_err(arrow_err)?;
        (FFI_ArrowArray::new(&list.to_data()), schema)
    } else {
        let array = adapter::to_arrow(t, copy)?;
        to_ffi(&array.to_data()).map_err(arrow_err)?
    };
    let mut ffi_array = Box::new(ffi_array);
    let mut ffi_schema = Box::new(ffi_schema);
    // pyarrow moves both structs out (their release callbacks become NULL, so the boxes' drops
    // release nothing); on an error before that, the drops release them.
    py.import("pyarrow")?.getattr("Array")?.call_method1(
        "_import_from_c",
        (&raw mut *ffi_array as usize, &raw mut *ffi_schema as usize),
    )
}

/// A DLPack producer into arrow-rs and straight back out as a `Tensor` (both ways in Rust).
/// With `primitive` the 1-D path goes through `to_primitive::<T>` for the tensor's dtype.
#[pyfunction]
#[pyo3(signature = (obj, *, copy = false, tensor = false))]
fn arrow_round_trip(obj: &Bound<'_, PyAny>, copy: bool, tensor: bool) -> PyResult<Tensor> {
    let t = dlbind::from_dlpack(obj, None, None)?;
    let out = if tensor {
        let (field, list) = adapter::to_fixed_shape_tensor(t, copy)?;
        ArrowTensor::from_field(&field, &list, false)?
    } else {
        let array = adapter::to_arrow(t, copy)?;
        ArrowTensor::from_array(array.as_ref(), false)?
    };
    Ok(tensor_of(out))
}

/// A 1-D DLPack producer as `PrimitiveArray<T>` (`to_primitive`, checked against `dtype`),
/// exported back by value (`ArrowTensor::from_primitive`: writable when nothing else holds it).
#[pyfunction]
#[pyo3(signature = (obj, dtype, *, copy = false))]
fn arrow_primitive(obj: &Bound<'_, PyAny>, dtype: &str, copy: bool) -> PyResult<Tensor> {
    let t = dlbind::from_dlpack(obj, None, None)?;
    let out = match dtype {
        "int32" => ArrowTensor::from_primitive(adapter::to_primitive::<Int32Type>(t, copy)?, false),
        "int64" => ArrowTensor::from_primitive(adapter::to_primitive::<Int64Type>(t, copy)?, false),
        "float32" => {
            ArrowTensor::from_primitive(adapter::to_primitive::<Float32Type>(t, copy)?, false)
        }
        "float64" => {
            ArrowTensor::from_primitive(adapter::to_primitive::<Float64Type>(t, copy)?, false)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "dtype {other:?} not offered here"
            )));
        }
    }?;
    Ok(tensor_of(out))
}

/// `0.0, 1.0, ..` as an arrow `Float32Array` built in Rust, exported by value: its buffer has
/// no other holder, so the tensor is writable.
#[pyfunction]
fn arrow_arange(n: usize) -> PyResult<Tensor> {
    let a = PrimitiveArray::<Float32Type>::from_iter_values((0..n).map(|i| i as f32));
    Ok(tensor_of(ArrowTensor::from_primitive(a, false)?))
}

/// A pyarrow array handed to Python once, with its flags (`dlbind::adapters::Handoff`):
/// `IS_COPIED` when the adapter copied (`copy=True`, nulls, booleans), `READ_ONLY` for a view
/// of arrow's shared memory.
#[pyfunction]
#[pyo3(signature = (array, *, copy = false))]
fn arrow_handoff(array: &Bound<'_, PyAny>, copy: bool) -> PyResult<dlbind::adapters::Handoff> {
    let (field, arr) = from_pyarrow(array)?;
    Ok(ArrowTensor::from_field(&field, arr.as_ref(), copy)?.into_handoff()?)
}

/// Adds the arrow functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(arrow_handoff, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_from_pyarrow, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_dim_names, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_to_pyarrow, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_round_trip, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_primitive, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_arange, m)?)?;
    Ok(())
}
