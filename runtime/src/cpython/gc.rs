//! Garbage-collector support: how dlbind storage reports the Python objects it holds to a
//! `tp_traverse` (the `__traverse__` that `#[derive(DLPackExport)]` emits, through
//! [`DataSource::visit_python_refs`](crate::export::DataSource::visit_python_refs)).
//!
//! A tensor imported from a Python object keeps that object alive: a view's owner
//! (a view buffer), the exporter behind a bridge import (the
//! object with `__array_interface__`, the buffer's `obj`), or the array a dlbind export points
//! at. If that object in turn refers to the tensor (say it stores the array imported from
//! itself), the pair is a reference cycle, which the collector can free only when the tensor
//! reports its reference. Each reference is reported exactly once, and only by its one owner:
//! the collector subtracts one per visit from the object's count, so a reference shared by
//! several owners (a shared imported buffer) or held by a foreign
//! producer's opaque `manager_ctx` is not reported (a cycle through it stays uncollected, the
//! safe side; numpy's `ndarray.base` is never reported at all).
//!
//! A buffer's exporter (the `obj` of a `Py_buffer` dlbind holds) is reported only when the
//! collector cannot harm the export by clearing it ([`may_report_buffer_exporter`]).

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

/// Whether the exporter `obj` of a buffer dlbind holds may be reported to the collector.
///
/// A buffer export is more than a reference: while it is held, the exporter must keep the
/// exported memory and its own bookkeeping. The collector does not know that. When a reported
/// exporter is part of an unreachable cycle, its `tp_clear` runs while the export is still
/// held, and some exporters then drop what the export needs: CPython 3.11's `memoryview` drops
/// its managed buffer, and releasing the export afterwards dereferences it (a segfault; CPython
/// gh-77894, fixed in 3.12.7 and 3.13), and ctypes arrays free their memory. So `obj` is
/// reported only when its `tp_clear` can drop nothing but Python attributes: its type and each
/// `tp_base` below it clear with CPython's generic `subtype_clear` (the `__dict__` and
/// `__slots__` of a class statement's instances, e.g. a `bytearray` subclass) down to the first
/// type with no `tp_clear` at all. Every other exporter stays unreported, so a cycle through it
/// is not collected: the safe side, as with numpy.
///
/// # Safety
/// `obj` is NULL or a live object; the GIL is held (`py`).
pub(crate) unsafe fn may_report_buffer_exporter(py: Python<'_>, obj: *mut ffi::PyObject) -> bool {
    if obj.is_null() {
        return false;
    }
    let Some(generic) = subtype_clear(py) else {
        return false;
    };
    // SAFETY: a live object's type and its `tp_base` chain are live type objects (caller
    // contract); only `tp_clear` and `tp_base` are read.
    unsafe {
        let mut tp = ffi::Py_TYPE(obj);
        while !tp.is_null() {
            match super::api::type_clear(tp) {
                None => return true,
                Some(f) if f as usize == generic => tp = super::api::type_base(tp),
                Some(_) => return false,
            }
        }
    }
    true
}

/// The address of CPython's `subtype_clear` (not exported): the `tp_clear` of a class made by a
/// class statement, read once from such a class. `None` if it could not be made.
fn subtype_clear(py: Python<'_>) -> Option<usize> {
    static GENERIC: pyo3::sync::PyOnceLock<Option<usize>> = pyo3::sync::PyOnceLock::new();
    *GENERIC.get_or_init(py, || {
        let cls = py
            .get_type::<pyo3::types::PyType>()
            .call1((
                "_dlbind_clear_probe",
                pyo3::types::PyTuple::empty(py),
                pyo3::types::PyDict::new(py),
            ))
            .ok()?;
        let tp = cls.cast::<pyo3::types::PyType>().ok()?.as_type_ptr();
        // SAFETY: a live type object (held by `cls` for the read).
        unsafe { super::api::type_clear(tp) }.map(|f| f as usize)
    })
}

/// Whether a new instance of the frozen type `own()`, whose only reference the collector could
/// follow (the one its `tp_traverse` reports) is `o`, must be tracked by the garbage collector
/// for a cycle through it to be found. `false` when no cycle through `o` can ever be collected
/// or exist:
/// - `o`'s type is not a GC type (a numpy array, `bytes`): the collector never looks inside
///   `o`, so a cycle through it is uncollectable whether or not the instance is tracked;
/// - `o` is an untracked instance of exactly `own()`: a frozen dlbind instance is untracked only
///   when it was made so by this rule, so its own reference leads nowhere the collector could
///   come back from, and being frozen it never gains another.
///
/// CPython leaves such objects out of the collector the same way (a tuple of untracked
/// objects is untracked at its next collection, `_PyTuple_MaybeUntrack`); dlbind decides at
/// creation, so the instance is never linked into the collector's lists at all (no
/// `PyObject_GC_Track` and `PyObject_GC_UnTrack` per import; costs: `bench/`). An
/// untracked instance is still reported by `gc.get_referents`; `gc.is_tracked` says `False`.
///
/// # Safety
/// `o` is a live object; the GIL is held.
#[inline]
pub(crate) unsafe fn referent_needs_tracking(
    o: *mut ffi::PyObject,
    own: impl FnOnce() -> *mut ffi::PyTypeObject,
) -> bool {
    // SAFETY: reading the type and flags of a live object (caller contract).
    unsafe {
        let ty = ffi::Py_TYPE(o);
        if ffi::PyType_IS_GC(ty) == 0 {
            return false;
        }
        !(std::ptr::eq(ty, own()) && ffi::PyObject_GC_IsTracked(o) == 0)
    }
}
