//! Interpreter primitives in both build modes: the full C API (struct fields, CPython's inline
//! macros, private symbols) and the limited API of an abi3 build (`pyo3/abi3-py311`: exported
//! functions, `PyType_GetSlot`, and symbols whose name changed between versions resolved once at
//! run time). Every caller outside `cpython/` reads a tuple, a type's slots or a vectorcall
//! argument count through here, never through a struct field (`runtime/tests/layering.rs`).
//!
//! The full-API versions compile to the field read or macro they replace; the limited ones are
//! a function call each, which is what an abi3 build trades for one wheel on every version.

use std::ffi::{CStr, c_int, c_void};
#[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
use std::sync::OnceLock;

use pyo3::ffi;

/// `PY_VECTORCALL_ARGUMENTS_OFFSET`: the flag a vectorcall caller may set in `nargsf` (the top
/// bit; part of the stable ABI from 3.12, the same value on every version).
pub(crate) const VECTORCALL_ARGUMENTS_OFFSET: usize = 1 << (usize::BITS - 1);

/// `PyVectorcall_NARGS`: the argument count in a vectorcall's `nargsf` (an inline function in
/// every version's headers, so one definition serves both build modes).
#[inline]
pub(crate) fn vectorcall_nargs(nargsf: usize) -> ffi::Py_ssize_t {
    (nargsf & !VECTORCALL_ARGUMENTS_OFFSET) as ffi::Py_ssize_t
}

/// `PyTuple_GET_SIZE` (limited API: `PyTuple_Size`).
///
/// # Safety
/// `t` is a live tuple (or tuple subclass instance); the GIL is held.
#[inline]
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
#[inline]
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

/// `PyObject_Vectorcall`: a new reference, or NULL with an exception set.
///
/// An abi3 build for 3.11 cannot link it (it joined the limited API in 3.12): there it is the
/// same call through `PyObject_Call` with an argument tuple and a keyword dict, or, with the
/// `abi3-layouts` feature, the interpreter's own function found by name.
///
/// # Safety
/// The GIL is held; `callable` is live; `args` holds `nargs + len(kwnames)` live objects;
/// `kwnames` is NULL or a tuple of str.
#[inline]
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
            #[cfg(feature = "abi3-layouts")]
            {
                static FN: OnceLock<Option<ffi::vectorcallfunc>> = OnceLock::new();
                // SAFETY: `PyObject_Vectorcall` has a vectorcall entry's signature.
                let f = *FN.get_or_init(|| {
                    super::abi3_layouts::running()?;
                    interpreter_symbol::<ffi::vectorcallfunc>(&[c"PyObject_Vectorcall"])
                });
                if let Some(f) = f {
                    return f(callable, args, nargsf, kwnames);
                }
            }
            call_through_tuple(callable, args, nargsf, kwnames)
        }
    }
}

