//! `dlbind_demo.adapters.candle_*`: the candle adapter (`dlbind::adapters::candle`). Candle
//! tensors made in Rust leave as read-only DLPack `Tensor`s over candle's storage; DLPack
//! producers come in as candle tensors (a copy) that candle then computes with.

use candle_core::{DType, Device as CDevice, Tensor as CTensor};
use dlbind::adapters::candle::{CandleTensor, to_candle};
use dlbind::prelude::*;
use pyo3::exceptions::PyValueError;

use crate::Tensor;
use dlbind::Dims;

fn candle_err(e: candle_core::Error) -> PyErr {
    PyValueError::new_err(format!("candle: {e}"))
}

/// A `Tensor` over a candle tensor's storage (no copy, read-only).
fn tensor_of(t: &CTensor) -> PyResult<Tensor> {
    let e = CandleTensor::from_tensor(t)?;
    let (dtype, shape, strides) = (
        e.dtype(),
        Dims::from_slice(e.shape()),
        Dims::from_slice(e.strides()),
    );
    Ok(Tensor {
        buf: e.into_buffer(),
        dtype,
        shape,
        strides,
        device: Device::CPU,
        readonly: Writability::ReadOnly,
    })
}

fn candle_dtype(name: &str) -> PyResult<DType> {
    name.parse::<DType>()
        .map_err(|_| PyValueError::new_err(format!("unknown candle dtype {name:?}")))
}

/// `arange(rows * cols)` as a `(rows, cols)` candle tensor of `dtype` (candle's names: "f32",
/// "bf16", "u8", ...), optionally transposed, broadcast to `(2, rows, cols)` or narrowed to rows
/// `1..`, exported without a copy.
#[pyfunction]
#[pyo3(signature = (rows, cols, *, dtype = "f32", layout = "c"))]
fn candle_arange(rows: usize, cols: usize, dtype: &str, layout: &str) -> PyResult<Tensor> {
    let dt = candle_dtype(dtype)?;
    let t = CTensor::arange(0u32, (rows * cols) as u32, &CDevice::Cpu)
        .and_then(|t| t.to_dtype(dt))
        .and_then(|t| t.reshape((rows, cols)))
        .map_err(candle_err)?;
    let t = match layout {
        "c" => t,
        "t" => t.t().map_err(candle_err)?,
        "broadcast" => t.broadcast_as((2, rows, cols)).map_err(candle_err)?,
        "narrow" => t.narrow(0, 1, rows - 1).map_err(candle_err)?,
        other => return Err(PyValueError::new_err(format!("unknown layout {other:?}"))),
    };
    tensor_of(&t)
}

/// Any DLPack producer as a candle tensor (copied), returned as `(dtype, shape, values)` read by
/// candle (`values` as float64, C order) and the candle tensor exported back as a `Tensor`.
#[pyfunction]
fn candle_import(obj: &Bound<'_, PyAny>) -> PyResult<(String, Vec<usize>, Vec<f64>, Tensor)> {
    let imported = dlbind::from_dlpack(obj, None, None)?;
    let c = to_candle(&imported)?;
    drop(imported);
    let values = c
        .to_dtype(DType::F64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .map_err(candle_err)?;
    Ok((
        c.dtype().as_str().to_owned(),
        c.dims().to_vec(),
        values,
        tensor_of(&c)?,
    ))
}

/// Adds the candle functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(candle_arange, m)?)?;
    m.add_function(wrap_pyfunction!(candle_import, m)?)?;
    Ok(())
}
