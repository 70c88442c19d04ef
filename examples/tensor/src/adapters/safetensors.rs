//! `dlbind_demo.adapters.safetensors_*`: the safetensors adapter
//! (`dlbind::adapters::safetensors`). A file is memory-mapped and its tensors leave as
//! read-only `Tensor`s over the map (copied only when misaligned).

use dlbind::adapters::safetensors::SafetensorsFile as File;
use dlbind::prelude::*;

use crate::Tensor;

/// A memory-mapped safetensors file (`dlbind_demo.adapters.safetensors_open(path)`).
#[pyclass(frozen, module = "dlbind_demo.adapters")]
struct SafetensorsFile {
    file: File,
}

#[pymethods]
impl SafetensorsFile {
    /// The tensors' names, in file order.
    fn keys(&self) -> Vec<String> {
        self.file.names().into_iter().map(str::to_string).collect()
    }

    /// The tensor `name`, a read-only `Tensor` over the map (no copy unless misaligned); the map
    /// stays alive as long as the tensor. An unknown name is a ValueError.
    fn get(&self, py: Python<'_>, name: &str) -> PyResult<Tensor> {
        <Tensor as FromDLPack>::from_imported(py, self.file.tensor(name)?)
    }

    fn __len__(&self) -> usize {
        self.file.names().len()
    }
}

/// Memory-maps the safetensors file at `path` (a file that is not one is a BufferError).
#[pyfunction]
fn safetensors_open(path: std::path::PathBuf) -> PyResult<SafetensorsFile> {
    let f = std::fs::File::open(&path)?;
    // SAFETY: the demo's files are not rewritten while mapped (the documented condition of
    // memory-mapping: another process changing the file would change the tensors' memory).
    let map = unsafe { memmap2::Mmap::map(&f)? };
    Ok(SafetensorsFile {
        file: File::new(map)?,
    })
}

/// A safetensors file held in memory (a copy of `data`, e.g. `safetensors.numpy.save(...)`).
#[pyfunction]
fn safetensors_from_bytes(data: Vec<u8>) -> PyResult<SafetensorsFile> {
    Ok(SafetensorsFile {
        file: File::new(data)?,
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(safetensors_open, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_from_bytes, m)?)?;
    m.add_class::<SafetensorsFile>()?;
    Ok(())
}
