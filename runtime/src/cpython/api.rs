//! Interpreter primitives in both build modes: the full C API (struct fields, CPython's inline
//! macros, private symbols) and the limited API of an abi3 build (`pyo3/abi3-py311`: exported
//! functions, `PyType_GetSlot`, and symbols whose name changed between versions resolved once at
//! run time). Every caller outside `cpython/` reads a tuple, a type's slots or a vectorcall
//! argument count through here, never through a struct field (`runtime/tests/layering.rs`).
//!
//! The full-API versions compile to the field read or macro they replace; the limited ones are
//! a function call each, which is what an abi3 build trades for one wheel on every version.

use std::ffi::{CStr, c_int, c_void};
#[cfg(Py_LIMITED_API)]
use std::sync::OnceLock;

use pyo3::ffi;

/// `PY_VECTORCALL_ARGUMENTS_OFFSET`: the flag a vectorcall caller may set in `nargsf` (the top
/// bit; part of the stable ABI from 3.12, the same value on every version).
pub(crate) const VECTORCALL_ARGUMENTS_OFFSET: usize = 1 << (usize::BITS - 1);

/// `PyVectorcall_NARGS`: the argument count in a vectorcall's `nargsf` (an inline function in
/// every version's headers, so one definition serves both build modes).
#[inline(always)]
pub(crate) fn vectorcall_nargs(nargsf: usize) -> ffi::Py_ssize_t {
    (nargsf & !VECTORCALL_ARGUMENTS_OFFSET) as ffi::Py_ssize_t
}

/// `PyTuple_GET_SIZE` (limited API: `PyTuple_Size`).
///
/// # Safety
/// `t` is a live tuple (or tuple subclass instance); the GIL is held.
#[inline(always)]
pub(crate) unsafe fn tuple_size(t: *mut ffi::PyObject) -> ffi::Py_ssize_t {
    // SAFETY: caller contract.
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            ffi::PyTuple_GET_SIZE(t)
        }
        #[cfg(Py_LIMITED_API)]
        {
            ffi::PyTuple_Size(t)
        }
    }
}

/// `PyTuple_GET_ITEM`: a borrowed item (limited API: `PyTuple_GetItem`).
///
/// # Safety
/// `t` is a live tuple; `0 <= i < tuple_size(t)`; the GIL is held.
#[inline(always)]
pub(crate) unsafe fn tuple_item(t: *mut ffi::PyObject, i: ffi::Py_ssize_t) -> *mut ffi::PyObject {
    // SAFETY: caller contract (the index is in range, so the limited call cannot fail).
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            ffi::PyTuple_GET_ITEM(t, i)
        }
        #[cfg(Py_LIMITED_API)]
        {
            ffi::PyTuple_GetItem(t, i)
        }
    }
}

#[cfg(all(Py_LIMITED_API, not(Py_3_12)))]
unsafe extern "C" {
    /// Exported as a function by every CPython from 3.9 (part of the limited API from 3.12), so
    /// an abi3 wheel built for 3.11 links it on every version it supports.
    #[link_name = "PyObject_Vectorcall"]
    fn PyObject_Vectorcall_311(
        callable: *mut ffi::PyObject,
        args: *const *mut ffi::PyObject,
        nargsf: usize,
        kwnames: *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
}

/// `PyObject_Vectorcall`: a new reference, or NULL with an exception set.
///
/// # Safety
/// The GIL is held; `callable` is live; `args` holds `nargs + len(kwnames)` live objects;
/// `kwnames` is NULL or a tuple of str.
#[inline(always)]
pub(crate) unsafe fn vectorcall(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: caller contract.
    unsafe {
        #[cfg(any(not(Py_LIMITED_API), Py_3_12))]
        {
            ffi::PyObject_Vectorcall(callable, args, nargsf, kwnames)
        }
        #[cfg(all(Py_LIMITED_API, not(Py_3_12)))]
        {
            PyObject_Vectorcall_311(callable, args, nargsf, kwnames)
        }
    }
}

/// A type slot read through `PyType_GetSlot` (which the limited API allows on static types from
/// 3.10, and on heap types always).
///
/// # Safety
/// `tp` is a live type object; the GIL is held.
#[cfg(Py_LIMITED_API)]
#[inline]
unsafe fn slot(tp: *mut ffi::PyTypeObject, which: c_int) -> *mut c_void {
    // SAFETY: caller contract; an unknown slot answers NULL with SystemError, never for these.
    unsafe { ffi::PyType_GetSlot(tp, which) }
}

/// A type's `tp_alloc`, `PyType_GenericAlloc` when it has none.
///
/// # Safety
/// `tp` is a live, ready type object; the GIL is held.
#[inline(always)]
pub(crate) unsafe fn type_alloc(tp: *mut ffi::PyTypeObject) -> ffi::allocfunc {
    // SAFETY: caller contract; the slot holds an `allocfunc` (or NULL).
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        let f = (*tp).tp_alloc;
        #[cfg(Py_LIMITED_API)]
        let f =
            std::mem::transmute::<*mut c_void, Option<ffi::allocfunc>>(slot(tp, ffi::Py_tp_alloc));
        f.unwrap_or(ffi::PyType_GenericAlloc)
    }
}

