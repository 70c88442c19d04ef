//! The demo's adapter functions (issue 34): each adapter feature of dlbind gets a submodule here
//! that registers Python functions exercising it, under `dlbind_demo.adapters`.

use pyo3::prelude::*;

/// Adds every compiled adapter's functions to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let _ = m;
    Ok(())
}
