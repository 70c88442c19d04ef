//! The capsule around an export (named by the generated static names, compared without
//! `strcmp` on the hot path), its destructor, and the export entry points: negotiate, fill,
//! wrap.

use std::ffi::{CStr, c_void};
use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;

use super::DLPackSource;
use super::request::{EXPORT_VERSION, ExportPlan, ExportRequest, SourceInfo, plan_export};
use std::sync::Arc;

use super::block::*;
use super::borrow::Keep;
use super::device::gpu_involved;
use super::fill::*;
use super::release::*;
use crate::error::DlpackError;
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};
use crate::gpu::DeviceRuntime;

/// Whether the C string `a` equals `b`, reading `a` only up to the first difference: a consumer's
/// "used_…" name differs at its first byte (`PyCapsule_IsValid`'s `strcmp` is a call on every
/// consumed export's release).
///
/// # Safety
/// `a` is a NUL-terminated string.
#[inline]
pub(super) unsafe fn c_str_eq(a: *const std::ffi::c_char, b: &CStr) -> bool {
    for (i, &want) in b.to_bytes_with_nul().iter().enumerate() {
        // SAFETY: every earlier byte of `a` matched a non-NUL byte of `b`, so `a` has not ended
        // before index `i`.
        if unsafe { *a.add(i) } as u8 != want {
            return false;
        }
    }
    true
}

/// PyCapsule destructor: frees the tensor only while the capsule still has its unused name
/// (a consumer that renamed it owns the tensor).
///
/// # Safety
/// Called by CPython with the GIL held on a capsule created by [`wrap_capsule`].
pub(super) unsafe extern "C" fn capsule_destructor<M: ManagedKind>(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule (CPython contract); these calls only read it.
    unsafe {
        // Fast check: our capsules carry exactly the static name pointer until a consumer
        // renames them; otherwise compare by content as the DLPack rule says.
        let (name, context) = crate::cpython::capsule::name_and_context(capsule);
        let p = if name == M::CAPSULE_NAME.as_ptr() {
            // Unrenamed (the static name pointer): the context holds the tensor (`wrap_capsule`).
            context.cast::<M>()
        } else if !name.is_null() && c_str_eq(name, M::CAPSULE_NAME) {
            ffi::PyCapsule_GetPointer(capsule, name).cast::<M>()
        } else {
            // Renamed by a consumer ("used_dltensor…"): it owns the tensor now.
            return;
        };
        if p.is_null() {
            ffi::PyErr_WriteUnraisable(capsule);
            return;
        }
        match M::deleter_of(p) {
            // Our own tensor: the GIL is held here, skip PyGILState_*.
            Some(d) if d as usize == M::DELETER as usize => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    release::<M>(p, true)
                }));
            }
            Some(d) => d(p),
            None => {}
        }
    }
}

/// Wraps a managed tensor in a capsule with the generated unused name and dlbind's
/// destructor (which deletes an unconsumed tensor through its own deleter: dlbind's for
/// [`build_managed`]'s, the block's for an adapter's `Handoff`). On failure the tensor is
/// deleted.
///
/// # Safety
/// `m` is a live tensor nobody else holds, with a deleter that frees it; the GIL is held.
#[inline]
pub(crate) unsafe fn wrap_capsule<M: ManagedKind>(
    py: Python<'_>,
    m: NonNull<M>,
) -> PyResult<Py<PyAny>> {
    // SAFETY: caller contract.
    let cap = unsafe { capsule_or_delete(m) };
    if cap.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `capsule_or_delete` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// The capsule around `m` (a new reference), or null with the allocation's error set and `m`
/// deleted.
///
/// # Safety
/// As for [`wrap_capsule`].
#[inline]
unsafe fn capsule_or_delete<M: ManagedKind>(m: NonNull<M>) -> *mut ffi::PyObject {
    // SAFETY: the name is a 'static C string (PyCapsule keeps the pointer); the destructor
    // follows the DLPack rules for exactly this struct kind.
    // The context repeats the pointer so that the destructor reads it without
    // `PyCapsule_GetPointer`'s name comparison (DLPack consumers never use the context).
    let cap = unsafe {
        crate::cpython::capsule::new_capsule(
            m.as_ptr().cast::<c_void>(),
            M::CAPSULE_NAME.as_ptr(),
            m.as_ptr().cast::<c_void>(),
            Some(capsule_destructor::<M>),
        )
    };
    if cap.is_null() {
        // SAFETY: nobody else owns `m` (caller contract).
        unsafe { delete_unwrapped(m) };
    }
    cap
}

/// Deletes a tensor no capsule could be made for, through its own deleter (once).
///
/// # Safety
/// Nobody else owns `m`.
#[cold]
#[inline(never)]
unsafe fn delete_unwrapped<M: ManagedKind>(m: NonNull<M>) {
    // SAFETY: caller contract; its own deleter frees it once.
    unsafe {
        if let Some(d) = M::deleter_of(m.as_ptr()) {
            d(m.as_ptr());
        }
    }
}

/// Negotiates `req` for `src` and returns the capsule (`"dltensor"` or
/// `"dltensor_versioned"`). `owner` is the Python object that keeps `src`'s memory alive; the
/// capsule's tensor holds a strong reference to it (none when the data was copied on the host).
/// For a `#[pyclass]`, pass what [`SourceAccess::with_owner`](crate::export::access::SourceAccess::with_owner)
/// gives: the object when it is frozen, else a guard holding a shared borrow of it (so a
/// `&mut self` method cannot reallocate the data while the tensor lives). (dlbind's own entry
/// points export through the crate-internal paths below; this one is for tests.)
#[cfg(any(test, feature = "test-util"))]
#[inline]
pub fn export_to_capsule<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
) -> PyResult<Py<PyAny>> {
    negotiate_and_export(owner, src, req, None)
}