/// A type's `tp_free` (`None` when it has none).
///
/// # Safety
/// `tp` is a live, ready type object; the GIL is held.
#[inline(always)]
pub(crate) unsafe fn type_free(tp: *mut ffi::PyTypeObject) -> Option<ffi::freefunc> {
    // SAFETY: caller contract; the slot holds a `freefunc` (or NULL).
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            (*tp).tp_free
        }
        #[cfg(Py_LIMITED_API)]
        {
            std::mem::transmute::<*mut c_void, Option<ffi::freefunc>>(slot(tp, ffi::Py_tp_free))
        }
    }
}

/// A type's `tp_clear` (`None` when it has none).
///
/// # Safety
/// `tp` is a live, ready type object; the GIL is held.
#[inline]
pub(crate) unsafe fn type_clear(tp: *mut ffi::PyTypeObject) -> Option<ffi::inquiry> {
    // SAFETY: caller contract; the slot holds an `inquiry` (or NULL).
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            (*tp).tp_clear
        }
        #[cfg(Py_LIMITED_API)]
        {
            std::mem::transmute::<*mut c_void, Option<ffi::inquiry>>(slot(tp, ffi::Py_tp_clear))
        }
    }
}

/// A type's `tp_base` (NULL for `object`).
///
/// # Safety
/// `tp` is a live, ready type object; the GIL is held.
#[inline]
pub(crate) unsafe fn type_base(tp: *mut ffi::PyTypeObject) -> *mut ffi::PyTypeObject {
    // SAFETY: caller contract.
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            (*tp).tp_base
        }
        #[cfg(Py_LIMITED_API)]
        {
            slot(tp, ffi::Py_tp_base).cast()
        }
    }
}

/// A type's instance size (`tp_basicsize`; limited API: its `__basicsize__`), `None` if it
/// cannot be read.
///
/// # Safety
/// `tp` is a live, ready type object; the GIL is held.
pub(crate) unsafe fn type_basicsize(
    py: pyo3::Python<'_>,
    tp: *mut ffi::PyTypeObject,
) -> Option<usize> {
    #[cfg(not(Py_LIMITED_API))]
    {
        let _ = py;
        // SAFETY: caller contract.
        usize::try_from(unsafe { (*tp).tp_basicsize }).ok()
    }
    #[cfg(Py_LIMITED_API)]
    {
        use pyo3::prelude::*;
        // SAFETY: caller contract: a live type object, borrowed for the read.
        let ty = unsafe { pyo3::Bound::<PyAny>::from_borrowed_ptr(py, tp.cast()) };
        ty.getattr("__basicsize__").ok()?.extract().ok()
    }
}

/// Whether a type's fully qualified name (`tp_name` of a static type: `"numpy.ndarray"`) is
/// `name`. Full API: a `strcmp` of `tp_name` that stops at the first differing byte; limited
/// API: `__module__` + `.` + `__qualname__` (cold callers only).
///
/// # Safety
/// `tp` is a live type object; the GIL is held.
#[inline]
pub(crate) unsafe fn type_name_is(
    py: pyo3::Python<'_>,
    tp: *mut ffi::PyTypeObject,
    name: &CStr,
) -> bool {
    #[cfg(not(Py_LIMITED_API))]
    {
        let _ = py;
        // SAFETY: caller contract: `tp_name` is a NUL-terminated string.
        unsafe { libc::strcmp((*tp).tp_name, name.as_ptr()) == 0 }
    }
    #[cfg(Py_LIMITED_API)]
    {
        use pyo3::prelude::*;
        use pyo3::types::PyType;
        // SAFETY: caller contract: a live type object, borrowed for the read.
        let ty = unsafe { pyo3::Bound::<PyAny>::from_borrowed_ptr(py, tp.cast()) };
        let Ok(ty) = ty.cast_into::<PyType>() else {
            return false;
        };
        let Ok(Ok(want)) = name.to_str().map(Ok::<_, ()>) else {
            return false;
        };
        let got = match (ty.module(), ty.qualname()) {
            (Ok(m), Ok(q)) => format!("{}.{}", m, q),
            _ => return false,
        };
        got == want
    }
}

