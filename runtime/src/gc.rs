//! Garbage-collector support: how dlbind storage reports the Python objects it holds to a
//! `tp_traverse` (the `__traverse__` that `#[derive(DLPackExport)]` emits, through
//! [`DataSource::visit_python_refs`](crate::export::DataSource::visit_python_refs)).
//!
//! A tensor imported from a Python object keeps that object alive: a view's owner
//! ([`Buffer::View`](crate::storage::Buffer::View)), the exporter behind a bridge import (the
//! object with `__array_interface__`, the buffer's `obj`), or the array a dlbind export points
//! at. If that object in turn refers to the tensor (say it stores the array imported from
//! itself), the pair is a reference cycle, which the collector can free only when the tensor
//! reports its reference. Each reference is reported exactly once, and only by its one owner:
//! the collector subtracts one per visit from the object's count, so a reference shared by
//! several owners ([`Buffer::Shared`](crate::storage::Buffer::Shared)) or held by a foreign
//! producer's opaque `manager_ctx` is not reported (a cycle through it stays uncollected, the
//! safe side; numpy's `ndarray.base` is never reported at all).

use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

/// Visits `o`, a strong reference the caller owns, without touching its reference count.
///
/// # Safety
/// `o` is a live object to which the caller (the object being traversed) holds a strong
/// reference of its own.
pub(crate) unsafe fn visit_ptr(
    visit: &PyVisit<'_>,
    o: NonNull<ffi::PyObject>,
) -> Result<(), PyTraverseError> {
    // `Py<PyAny>` is `#[repr(transparent)]` over `NonNull<ffi::PyObject>` (plus a zero-sized
    // marker), so a reference to the pointer is a reference to a `Py<PyAny>` that is never
    // dropped: the visit neither takes nor releases a reference.
    let as_py = std::ptr::from_ref(&o).cast::<Py<PyAny>>();
    // SAFETY: layout as above; `o` is live (caller contract) and the borrow ends with the call.
    visit.call(unsafe { &*as_py })
}