/// [`vectorcall`] in the limited API of 3.11: `PyObject_Call(callable, args, kwargs)`.
///
/// # Safety
/// As for [`vectorcall`].
#[cfg(all(Py_LIMITED_API, not(Py_3_12)))]
unsafe fn call_through_tuple(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: caller contract: `args` holds `nargs + len(kwnames)` live objects; every new
    // reference made here is released here (`PyTuple_SetItem` and `PyDict_SetItem` take or copy
    // theirs).
    unsafe {
        let nargs = vectorcall_nargs(nargsf);
        let tuple = ffi::PyTuple_New(nargs);
        if tuple.is_null() {
            return std::ptr::null_mut();
        }
        for i in 0..nargs {
            let a = *args.offset(i);
            ffi::Py_INCREF(a);
            ffi::PyTuple_SetItem(tuple, i, a);
        }
        let mut kwargs = std::ptr::null_mut();
        if !kwnames.is_null() {
            kwargs = ffi::PyDict_New();
            if kwargs.is_null() {
                ffi::Py_DECREF(tuple);
                return std::ptr::null_mut();
            }
            for j in 0..ffi::PyTuple_Size(kwnames) {
                let key = ffi::PyTuple_GetItem(kwnames, j);
                if ffi::PyDict_SetItem(kwargs, key, *args.offset(nargs + j)) != 0 {
                    ffi::Py_DECREF(kwargs);
                    ffi::Py_DECREF(tuple);
                    return std::ptr::null_mut();
                }
            }
        }
        let res = ffi::PyObject_Call(callable, tuple, kwargs);
        ffi::Py_DECREF(tuple);
        if !kwargs.is_null() {
            ffi::Py_DECREF(kwargs);
        }
        res
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
#[inline]
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
#[inline]
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
#[inline]
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
python_dll_extern! {
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

/// A function of the running interpreter by the first of `names` it exports, looked up in the
/// image that defines the interpreter (the object `Py_IsInitialized` lives in: libpython, or
/// the executable when it is linked in; on Windows the interpreter's DLL), not in the first
/// object of the process that happens to export the name (a process may hold two libpythons).
/// `None` when no such image is found or it exports none of the names: every caller then uses
/// the public C API (on Windows that includes an image that is the forwarding `python3.dll`,
/// which exports no private name).
///
/// # Safety
/// Every name, if found, is a function of type `F` (a function pointer type).
#[cfg_attr(all(Py_LIMITED_API, not(feature = "abi3-layouts")), allow(dead_code))]
pub(crate) unsafe fn interpreter_symbol<F: Copy>(names: &[&CStr]) -> Option<F> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let image = interpreter_image()?;
    names.iter().find_map(|name| {
        // SAFETY: `image` comes from `image::containing` (a loaded object, kept loaded).
        let p = unsafe { image::symbol(image, name) };
        // SAFETY: caller contract: a found name is a function of type `F`, a pointer-sized
        // function pointer type.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    })
}

/// The handle of the loaded object that defines the running interpreter's `Py_IsInitialized`,
/// found once (the object stays loaded while the interpreter runs, so the handle is kept).
#[cfg_attr(all(Py_LIMITED_API, not(feature = "abi3-layouts")), allow(dead_code))]
fn interpreter_image() -> Option<*mut c_void> {
    // A handle is an opaque address-sized value, shared between threads as an integer.
    static IMAGE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    IMAGE
        .get_or_init(|| {
            image::containing(ffi::Py_IsInitialized as *const c_void).map(|h| h as usize)
        })
        .map(|h| h as *mut c_void)
}

/// The loader's view of loaded objects: the object containing an address, and a symbol of it by
/// name. Unix: `dladdr` + `dlopen(RTLD_NOLOAD)` + `dlsym`; Windows: `GetModuleHandleExW` +
/// `GetProcAddress` (decision 0019).
#[cfg_attr(all(Py_LIMITED_API, not(feature = "abi3-layouts")), allow(dead_code))]
mod image {
    use std::ffi::{CStr, c_void};

    /// The `dlopen` handle of the object containing `addr` (`RTLD_NOLOAD`: never loads
    /// anything; the executable's handle when the address is in it).
    #[cfg(unix)]
    pub(super) fn containing(addr: *const c_void) -> Option<*mut c_void> {
        // SAFETY: `dladdr` only reads the loader's tables for an address (any address: one in
        // no object gives 0); `info` is a local it fills. `dlopen` with `RTLD_NOLOAD` returns a
        // handle to an object already loaded (or NULL), and `dlopen(NULL)` the executable's. The
        // handles are never closed (the objects stay loaded while the interpreter runs).
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if !h.is_null() {
                return Some(h);
            }
            // The executable itself (its loader entry has no name to open it by).
            let h = libc::dlopen(std::ptr::null(), libc::RTLD_LAZY);
            (!h.is_null()).then_some(h)
        }
    }

    /// `name` in the object `handle`, or NULL.
    ///
    /// # Safety
    /// `handle` was returned by [`containing`].
    #[cfg(unix)]
    pub(super) unsafe fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
        // SAFETY: caller contract: `handle` is a loaded object's handle (kept open); `dlsym`
        // reads its symbol table; `name` is NUL-terminated.
        unsafe { libc::dlsym(handle, name.as_ptr()) }
    }

    #[cfg(windows)]
    mod kernel32 {
        use std::ffi::{c_char, c_int, c_void};

        /// `lpModuleName` is an address inside the module, not a name.
        pub(super) const GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS: u32 = 0x4;
        /// The module's reference count is left as it is (nothing to release).
        pub(super) const GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT: u32 = 0x2;

        #[link(name = "kernel32")]
        unsafe extern "system" {
            pub(super) fn GetModuleHandleExW(
                flags: u32,
                module_name: *const u16,
                module: *mut *mut c_void,
            ) -> c_int;
            pub(super) fn GetProcAddress(module: *mut c_void, name: *const c_char) -> *mut c_void;
        }
    }

    /// The module (DLL or executable) containing `addr`, by address, without changing its
    /// reference count (the interpreter's DLL stays loaded while the interpreter runs). `None`
    /// when `addr` is in no module, or in the module of dlbind's own code: then the address was
    /// an import thunk of this extension, not the interpreter's function, and the extension
    /// exports none of the names looked up.
    #[cfg(windows)]
    pub(super) fn containing(addr: *const c_void) -> Option<*mut c_void> {
        use kernel32::*;
        let flags =
            GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT;
        let module_of = |a: *const c_void| {
            let mut m = std::ptr::null_mut();
            // SAFETY: with FROM_ADDRESS the "name" is only compared against the loaded modules'
            // address ranges (any address is accepted; one in no module fails); `m` is a local
            // the call writes. UNCHANGED_REFCOUNT: nothing to release.
            let ok = unsafe { GetModuleHandleExW(flags, a.cast::<u16>(), &mut m) };
            (ok != 0 && !m.is_null()).then_some(m)
        };
        let image = module_of(addr)?;
        let own =
            module_of(containing as fn(*const c_void) -> Option<*mut c_void> as *const c_void);
        (own != Some(image)).then_some(image)
    }

    /// `name` exported by `module`, or NULL (forwarded exports, such as `python3.dll`'s, are
    /// resolved by the loader).
    ///
    /// # Safety
    /// `module` was returned by [`containing`].
    #[cfg(windows)]
    pub(super) unsafe fn symbol(module: *mut c_void, name: &CStr) -> *mut c_void {
        // SAFETY: caller contract: `module` is a loaded module's handle (it stays loaded while
        // the interpreter runs); `GetProcAddress` reads its export table; `name` is
        // NUL-terminated.
        unsafe { kernel32::GetProcAddress(module, name.as_ptr()) }
    }

    /// Any other target: no lookup by name, so every caller uses the public C API.
    #[cfg(not(any(unix, windows)))]
    pub(super) fn containing(_addr: *const c_void) -> Option<*mut c_void> {
        None
    }

    /// # Safety
    /// None (nothing is read).
    #[cfg(not(any(unix, windows)))]
    pub(super) unsafe fn symbol(_handle: *mut c_void, _name: &CStr) -> *mut c_void {
        std::ptr::null_mut()
    }
}

/// How [`getattr_optional_raw`] reaches the interpreter: `"linked"` (full API), the name of
/// the function found by name at run time (abi3 with `abi3-layouts`), or `"PyObject_GetAttr"`
/// (abi3: the limited API's getattr, the AttributeError cleared).
pub(crate) fn getattr_optional_source() -> &'static str {
    #[cfg(not(Py_LIMITED_API))]
    {
        "linked"
    }
    #[cfg(Py_LIMITED_API)]
    {
        #[cfg(feature = "abi3-layouts")]
        if super::abi3_layouts::running().is_some() {
            // SAFETY: a lookup of symbols by name, with the signature they have.
            unsafe {
                if interpreter_symbol::<GetOptionalAttr>(&[c"PyObject_GetOptionalAttr"]).is_some() {
                    return "PyObject_GetOptionalAttr";
                }
                if interpreter_symbol::<GetOptionalAttr>(&[c"_PyObject_LookupAttr"]).is_some() {
                    return "_PyObject_LookupAttr";
                }
            }
        }
        "PyObject_GetAttr"
    }
}

#[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
type GetOptionalAttr =
    unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, *mut *mut ffi::PyObject) -> c_int;

