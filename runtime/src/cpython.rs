//! CPython symbols that libpython exports and PyO3 does not bind, declared once for the crate.

use std::ffi::c_int;

use pyo3::ffi;

unsafe extern "C" {
    /// CPython's method-cache lookup on a type's MRO: a borrowed reference or NULL, never
    /// raises.
    pub(crate) fn _PyType_Lookup(
        ty: *mut ffi::PyTypeObject,
        name: *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
    /// `getattr(o, name)` that reports a missing attribute without raising AttributeError:
    /// 1 and a new reference in `*out`, 0 and NULL when absent, -1 with an error set.
    /// (`PyObject_GetOptionalAttr` since 3.13; exported under this name by 3.8–3.12.)
    #[cfg_attr(Py_3_13, link_name = "PyObject_GetOptionalAttr")]
    pub(crate) fn _PyObject_LookupAttr(
        o: *mut ffi::PyObject,
        name: *mut ffi::PyObject,
        out: *mut *mut ffi::PyObject,
    ) -> c_int;
}
