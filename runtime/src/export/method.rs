//! Producer entry points: the `__dlpack__` / `__dlpack_device__` bodies the derive calls, and
//! the raw `METH_FASTCALL | METH_KEYWORDS` `__dlpack__` that replaces PyO3's argument parser.

use std::ptr;

use pyo3::Borrowed;
use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use super::capsule::{negotiate_and_export, negotiate_and_export_kept, negotiate_and_export_raw};
use crate::export::{DLPackSource, ExportRequest};
use crate::spec::protocol;

use super::access::{SourceAccess, with_held};
use super::borrow::FrozenInstance;
use crate::args::{parse_export_request, parse_fastcall_kwargs, type_error};
use crate::cpython::boundary::{
    at_c_boundary, has_own_method_descriptor, leaked_fastcall_def, leaked_noargs_def,
    set_type_dict_item, type_dict_writable,
};
use crate::cpython::idcache::{
    cached_kwnames, only_max_version, seen_max_version, versioned_defaults, versioned_max_version,
};
use crate::cpython::names::names;

/// The body of `__dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)`.
///
/// Works for frozen classes (borrow-free `get()`; the capsule keeps `slf` alive) and non-frozen
/// ones (the capsule's tensor keeps a shared borrow of `slf` in its manager block until the
/// consumer releases it: see `access::with_held`).
#[inline]
pub fn dlpack_method<T>(
    slf: &Bound<'_, T>,
    stream: Option<&Bound<'_, PyAny>>,
    max_version: Option<&Bound<'_, PyAny>>,
    dl_device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let req = parse_export_request(stream, max_version, dl_device, copy)?;
    export_with(slf, &req)
}

/// `slf` exported as `req` asks (the part of [`dlpack_method`] after argument parsing).
#[inline]
fn export_with<T>(slf: &Bound<'_, T>, req: &ExportRequest) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    if <T::Frozen as SourceAccess<T>>::FROZEN {
        // The frozen path written exactly as before non-frozen classes were supported (the
        // object is its own owner; `with_owner` gives the same), so that this hot path keeps
        // the code it had: the branch is a constant, the other arm is not compiled in.
        // The closure is inlined into each caller, so that a constant request (the legacy and
        // the versioned call's) folds into the negotiation.
        <T::Frozen as SourceAccess<T>>::with(
            slf,
            #[inline(always)]
            |src| negotiate_and_export(slf.as_any(), src, req, None),
        )?
    } else {
        // The borrow goes into the export's manager block (no guard object): see
        // `access::with_held`.
        with_held(slf, |held, src| {
            // SAFETY: attached (`slf`); `held` keeps `src`'s object alive and borrowed.
            unsafe { negotiate_and_export_kept(slf.py(), held, src, req, None) }
        })?
    }
}

