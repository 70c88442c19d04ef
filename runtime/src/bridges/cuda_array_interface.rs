//! `__cuda_array_interface__` (version 3) export for `kDLCUDA` / `kDLCUDAManaged` data.
//!
//! Keys: `shape`, `typestr`, `data: (ptr, readonly)`, `strides` (bytes, `None` when
//! C-contiguous), `version: 3`, and `stream`. **Stream choice:** the source's
//! [`DLPackSource::dlpack_stream`] (`#[dlpack(stream)]` on the derive): the stream with pending
//! work, which the CAI v3 consumer must synchronise on or wait for (the null stream is reported
//! as `1`, the legacy default stream, since CAI disallows `0`). `kDLCUDA` data whose source
//! reports no stream is taken to be ready on the legacy stream
//! ([`crate::gpu::device_default_stream`], as the export planner does), so it reports `1` too: a view imported for that stream, or a host-to-device
//! copy queued there, may still be in flight. Managed memory with no stream reports `None`,
//! which CAI v3 defines as "no synchronization needed".
//!
//! Not for a non-frozen class (AttributeError, so consumers fall back to `__dlpack__`): CAI
//! consumers keep only the object, and `data` must be a pointer tuple, so nothing could hold
//! the borrow that keeps a `&mut self` method from freeing the memory under the view.

use pyo3::PyClass;
use pyo3::prelude::*;

use super::array_interface::v3_dict;
use super::{not_applicable, snapshot};
use crate::export::DLPackSource;
use crate::ffi::DLDeviceType;
use crate::gpu::StreamHandle;
use crate::export::access::SourceAccess;

const ATTR: &str = "__cuda_array_interface__";

/// The body of the `__cuda_array_interface__` getter (AttributeError unless the data is
/// `kDLCUDA` or `kDLCUDAManaged` and the dtype has a numpy typestr in the spec).
pub fn cuda_array_interface<T>(slf: &Bound<'_, T>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let s = snapshot(slf)?;
    if !matches!(
        s.device.device_type,
        DLDeviceType::kDLCUDA | DLDeviceType::kDLCUDAManaged
    ) {
        return Err(not_applicable(
            ATTR,
            format_args!("the data is on device {}, not CUDA memory", s.device),
        ));
    }
    if !<T::Frozen as SourceAccess<T>>::FROZEN {
        return Err(not_applicable(ATTR, super::NOT_FROZEN));
    }
    let py = slf.py();
    let d = v3_dict(py, &s, ATTR)?;
    match s.stream {
        // CAI v3 disallows 0; on CUDA the null stream is the legacy default stream (1).
        Some(h) => d.set_item(
            "stream",
            if h == StreamHandle::NULL {
                StreamHandle::LEGACY.0
            } else {
                h.0
            },
        )?,
        // No recorded stream: the device's default stream (CUDA: 1; managed memory has none).
        None => match crate::gpu::device_default_stream(s.device) {
            Some(h) => d.set_item("stream", h.0)?,
            None => d.set_item("stream", py.None())?,
        },
    }
    Ok(d.into_any().unbind())
}
