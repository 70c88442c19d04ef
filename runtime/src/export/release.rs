//! The deleter of an export (`extern "C"`, callable from any thread, with or without the GIL):
//! it takes the GIL with `PyGILState_Ensure` unless this thread already holds it, drops the
//! strong reference to the Python owner and frees the block — or, when the interpreter is gone
//! (`Py_IsInitialized() == 0`) or, on a thread without the GIL, finalising (`cpython::interp`),
//! frees only the Rust-owned copy buffer and leaks the rest. Runs exactly once per export; a
//! panic never crosses it. Also what an export reports to the garbage collector.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3::ffi;

use super::block::*;
use crate::ffi::{DLManagedTensor, DLManagedTensorVersioned};

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
#[inline]
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
#[inline]
pub(super) unsafe fn release<M: ManagedKind>(p: *mut M, gil_held: bool) {
    let hdr = p.cast::<Header<M>>();
    // Rust-owned memory (a `copy=True` export's copy) needs no interpreter; dropped out of line,
    // so that the common release stays small enough to inline at each of its callers whatever
    // else shares their codegen unit (issue 50: one such shift cost the deleter 11 instructions).
    // SAFETY: `hdr` is the live header of an allocation made by `build_managed`, both fields
    // initialised there and not moved out before.
    unsafe {
        if (*hdr).copy.is_some() || (*hdr).device_copy.is_some() {
            drop_copies(hdr);
        }
    }
    // SAFETY: plain C API calls. The owner reference (with the borrow holding it, if any) is
    // dropped and the allocation (pymalloc) freed only while the interpreter is alive and with
    // the GIL held (taken here unless the caller holds it, and only when not finalising: see
    // `interp`). After (or, on a thread without the GIL, during) finalization all of it is
    // leaked on purpose (a borrow too: the object stays borrowed).
    unsafe {
        // A deleter usually runs on a thread that holds the GIL (a consumer's array being
        // freed): skip the Ensure/Release pair then.
        if gil_held
            || (ffi::Py_IsInitialized() != 0 && crate::cpython::boundary::this_thread_holds_gil())
        {
            drop_owner(hdr);
            give_block::<M>(hdr.cast::<c_void>(), (*hdr).ndim);
            count_exports(-1);
        } else {
            release_taking_the_gil(hdr);
        }
    }
}

/// [`release`]'s Rust-owned buffers. Each is looked at in place and moved out (exactly once:
/// the deleter runs once per tensor by the DLPack rules) only when present: reading an empty
/// `Option<AlignedBuffer>` out copied its 40 bytes, and the drop of an empty `Option<Box<_>>`
/// was an out-of-line call, on every CPU export's release.
///
/// # Safety
/// As for [`release`]'s header: live, both fields initialised and not moved out before.
#[cold]
#[inline(never)]
unsafe fn drop_copies<M>(hdr: *mut Header<M>) {
    // SAFETY: caller contract.
    unsafe {
        if (*hdr).copy.is_some() {
            drop(ptr::read(&raw const (*hdr).copy));
        }
        if (*hdr).device_copy.is_some() {
            drop(ptr::read(&raw const (*hdr).device_copy));
        }
    }
}

/// [`release`] on a thread without the GIL: takes it unless the interpreter is finalising (then
/// the owner and the block are leaked on purpose).
///
/// # Safety
/// As for [`release`]; this thread does not hold the GIL.
#[cold]
#[inline(never)]
unsafe fn release_taking_the_gil<M: ManagedKind>(hdr: *mut Header<M>) {
    // SAFETY: as in `release`: the GIL is taken for the calls that need it.
    unsafe {
        if crate::cpython::interp::may_take_gil() {
            let gil = ffi::PyGILState_Ensure();
            drop_owner(hdr);
            give_block::<M>(hdr.cast::<c_void>(), (*hdr).ndim);
            count_exports(-1);
            ffi::PyGILState_Release(gil);
        }
    }
}

/// Drops what a block kept of its owner, before the block is given back: the borrow when there
/// is one (which drops the strong reference with it), else the reference. (Read from the block
/// here, after the Rust-owned buffers went, so that nothing of it is held across a call.)
///
/// # Safety
/// Attached to the interpreter; `hdr` is a live block `build_managed` filled whose owner was not
/// dropped yet. The block is still the caller's afterwards (only the owner's fields are spent).
#[inline]
unsafe fn drop_owner<M>(hdr: *mut Header<M>) {
    // SAFETY: caller contract: with `unborrow` set, `borrow` holds the borrow it ends; else
    // `owner` is NULL or a strong reference the block holds. Dropping either may run the
    // object's deallocation (Python code), which cannot reach this block: nothing else refers to
    // it, and it is given back only after this returns.
    unsafe {
        match (*hdr).unborrow {
            Some(unborrow) => unborrow((*hdr).borrow),
            None => {
                let owner = (*hdr).owner;
                if !owner.is_null() {
                    ffi::Py_DECREF(owner);
                }
            }
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
