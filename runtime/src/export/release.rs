//! The deleter of an export (`extern "C"`, callable from any thread, with or without the GIL):
//! it takes the GIL with `PyGILState_Ensure` unless this thread already holds it, drops the
//! strong reference to the Python owner and frees the block — or, when the interpreter is gone
//! (`Py_IsInitialized() == 0`) or, on a thread without the GIL, finalising (`cpython::interp`),
//! frees only the Rust-owned copy buffer and leaks the rest. Runs exactly once per export; a
//! panic never crosses it. Also what an export reports to the garbage collector.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3::ffi;


use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned,
};
use super::block::*;

/// The deleter dlbind installs in every legacy tensor it exports ([`deleter`]).
///
/// # Safety
/// As for [`deleter`].
// Never inlined, and so never copied into another crate (rustc may make small functions
// available for cross-crate inlining): its address identifies dlbind's tensors.
#[inline(never)]
pub(crate) unsafe extern "C" fn deleter_legacy(p: *mut DLManagedTensor) {
    // SAFETY: forwarded caller contract.
    unsafe { deleter(p) }
}

/// The deleter dlbind installs in every versioned tensor it exports ([`deleter`]).
///
/// # Safety
/// As for [`deleter`].
// Never inlined, and so never copied into another crate (rustc may make small functions
// available for cross-crate inlining): its address identifies dlbind's tensors.
#[inline(never)]
pub(crate) unsafe extern "C" fn deleter_versioned(p: *mut DLManagedTensorVersioned) {
    // SAFETY: forwarded caller contract.
    unsafe { deleter(p) }
}

/// What dlbind's deleters do (the body of [`ManagedKind::DELETER`]).
///
/// # Safety
/// `p` is NULL or a tensor created by `build_managed` whose deleter has not run yet.
#[inline(always)]
pub(super) unsafe fn deleter<M: ManagedKind>(p: *mut M) {
    if p.is_null() {
        return;
    }
    // A panic must not unwind into C; nothing below is expected to panic.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: forwarded caller contract. The GIL may or may not be held by this thread.
        unsafe { release::<M>(p, false) }
    }));
}

/// Frees a tensor made by `build_managed`.
///
/// # Safety
/// As for [`deleter`], `p` non-null; `gil_held` only if this thread holds the GIL.
#[inline(always)]
pub(super) unsafe fn release<M: ManagedKind>(p: *mut M, gil_held: bool) {
    let hdr = p.cast::<Header<M>>();
    // SAFETY: `hdr` is the live header of an allocation made by `build_managed`; the copy
    // buffer is moved out exactly once (the deleter runs once per tensor by the DLPack rules).
    let (owner, copy, device_copy, ndim) = unsafe {
        (
            (*hdr).owner,
            ptr::read(&raw const (*hdr).copy),
            ptr::read(&raw const (*hdr).device_copy),
            (*hdr).ndim,
        )
    };
    // Rust-owned memory needs no interpreter. (Dropped only when present: the drop of an empty
    // `Option<Box<_>>` was an out-of-line call on every CPU export's release.)
    drop(copy);
    if device_copy.is_some() {
        drop(device_copy);
    }
    // SAFETY: plain C API calls. The allocation (pymalloc) is freed and the owner reference
    // dropped only while the interpreter is alive and with the GIL held (taken here unless the
    // caller holds it, and only when not finalising: see `interp`). After (or, on a thread
    // without the GIL, during) finalization both are leaked on purpose.
    unsafe {
        // A deleter usually runs on a thread that holds the GIL (a consumer's array being
        // freed): skip the Ensure/Release pair then.
        if gil_held || (ffi::Py_IsInitialized() != 0 && crate::cpython::boundary::this_thread_holds_gil()) {
            give_block::<M>(hdr.cast::<c_void>(), ndim);
            if !owner.is_null() {
                ffi::Py_DECREF(owner);
            }
            count_exports(-1);
        } else if crate::cpython::interp::may_take_gil() {
            let gil = ffi::PyGILState_Ensure();
            give_block::<M>(hdr.cast::<c_void>(), ndim);
            if !owner.is_null() {
                ffi::Py_DECREF(owner);
            }
            count_exports(-1);
            ffi::PyGILState_Release(gil);
        }
    }
}

/// Visits the Python owner of `m` when `m` is a dlbind export (its deleter is dlbind's and
/// its header holds a strong reference); nothing for other tensors and for copies. For the
/// `tp_traverse` of the object that owns `m` (see `crate::gc`).
///
/// # Safety
/// `m` is a live managed tensor owned by the caller (its deleter not run).
pub(crate) unsafe fn visit_exported_owner<M: ManagedKind>(
    m: NonNull<M>,
    visit: &pyo3::PyVisit<'_>,
) -> Result<(), pyo3::PyTraverseError> {
    // SAFETY: caller contract.
    let Some(d) = (unsafe { M::deleter_of(m.as_ptr()) }) else {
        return Ok(());
    };
    if d as usize != M::DELETER as usize {
        return Ok(());
    }
    // SAFETY: a tensor with dlbind's deleter is the first field of a live `Header` block
    // (`build_managed`, `repr(C)`), whose `owner` is NULL or a strong reference it holds.
    match NonNull::new(unsafe { (*m.as_ptr().cast::<Header<M>>()).owner }) {
        // SAFETY: the block's (so the caller's) strong reference.
        Some(o) => unsafe { crate::cpython::gc::visit_ptr(visit, o) },
        None => Ok(()),
    }
}