#[cfg(any(test, feature = "test-util"))]
/// [`export_to_capsule`] with an explicit GPU runtime for the device steps (copies, stream
/// ordering) instead of [`gpu::default_runtime`]: for tests with
/// [`gpu::fake::FakeRuntime`], or for a runtime of your own.
pub fn export_to_capsule_on<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
    runtime: &Arc<dyn DeviceRuntime>,
) -> PyResult<Py<PyAny>> {
    negotiate_and_export(owner, src, req, Some(runtime))
}

/// Plans `req` for `src` ([`plan_export`]) and exports it ([`export_planned_on`]).
#[inline]
pub(super) fn negotiate_and_export<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> PyResult<Py<PyAny>> {
    // SAFETY: `owner` is a live object bound to the GIL token.
    unsafe { negotiate_and_export_kept(owner.py(), owner.as_ptr(), src, req, runtime) }
}

/// [`negotiate_and_export`] with any [`Keep`] as the owner (a non-frozen object's borrow).
///
/// # Safety
/// Attached (`py`); `owner` keeps `src`'s memory alive (a live object or a borrow of one).
#[inline]
pub(super) unsafe fn negotiate_and_export_kept<S: DLPackSource + ?Sized, K: Keep>(
    py: Python<'_>,
    owner: K,
    src: &S,
    req: &ExportRequest,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> PyResult<Py<PyAny>> {
    let plan = plan_export(
        req,
        SourceInfo {
            device: src.dlpack_device(),
            writability: src.dlpack_writability(),
        },
    )?;
    // SAFETY: caller contract.
    unsafe { export_planned_on(py, owner, src, &plan, req.stream, runtime) }
}

/// Builds the tensor `plan` describes and wraps it in a capsule.
///
/// # Safety
/// Attached (`py`); `owner` keeps `src`'s memory alive (a live object or a borrow of one).
#[inline]
pub(super) unsafe fn export_planned_on<S: DLPackSource + ?Sized, K: Keep>(
    py: Python<'_>,
    owner: K,
    src: &S,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> PyResult<Py<PyAny>> {
    // SAFETY: caller contract (`owner` owns `src`, GIL held).
    unsafe {
        if plan.versioned {
            let m =
                build_managed::<DLManagedTensorVersioned, S, K>(owner, src, plan, stream, runtime)?;
            wrap_capsule(py, m)
        } else {
            let m = build_managed::<DLManagedTensor, S, K>(owner, src, plan, stream, runtime)?;
            wrap_capsule(py, m)
        }
    }
}

/// [`negotiate_and_export`] for the C entry points (`__dlpack__` as CPython calls it): the
/// capsule as a new reference, or null with the error set. Host memory exported as it is (the
/// common call) is built and wrapped here, with no `PyResult` moved through the path; anything
/// else (a copy, a device) takes [`export_planned_on`]. `owner`: the object itself (`*mut
/// PyObject`, frozen classes) or a borrow of it ([`HeldBorrow`](super::borrow::HeldBorrow),
/// non-frozen ones), see [`Keep`].
///
/// # Safety
/// The GIL is held; `owner` keeps `src`'s memory alive (a live object, or a borrow of one).
#[inline(always)]
pub(super) unsafe fn negotiate_and_export_raw<S: DLPackSource + ?Sized, K: Keep>(
    owner: K,
    src: &S,
    req: &ExportRequest,
) -> *mut ffi::PyObject {
    let plan = match plan_export(
        req,
        SourceInfo {
            device: src.dlpack_device(),
            writability: src.dlpack_writability(),
        },
    ) {
        Ok(plan) => plan,
        Err(e) => return restore_null(e.into()),
    };
    if plan.copy || gpu_involved(src, &plan) {
        // SAFETY: caller contract (GIL held, `owner` owns `src`).
        return unsafe { export_not_as_is(owner, src, req) };
    }
    // SAFETY: caller contract (`owner` live, GIL held); the plan exports host memory as it is.
    unsafe {
        if plan.versioned {
            built_to_capsule(build_managed::<DLManagedTensorVersioned, S, K>(
                owner, src, &plan, req.stream, None,
            ))
        } else {
            built_to_capsule(build_managed::<DLManagedTensor, S, K>(
                owner, src, &plan, req.stream, None,
            ))
        }
    }
}

/// [`negotiate_and_export_raw`]'s other exports (a copy, a device): the plan made again here,
/// out of line, so that the common call keeps its plan in registers.
///
/// # Safety
/// As for [`negotiate_and_export_raw`].
#[cold]
#[inline(never)]
unsafe fn export_not_as_is<S: DLPackSource + ?Sized, K: Keep>(
    owner: K,
    src: &S,
    req: &ExportRequest,
) -> *mut ffi::PyObject {
    // SAFETY: caller contract (GIL held, `owner` owns `src`).
    match unsafe { negotiate_and_export_kept(Python::assume_attached(), owner, src, req, None) } {
        Ok(cap) => cap.into_ptr(),
        Err(e) => restore_null(e),
    }
}

/// The capsule around a tensor [`build_managed`] built (a new reference), or null with the
/// error set (the build's, or the capsule allocation's: the tensor is then deleted).
///
/// # Safety
/// The GIL is held; an `Ok` tensor is owned by nobody else.
#[inline(always)]
unsafe fn built_to_capsule<M: ManagedKind>(
    built: Result<NonNull<M>, DlpackError>,
) -> *mut ffi::PyObject {
    match built {
        // SAFETY: caller contract.
        Ok(m) => unsafe { capsule_or_delete(m) },
        Err(e) => restore_null(e.into()),
    }
}

/// Restores `e` (attached: see [`crate::cpython::boundary::restore_attached`]) and returns null.
#[cold]
#[inline(never)]
fn restore_null(e: PyErr) -> *mut ffi::PyObject {
    crate::cpython::boundary::restore_attached(e);
    std::ptr::null_mut()
}

/// Builds an owning `DLManagedTensorVersioned` without a capsule (for the C exchange API and
/// for Rust consumers). The caller owns the result and must call its deleter exactly once.
#[inline]
pub fn export_versioned_managed<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
) -> Result<NonNull<DLManagedTensorVersioned>, DlpackError> {
    // SAFETY: `owner` is live and bound to the GIL.
    unsafe { export_versioned_managed_kept(owner.as_ptr(), src, req) }
}

/// [`export_versioned_managed`] with any [`Keep`] as the owner: the exchange table's owning
/// export of a non-frozen object passes its borrow, which the tensor's deleter ends.
///
/// # Safety
/// Attached; `owner` keeps `src`'s memory alive (a live object or a borrow of one).
#[inline]
pub(crate) unsafe fn export_versioned_managed_kept<S: DLPackSource + ?Sized, K: Keep>(
    owner: K,
    src: &S,
    req: &ExportRequest,
) -> Result<NonNull<DLManagedTensorVersioned>, DlpackError> {
    let mut req = *req;
    if !req.wants_versioned() {
        req.max_version = Some((EXPORT_VERSION.major as i64, EXPORT_VERSION.minor as i64));
    }
    let plan = plan_export(
        &req,
        SourceInfo {
            device: src.dlpack_device(),
            writability: src.dlpack_writability(),
        },
    )?;
    // SAFETY: caller contract.
    unsafe { build_managed::<DLManagedTensorVersioned, S, K>(owner, src, &plan, req.stream, None) }
}

#[cfg(test)]
mod tests {
    use super::c_str_eq;

    #[test]
    fn c_str_eq_compares_whole_strings() {
        let eq = |a: &std::ffi::CStr, b: &std::ffi::CStr| {
            // SAFETY: both are NUL-terminated strings alive for the call.
            unsafe { c_str_eq(a.as_ptr(), b) }
        };
        assert!(eq(c"dltensor", c"dltensor"));
        assert!(eq(c"", c""));
        assert!(!eq(c"used_dltensor", c"dltensor"));
        assert!(
            !eq(c"dltensor", c"dltensor_versioned"),
            "a prefix is not equal"
        );
        assert!(
            !eq(c"dltensor_versioned", c"dltensor"),
            "nor is a longer name"
        );
        assert!(!eq(c"dltensoR", c"dltensor"));
        assert!(!eq(c"", c"dltensor"));
    }
}
