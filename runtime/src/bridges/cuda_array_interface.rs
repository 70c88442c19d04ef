//! `__cuda_array_interface__` (version 3) export for `kDLCUDA` / `kDLCUDAManaged` data.
//!
//! Keys: `shape`, `typestr`, `data: (ptr, readonly)`, `strides` (bytes, `None` when
//! C-contiguous), `version: 3`, and `stream`. **Stream choice:** `stream` is `None`, which the
//! CAI v3 specification defines as "no synchronization needed": a [`DLPackSource`] describes
//! memory that is ready (dlbind's own exports have no pending work on any stream it knows of;
//! `__dlpack__` likewise exports without recording an event for such sources). A producer
//! with pending work must expose `__dlpack__` (which negotiates the consumer's stream) — and
//! CAI consumers that prefer DLPack use it first.

use pyo3::PyClass;
use pyo3::prelude::*;

use super::array_interface::v3_dict;
use super::{not_applicable, snapshot};
use crate::export::DLPackSource;
use crate::ffi::DLDeviceType;
use crate::python::SourceAccess;

const ATTR: &str = "__cuda_array_interface__";

/// The body of the `__cuda_array_interface__` getter (AttributeError unless the data is
/// `kDLCUDA` or `kDLCUDAManaged` and the dtype has a numpy typestr in the spec).
pub fn cuda_array_interface<T>(slf: &Bound<'_, T>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let s = snapshot(slf)?;
    if !matches!(s.device.device_type, DLDeviceType::kDLCUDA | DLDeviceType::kDLCUDAManaged) {
        return Err(not_applicable(ATTR, format_args!("the data is on device {}, not CUDA memory", s.device)));
    }
    let py = slf.py();
    let d = v3_dict(py, &s, ATTR)?;
    d.set_item("stream", py.None())?;
    Ok(d.into_any().unbind())
}
