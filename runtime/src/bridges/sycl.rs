//! `__sycl_usm_array_interface__` (version 1) export for `kDLOneAPI` (USM) data.
//!
//! Fields per the dpctl specification: `data: (ptr, readonly)`, `shape`, `strides` (in
//! **elements**, `None` when C-contiguous), `typestr`, `version: 1`, `offset: 0` (`data`
//! already addresses element 0), and `syclobj`. **`syclobj` is `None`**: a [`DLPackSource`]
//! only knows a oneAPI device ordinal, not the SYCL context the allocation is bound to, and
//! dlbind has no SYCL runtime to name one; a filter-selector string guessed from the ordinal
//! could name the wrong context. Consumers that need the context must get it from the producer.
//!
//! Not for a non-frozen class (AttributeError): as for `__cuda_array_interface__`, consumers keep
//! only the object and `data` is a pointer tuple, so no export could hold the object's borrow.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::array_interface::base_dict;
use super::typestr::typestr_of;
use super::{not_applicable, snapshot};
use crate::export::DLPackSource;
use crate::ffi::DLDeviceType;
use crate::export::access::SourceAccess;

const ATTR: &str = "__sycl_usm_array_interface__";

/// The body of the `__sycl_usm_array_interface__` getter (AttributeError unless the data is
/// `kDLOneAPI` and the dtype has a numpy typestr in the spec).
pub fn sycl_usm_array_interface<T>(slf: &Bound<'_, T>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let s = snapshot(slf)?;
    if s.device.device_type != DLDeviceType::kDLOneAPI {
        return Err(not_applicable(
            ATTR,
            format_args!("the data is on device {}, not oneAPI USM memory", s.device),
        ));
    }
    if !<T::Frozen as SourceAccess<T>>::FROZEN {
        return Err(not_applicable(ATTR, super::NOT_FROZEN));
    }
    let ts = typestr_of(s.dtype).map_err(|e| not_applicable(ATTR, e.message()))?;
    let py = slf.py();
    let d = base_dict(py, &s, ts, 1)?;
    if s.is_c_contiguous() {
        d.set_item("strides", py.None())?;
    } else {
        d.set_item("strides", PyTuple::new(py, &s.strides)?)?;
    }
    d.set_item("offset", 0)?;
    d.set_item("syclobj", py.None())?;
    Ok(d.into_any().unbind())
}
