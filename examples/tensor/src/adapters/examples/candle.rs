// examples/tensor/src/adapters/examples/candle.rs
use dlbind::adapters::candle::candle_core::Tensor;
use dlbind::adapters::candle::{CandleTensor, to_candle};
use dlbind::prelude::*;

use super::Frame; // the README's `Frame`

fn candle_err(e: dlbind::adapters::candle::candle_core::Error) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(format!("candle: {e}"))
}

/// A candle tensor -> Python: a copy in memory dlbind owns (writable; candle writes its own
/// storage in place, so it is not lent), as a `Frame`.
fn to_frame(t: &Tensor) -> PyResult<Frame> {
    let e = CandleTensor::from_tensor(t)?;
    let (dtype, readonly) = (e.dtype(), e.readonly());
    let (shape, strides) = (Dims::from_slice(e.shape()), Dims::from_slice(e.strides()));
    Ok(Frame {
        buf: e.into_buffer(),
        dtype,
        shape,
        strides,
        device: Device::CPU,
        readonly,
    })
}

/// Python -> candle -> Python: two DLPack producers as candle tensors (copies: candle owns its
/// storage), multiplied by candle, the product back as a `Frame`.
#[pyfunction]
fn candle_matmul(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<Frame> {
    let a = to_candle(&dlbind::from_dlpack(a, None, None)?)?;
    let b = to_candle(&dlbind::from_dlpack(b, None, None)?)?;
    to_frame(&a.matmul(&b).map_err(candle_err)?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(candle_matmul, m)?)
}
