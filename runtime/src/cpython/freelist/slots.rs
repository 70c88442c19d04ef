//! The `tp_alloc` / `tp_free` functions [`enable_freelist`](super::enable_freelist) installs in
//! a type's slots.

use std::ffi::c_void;

use pyo3::ffi;

use super::registry::{keep_or_free, list_of};

/// `tp_alloc` of a type with a free list: a released instance of exactly that type when one
/// waits, prepared as `PyType_GenericAlloc` prepares a new one; otherwise `PyType_GenericAlloc`.
pub(super) unsafe extern "C" fn freelist_alloc(
    subtype: *mut ffi::PyTypeObject,
    nitems: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls `tp_alloc` with the GIL held and a live type; `pop` zero-fills the
    // whole body (an empty `keep` range right after the header).
    unsafe {
        if nitems == 0
            && let Some(list) = list_of(subtype)
        {
            let head = std::mem::size_of::<ffi::PyObject>();
            if let Some(obj) = list.pop(head..head) {
                return obj;
            }
        }
        ffi::PyType_GenericAlloc(subtype, nitems)
    }
}

/// `tp_free` of a type with a free list: keeps the memory of a released instance of exactly
/// that type while the list has room; otherwise `PyObject_GC_Del`.
pub(super) unsafe extern "C" fn freelist_free(obj: *mut c_void) {
    if obj.is_null() {
        return;
    }
    // SAFETY: CPython / PyO3 call `tp_free` with the GIL held on an object whose `tp_dealloc`
    // has run (its contents are dropped; it is no longer used by anyone).
    unsafe {
        let o = obj.cast::<ffi::PyObject>();
        // `tp_dealloc` untracks before freeing; an object freed without that is untracked here
        // so the list never holds a tracked object.
        if ffi::PyObject_GC_IsTracked(o) != 0 {
            ffi::PyObject_GC_UnTrack(obj);
        }
        // The memory handed on carries a reference to the type of its own: the caller's
        // `tp_dealloc` gives back the instance's once this returns, as CPython's heap types do.
        ffi::Py_INCREF(ffi::Py_TYPE(o).cast::<ffi::PyObject>());
        keep_or_free(o);
    }
}
