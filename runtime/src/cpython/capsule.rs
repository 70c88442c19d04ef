//! Capsules made and read without the `PyCapsule_*` calls on the export hot path: CPython's
//! capsule object is `PyObject_HEAD` followed by `pointer`, `name`, `context` and `destructor`
//! (every version from 3.1; 3.14 appends GC hooks). [`new_capsule`] fills those fields
//! directly and [`name_and_context`] reads them, once a check at first use has confirmed that
//! `PyCapsule_Type` has exactly that size and is not a GC type; otherwise both fall back to the
//! C API. No name comparison either way: dlbind's capsules carry the static generated name.

use std::ffi::{c_char, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::ffi;

/// CPython's `PyCapsule` (Objects/capsule.c), as far as 3.13.
#[repr(C)]
struct RawCapsule {
    ob_base: ffi::PyObject,
    pointer: *mut c_void,
    name: *const c_char,
    context: *mut c_void,
    destructor: Option<ffi::PyCapsule_Destructor>,
}

/// 0: not checked yet; 1: the layout matches (direct access); 2: it does not (C API).
static LAYOUT: AtomicU8 = AtomicU8::new(0);

/// Whether `PyCapsule_Type` is exactly [`RawCapsule`] and allocated with `_PyObject_New`.
///
/// # Safety
/// The GIL is held.
#[inline(always)]
unsafe fn direct() -> bool {
    match LAYOUT.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        // SAFETY: caller contract.
        _ => unsafe { check_layout() },
    }
}

/// Decides [`LAYOUT`] (once; a race only repeats the same check).
///
/// # Safety
/// The GIL is held.
#[cold]
unsafe fn check_layout() -> bool {
    // SAFETY: reading a static type object's fields with the GIL held.
    let ok = unsafe {
        let tp = &raw const ffi::PyCapsule_Type;
        (*tp).tp_basicsize as usize == std::mem::size_of::<RawCapsule>()
            && (*tp).tp_itemsize == 0
            && (*tp).tp_flags & ffi::Py_TPFLAGS_HAVE_GC == 0
            && cfg!(not(Py_3_14))
    };
    LAYOUT.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
    ok
}

/// A new capsule holding `pointer` under the 'static `name`, with `context` and `destructor`
/// (a new reference, or NULL with an exception set).
///
/// # Safety
/// The GIL is held; `pointer` is non-null; `name` outlives the capsule.
#[inline(always)]
pub(crate) unsafe fn new_capsule(
    pointer: *mut c_void,
    name: *const c_char,
    context: *mut c_void,
    destructor: Option<ffi::PyCapsule_Destructor>,
) -> *mut ffi::PyObject {
    // SAFETY: caller contract; the direct path writes every field `PyCapsule_New` writes into
    // an object of exactly `PyCapsule_Type`'s size (checked), the fallback is the C API.
    unsafe {
        if direct() {
            let o = ffi::PyObject_New::<ffi::PyObject>(&raw mut ffi::PyCapsule_Type);
            if o.is_null() {
                return o;
            }
            let c = o.cast::<RawCapsule>();
            (*c).pointer = pointer;
            (*c).name = name;
            (*c).context = context;
            (*c).destructor = destructor;
            o
        } else {
            let o = ffi::PyCapsule_New(pointer, name, destructor);
            if !o.is_null() && ffi::PyCapsule_SetContext(o, context) != 0 {
                ffi::Py_DECREF(o);
                return ptr::null_mut();
            }
            o
        }
    }
}

/// A capsule's `(name, context)`, as `PyCapsule_GetName` / `PyCapsule_GetContext` give them.
///
/// # Safety
/// The GIL is held (or the caller is a capsule destructor); `capsule` is a live, exact capsule.
#[inline(always)]
pub(crate) unsafe fn name_and_context(capsule: *mut ffi::PyObject) -> (*const c_char, *mut c_void) {
    // SAFETY: caller contract; the direct path reads fields of the checked layout.
    unsafe {
        if direct() {
            let c = capsule.cast::<RawCapsule>();
            ((*c).name, (*c).context)
        } else {
            (
                ffi::PyCapsule_GetName(capsule),
                ffi::PyCapsule_GetContext(capsule),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn capsule_layout_is_what_this_interpreter_has() {
        pyo3::Python::initialize();
        pyo3::Python::attach(|_py| {
            // SAFETY: attached (GIL held).
            let direct = unsafe { super::check_layout() };
            // SAFETY: as above; a capsule made by either path reads back the same fields.
            unsafe {
                let name = c"dlbind_test_capsule";
                let mut x = 7u8;
                let p = (&raw mut x).cast::<std::ffi::c_void>();
                let o = super::new_capsule(p, name.as_ptr(), p, None);
                assert!(!o.is_null());
                assert_eq!(pyo3::ffi::PyCapsule_GetPointer(o, name.as_ptr()), p);
                assert_eq!(pyo3::ffi::PyCapsule_GetContext(o), p);
                assert_eq!(super::name_and_context(o), (name.as_ptr(), p));
                pyo3::ffi::Py_DECREF(o);
            }
            assert!(direct || cfg!(Py_3_14), "CPython 3.11-3.13 capsules have the known layout");
        });
    }
}
