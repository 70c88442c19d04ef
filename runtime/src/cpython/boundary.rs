//! The C boundary: running a C entry point's body with errors restored and panics stopped,
//! and installing leaked `PyMethodDef`s into type dicts.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::error::DlpackError;
use crate::spec::errors::FailureKind;

/// Whether this thread holds the GIL: the thread state running now is this thread's own
/// (`PyGILState` TSS) one. Unlike `PyGILState_Check`, it never answers yes for a thread that
/// does not hold the GIL (that function does, for every thread, once a subinterpreter exists).
/// A thread running on a thread state of its own making answers no, and callers then take the
/// `PyGILState_Ensure` path they would take anyway.
///
/// # Safety
/// The interpreter is initialised (`Py_IsInitialized`).
#[inline]
pub(crate) unsafe fn this_thread_holds_gil() -> bool {
    // SAFETY: caller contract; both calls only read the runtime's thread-state bookkeeping.
    unsafe {
        match super::api::current_thread_state() {
            Some(current) => !current.is_null() && current == ffi::PyGILState_GetThisThreadState(),
            // An abi3 build on an interpreter exporting neither name: "no", and the caller takes
            // the `PyGILState_Ensure` path (correct on a thread that holds the GIL too).
            None => false,
        }
    }
}

/// The body of a C entry point CPython (or a C consumer) calls with the GIL held: runs `f`; a
/// `PyErr` is restored and a panic becomes a `SystemError` ("panic in {what}"), and `failed` is
/// returned then. Panics never cross the C boundary.
///
/// `what` gives the entry point's name; it is called and formatted only when a panic is caught.
/// A closure that captures nothing (`|| NAME`) costs nothing on the call, where a `&str` passed
/// as a value is stored on the stack on every call for the unwinding path to read.
///
/// # Safety
/// The calling thread holds the GIL.
#[inline]
pub(crate) unsafe fn at_c_boundary<R, D: std::fmt::Display>(
    what: impl FnOnce() -> D,
    failed: R,
    f: impl FnOnce(Python<'_>) -> PyResult<R>,
) -> R {
    // SAFETY: caller contract (GIL held).
    let py = unsafe { Python::assume_attached() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            restore_attached(e);
            failed
        }
        Err(_) => {
            restore_attached(PyErr::from(DlpackError::new(
                FailureKind::InternalError,
                format!("panic in {}", what()),
            )));
            failed
        }
    }
}

/// Restores `e` as the current exception inside `Python::attach` (cold: error paths only).
///
/// The entry points run their bodies on the caller's GIL without PyO3's attach count (which
/// costs thread-local accesses on every call). A `Py<…>` dropped there, as an error's parts
/// are when it is restored, waits in PyO3's reference pool until PyO3 next attaches; an error
/// path taken in a loop with no other PyO3 call in between would grow that pool without bound.
/// Attached, those drops are immediate and the pool is emptied. (`attach` on a thread that holds
/// the GIL only counts; it takes nothing.)
#[cold]
#[inline(never)]
pub(crate) fn restore_attached(e: PyErr) {
    Python::attach(|py| e.restore(py));
}

/// Every `PyMethodDef` this module leaked: process-lifetime by design (CPython keeps pointers to
/// them in the functions and descriptors made from them). Listed so that they stay reachable
/// after a descriptor that used one is replaced (`export::method` rebinds its class attributes):
/// one per installed function or method, never per call.
static LEAKED_DEFS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// A leaked `PyMethodDef` named `name` with docstring `doc`, listed in [`LEAKED_DEFS`].
fn leak_def(
    name: &str,
    doc: String,
    meth: ffi::PyMethodDefPointer,
    flags: std::ffi::c_int,
) -> PyResult<&'static mut ffi::PyMethodDef> {
    let leak = |s: String| std::ffi::CString::new(s).map(|c| &*Box::leak(c.into_boxed_c_str()));
    let name = leak(name.to_string())?;
    let doc = leak(doc)?;
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: meth,
        ml_flags: flags,
        ml_doc: doc.as_ptr(),
    }));
    LEAKED_DEFS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(std::ptr::from_mut(def) as usize);
    Ok(def)
}

/// A leaked `METH_FASTCALL | METH_KEYWORDS` `PyMethodDef` named `name`, whose docstring is
/// `doc` (starting with the text signature). Callers create one per installed function.
pub(crate) fn leaked_fastcall_def(
    name: &str,
    doc: String,
    meth: ffi::PyCFunctionFastWithKeywords,
) -> PyResult<&'static mut ffi::PyMethodDef> {
    leak_def(
        name,
        doc,
        ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: meth,
        },
        ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    )
}

/// A leaked `METH_NOARGS` `PyMethodDef` named `name` with docstring `doc`.
pub(crate) fn leaked_noargs_def(
    name: &str,
    doc: String,
    meth: ffi::PyCFunction,
) -> PyResult<&'static mut ffi::PyMethodDef> {
    leak_def(
        name,
        doc,
        ffi::PyMethodDefPointer { PyCFunction: meth },
        ffi::METH_NOARGS,
    )
}

