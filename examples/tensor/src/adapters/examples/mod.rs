//! The manual's adapter examples (docs/manual/adapters-a.md and adapters-b.md, "From Rust to
//! Python and back"): each file here is one example exactly as the manual shows it (the pytest
//! `test_adapter_examples.py` compares them byte for byte and calls their functions), registered
//! under `dlbind_demo.adapters.examples`. They hold their exports in `Frame`, the README's
//! "Importing as your own type" class, defined here as a user defines it in the parent module of
//! such code.

use dlbind::prelude::*;

#[cfg(feature = "arrow")]
mod arrow;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cuda")]
mod cudarc;
#[cfg(feature = "image")]
mod image;
mod ndarray;
#[cfg(feature = "safetensors")]
mod safetensors;

/// The README's `Frame`: any dtype, shape, strides and device, over a `Buffer`.
#[pyclass(frozen, module = "dlbind_demo.adapters.examples")]
#[derive(DLPackExport, FromDLPack)]
struct Frame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Dims,
    #[dlpack(strides)]
    strides: Dims,
    #[dlpack(device)]
    device: Device,
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl Frame {
    /// The shape, for the tests.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.to_vec()
    }
    /// Whether consumers must not write.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }
}

/// The examples' module, `dlbind_demo.adapters.examples`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let ex = PyModule::new(m.py(), "examples")?;
    ex.add_class::<Frame>()?;
    #[cfg(feature = "arrow")]
    arrow::register(&ex)?;
    #[cfg(feature = "candle")]
    candle::register(&ex)?;
    #[cfg(feature = "cuda")]
    cudarc::register(&ex)?;
    #[cfg(feature = "image")]
    image::register(&ex)?;
    ndarray::register(&ex)?;
    #[cfg(feature = "safetensors")]
    safetensors::register(&ex)?;
    m.add_submodule(&ex)
}