/// `getattr(o, name)` reporting a missing attribute without raising AttributeError: 1 and a new
/// reference in `*out`, 0 and NULL when absent, -1 with an error set.
///
/// `PyObject_GetOptionalAttr` from 3.13, `_PyObject_LookupAttr` (the same function) in 3.11 and
/// 3.12: the full-API build links the right name for the version it targets. An abi3 build
/// calls `PyObject_GetAttr` and clears the AttributeError (PyO3's compat function); with
/// `abi3-layouts`, on a version in its table, whichever of the two names the interpreter
/// exports.
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
        #[cfg(feature = "abi3-layouts")]
        {
            static FN: OnceLock<Option<GetOptionalAttr>> = OnceLock::new();
            // SAFETY: both names are `int (PyObject *, PyObject *, PyObject **)`.
            let f = *FN.get_or_init(|| unsafe {
                super::abi3_layouts::running()?;
                interpreter_symbol::<GetOptionalAttr>(&[
                    c"PyObject_GetOptionalAttr",
                    c"_PyObject_LookupAttr",
                ])
            });
            if let Some(f) = f {
                // SAFETY: caller contract.
                return unsafe { f(o, name, out) };
            }
        }
        // SAFETY: caller contract.
        unsafe { ffi::compat::PyObject_GetOptionalAttr(o, name, out) }
    }
}