/// Whether `tp`'s own dict maps `key` to a method descriptor bound to `tp` itself.
///
/// # Safety
/// The GIL is held; `tp` is a live, ready type object.
pub(crate) unsafe fn has_own_method_descriptor(
    tp: *mut ffi::PyTypeObject,
    key: &Bound<'_, PyString>,
) -> bool {
    #[cfg(Py_LIMITED_API)]
    {
        // `tp_dict` is not in the limited API: the entry found on the MRO, a method descriptor
        // whose `__objclass__` is `tp` itself (which only `tp`'s own dict can hold).
        let py = key.py();
        // SAFETY: caller contract; a new reference or NULL.
        let d = unsafe { super::api::type_lookup(tp, key.as_ptr()) };
        if d.is_null() {
            return false;
        }
        // SAFETY: a new reference, owned here.
        let d = unsafe { Bound::from_owned_ptr(py, d) };
        // SAFETY: a pointer comparison with a static type object.
        if unsafe { ffi::Py_TYPE(d.as_ptr()) } != &raw mut ffi::PyMethodDescr_Type {
            return false;
        }
        d.getattr("__objclass__")
            .is_ok_and(|c| c.as_ptr() == tp.cast::<ffi::PyObject>())
    }
    // SAFETY: caller contract; a borrowed dict entry, only read.
    #[cfg(not(Py_LIMITED_API))]
    unsafe {
        let dict = (*tp).tp_dict;
        if dict.is_null() {
            return false;
        }
        let d = ffi::PyDict_GetItemWithError(dict, key.as_ptr());
        if d.is_null() {
            ffi::PyErr_Clear();
            return false;
        }
        ffi::Py_TYPE(d) == &raw mut ffi::PyMethodDescr_Type
            && (*d.cast::<ffi::PyMethodDescrObject>()).d_common.d_type == tp
    }
}

/// Whether [`set_type_dict_item`] can change `tp`: always with the full API (it writes the
/// dict); in an abi3 build (a `setattr` on the type) not for an immutable type
/// (`Py_TPFLAGS_IMMUTABLETYPE`, PyO3's `#[pyclass(immutable_type)]`).
///
/// # Safety
/// The GIL is held; `tp` is a live type object.
pub(crate) unsafe fn type_dict_writable(tp: *mut ffi::PyTypeObject) -> bool {
    #[cfg(not(Py_LIMITED_API))]
    {
        let _ = tp;
        true
    }
    // SAFETY: caller contract; `PyType_GetFlags` is in the limited API.
    #[cfg(Py_LIMITED_API)]
    unsafe {
        ffi::PyType_GetFlags(tp) & ffi::Py_TPFLAGS_IMMUTABLETYPE == 0
    }
}

/// Sets `key` in the type's own dict and invalidates the method cache (`PyType_Modified`):
/// PyO3 types may be immutable to `setattr`.
///
/// # Safety
/// The GIL is held; `tp` is a live, ready type object.
pub(crate) unsafe fn set_type_dict_item(
    py: Python<'_>,
    tp: *mut ffi::PyTypeObject,
    key: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // `tp_dict` is not in the limited API: `setattr(type, key, value)`, which invalidates the
    // caches itself (refused by an immutable type: the `object`-bound attributes then stay).
    #[cfg(Py_LIMITED_API)]
    {
        // SAFETY: caller contract (a live type object).
        if unsafe { ffi::PyObject_SetAttr(tp.cast(), key.as_ptr(), value.as_ptr()) } != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(())
    }
    // SAFETY: caller contract.
    #[cfg(not(Py_LIMITED_API))]
    unsafe {
        let dict = (*tp).tp_dict;
        if dict.is_null() {
            return Err(
                DlpackError::new(FailureKind::InternalError, "type has no __dict__").into(),
            );
        }
        if ffi::PyDict_SetItem(dict, key.as_ptr(), value.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        ffi::PyType_Modified(tp);
        Ok(())
    }
}

/// CPython's `PyMethodDescrObject` (Include/cpython/descrobject.h, the same from 3.8 to 3.14):
/// `PyDescr_COMMON` (the object header, `d_type`, `d_name`, `d_qualname`), the `PyMethodDef` and
/// the vectorcall entry. A full-API build checks it against the headers at compile time; an
/// abi3 build (no descriptor struct in the limited API) uses it only where
/// [`method_descr_layout_known`] says the running interpreter has it.
#[repr(C)]
struct RawMethodDescr {
    ob_base: ffi::PyObject,
    d_type: *mut ffi::PyTypeObject,
    d_name: *mut ffi::PyObject,
    d_qualname: *mut ffi::PyObject,
    d_method: *mut ffi::PyMethodDef,
    vectorcall: Option<ffi::vectorcallfunc>,
}

#[cfg(not(Py_LIMITED_API))]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<RawMethodDescr>() == size_of::<ffi::PyMethodDescrObject>());
    assert!(offset_of!(RawMethodDescr, d_method) == offset_of!(ffi::PyMethodDescrObject, d_method));
    assert!(
        offset_of!(RawMethodDescr, vectorcall) == offset_of!(ffi::PyMethodDescrObject, vectorcall)
    );
    assert!(offset_of!(RawMethodDescr, d_type) == offset_of!(ffi::PyDescrObject, d_type));
};

