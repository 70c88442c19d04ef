//! The demo's adapter functions (issue 34): each adapter feature of dlbind gets a submodule here
//! that registers Python functions exercising it, under `dlbind_demo.adapters`.

use pyo3::prelude::*;

#[cfg(feature = "arrow")]
mod arrow;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cuda")]
mod cudarc;
mod examples;
#[cfg(feature = "image")]
mod image;
mod ndarray;
#[cfg(feature = "safetensors")]
mod safetensors;

/// Adds every compiled adapter's functions to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let _ = m;
    #[cfg(feature = "arrow")]
    arrow::register(m)?;
    #[cfg(feature = "candle")]
    candle::register(m)?;
    #[cfg(feature = "cuda")]
    cudarc::register(m)?;
    #[cfg(feature = "image")]
    image::register(m)?;
    ndarray::register(m)?;
    #[cfg(feature = "safetensors")]
    safetensors::register(m)?;
    examples::register(m)
}