/// [`dlpack_fastcall`] with a constant request: `x.__dlpack__()` (`VERSIONED = false`,
/// [`ExportRequest::DEFAULT`]) or `x.__dlpack__(max_version=(1, n))` alone (`true`,
/// [`ExportRequest::VERSIONED`]). [`export_with`] for the C entry points: the capsule as a new
/// reference, or null with the error set. A frozen class exports through
/// [`negotiate_and_export_raw`] (no `PyResult` on the path), and so does a non-frozen one, with a
/// shared borrow of `slf` as the owner, which the tensor's block keeps. The request is a constant
/// parameter, so that each gets its own out-of-line copy of the body (the closure below is a
/// distinct type per request) with the request folded into the negotiation.
///
/// # Safety
/// As for [`dlpack_fastcall`].
#[inline(never)]
unsafe extern "C" fn export_constant<T, const VERSIONED: bool>(
    slf: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let req = if VERSIONED {
        &ExportRequest::VERSIONED
    } else {
        &ExportRequest::DEFAULT
    };
    if <T::Frozen as SourceAccess<T>>::FROZEN {
        // SAFETY: CPython holds the GIL for us; `slf` is a `T` (the descriptor is bound to `T`).
        // A panic is caught here and reported as `at_c_boundary` does.
        unsafe {
            at_c_boundary(
                || protocol::DLPACK_METHOD,
                ptr::null_mut(),
                |py| {
                    // `slf` is never NULL (CPython lends it for the call): borrowed as it is.
                    let this = Bound::ref_from_ptr(py, &slf).cast_unchecked::<T>();
                    <T::Frozen as SourceAccess<T>>::with(
                        this,
                        #[inline(always)]
                        |src| negotiate_and_export_raw(FrozenInstance(this.as_ptr()), src, req),
                    )
                },
            )
        }
    } else {
        // A non-frozen class: the same raw path, with a shared borrow of `slf` as the owner
        // instead of `slf` itself; the borrow moves into the tensor's manager block and ends in
        // its deleter (no guard object, no `PyResult` moved through the export). PyO3's borrow
        // error ("Already borrowed") is restored by `at_c_boundary`.
        // SAFETY: as above.
        unsafe {
            at_c_boundary(
                || protocol::DLPACK_METHOD,
                ptr::null_mut(),
                |py| {
                    let this = Bound::ref_from_ptr(py, &slf).cast_unchecked::<T>();
                    with_held(
                        this,
                        #[inline(always)]
                        |held, src| negotiate_and_export_raw(held, src, req),
                    )
                },
            )
        }
    }
}

/// The body of `__dlpack_device__(self)`: `(device_type, device_id)`.
#[inline]
pub fn dlpack_device_method<T>(slf: &Bound<'_, T>) -> PyResult<(i32, i32)>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    <T::Frozen as SourceAccess<T>>::with(slf, |src| src.dlpack_device().to_tuple())
}

/// A raw `METH_FASTCALL | METH_KEYWORDS` implementation of
/// `__dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)` for `T`
/// (keyword names from the generated `protocol` module). Installed by
/// [`install_fast_dlpack`]; semantics identical to [`dlpack_method`].
///
/// # Safety
/// Called by CPython through a method descriptor bound to `T`'s type (CPython checks that
/// `slf` is a `T` instance), with the GIL held.
pub unsafe extern "C" fn dlpack_fastcall<T>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // `x.__dlpack__()` (the legacy call): nothing to parse, a constant request. Each kind of
    // call has its own out-of-line body, so that none's code shapes another's.
    // `nargsf` is CPython's argument count (with the offset flag).
    if crate::cpython::api::vectorcall_nargs(nargsf as usize) == 0 && kwnames.is_null() {
        // SAFETY: as for this function.
        unsafe { export_constant::<T, false>(slf) }
    } else {
        // SAFETY: as for this function.
        unsafe { export_with_args::<T>(slf, args, nargsf, kwnames) }
    }
}

/// [`dlpack_fastcall`] with arguments. `x.__dlpack__(max_version=(1, n))`, the versioned call
/// consumers make, exports with a constant request, like the legacy call: the tuple the last
/// such call passed is recognised by identity ([`seen_max_version`]), another is checked
/// ([`export_max_version`]); so does numpy's `from_dlpack` call, whose other keywords are `None`
/// ([`versioned_defaults`]); anything else is parsed ([`export_parsed`]).
///
/// # Safety
/// As for [`dlpack_fastcall`].
#[inline(never)]
unsafe extern "C" fn export_with_args<T>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: `nargsf` is CPython's argument count (with the offset flag); with no positional
    // arguments the one keyword value is `args[0]`.
    unsafe {
        if crate::cpython::api::vectorcall_nargs(nargsf as usize) == 0
            && !kwnames.is_null()
            && only_max_version(kwnames)
        {
            return if seen_max_version(*args) {
                export_constant::<T, true>(slf)
            } else {
                export_max_version::<T>(slf, args, nargsf, kwnames)
            };
        }
        // numpy's `from_dlpack`: `dl_device=None, copy=None, max_version=(1, n)` with the
        // name tuple seen last, asking for what the versioned call asks.
        if crate::cpython::api::vectorcall_nargs(nargsf as usize) == 0
            && let Some(slots) = cached_kwnames(kwnames)
            && versioned_defaults(args, slots)
        {
            return export_constant::<T, true>(slf);
        }
        export_parsed::<T>(slf, args, nargsf, kwnames)
    }
}

