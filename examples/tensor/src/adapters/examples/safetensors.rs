// examples/tensor/src/adapters/examples/safetensors.rs
use dlbind::adapters::safetensors::SafetensorsFile;
use dlbind::adapters::safetensors::safetensors::{Dtype, serialize, tensor::TensorView};
use dlbind::prelude::*;

use super::Frame; // the README's `Frame`

/// Rust -> Python: tensor `name` of a safetensors file, memory-mapped (no copy; read-only:
/// the file's bytes are shared by every tensor of it).
#[pyfunction]
fn safetensors_load(py: Python<'_>, path: &str, name: &str) -> PyResult<Frame> {
    let file = std::fs::File::open(path)?;
    // SAFETY: nothing writes the file while it is mapped (a model file, written once).
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let st = SafetensorsFile::new(map)?;
    Frame::from_imported(py, st.tensor(name)?)
}

/// Python -> Rust: any float32 producer written as tensor `name` of a new safetensors file
/// (the `safetensors` crate's `serialize`; `to_vec` reads any layout in C order).
#[pyfunction]
fn safetensors_save(path: &str, name: &str, x: &Bound<'_, PyAny>) -> PyResult<()> {
    let t = dlbind::from_dlpack(x, None, None)?;
    let bytes: Vec<u8> = t
        .to_vec::<f32>()?
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
    let err = |e| pyo3::exceptions::PyValueError::new_err(format!("safetensors: {e}"));
    let view = TensorView::new(Dtype::F32, shape, &bytes).map_err(err)?;
    std::fs::write(path, serialize([(name, view)], None).map_err(err)?)?;
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(safetensors_load, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_save, m)?)
}
