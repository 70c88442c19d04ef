//! Capsules made and read without the `PyCapsule_*` calls on the export hot path: CPython's
//! capsule object is `PyObject_HEAD` followed by `pointer`, `name`, `context` and `destructor`
//! (every version from 3.1), and from 3.13 `traverse_func` and `clear_func`, with the type
//! GC-enabled (a capsule is GC-allocated, and tracked only once a traverse function is set).
//! [`new_capsule`] fills those fields directly and [`name_and_context`] reads them, once a check
//! at first use has confirmed that `PyCapsule_Type` has exactly one of those two layouts;
//! otherwise both use the C API. An abi3 build (no struct layout in the limited API) uses the C
//! API; with the `abi3-layouts` feature it takes the direct path on a running version whose
//! layout it knows (`abi3_layouts::TABLE`), with the same check through the type's
//! `__basicsize__` / `__itemsize__` and flags. No name
//! comparison either way: dlbind's capsules carry the static generated name.

use std::ffi::{c_char, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};

use pyo3::ffi;

/// CPython's `PyCapsule` (Objects/capsule.c) as far as 3.12.
#[repr(C)]
struct RawCapsule {
    ob_base: ffi::PyObject,
    pointer: *mut c_void,
    name: *const c_char,
    context: *mut c_void,
    destructor: Option<ffi::PyCapsule_Destructor>,
}

/// CPython's `PyCapsule` from 3.13: the same fields, then the GC hooks (`traverse_func`,
/// `clear_func`), both NULL in a capsule `PyCapsule_New` makes.
#[repr(C)]
struct RawCapsuleGc {
    capsule: RawCapsule,
    traverse_func: *mut c_void,
    clear_func: *mut c_void,
}

/// 0: not checked yet; 1: [`RawCapsule`], no GC (direct access); 2: neither layout (C API);
/// 3: [`RawCapsuleGc`], GC-allocated (direct access). The direct layouts have odd codes.
static LAYOUT: AtomicU8 = AtomicU8::new(0);

/// What [`check_layout`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `RawCapsule`, allocated with `PyObject_New` (3.11, 3.12).
    Plain,
    /// `RawCapsuleGc`, allocated with `PyObject_GC_New`, untracked (3.13 on).
    Gc,
    /// Another layout, or an abi3 build on a version it does not know: the `PyCapsule_*` calls.
    CApi,
}

/// The layout in use (checked at first use).
///
/// # Safety
/// The GIL is held.
#[inline]
unsafe fn layout() -> Layout {
    match LAYOUT.load(Ordering::Relaxed) {
        1 => Layout::Plain,
        2 => Layout::CApi,
        3 => Layout::Gc,
        // SAFETY: caller contract.
        _ => unsafe { check_layout() },
    }
}

/// The layout in use, checked now if it was not yet (for `stats::shortcuts`).
///
/// # Safety
/// The GIL is held.
pub(crate) unsafe fn current_layout() -> Layout {
    // SAFETY: caller contract.
    unsafe { layout() }
}

/// Decides [`LAYOUT`] (once; a race only repeats the same check).
///
/// # Safety
/// The GIL is held.
#[cold]
pub(crate) unsafe fn check_layout() -> Layout {
    #[cfg(not(Py_LIMITED_API))]
    // SAFETY: reading a static type object's fields with the GIL held.
    let found = unsafe {
        let tp = &raw const ffi::PyCapsule_Type;
        let size = (*tp).tp_basicsize as usize;
        let gc = ffi::PyType_GetFlags(tp.cast_mut()) & ffi::Py_TPFLAGS_HAVE_GC != 0;
        if (*tp).tp_itemsize != 0 {
            Layout::CApi
        } else if size == std::mem::size_of::<RawCapsule>() && !gc && cfg!(not(Py_3_13)) {
            Layout::Plain
        } else if size == std::mem::size_of::<RawCapsuleGc>() && gc && cfg!(Py_3_13) {
            Layout::Gc
        } else {
            Layout::CApi
        }
    };
    #[cfg(Py_LIMITED_API)]
    // SAFETY: GIL held (caller contract).
    let found = unsafe { check_layout_limited() };
    let code = match found {
        Layout::Plain => 1,
        Layout::CApi => 2,
        Layout::Gc => 3,
    };
    LAYOUT.store(code, Ordering::Relaxed);
    found
}