/// [`export_with_args`] for `max_version=mv` alone, `mv` not the tuple seen last: versioned with
/// a constant request when [`versioned_max_version`] accepts `mv` (and remembers it), else
/// parsed.
///
/// # Safety
/// As for [`dlpack_fastcall`]; `kwnames` is `("max_version",)`, its value `args[0]`.
#[inline(never)]
unsafe extern "C" fn export_max_version<T>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: CPython holds the GIL; `args[0]` is live (caller contract).
    unsafe {
        if versioned_max_version(*args) {
            export_constant::<T, true>(slf)
        } else {
            export_parsed::<T>(slf, args, nargsf, kwnames)
        }
    }
}

/// [`dlpack_fastcall`] with arguments: parsed, then exported.
///
/// # Safety
/// As for [`dlpack_fastcall`].
#[inline(never)]
unsafe extern "C" fn export_parsed<T>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: CPython holds the GIL for us and passes `nargs + len(kwnames)` live arguments;
    // `slf` is a `T` (the descriptor is bound to `T`).
    unsafe {
        at_c_boundary(
            || protocol::DLPACK_METHOD,
            ptr::null_mut(),
            |py| {
                let nargs = crate::cpython::api::vectorcall_nargs(nargsf as usize);
                let this = Borrowed::from_ptr(py, slf).cast_unchecked::<T>();
                parse_fastcall_kwargs(py, args, nargs, kwnames).and_then(|[s, mv, dd, c]| {
                    dlpack_method(
                        &this,
                        s.as_deref(),
                        mv.as_deref(),
                        dd.as_deref(),
                        c.as_deref(),
                    )
                    .map(Py::into_ptr)
                })
            },
        )
    }
}

/// Replaces `T.__dlpack__` (e.g. the one `#[derive(DLPackExport)]` generated) by
/// [`dlpack_fastcall::<T>`]: same semantics, but keyword names are matched by identity with
/// interned names instead of PyO3's general argument parser. Optional; call it once at module
/// init after the class is added. Safe to call more than once.
pub fn install_fast_dlpack<T>(py: Python<'_>) -> PyResult<()>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let ty = T::type_object(py);
    let n = names(py);
    // SAFETY: the type object is live and ready.
    unsafe {
        let tp = ty.as_type_ptr();
        if !type_dict_writable(tp) {
            // An immutable type in an abi3 build: its `__dlpack__` stays the derived one.
            return Ok(());
        }
        let descr = class_dlpack_descriptor::<T>(py, tp)?;
        set_type_dict_item(py, tp, n.dlpack.bind(py), &descr)
    }
}

/// The class attribute `T.__dlpack__` the derive emits: a method descriptor bound to `object`,
/// since the class does not exist yet while PyO3 builds its class attributes (asking for `T`'s
/// type object there would recurse into its creation). Its function,
/// `dlpack_fastcall_unbound::<T>`, checks that `self` is a `T`, replaces `T.__dlpack__` and
/// `T.__dlpack_device__` with descriptors bound to `T` itself (`bind_to_class`) and exports.
/// From then on CPython checks the type and its method-call fast path applies (a descriptor
/// bound to another type than the object's is never specialised).
pub fn dlpack_descriptor<T>(py: Python<'_>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let def = method_def::<T>(dlpack_fastcall_unbound::<T>)?;
    // SAFETY: `def` is 'static; `PyBaseObject_Type` is a static type object.
    unsafe {
        Ok(Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(&raw mut ffi::PyBaseObject_Type, def),
        )?
        .unbind())
    }
}

/// The class attribute `T.__dlpack_device__` the derive emits: like [`dlpack_descriptor`], a
/// `METH_NOARGS` descriptor bound to `object` whose first call binds both methods to `T`.
pub fn dlpack_device_descriptor<T>(py: Python<'_>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let def = device_method_def(dlpack_device_unbound::<T>)?;
    // SAFETY: `def` is 'static; `PyBaseObject_Type` is a static type object.
    unsafe {
        Ok(Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(&raw mut ffi::PyBaseObject_Type, def),
        )?
        .unbind())
    }
}