/// Whether method descriptors are [`RawMethodDescr`]s: always in a full-API build; in an abi3
/// build never, unless the `abi3-layouts` feature is on and the running version is in
/// `abi3_layouts::TABLE` with `PyMethodDescr_Type.__basicsize__` the struct's size (checked once;
/// a race repeats it).
pub(crate) fn method_descr_layout_known() -> bool {
    #[cfg(not(Py_LIMITED_API))]
    {
        true
    }
    #[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
    {
        false
    }
    #[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
    {
        use std::sync::atomic::{AtomicU8, Ordering};
        static KNOWN: AtomicU8 = AtomicU8::new(0);
        match KNOWN.load(Ordering::Relaxed) {
            1 => return true,
            2 => return false,
            _ => {}
        }
        // SAFETY: the attribute read runs attached (every caller holds the GIL).
        let known = super::abi3_layouts::running().is_some()
            && unsafe {
                super::abi3_layouts::type_usize_attr(
                    &raw mut ffi::PyMethodDescr_Type,
                    c"__basicsize__",
                )
            } == Some(std::mem::size_of::<RawMethodDescr>());
        KNOWN.store(if known { 1 } else { 2 }, Ordering::Relaxed);
        known
    }
}

/// CPython's own vectorcall entry of a `METH_FASTCALL | METH_KEYWORDS` method descriptor
/// (`method_vectorcall_FASTCALL_KEYWORDS`), as read from the first descriptor whose entry
/// [`set_method_vectorcall`] replaced (they all share it).
static METHOD_VECTORCALL: std::sync::OnceLock<ffi::vectorcallfunc> = std::sync::OnceLock::new();

/// Replaces the vectorcall entry of `descr`, a `METH_FASTCALL | METH_KEYWORDS` method
/// descriptor `PyDescr_NewMethod(tp, def)` made, by `f`, after saving CPython's own entry for
/// [`method_vectorcall_fallback`]. The descriptor keeps its type (`PyMethodDescr_Type`), so
/// CPython's specialised method calls, which call the `PyMethodDef`'s function directly, still
/// apply; only calls through the vectorcall protocol reach `f`. Does nothing, and says so
/// (`false`), where [`method_descr_layout_known`] does not hold or `descr` is not a method
/// descriptor of `tp` and `def` with an entry.
///
/// # Safety
/// The GIL is held; `descr` is a live object nobody else sees yet.
pub(crate) unsafe fn set_method_vectorcall(
    descr: *mut ffi::PyObject,
    tp: *mut ffi::PyTypeObject,
    def: *mut ffi::PyMethodDef,
    f: ffi::vectorcallfunc,
) -> bool {
    if !method_descr_layout_known() {
        return false;
    }
    // SAFETY: caller contract; the fields are read only once `descr` is known to be a method
    // descriptor of the checked layout, which nobody else sees yet.
    unsafe {
        if ffi::Py_TYPE(descr) != &raw mut ffi::PyMethodDescr_Type {
            return false;
        }
        let d = descr.cast::<RawMethodDescr>();
        if (*d).d_type != tp || (*d).d_method != def {
            return false;
        }
        // A fresh descriptor has CPython's entry; one that has `f` already keeps it (saving `f`
        // as CPython's entry would make the fallback call itself).
        match (*d).vectorcall {
            Some(own) if own as usize == f as usize => true,
            Some(own) => {
                METHOD_VECTORCALL.get_or_init(|| own);
                (*d).vectorcall = Some(f);
                true
            }
            None => false,
        }
    }
}

/// The type a method descriptor is bound to (`__objclass__`, its `d_type`).
///
/// # Safety
/// `descr` is a live method descriptor whose entry [`set_method_vectorcall`] replaced (so its
/// layout is known).
#[inline]
pub(crate) unsafe fn descriptor_type(descr: *mut ffi::PyObject) -> *mut ffi::PyTypeObject {
    // SAFETY: caller contract.
    unsafe { (*descr.cast::<RawMethodDescr>()).d_type }
}

/// Calls CPython's own vectorcall entry of a method descriptor (saved by
/// [`set_method_vectorcall`]): its `self` check, error messages and call, for the calls a
/// replacement entry does not handle itself.
///
/// # Safety
/// As for a vectorcall: the GIL is held, `callable` is a descriptor whose entry
/// [`set_method_vectorcall`] replaced, `args` holds `nargs + len(kwnames)` live objects.
#[cold]
#[inline(never)]
pub(crate) unsafe extern "C" fn method_vectorcall_fallback(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // An entry was replaced, so one was saved first.
    let own = METHOD_VECTORCALL
        .get()
        .expect("set before any entry was replaced");
    // SAFETY: caller contract; `own` is CPython's entry for exactly this kind of descriptor.
    unsafe { own(callable, args, nargsf, kwnames) }
}
