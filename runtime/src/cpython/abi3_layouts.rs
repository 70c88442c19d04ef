//! abi3 builds with the `abi3-layouts` feature only: the one table of CPython versions whose
//! private layouts and symbols such a build may use, and the checks every shortcut reads.
//!
//! By default an abi3 build uses the limited API of its minimum version and nothing else (no
//! struct read or written, no symbol found by name at run time), so the wheel is what
//! `abi3audit` accepts and runs on versions that do not exist yet. With the feature, and only on
//! a running version in [`TABLE`] whose type sizes match what the row says (checked once, at
//! first use), it takes the shortcuts a full-API build takes: capsules written by field
//! (`capsule`), dlbind's vectorcall entry in `__dlpack__`'s method descriptor (`boundary`), and
//! interpreter functions found by name ([`super::api::interpreter_symbol`]: `PyObject_Vectorcall` on 3.11,
//! `PyObject_GetOptionalAttr` / `_PyObject_LookupAttr`, the unchecked thread-state getter, the
//! finalisation query). Anywhere else the default path runs. `stats::shortcuts` says which.

use std::ffi::CStr;

use pyo3::ffi;

/// One CPython version whose layouts the shortcuts know.
pub(crate) struct Known {
    /// `(major << 8) | minor`, as in the top half of `Py_Version` (a C `unsigned long`: 32 bits
    /// on Windows).
    pub(crate) version: std::ffi::c_ulong,
    /// The capsule object carries `traverse_func` and `clear_func` and is GC-allocated (3.13 on).
    pub(crate) capsule_gc: bool,
}

/// Every version the shortcuts may run on. `PyMethodDescrObject` is the same on all of them.
pub(crate) const TABLE: [Known; 4] = [
    Known {
        version: 0x030b,
        capsule_gc: false,
    },
    Known {
        version: 0x030c,
        capsule_gc: false,
    },
    Known {
        version: 0x030d,
        capsule_gc: true,
    },
    Known {
        version: 0x030e,
        capsule_gc: true,
    },
];

/// The running version's row of [`TABLE`], or `None`.
pub(crate) fn running() -> Option<&'static Known> {
    // SAFETY: `Py_Version` is a constant of the running interpreter (stable ABI from 3.11).
    let v = unsafe { ffi::Py_Version } >> 16;
    TABLE.iter().find(|k| k.version == v)
}

/// An integer attribute of a type (`__basicsize__`, `__itemsize__`), or `None` (no error left).
///
/// # Safety
/// The GIL is held; `tp` is a live type object.
pub(crate) unsafe fn type_usize_attr(tp: *mut ffi::PyTypeObject, name: &CStr) -> Option<usize> {
    // SAFETY: caller contract; the new reference is released here.
    unsafe {
        let v = ffi::PyObject_GetAttrString(tp.cast(), name.as_ptr());
        if v.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        let n = ffi::PyLong_AsSsize_t(v);
        ffi::Py_DECREF(v);
        if n < 0 {
            ffi::PyErr_Clear();
            return None;
        }
        Some(n as usize)
    }
}