/// `__dlpack__` through the `object`-bound class attribute: checks the type, binds the
/// methods to `T` and exports.
///
/// # Safety
/// As for [`dlpack_fastcall`], except that `slf` may be any object.
unsafe extern "C" fn dlpack_fastcall_unbound<T>(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: CPython holds the GIL for us; `slf` is a live object.
    if !unsafe { check_and_bind::<T>(slf, protocol::DLPACK_METHOD) } {
        return ptr::null_mut();
    }
    // SAFETY: `slf` is a `T` (checked); same arguments as CPython passed.
    unsafe { dlpack_fastcall::<T>(slf, args, nargsf, kwnames) }
}

/// `__dlpack_device__` bound to `T` (`METH_NOARGS`): `(device_type, device_id)`, the cached
/// tuple for device 0 of a common type.
///
/// A type whose device is fixed ([`DLPackSource::dlpack_fixed_device`], frozen or not) is answered
/// here without touching the object; a frozen class's device 0 of a cached type with nothing but
/// the field read, one table load and an incref (no stack frame: the rest is a tail call);
/// everything else, and every non-frozen class with a device field (its borrow can fail), goes
/// to [`dlpack_device_general`].
///
/// # Safety
/// Called by CPython through a method descriptor bound to `T`'s type, with the GIL held. Only
/// [`bind_to_class`] makes that descriptor, after `names()` returned (which the cached tuples
/// need: [`crate::cpython::names::cached_device_tuple`]); [`dlpack_device_unbound`] calls this
/// after `bind_to_class` too.
unsafe extern "C" fn dlpack_device_noargs<T>(
    slf: *mut ffi::PyObject,
    unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    if let Some(device) = T::dlpack_fixed_device() {
        // The type's device does not depend on the value (a derived type without a device
        // field): answered without reading, or borrowing, the object. A non-frozen class pays
        // no borrow here, and one mutably borrowed right now answers as well (what it answers
        // cannot change).
        // SAFETY: GIL held (CPython calls us with it); `names()` ran before this method could
        // be called (see the function's safety section).
        if let Some(t) = unsafe { crate::cpython::names::cached_device_tuple(device) } {
            return t;
        }
    } else if <T::Frozen as SourceAccess<T>>::FROZEN {
        // SAFETY: CPython holds the GIL for us and checked that `slf` is a `T`.
        let py = unsafe { Python::assume_attached() };
        // SAFETY: as above; `slf` is a live object CPython lends for the call (never NULL, so
        // no null check: `Bound::ref_from_ptr` borrows the pointer as it is).
        let this = unsafe { Bound::ref_from_ptr(py, &slf).cast_unchecked::<T>() };
        // A panic in the type's `dlpack_device` must not cross into CPython: it is caught here
        // and the general path runs it again, inside `at_c_boundary`, which reports it. For a
        // field read the guard compiles to nothing.
        let device = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            <T::Frozen as SourceAccess<T>>::with(this, |src| src.dlpack_device())
        }));
        if let Ok(Ok(device)) = device
            // SAFETY: GIL held (above); `names()` ran before this method could be called (see
            // the function's safety section).
            && let Some(t) = unsafe { crate::cpython::names::cached_device_tuple(device) }
        {
            return t;
        }
    }
    // SAFETY: as for this function.
    unsafe { dlpack_device_general::<T>(slf, unused) }
}

/// [`dlpack_device_noargs`] for everything its fast path does not answer.
///
/// # Safety
/// As for [`dlpack_device_noargs`].
#[inline(never)]
#[cold]
unsafe extern "C" fn dlpack_device_general<T>(
    slf: *mut ffi::PyObject,
    _unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: CPython holds the GIL for us and checked that `slf` is a `T`.
    unsafe {
        at_c_boundary(
            || protocol::DLPACK_DEVICE_METHOD,
            ptr::null_mut(),
            |py| {
                let slf = Borrowed::from_ptr(py, slf).cast_unchecked::<T>();
                let device = <T::Frozen as SourceAccess<T>>::with(&slf, |src| src.dlpack_device())?;
                crate::cpython::names::device_tuple(py, device)
            },
        )
    }
}