#[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
type ThreadStateGet = unsafe extern "C" fn() -> *mut ffi::PyThreadState;

/// The thread state running on this thread, NULL when none (never a fatal error):
/// `PyThreadState_GetUnchecked` (3.13) / `_PyThreadState_UncheckedGet` (3.11, 3.12). The limited
/// API has neither: an abi3 build answers `None` (callers then take the `PyGILState_Ensure`
/// path), or, with `abi3-layouts` on a version in its table, finds the name at run time.
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
    #[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
    {
        static FN: OnceLock<Option<ThreadStateGet>> = OnceLock::new();
        // SAFETY: both names are `PyThreadState *(void)`.
        let f = *FN.get_or_init(|| unsafe {
            super::abi3_layouts::running()?;
            interpreter_symbol::<ThreadStateGet>(&[
                c"PyThreadState_GetUnchecked",
                c"_PyThreadState_UncheckedGet",
            ])
        });
        // SAFETY: caller contract; a plain query.
        f.map(|f| unsafe { f() })
    }
    #[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type NoArgs = unsafe extern "C" fn() -> c_int;

    /// The lookup by name finds the running interpreter's own function (the address the build
    /// links) and gives `None`, never a wrong pointer, for a name it does not export: what every
    /// caller's fallback to the C API relies on (decision 0019: on Windows the same contract
    /// holds through `GetModuleHandleExW` + `GetProcAddress`; no test runs there).
    #[test]
    #[cfg(unix)]
    fn interpreter_symbol_finds_the_interpreters_own_functions_and_nothing_else() {
        pyo3::Python::initialize();
        pyo3::Python::attach(|_| {
            assert!(
                interpreter_image().is_some(),
                "the image defining Py_IsInitialized"
            );
            // SAFETY: `Py_IsInitialized` is `int (void)`; the missing name is never called.
            let (found, missing) = unsafe {
                (
                    interpreter_symbol::<NoArgs>(&[c"dlbind_no_such_symbol", c"Py_IsInitialized"]),
                    interpreter_symbol::<NoArgs>(&[c"dlbind_no_such_symbol"]),
                )
            };
            assert_eq!(
                found.map(|f| f as *const () as usize),
                Some(ffi::Py_IsInitialized as *const () as usize),
                "the first exported name, at the linked address"
            );
            assert!(missing.is_none());
        });
    }
}
