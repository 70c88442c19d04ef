//! The CPython internals dlbind relies on, in one place: nothing outside this module declares
//! a CPython symbol, reads interpreter state, installs a C entry point or keeps a free list.
//!
//! | module | holds |
//! |---|---|
//! | this file | symbols libpython exports and PyO3 does not bind; [`getattr_optional`] |
//! | `shortcuts` | the report of which of these shortcuts this process takes |
//! | `abi3_layouts` | abi3 with the `abi3-layouts` feature: the versions whose layouts it may use |
//! | `idcache` | the keyword-name and `max_version` tuples of calls seen before, by identity |
//! | `typecache` | values found on a type, keyed by the type and its version tag |
//! | `api` | tuples, type slots, vectorcall counts, version tags, MRO lookups: full API and abi3 |
//! | `interp` | interpreter state: may this thread take the GIL, is the GIL held |
//! | `boundary` | C entry points: errors restored, panics stopped; method-def installation |
//! | `capsule` | capsules made and read without the `PyCapsule_*` calls (layout checked once) |
//! | `names` | interned names and the cached `max_version` tuple |
//! | `ints` | CPython's cached small ints read by identity (layout checked once) |
//! | `gc` | what exports and views report to the garbage collector |
//! | `spare` | one freed manager block per export kind, kept for the next export |
//! | `freelist` | per-type free lists of released instances |

#[cfg(not(Py_LIMITED_API))]
use std::ffi::c_int;
use std::ptr;

#[cfg(not(Py_LIMITED_API))]
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// An `extern "C"` block of functions the interpreter's shared library exports and PyO3 does not
/// bind (full API only). Linked by symbol name on Linux and macOS; on Windows, where a DLL's
/// imports name the DLL, from the interpreter's DLL through `raw-dylib` (as PyO3 links its own,
/// so no import library is needed), the name found by the build script (`dlbind_python_dll`,
/// the same list as `build.rs`'s `PYTHON_DLLS`).
#[cfg(not(Py_LIMITED_API))]
macro_rules! python_dll_extern {
    ($($item:tt)*) => {
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python311"),
            link(name = "python311", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python311_d"),
            link(name = "python311_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python312"),
            link(name = "python312", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python312_d"),
            link(name = "python312_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python313"),
            link(name = "python313", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python313_d"),
            link(name = "python313_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python313t"),
            link(name = "python313t", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python313t_d"),
            link(name = "python313t_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python314"),
            link(name = "python314", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python314_d"),
            link(name = "python314_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python314t"),
            link(name = "python314t", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python314t_d"),
            link(name = "python314t_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python315"),
            link(name = "python315", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python315_d"),
            link(name = "python315_d", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python315t"),
            link(name = "python315t", kind = "raw-dylib")
        )]
        #[cfg_attr(
            all(windows, dlbind_python_dll = "python315t_d"),
            link(name = "python315t_d", kind = "raw-dylib")
        )]
        unsafe extern "C" {
            $($item)*
        }
    };
}

#[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
pub mod abi3_layouts;
pub mod api;
pub mod boundary;
pub mod capsule;
pub mod freelist;
pub mod gc;
pub mod idcache;
pub mod interp;
pub mod ints;
pub mod names;
pub mod shortcuts;
pub mod spare;
pub mod typecache;

#[cfg(not(Py_LIMITED_API))]
python_dll_extern! {
    /// `getattr(o, name)` that reports a missing attribute without raising AttributeError:
    /// 1 and a new reference in `*out`, 0 and NULL when absent, -1 with an error set.
    /// (`PyObject_GetOptionalAttr` since 3.13; exported under this name by 3.8–3.12.)
    #[cfg_attr(Py_3_13, link_name = "PyObject_GetOptionalAttr")]
    pub(crate) fn _PyObject_LookupAttr(
        o: *mut ffi::PyObject,
        name: *mut ffi::PyObject,
        out: *mut *mut ffi::PyObject,
    ) -> c_int;
    /// Whether the interpreter is finalising (`Py_IsFinalizing` since 3.13; exported under
    /// this name by 3.11 and 3.12).
    #[cfg_attr(Py_3_13, link_name = "Py_IsFinalizing")]
    pub(crate) fn _Py_IsFinalizing() -> c_int;
}

/// `getattr(obj, name)`, `None` when the attribute is missing — without creating and catching
/// an AttributeError on the common path (an exception costs ~1 µs; see the bridges' probes).
pub(crate) fn getattr_optional<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut out = ptr::null_mut();
    // SAFETY: GIL held (`Bound`); both objects are live; `out` receives a new reference or NULL.
    match unsafe { api::getattr_optional_raw(obj.as_ptr(), name.as_ptr(), &mut out) } {
        // SAFETY: a new reference on success.
        1 => Ok(Some(unsafe { Bound::from_owned_ptr(obj.py(), out) })),
        0 => Ok(None),
        _ => Err(PyErr::fetch(obj.py())),
    }
}