/// `__dlpack_device__` through the `object`-bound class attribute: checks the type, binds the
/// methods to `T` and answers.
///
/// # Safety
/// As for [`dlpack_device_noargs`], except that `slf` may be any object.
unsafe extern "C" fn dlpack_device_unbound<T>(
    slf: *mut ffi::PyObject,
    unused: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: CPython holds the GIL for us; `slf` is a live object.
    if !unsafe { check_and_bind::<T>(slf, protocol::DLPACK_DEVICE_METHOD) } {
        return ptr::null_mut();
    }
    // SAFETY: `slf` is a `T` (checked).
    unsafe { dlpack_device_noargs::<T>(slf, unused) }
}

/// The first call through an `object`-bound class attribute (of `method`): checks that `slf` is
/// a `T` and binds both methods to `T` ([`bind_to_class`]). `false` with the exception set
/// when either fails.
///
/// # Safety
/// The GIL is held; `slf` is a live object.
unsafe fn check_and_bind<T>(slf: *mut ffi::PyObject, method: &str) -> bool
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: caller contract.
    unsafe {
        at_c_boundary(
            || method,
            false,
            |py| {
                check_type::<T>(py, slf, method)?;
                bind_to_class::<T>(py)?;
                Ok(true)
            },
        )
    }
}

/// TypeError unless `slf` is a `T` (what CPython says for a descriptor of another type).
///
/// # Safety
/// The GIL is held; `slf` is a live object.
unsafe fn check_type<T: PyClass>(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    method: &str,
) -> PyResult<()> {
    // SAFETY: caller contract.
    if unsafe { ffi::PyObject_TypeCheck(slf, T::type_object_raw(py)) } == 0 {
        return Err(type_error(format!(
            "descriptor '{method}' requires a '{}' object",
            <T as PyClass>::NAME
        ))
        .into());
    }
    Ok(())
}

/// Puts descriptors bound to `T` itself for `__dlpack__` and `__dlpack_device__` in `T`'s dict
/// (once: a stale `object`-bound descriptor someone kept finds them there and does nothing).
fn bind_to_class<T>(py: Python<'_>) -> PyResult<()>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let tp = T::type_object_raw(py);
    let n = names(py);
    // SAFETY: GIL held; `tp` is `T`'s live, ready type object (an instance exists).
    unsafe {
        // An immutable type in an abi3 build cannot be changed: its `object`-bound attributes
        // stay, and each call checks the type itself (what they do before binding).
        if !type_dict_writable(tp) {
            return Ok(());
        }
        if !has_own_method_descriptor(tp, n.dlpack.bind(py)) {
            let d = class_dlpack_descriptor::<T>(py, tp)?;
            set_type_dict_item(py, tp, n.dlpack.bind(py), &d)?;
        }
        if !has_own_method_descriptor(tp, n.dlpack_device.bind(py)) {
            let def = device_method_def(dlpack_device_noargs::<T>)?;
            let d = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(tp, def))?;
            set_type_dict_item(py, tp, n.dlpack_device.bind(py), &d)?;
        }
    }
    Ok(())
}

/// `T.__dlpack__` bound to `T` itself: a method descriptor for [`dlpack_fastcall::<T>`] whose
/// vectorcall entry is [`dlpack_vectorcall::<T>`].
///
/// # Safety
/// The GIL is held; `tp` is `T`'s live, ready type object.
unsafe fn class_dlpack_descriptor<'py, T>(
    py: Python<'py>,
    tp: *mut ffi::PyTypeObject,
) -> PyResult<Bound<'py, PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let def = method_def::<T>(dlpack_fastcall::<T>)?;
    // SAFETY: `def` lives for the rest of the process; `tp` is live (caller contract). The new
    // descriptor is not yet shared, so its vectorcall entry can be set.
    unsafe {
        let def: *mut ffi::PyMethodDef = def;
        let d = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(tp, def))?;
        // Where the descriptor's layout is not known (an abi3 build on a version it does not
        // know) it keeps CPython's entry, which checks `self` and calls `dlpack_fastcall`.
        crate::cpython::boundary::set_method_vectorcall(
            d.as_ptr(),
            tp,
            def,
            dlpack_vectorcall::<T>,
        );
        Ok(d)
    }
}