/// [`check_layout`] in an abi3 build: the C API, or with `abi3-layouts` the layout the running
/// version is known to have (its row of `abi3_layouts::TABLE`: 3.11 and 3.12 plain, 3.13 and
/// 3.14 GC-allocated), confirmed by the type's size, item size and GC flag.
///
/// # Safety
/// The GIL is held.
#[cfg(Py_LIMITED_API)]
unsafe fn check_layout_limited() -> Layout {
    #[cfg(not(feature = "abi3-layouts"))]
    {
        Layout::CApi
    }
    // SAFETY: the type object is a live static; the attribute reads hold the GIL (caller
    // contract).
    #[cfg(feature = "abi3-layouts")]
    unsafe {
        use super::abi3_layouts::{running, type_usize_attr};
        let Some(known) = running() else {
            return Layout::CApi;
        };
        let tp = &raw mut ffi::PyCapsule_Type;
        let size = type_usize_attr(tp, c"__basicsize__");
        let itemsize = type_usize_attr(tp, c"__itemsize__");
        let gc = ffi::PyType_GetFlags(tp) & ffi::Py_TPFLAGS_HAVE_GC != 0;
        match (itemsize, gc, known.capsule_gc) {
            (Some(0), false, false) if size == Some(std::mem::size_of::<RawCapsule>()) => {
                Layout::Plain
            }
            (Some(0), true, true) if size == Some(std::mem::size_of::<RawCapsuleGc>()) => {
                Layout::Gc
            }
            _ => Layout::CApi,
        }
    }
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
    // SAFETY: caller contract; the direct paths write every field `PyCapsule_New` writes into
    // an object of exactly `PyCapsule_Type`'s size, allocated as `PyCapsule_New` allocates it
    // (checked), the fallback is the C API.
    unsafe {
        match layout() {
            Layout::Plain => {
                let o = ffi::PyObject_New::<ffi::PyObject>(&raw mut ffi::PyCapsule_Type);
                if !o.is_null() {
                    fill(o.cast(), pointer, name, context, destructor);
                }
                o
            }
            Layout::Gc => {
                // GC-allocated and left untracked, as `PyCapsule_New` does (3.13+).
                let o = ffi::PyObject_GC_New::<ffi::PyObject>(&raw mut ffi::PyCapsule_Type);
                if !o.is_null() {
                    let c = o.cast::<RawCapsuleGc>();
                    fill(&raw mut (*c).capsule, pointer, name, context, destructor);
                    (*c).traverse_func = ptr::null_mut();
                    (*c).clear_func = ptr::null_mut();
                }
                o
            }
            _ => {
                let o = ffi::PyCapsule_New(pointer, name, destructor);
                if !o.is_null() && ffi::PyCapsule_SetContext(o, context) != 0 {
                    ffi::Py_DECREF(o);
                    return ptr::null_mut();
                }
                o
            }
        }
    }
}

/// Writes a capsule's four fields.
///
/// # Safety
/// `c` points to a freshly allocated capsule of a checked layout.
#[inline]
unsafe fn fill(
    c: *mut RawCapsule,
    pointer: *mut c_void,
    name: *const c_char,
    context: *mut c_void,
    destructor: Option<ffi::PyCapsule_Destructor>,
) {
    // SAFETY: caller contract.
    unsafe {
        (*c).pointer = pointer;
        (*c).name = name;
        (*c).context = context;
        (*c).destructor = destructor;
    }
}

/// A capsule's `(name, context)`, as `PyCapsule_GetName` / `PyCapsule_GetContext` give them.
///
/// # Safety
/// The GIL is held (or the caller is a capsule destructor); `capsule` is a live, exact capsule.
#[inline]
pub(crate) unsafe fn name_and_context(capsule: *mut ffi::PyObject) -> (*const c_char, *mut c_void) {
    // SAFETY: caller contract; the direct path reads fields of the checked layout (both
    // layouts start with `RawCapsule`, and both have an odd code: one test decides).
    unsafe {
        if LAYOUT.load(Ordering::Relaxed) & 1 != 0 {
            let c = capsule.cast::<RawCapsule>();
            return ((*c).name, (*c).context);
        }
        match layout() {
            Layout::Plain | Layout::Gc => {
                let c = capsule.cast::<RawCapsule>();
                ((*c).name, (*c).context)
            }
            _ => (
                ffi::PyCapsule_GetName(capsule),
                ffi::PyCapsule_GetContext(capsule),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn capsule_layout_is_what_this_interpreter_has() {
        pyo3::Python::initialize();
        pyo3::Python::attach(|py| {
            // SAFETY: attached (GIL held).
            let layout = unsafe { super::check_layout() };
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
            // The layout each version is known to have (CPython 3.11-3.14), in either build mode
            // (an abi3 build checks the running version).
            let v = py.version_info();
            let want = if v >= (3, 15) {
                super::Layout::CApi
            } else if v >= (3, 13) {
                super::Layout::Gc
            } else {
                super::Layout::Plain
            };
            assert_eq!(layout, want, "the capsule layout of this interpreter");
        });
    }
}