/// The valid method-cache version tag of a type, or 0 when it has none (or the build cannot
/// read it). A cache keyed by `(type, tag)` stays correct while the tag matches: CPython resets
/// the tag when the type or a base is modified and never hands out a tag twice.
///
/// * 3.11, 3.12: the tag counts only while `Py_TPFLAGS_VALID_VERSION_TAG` is set;
/// * 3.13 on: that flag is unused (never set); a nonzero tag is valid, and `PyType_Modified`
///   zeroes it;
/// * abi3: the field is not part of the limited API, so no tag (caches stay empty).
///
/// # Safety
/// `tp` is a live type object; the GIL is held.
#[cfg_attr(Py_GIL_DISABLED, allow(dead_code))]
#[inline(always)]
pub(crate) unsafe fn version_tag(tp: *mut ffi::PyTypeObject) -> u32 {
    #[cfg(Py_LIMITED_API)]
    {
        let _ = tp;
        0
    }
    // SAFETY: caller contract; plain field reads.
    #[cfg(all(not(Py_LIMITED_API), not(Py_3_13)))]
    unsafe {
        if ffi::PyType_HasFeature(tp, ffi::Py_TPFLAGS_VALID_VERSION_TAG) != 0 {
            (*tp).tp_version_tag
        } else {
            0
        }
    }
    // SAFETY: caller contract; a plain field read.
    #[cfg(all(not(Py_LIMITED_API), Py_3_13))]
    unsafe {
        (*tp).tp_version_tag
    }
}

#[cfg(not(Py_LIMITED_API))]
unsafe extern "C" {
    /// CPython's method-cache lookup on a type's MRO: a borrowed reference or NULL, never
    /// raises (not in the limited API; exported by every version).
    fn _PyType_Lookup(ty: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

/// An attribute found on a type's MRO without calling descriptors and without raising: a new
/// reference, or NULL when absent (never an exception left set).
///
/// Full API: `_PyType_Lookup` (CPython's method cache; assigns the type a version tag when it
/// can, so a caller may key a cache by [`version_tag`] read afterwards): the object in the dict
/// of the type or a base, kept alive by that dict while the type's tag is unchanged. Limited
/// API: `getattr(type, name)` without the AttributeError ([`getattr_optional_raw`]), which also
/// binds a descriptor's `__get__(None, type)`: the dict's own object for functions, method
/// descriptors, properties, capsules and ints, but a new object for a `classmethod` (a bound
/// method) or any descriptor whose `__get__` makes one, alive only while the returned reference
/// is. So under the limited API no pointer to the result may be kept past that reference (a
/// cache keeps what it derived from it, or only that it was found: `typecache`).
///
/// # Safety
/// `tp` is a live type object; `name` a live str; the GIL is held.
#[inline]
pub(crate) unsafe fn type_lookup(
    tp: *mut ffi::PyTypeObject,
    name: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: caller contract.
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        {
            let d = _PyType_Lookup(tp, name);
            if !d.is_null() {
                ffi::Py_INCREF(d);
            }
            d
        }
        #[cfg(Py_LIMITED_API)]
        {
            let mut out = std::ptr::null_mut();
            if getattr_optional_raw(tp.cast(), name, &mut out) < 0 {
                ffi::PyErr_Clear();
                return std::ptr::null_mut();
            }
            out
        }
    }
}

/// How [`getattr_optional_raw`] reaches the interpreter: `"linked"` (full API), the name of
/// the symbol resolved at run time (abi3), or `"PyObject_GetAttr"` (abi3, neither exported).
pub(crate) fn getattr_optional_source() -> &'static str {
    #[cfg(not(Py_LIMITED_API))]
    {
        "linked"
    }
    #[cfg(Py_LIMITED_API)]
    {
        // SAFETY: a lookup of symbols by name, with the signature they have.
        unsafe {
            if interpreter_symbol::<GetOptionalAttr>(&[c"PyObject_GetOptionalAttr"]).is_some() {
                "PyObject_GetOptionalAttr"
            } else if interpreter_symbol::<GetOptionalAttr>(&[c"_PyObject_LookupAttr"]).is_some() {
                "_PyObject_LookupAttr"
            } else {
                "PyObject_GetAttr"
            }
        }
    }
}

