//! Producer entry points: the `__dlpack__` / `__dlpack_device__` bodies the derive calls, and
//! the raw `METH_FASTCALL | METH_KEYWORDS` `__dlpack__` that replaces PyO3's argument parser.

use std::ptr;

use pyo3::Borrowed;
use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::export::{DLPackSource, export_to_capsule};
use crate::spec::protocol;

use super::access::SourceAccess;
use crate::args::{parse_export_request, parse_fastcall_kwargs, type_error};
use crate::cpython::boundary::{at_c_boundary, leaked_fastcall_def, set_type_dict_item};
use crate::cpython::names::names;

/// The body of `__dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)`.
///
/// Works for frozen classes (borrow-free `get()`; the capsule keeps `slf` alive) and non-frozen
/// ones (the capsule keeps a borrow guard alive instead, holding a shared borrow of `slf` until
/// the consumer releases the tensor: see [`SourceAccess::with_owner`]).
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
    if <T::Frozen as SourceAccess<T>>::FROZEN {
        // The frozen path written exactly as before non-frozen classes were supported (the
        // object is its own owner; `with_owner` gives the same), so that this hot path keeps
        // the code it had: the branch is a constant, the other arm is not compiled in.
        <T::Frozen as SourceAccess<T>>::with(slf, |src| export_to_capsule(slf.as_any(), src, &req))?
    } else {
        <T::Frozen as SourceAccess<T>>::with_owner(slf, |owner, src| {
            export_to_capsule(owner, src, &req)
        })?
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
/// Called by CPython through a method descriptor of `T`'s type (so `slf` is a `T` instance),
/// with the GIL held.
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
    // SAFETY: CPython holds the GIL for us and passes `nargs + len(kwnames)` live arguments.
    unsafe {
        at_c_boundary(
            format_args!("{}", protocol::DLPACK_METHOD),
            ptr::null_mut(),
            |py| {
                let nargs = ffi::PyVectorcall_NARGS(nargsf as usize);
                // `x.__dlpack__()` (the legacy call): nothing to parse.
                let parsed = if nargs == 0 && kwnames.is_null() {
                    Ok([None, None, None, None])
                } else {
                    parse_fastcall_kwargs(py, args, nargs, kwnames)
                };
                parsed.and_then(|[s, mv, dd, c]| {
                    // The descriptor may be bound to `object` (see `dlpack_descriptor`): check the type.
                    if ffi::PyObject_TypeCheck(slf, T::type_object_raw(py)) == 0 {
                        return Err(type_error(format!(
                            "descriptor '{}' requires a '{}' object",
                            protocol::DLPACK_METHOD,
                            <T as PyClass>::NAME
                        ))
                        .into());
                    }
                    let slf = Borrowed::from_ptr(py, slf).cast_unchecked::<T>();
                    dlpack_method(
                        &slf,
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
    let def = fast_method_def::<T>()?;
    // SAFETY: `def` lives for the rest of the process; the type object is live and ready.
    unsafe {
        let tp = ty.as_type_ptr();
        let descr = Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(tp, def))?;
        set_type_dict_item(py, tp, n.dlpack.bind(py), &descr)
    }
}

/// A method descriptor for `T.__dlpack__` backed by [`dlpack_fastcall::<T>`], to be placed in
/// the class namespace at class creation, e.g. by the derive:
/// `#[classattr] #[pyo3(name = "__dlpack__")] fn f(py: Python<'_>) -> PyResult<Py<PyAny>> {
/// ::dlbind::python::dlpack_descriptor::<Self>(py) }`. The descriptor is bound to `object`
/// (the class does not exist yet when class attributes are built); the function checks that
/// `self` is a `T`.
pub fn dlpack_descriptor<T>(py: Python<'_>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let def = fast_method_def::<T>()?;
    // SAFETY: `def` is 'static; `PyBaseObject_Type` is a static type object.
    unsafe {
        Ok(Bound::from_owned_ptr_or_err(
            py,
            ffi::PyDescr_NewMethod(&raw mut ffi::PyBaseObject_Type, def),
        )?
        .unbind())
    }
}

/// A leaked `PyMethodDef` for [`dlpack_fastcall::<T>`] (once per call; callers create it once
/// per class).
fn fast_method_def<T>() -> PyResult<&'static mut ffi::PyMethodDef>
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
    leaked_fastcall_def(protocol::DLPACK_METHOD, doc, dlpack_fastcall::<T>)
}
