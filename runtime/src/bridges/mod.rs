//! Bridges to the array world's older protocols (issue 5), both directions.
//!
//! Export (bodies of the items `#[derive(DLPackExport)]` emits; generic over any
//! `T: PyClass + DLPackSource`, like [`crate::export::method::dlpack_method`]):
//! * [`getbuffer`] / [`releasebuffer`]: the buffer protocol (PEP 3118) for host-accessible data.
//! * [`array_interface`](fn@array_interface): numpy `__array_interface__` version 3 for host-accessible data.
//! * [`cuda_array_interface`](fn@cuda_array_interface): `__cuda_array_interface__` version 3 for `kDLCUDA` /
//!   `kDLCUDAManaged` data.
//! * [`sycl_usm_array_interface`]: `__sycl_usm_array_interface__` version 1 for `kDLOneAPI` data.
//!
//! For a non-frozen class every bridge export holds a shared borrow of the object while it lives
//! (see [`SourceAccess::with_owner`]): the buffer protocol through the view's `obj`,
//! `__array_interface__` through its `data` entry (a buffer-exporting guard numpy keeps as the
//! array's base). The CUDA and SYCL interfaces cannot (their consumers keep only the object) and
//! are not available for such a class.
//!
//! Each raises the generated `NoProtocol` failure (AttributeError) where it does not apply, so
//! `hasattr(x, "__array_interface__")` is `False` and consumers fall through to the next
//! protocol; the buffer protocol raises BufferError (what `memoryview` expects).
//!
//! Import ([`import_bridges`]; called by [`crate::import::from_dlpack`] when the object has no
//! `__dlpack__`): CUDA array interface → SYCL USM interface → `__array_interface__` → buffer
//! protocol, zero-copy, keeping the exporter (or the held `Py_buffer`) alive for the view's
//! lifetime.
//!
//! Every typestr / PEP 3118 format ↔ `DLDataType` mapping goes through the spec's generated
//! dtype table ([`typestr`]); there is no hand-written dtype table here.

mod array_interface;
mod buffer;
mod consume;
mod cuda_array_interface;
mod numpy_header;
mod sycl;
pub mod typestr;

use std::ffi::c_void;

use pyo3::PyClass;
use pyo3::prelude::*;

use crate::copy::is_c_contiguous;
use crate::device::Device;
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::layout::c_strides_into;
use crate::spec::errors::FailureKind;
use crate::ffi::DLDataType;
use crate::export::access::SourceAccess;

pub use array_interface::{array_interface, numpy_view};
pub use buffer::{getbuffer, releasebuffer};
pub(crate) use consume::Keeper;
pub use consume::import_bridges;
#[cfg(feature = "test-util")]
pub use consume::{
    CAI_DEVICE_WITHOUT_DRIVER, InterfaceKind, PROTOCOLS_TRIED, cuda_pointer_device,
    cuda_pointer_device_with, import_buffer, import_interface_dict,
};
pub use cuda_array_interface::cuda_array_interface;
pub(crate) use numpy_header::header_path_state;
pub use numpy_header::{PythonView, numpy_fast_imports, with_ndarray_view};
pub use sycl::sycl_usm_array_interface;

/// A copy of what a [`DLPackSource`] says about itself (taken under one borrow).
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub data: *mut c_void,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    /// Strides in elements (computed C-contiguous ones when the source gives none).
    pub strides: Vec<i64>,
    pub device: Device,
    pub readonly: bool,
    /// The stream with pending work on the data ([`DLPackSource::dlpack_stream`]).
    pub stream: Option<crate::gpu::StreamHandle>,
}

impl Snapshot {
    /// What `src` says, after the export-side checks (`export::check_source`).
    pub(crate) fn of<S: DLPackSource + ?Sized>(src: &S) -> Result<Snapshot, DlpackError> {
        let n = src.dlpack_ndim();
        let mut shape = vec![0i64; n];
        src.dlpack_fill_shape(&mut shape);
        let mut strides = vec![0i64; n];
        if !src.dlpack_fill_strides(&mut strides) {
            c_strides_into(&shape, &mut strides);
        }
        let dtype = src.dlpack_dtype();
        crate::export::check_source(src, &shape, &strides, dtype)?;
        Ok(Snapshot {
            data: src.dlpack_data_ptr(),
            dtype,
            shape,
            strides,
            device: src.dlpack_device(),
            readonly: src.dlpack_readonly(),
            stream: src.dlpack_stream(),
        })
    }

    pub(crate) fn is_c_contiguous(&self) -> bool {
        is_c_contiguous(&self.shape, &self.strides)
    }
}

/// Snapshot of a pyclass implementing [`DLPackSource`] (frozen: `get()`, else `try_borrow()`).
pub(crate) fn snapshot<T>(slf: &Bound<'_, T>) -> PyResult<Snapshot>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    Ok(<T::Frozen as SourceAccess<T>>::with(slf, |src| {
        Snapshot::of(src)
    })??)
}

/// Why the pointer-tuple interfaces (`__cuda_array_interface__`, `__sycl_usm_array_interface__`)
/// do not apply to a non-frozen class.
pub(crate) const NOT_FROZEN: &str = "the class is not frozen, and this interface's consumers keep only the object, not a borrow of it \
     (a `&mut self` method could free the memory under them); use __dlpack__";

/// The `NoProtocol` failure (AttributeError) for an interface attribute that does not apply.
pub(crate) fn not_applicable(attr: &str, why: impl std::fmt::Display) -> PyErr {
    DlpackError::new(
        FailureKind::NoProtocol,
        format!("{attr} is not available: {why}"),
    )
    .into()
}
