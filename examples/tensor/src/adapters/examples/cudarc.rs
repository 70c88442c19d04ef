// examples/tensor/src/adapters/examples/cudarc.rs
use dlbind::adapters::cudarc::cudarc::driver::CudaContext;
use dlbind::adapters::cudarc::{CudaTensor, ImportedSlice, import_on_stream};
use dlbind::gpu::StreamHandle;
use dlbind::prelude::*;

/// GPU memory with the stream its data was written on (consumers asking for another stream wait
/// for it through an event).
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct GpuArray {
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
impl GpuArray {}

fn cuda_err(e: impl std::fmt::Debug) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!("cudarc: {e:?}"))
}

/// Rust -> Python: `values` copied into a `CudaSlice` on a new stream of GPU 0, exported without
/// a further copy; its producer stream is that stream.
#[pyfunction]
fn cudarc_upload(values: Vec<f32>) -> PyResult<GpuArray> {
    dlbind::gpu::check_driver()?; // cudarc panics without a driver
    let stream = CudaContext::new(0)
        .and_then(|c| c.new_stream())
        .map_err(cuda_err)?;
    let n = values.len();
    let t = CudaTensor::from_slice(stream.clone_htod(&values).map_err(cuda_err)?, &[n])?;
    Ok(GpuArray {
        dtype: t.dtype(),
        shape: t.shape().to_vec(),
        strides: t.strides().to_vec(),
        device: t.device(),
        stream: t.stream().map(|s| s.0),
        buf: t.into_buffer(),
    })
}

/// Python -> Rust: any C-contiguous float32 CUDA producer (CuPy, torch, a `GpuArray`) on GPU 0,
/// ordered before a stream of ours (`__dlpack__(stream=...)`), read as a `CudaView` and copied
/// to the host.
#[pyfunction]
fn cudarc_download(x: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    dlbind::gpu::check_driver()?;
    let stream = CudaContext::new(0)
        .and_then(|c| c.new_stream())
        .map_err(cuda_err)?;
    let t = import_on_stream(x, StreamHandle(stream.cu_stream() as u64))?;
    let view = ImportedSlice::<f32>::new(t, &stream)?;
    stream.clone_dtoh(&view.as_view()).map_err(cuda_err)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<GpuArray>()?;
    m.add_function(wrap_pyfunction!(cudarc_upload, m)?)?;
    m.add_function(wrap_pyfunction!(cudarc_download, m)?)
}
