//! `dlbind_demo.adapters.candle_*`: the candle adapter (`dlbind::adapters::candle`). Candle
//! tensors made in Rust leave as DLPack `Tensor`s: a copy dlbind owns by default, or
//! (`candle_arange(..., view=True)`) a read-only view of candle's storage through the adapter's
//! `unsafe` view, sound there because no other handle on that storage outlives the call. DLPack
//! producers come in as candle tensors (a copy) that candle then computes with.

use dlbind::adapters::candle::candle_core::{
    self, DType, Device as CDevice, Tensor as CTensor, Var,
};
use dlbind::adapters::candle::{CandleTensor, to_candle};
use dlbind::prelude::*;
use pyo3::exceptions::PyValueError;

use crate::Tensor;
use dlbind::Dims;

fn candle_err(e: candle_core::Error) -> PyErr {
    PyValueError::new_err(format!("candle: {e}"))
}

/// A `Tensor` of a candle export: a copy (writable), or a view of candle's storage (read-only,
/// candle's layout).
fn tensor_of(e: CandleTensor) -> Tensor {
    let (dtype, shape, strides) = (
        e.dtype(),
        Dims::from_slice(e.shape()),
        Dims::from_slice(e.strides()),
    );
    let readonly = Writability::from_readonly(e.readonly());
    Tensor {
        buf: e.into_buffer(),
        dtype,
        shape,
        strides,
        device: Device::CPU,
        readonly,
    }
}

fn candle_dtype(name: &str) -> PyResult<DType> {
    name.parse::<DType>()
        .map_err(|_| PyValueError::new_err(format!("unknown candle dtype {name:?}")))
}

/// `arange(rows * cols)` as a `(rows, cols)` candle tensor of `dtype` (candle's names: "f32",
/// "bf16", "u8", ...), optionally transposed, broadcast to `(2, rows, cols)` or narrowed to rows
/// `1..`, exported as a copy (C-contiguous, writable) or with `view` as a read-only view of
/// candle's storage (candle's layout, no copy).
#[pyfunction]
#[pyo3(signature = (rows, cols, *, dtype = "f32", layout = "c", view = false))]
fn candle_arange(
    rows: usize,
    cols: usize,
    dtype: &str,
    layout: &str,
    view: bool,
) -> PyResult<Tensor> {
    let dt = candle_dtype(dtype)?;
    let t = CTensor::arange(0u32, (rows * cols) as u32, &CDevice::Cpu)
        .and_then(|t| t.to_dtype(dt))
        .and_then(|t| t.reshape((rows, cols)))
        .map_err(candle_err)?;
    let t = match layout {
        "c" => t,
        "t" => t.t().map_err(candle_err)?,
        "broadcast" => t.broadcast_as((2, rows, cols)).map_err(candle_err)?,
        "narrow" => t.narrow(0, 1, rows.saturating_sub(1)).map_err(candle_err)?,
        other => return Err(PyValueError::new_err(format!("unknown layout {other:?}"))),
    };
    let e = if view {
        // SAFETY: `t` and the tensors it was made from are locals of this call, none written in
        // place; once it returns, the clone the view keeps is the storage's only handle, so no
        // in-place candle write can reach the storage while the view lives.
        unsafe { CandleTensor::view_unchecked(&t)? }
    } else {
        CandleTensor::from_tensor(&t)?
    };
    Ok(tensor_of(e))
}

/// Exports a copy of `arange(6)` as a `(2, 3)` candle tensor, then writes that tensor in place
/// with candle (`op`: "zero_set", "const_set", "slice_set" or "var_set", what an optimizer step
/// does): returns the export and the values candle reads afterwards (C order).
#[pyfunction]
fn candle_write_after_export(op: &str) -> PyResult<(Tensor, Vec<f32>)> {
    let var = Var::from_tensor(
        &CTensor::arange(0f32, 6f32, &CDevice::Cpu)
            .and_then(|t| t.reshape((2, 3)))
            .map_err(candle_err)?,
    )
    .map_err(candle_err)?;
    let t = var.as_tensor();
    let exported = tensor_of(CandleTensor::from_tensor(t)?);
    match op {
        "zero_set" => t.zero_set(),
        "const_set" => t.const_set(7f32.into()),
        "slice_set" => CTensor::ones((1, 3), DType::F32, &CDevice::Cpu)
            .and_then(|ones| t.slice_set(&ones, 0, 1)),
        "var_set" => CTensor::full(9f32, (2, 3), &CDevice::Cpu).and_then(|v| var.set(&v)),
        other => return Err(PyValueError::new_err(format!("unknown op {other:?}"))),
    }
    .map_err(candle_err)?;
    let after = t
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(candle_err)?;
    Ok((exported, after))
}

/// Any DLPack producer as a candle tensor (copied), returned as `(dtype, shape, values)` read by
/// candle (`values` as float64, C order) and the candle tensor exported back as a `Tensor` (a
/// copy).
#[pyfunction]
fn candle_import(obj: &Bound<'_, PyAny>) -> PyResult<(String, Vec<usize>, Vec<f64>, Tensor)> {
    let imported = dlbind::from_dlpack(obj, None, None)?;
    let c = to_candle(&imported)?;
    drop(imported);
    // f8e4m3 goes through f32: candle's own f8e4m3 -> f64 conversion recurses until the stack
    // overflows (candle-core 0.11).
    let wide = if c.dtype() == DType::F8E4M3 {
        c.to_dtype(DType::F32).map_err(candle_err)?
    } else {
        c.clone()
    };
    let values = wide
        .to_dtype(DType::F64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .map_err(candle_err)?;
    Ok((
        c.dtype().as_str().to_owned(),
        c.dims().to_vec(),
        values,
        tensor_of(CandleTensor::from_tensor(&c)?),
    ))
}

/// Adds the candle functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(candle_arange, m)?)?;
    m.add_function(wrap_pyfunction!(candle_import, m)?)?;
    m.add_function(wrap_pyfunction!(candle_write_after_export, m)?)?;
    Ok(())
}