/// The vectorcall entry of `T.__dlpack__`'s descriptor, in place of CPython's
/// `method_vectorcall_FASTCALL_KEYWORDS`. CPython 3.11 specialises a call of a method
/// descriptor only without keywords (it then calls the `PyMethodDef`'s function,
/// [`dlpack_fastcall`], itself); `t.__dlpack__(max_version=…)` and C callers
/// (`PyObject_VectorcallMethod`, as numpy's `from_dlpack`) come here. When `self` is exactly a
/// `T` this goes straight to [`dlpack_fastcall`]; everything else (no `self`, a subclass, another
/// type) goes to CPython's function, which checks and reports as always. The recursion check
/// CPython's function adds is the one its own specialised call skips as well: the export does
/// not call back into Python code.
///
/// # Safety
/// Called by CPython (or any vectorcall caller) with the GIL held: `callable` is the descriptor
/// [`class_dlpack_descriptor`] made, `args` holds `nargs + len(kwnames)` live objects.
unsafe extern "C" fn dlpack_vectorcall<T>(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: caller contract; `callable` is a method descriptor (its `d_type` is `T`'s type),
    // `args[0]` exists when `nargs >= 1`.
    unsafe {
        let nargs = crate::cpython::api::vectorcall_nargs(nargsf);
        if nargs >= 1 {
            let slf = *args;
            if ffi::Py_TYPE(slf) == crate::cpython::boundary::descriptor_type(callable) {
                // `x.__dlpack__(max_version=mv)` with the `mv` seen last, the versioned call as
                // consumers make it: straight to its constant-request body (what
                // `export_with_args` decides, without its frame).
                // (Identity checks only: any other call, numpy's three keywords among them,
                // pays two compares here and is decided as before.)
                if nargs == 1
                    && crate::cpython::idcache::is_max_version_kwnames(kwnames)
                    && seen_max_version(*args.add(1))
                {
                    return export_constant::<T, true>(slf);
                }
                return dlpack_fastcall::<T>(slf, args.add(1), nargs - 1, kwnames);
            }
        }
        crate::cpython::boundary::method_vectorcall_fallback(callable, args, nargsf, kwnames)
    }
}

/// A leaked `METH_NOARGS` `PyMethodDef` for `__dlpack_device__` backed by `f`.
fn device_method_def(f: ffi::PyCFunction) -> PyResult<&'static mut ffi::PyMethodDef> {
    let doc = format!(
        "{}($self, /)\n--\n\nThe `(device_type, device_id)` of the tensor (dlbind).",
        protocol::DLPACK_DEVICE_METHOD
    );
    leaked_noargs_def(protocol::DLPACK_DEVICE_METHOD, doc, f)
}

/// A leaked `PyMethodDef` for `__dlpack__` backed by `f` (once per call; callers create it once
/// per class).
fn method_def<T>(f: ffi::PyCFunctionFastWithKeywords) -> PyResult<&'static mut ffi::PyMethodDef>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    // Name and signature text from the generated protocol names (leaked once per install).
    let doc = format!(
        "{}($self, /, *, {}=None, {}=None, {}=None, {}=None)\n--\n\nExport as a DLPack capsule (dlbind).",
        protocol::DLPACK_METHOD,
        protocol::KW_STREAM,
        protocol::KW_MAX_VERSION,
        protocol::KW_DL_DEVICE,
        protocol::KW_COPY
    );
    leaked_fastcall_def(protocol::DLPACK_METHOD, doc, f)
}