#[cfg(Py_LIMITED_API)]
type GetOptionalAttr =
    unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, *mut *mut ffi::PyObject) -> c_int;

/// A symbol of the running interpreter by the first of `names` it exports (`dlsym` on the
/// loaded objects; one build then works with a name that changed between versions).
///
/// # Safety
/// Every name, if found, is a function of type `F` (a function pointer type).
pub(crate) unsafe fn interpreter_symbol<F: Copy>(names: &[&CStr]) -> Option<F> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    names.iter().find_map(|name| {
        // SAFETY: `dlsym` with the default handle only searches the loaded objects' symbol
        // tables; caller contract for the type.
        unsafe {
            #[cfg(unix)]
            let p = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
            // Not reached: other targets are refused at the crate root (`compile_error!`), and
            // this keeps that refusal the only error they see.
            #[cfg(not(unix))]
            let p = {
                let _ = name;
                std::ptr::null_mut::<c_void>()
            };
            (!p.is_null()).then(|| std::mem::transmute_copy::<*mut c_void, F>(&p))
        }
    })
}

/// `getattr(o, name)` reporting a missing attribute without raising AttributeError: 1 and a new
/// reference in `*out`, 0 and NULL when absent, -1 with an error set.
///
/// `PyObject_GetOptionalAttr` from 3.13, `_PyObject_LookupAttr` (the same function) in 3.11 and
/// 3.12. The full-API build links the right name for the version it targets; an abi3 build finds
/// whichever the running interpreter exports, and falls back to `PyObject_GetAttr` with the
/// AttributeError cleared.
///
/// # Safety
/// The GIL is held; `o` and `name` are live; `out` is writable.
#[inline]
pub(crate) unsafe fn getattr_optional_raw(
    o: *mut ffi::PyObject,
    name: *mut ffi::PyObject,
    out: *mut *mut ffi::PyObject,
) -> c_int {
    #[cfg(not(Py_LIMITED_API))]
    {
        // SAFETY: caller contract.
        unsafe { super::_PyObject_LookupAttr(o, name, out) }
    }
    #[cfg(Py_LIMITED_API)]
    {
        static FN: OnceLock<Option<GetOptionalAttr>> = OnceLock::new();
        // SAFETY: both names are `int (PyObject *, PyObject *, PyObject **)`.
        let f = *FN.get_or_init(|| unsafe {
            interpreter_symbol::<GetOptionalAttr>(&[
                c"PyObject_GetOptionalAttr",
                c"_PyObject_LookupAttr",
            ])
        });
        // SAFETY: caller contract.
        unsafe {
            match f {
                Some(f) => f(o, name, out),
                None => ffi::compat::PyObject_GetOptionalAttr(o, name, out),
            }
        }
    }
}

#[cfg(Py_LIMITED_API)]
type ThreadStateGet = unsafe extern "C" fn() -> *mut ffi::PyThreadState;

/// The thread state running on this thread, NULL when none (never a fatal error):
/// `PyThreadState_GetUnchecked` (3.13) / `_PyThreadState_UncheckedGet` (3.11, 3.12). An abi3
/// build resolves the name at run time; `None` if the interpreter exports neither.
///
/// # Safety
/// The interpreter is initialised.
#[inline]
pub(crate) unsafe fn current_thread_state() -> Option<*mut ffi::PyThreadState> {
    #[cfg(not(Py_LIMITED_API))]
    {
        // SAFETY: caller contract.
        Some(unsafe { ffi::compat::PyThreadState_GetUnchecked() })
    }
    #[cfg(Py_LIMITED_API)]
    {
        static FN: OnceLock<Option<ThreadStateGet>> = OnceLock::new();
        // SAFETY: both names are `PyThreadState *(void)`.
        let f = *FN.get_or_init(|| unsafe {
            interpreter_symbol::<ThreadStateGet>(&[
                c"PyThreadState_GetUnchecked",
                c"_PyThreadState_UncheckedGet",
            ])
        });
        // SAFETY: caller contract; a plain query.
        f.map(|f| unsafe { f() })
    }
}
