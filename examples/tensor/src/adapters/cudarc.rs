//! `dlbind_demo.adapters.cudarc_*` (demo feature `cuda`): the cudarc adapter
//! (`dlbind::adapters::cudarc`). `cudarc_arange` copies `0, 1, ..` into a `CudaSlice` on a stream
//! of its own and exports it as a `CudaArray` whose producer stream is that stream;
//! `cudarc_read` imports any CUDA producer for a stream of its own (`__dlpack__(stream=...)`)
//! as a `CudaView` and copies it back to the host. Every call needs a CUDA driver and GPU
//! (BufferError otherwise).

use std::sync::Arc;

use dlbind::adapters::cudarc::cudarc::driver::{CudaContext, CudaStream};
use dlbind::adapters::cudarc::{CudaTensor, ImportedSlice, import_on_stream};
use dlbind::gpu::StreamHandle;
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;

/// GPU memory from a `CudaSlice`, with the stream its copy was queued on.
#[pyclass(frozen, module = "dlbind_demo.adapters")]
#[derive(DLPackExport)]
struct CudaArray {
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
    #[dlpack(stream)]
    stream: Option<u64>,
}

#[dlbind::pymethods]
impl CudaArray {
    /// The producer stream (`CUstream` as an int).
    #[getter]
    fn stream(&self) -> Option<u64> {
        self.stream
    }
}

fn gpu_err(what: &str, e: impl std::fmt::Debug) -> PyErr {
    DlpackError::new(
        FailureKind::DeviceUnavailable,
        format!("CUDA {what}: {e:?}"),
    )
    .into()
}

/// A new stream on GPU `ordinal` (after checking that a driver is there: cudarc panics without).
fn stream_on(ordinal: usize) -> PyResult<Arc<CudaStream>> {
    dlbind::gpu::check_driver()?;
    let ctx = CudaContext::new(ordinal).map_err(|e| gpu_err("context", e))?;
    ctx.new_stream().map_err(|e| gpu_err("stream", e))
}

/// `0.0, 1.0, ..` (float32) of `shape` in a `CudaSlice` on a new stream of GPU 0, exported
/// without a copy.
#[pyfunction]
fn cudarc_arange(shape: Vec<usize>) -> PyResult<CudaArray> {
    let stream = stream_on(0)?;
    let n: usize = shape.iter().product();
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let slice = stream.clone_htod(&host).map_err(|e| gpu_err("copy", e))?;
    let t = CudaTensor::from_slice(slice, &shape)?;
    Ok(CudaArray {
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        strides: t.strides().to_vec(),
        device: t.device(),
        stream: t.stream().map(|s| s.0),
        buf: t.into_buffer(),
    })
}

/// Any CUDA float32 producer, imported for a new stream of its GPU and read back to the host
/// through cudarc (C order).
#[pyfunction]
fn cudarc_read(obj: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    let (_, id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    let stream = stream_on(usize::try_from(id).unwrap_or(0))?;
    let t = import_on_stream(obj, StreamHandle(stream.cu_stream() as u64))?;
    let view = ImportedSlice::<f32>::new(t, &stream)?;
    stream
        .clone_dtoh(&view.as_view())
        .map_err(|e| gpu_err("copy", e))
}

/// Adds the cudarc functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CudaArray>()?;
    m.add_function(wrap_pyfunction!(cudarc_arange, m)?)?;
    m.add_function(wrap_pyfunction!(cudarc_read, m)?)?;
    Ok(())
}
