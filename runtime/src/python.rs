//! PyO3 glue: the `__dlpack__` / `__dlpack_device__` bodies the derive calls, and
//! `from_dlpack` (the consumer).
//!
//! Hot paths use the raw C API: exact-type checks (`PyLong_CheckExact`, `PyTuple_CheckExact`),
//! no dict, no exception-raising attribute probes (`_PyType_Lookup` on the type), vectorcall with
//! interned keyword names (from the generated `protocol` module) and a cached `max_version`
//! tuple (from the generated version constants).

use std::ffi::c_int;
use std::ptr;

use pyo3::Borrowed;
use pyo3::PyClass;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};

use crate::device::Device;
use crate::error::DlpackError;
use crate::exchange::FromManagedTensor;
use crate::export::request::EXPORT_VERSION;
use crate::export::{DLPackSource, ExportRequest, export_to_capsule};
use crate::failure::FailureKind;
use crate::ffi::DLDeviceType;
use crate::import::ImportedTensor;
use crate::protocol;

// ---------------------------------------------------------------------------------------------
// Borrowing the Rust value behind a pyclass: `get()` for frozen classes (no borrow flag),
// `try_borrow()` otherwise. Selected at compile time through `PyClass::Frozen`.
// ---------------------------------------------------------------------------------------------

/// How to reach `&T` from `&Bound<T>`: implemented for PyO3's `True` (frozen classes, via
/// `Bound::get`) and `False` (via `Bound::try_borrow`). Every `#[pyclass]` satisfies
/// `T::Frozen: SourceAccess<T>`. `#[derive(DLPackExport)]` requires `frozen`; the `False` impl
/// serves hand-written `DLPackSource` impls on non-frozen classes, whose safety contract
/// forbids reallocating the data from `&mut self` while exports exist (the borrow is released
/// once the export is built).
pub trait SourceAccess<T: PyClass> {
    /// Whether the class is frozen (no `&mut self` access once created: what `T` lends stays
    /// as it is while the object is alive).
    const FROZEN: bool;
    /// Runs `f` with a shared reference to the value.
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R>;
}

impl<T: PyClass<Frozen = True> + Sync> SourceAccess<T> for True {
    const FROZEN: bool = true;
    #[inline(always)]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        Ok(f(slf.get()))
    }
}

impl<T: PyClass<Frozen = False>> SourceAccess<T> for False {
    const FROZEN: bool = false;
    #[inline(always)]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        let r = slf.try_borrow()?;
        Ok(f(&r))
    }
}

// ---------------------------------------------------------------------------------------------
// Argument parsing for `__dlpack__`.
// ---------------------------------------------------------------------------------------------

#[inline(always)]
fn given<'a, 'py>(o: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    // SAFETY: pointer comparison with the None singleton.
    o.filter(|o| o.as_ptr() != unsafe { ffi::Py_None() })
}

/// An int that is not a bool, as i64 (`Err(sign)` when it does not fit: +1 / -1).
#[inline(always)]
fn as_int(o: *mut ffi::PyObject) -> Option<Result<i64, c_int>> {
    // SAFETY: `o` is a live object; type checks and `PyLong_AsLongLongAndOverflow` on an int
    // cannot fail except by overflow, which is reported through `overflow`.
    unsafe {
        if ffi::PyLong_CheckExact(o) == 0
            && (ffi::PyLong_Check(o) == 0 || ffi::PyBool_Check(o) != 0)
        {
            return None;
        }
        let mut overflow: c_int = 0;
        let v = ffi::PyLong_AsLongLongAndOverflow(o, &mut overflow);
        if overflow != 0 {
            return Some(Err(overflow));
        }
        if v == -1 && !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        Some(Ok(v))
    }
}

/// A tuple of exactly two ints (bools refused): the raw items, each possibly out of range.
#[inline(always)]
fn int_pair(o: &Bound<'_, PyAny>) -> Option<(Result<i64, c_int>, Result<i64, c_int>)> {
    let p = o.as_ptr();
    // SAFETY: `p` is live; tuple items are borrowed for the duration of the checks.
    unsafe {
        if (ffi::PyTuple_CheckExact(p) == 0 && ffi::PyTuple_Check(p) == 0)
            || ffi::PyTuple_GET_SIZE(p) != 2
        {
            return None;
        }
        Some((
            as_int(ffi::PyTuple_GET_ITEM(p, 0))?,
            as_int(ffi::PyTuple_GET_ITEM(p, 1))?,
        ))
    }
}

/// `(major, minor)` from a tuple of two ints (bools refused); out-of-range values saturate.
#[inline(always)]
fn parse_max_version(o: &Bound<'_, PyAny>) -> Option<(i64, i64)> {
    let p = o.as_ptr();
    // SAFETY: `p` is live; tuple items are borrowed for the duration of the checks.
    unsafe {
        if (ffi::PyTuple_CheckExact(p) == 0 && ffi::PyTuple_Check(p) == 0)
            || ffi::PyTuple_GET_SIZE(p) != 2
        {
            return None;
        }
        let sat =
            |r: Result<i64, c_int>| r.unwrap_or_else(|s| if s > 0 { i64::MAX } else { i64::MIN });
        let major = sat(as_int(ffi::PyTuple_GET_ITEM(p, 0))?);
        let minor = sat(as_int(ffi::PyTuple_GET_ITEM(p, 1))?);
        Some((major, minor))
    }
}

fn type_error(msg: &'static str) -> DlpackError {
    DlpackError::new(FailureKind::BadArgumentType, msg)
}

/// A call-signature error (a positional argument too many or missing, an unknown or repeated
/// keyword, a descriptor bound to the wrong type): the spec's `BadArgumentType`.
#[cold]
fn call_error(msg: String) -> PyErr {
    DlpackError::new(FailureKind::BadArgumentType, msg).into()
}

/// Parses `__dlpack__`'s keyword arguments (types are checked here; values in
/// [`crate::export::plan_export`]).
///
/// * `max_version`: `None` or a tuple of two ints → TypeError otherwise;
/// * `dl_device`: `None` or a tuple of two ints (IntEnum ok) → TypeError otherwise;
///   values outside `i32` → BufferError (unsupported device);
/// * `copy`: `None`, `True` or `False` → TypeError otherwise;
/// * `stream`: `None` or an int (not a bool) → TypeError otherwise; outside `i64` → ValueError.
#[inline]
pub fn parse_export_request(
    stream: Option<&Bound<'_, PyAny>>,
    max_version: Option<&Bound<'_, PyAny>>,
    dl_device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> Result<ExportRequest, DlpackError> {
    let mut req = ExportRequest::DEFAULT;
    if let Some(mv) = given(max_version) {
        req.max_version = Some(
            parse_max_version(mv)
                .ok_or_else(|| type_error("max_version must be None or a tuple of two ints"))?,
        );
    }
    if let Some(c) = given(copy) {
        req.copy = Some(copy_flag(c)?);
    }
    if let Some(d) = given(dl_device) {
        let (t, id) = int_pair(d).ok_or_else(|| {
            type_error("dl_device must be None or a tuple of two ints (device_type, device_id)")
        })?;
        let t = t.ok().and_then(|v| i32::try_from(v).ok());
        let id = id.ok().and_then(|v| i32::try_from(v).ok());
        match (t, id) {
            (Some(t), Some(id)) => req.dl_device = Some(Device::new(DLDeviceType(t), id)),
            _ => {
                return Err(DlpackError::new(
                    FailureKind::UnsupportedDevice,
                    "unsupported device requested: dl_device values out of range",
                ));
            }
        }
    }
    if let Some(s) = given(stream) {
        match as_int(s.as_ptr()) {
            Some(Ok(v)) => req.stream = Some(v),
            Some(Err(_)) => {
                return Err(DlpackError::new(
                    FailureKind::InvalidStream,
                    "stream value out of range",
                ));
            }
            None => return Err(type_error("stream must be None or an int")),
        }
    }
    Ok(req)
}

// ---------------------------------------------------------------------------------------------
// Producer entry points (called by the derive).
// ---------------------------------------------------------------------------------------------

/// The body of `__dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None)`.
///
/// Works for frozen classes (borrow-free `get()`) and non-frozen ones (`try_borrow()`).
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
    <T::Frozen as SourceAccess<T>>::with(slf, |src| export_to_capsule(slf.as_any(), src, &req))?
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

// ---------------------------------------------------------------------------------------------
// Consumer.
// ---------------------------------------------------------------------------------------------

unsafe extern "C" {
    /// CPython's method-cache lookup on a type's MRO: a borrowed reference or NULL, never
    /// raises. (Exported by libpython; PyO3 does not bind it.)
    fn _PyType_Lookup(ty: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
    /// `getattr(o, name)` that reports a missing attribute without raising AttributeError:
    /// 1 and a new reference in `*out`, 0 and NULL when absent, -1 with an error set.
    /// (`PyObject_GetOptionalAttr` since 3.13; exported under this name by 3.8–3.12.)
    #[cfg_attr(Py_3_13, link_name = "PyObject_GetOptionalAttr")]
    fn _PyObject_LookupAttr(
        o: *mut ffi::PyObject,
        name: *mut ffi::PyObject,
        out: *mut *mut ffi::PyObject,
    ) -> c_int;
}

/// `getattr(obj, name)`, `None` when the attribute is missing — without creating and catching
/// an AttributeError on the common path (an exception costs ~1 µs; see the bridges' probes).
pub(crate) fn getattr_optional<'py>(
    obj: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let mut out = ptr::null_mut();
    // SAFETY: GIL held (`Bound`); both objects are live; `out` receives a new reference or NULL.
    match unsafe { _PyObject_LookupAttr(obj.as_ptr(), name.as_ptr(), &mut out) } {
        // SAFETY: a new reference on success.
        1 => Ok(Some(unsafe { Bound::from_owned_ptr(obj.py(), out) })),
        0 => Ok(None),
        _ => Err(PyErr::fetch(obj.py())),
    }
}

struct Names {
    dlpack: Py<PyString>,
    /// `from_dlpack`'s keywords (`device`, `copy`), from the generated protocol names.
    kw_from_device: Py<PyString>,
    kw_from_copy: Py<PyString>,
    kw_stream: Py<PyString>,
    kw_max_version: Py<PyString>,
    kw_dl_device: Py<PyString>,
    kw_copy: Py<PyString>,
    /// `("max_version",)`
    kwnames_fast: Py<PyTuple>,
    /// `(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)`
    version: Py<PyTuple>,
}

static NAMES: PyOnceLock<Names> = PyOnceLock::new();

fn names(py: Python<'_>) -> &Names {
    NAMES.get_or_init(py, || {
        let s = |n: &str| PyString::intern(py, n).unbind();
        let kw_max_version = s(protocol::KW_MAX_VERSION);
        Names {
            dlpack: s(protocol::DLPACK_METHOD),
            kw_from_device: s(protocol::FROM_DLPACK_KW_DEVICE),
            kw_from_copy: s(protocol::FROM_DLPACK_KW_COPY),
            kw_stream: s(protocol::KW_STREAM),
            kw_dl_device: s(protocol::KW_DL_DEVICE),
            kw_copy: s(protocol::KW_COPY),
            kwnames_fast: PyTuple::new(py, [kw_max_version.bind(py)])
                .expect("tuple")
                .unbind(),
            kw_max_version,
            version: PyTuple::new(py, [EXPORT_VERSION.major, EXPORT_VERSION.minor])
                .expect("tuple")
                .unbind(),
        }
    })
}

thread_local! {
    /// Last `(type, tp_version_tag, __dlpack__ descriptor)` seen by this thread. A valid
    /// version tag is unique for the type's current MRO dicts (CPython bumps it on any change
    /// and never reuses one), so while it matches, the descriptor is the one `_PyType_Lookup`
    /// would return and is kept alive by the type's dict.
    static LOOKUP_CACHE: std::cell::Cell<(usize, u32, usize)> = const { std::cell::Cell::new((0, 0, 0)) };
}

/// `type(o).__dlpack__` without raising on a miss (borrowed reference or NULL).
///
/// # Safety
/// GIL held; `o` live; `name` is the interned `"__dlpack__"`.
#[inline]
unsafe fn lookup_dlpack(o: *mut ffi::PyObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: caller contract; reading the type's flags and version tag is plain field access.
    unsafe {
        let tp = ffi::Py_TYPE(o);
        let valid = ffi::PyType_HasFeature(tp, ffi::Py_TPFLAGS_VALID_VERSION_TAG) != 0;
        let tag = (*tp).tp_version_tag;
        if valid && tag != 0 {
            let (ct, ctag, cd) = LOOKUP_CACHE.with(|c| c.get());
            if ct == tp as usize && ctag == tag {
                return cd as *mut ffi::PyObject;
            }
        }
        let d = _PyType_Lookup(tp, name);
        // `_PyType_Lookup` assigns a version tag when it can; cache hits only under a valid one.
        let valid = ffi::PyType_HasFeature(tp, ffi::Py_TPFLAGS_VALID_VERSION_TAG) != 0;
        let tag = (*tp).tp_version_tag;
        if valid && tag != 0 && !d.is_null() {
            LOOKUP_CACHE.with(|c| c.set((tp as usize, tag, d as usize)));
        }
        d
    }
}

/// Calls `descr` (found on `type(obj)`) as a method of `obj` with `vals` for `kwnames`.
///
/// # Safety
/// `descr` is a live object (a strong reference held by the caller); `vals` are live objects;
/// `kwnames` is NULL or a tuple of `vals.len()` strings; the GIL is held.
unsafe fn call_method<'py>(
    obj: &Bound<'py, PyAny>,
    descr: *mut ffi::PyObject,
    vals: &[*mut ffi::PyObject],
    kwnames: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let mut args: [*mut ffi::PyObject; 5] = [ptr::null_mut(); 5];
    args[0] = obj.as_ptr();
    args[1..1 + vals.len()].copy_from_slice(vals);
    // SAFETY: caller contract; `args` holds 1 + vals.len() live objects.
    unsafe {
        let res = if ffi::PyType_HasFeature(ffi::Py_TYPE(descr), ffi::Py_TPFLAGS_METHOD_DESCRIPTOR)
            != 0
        {
            // A plain function / method descriptor: call it unbound with `obj` first (what
            // CPython's own method calls do).
            ffi::PyObject_Vectorcall(descr, args.as_ptr(), 1, kwnames)
        } else {
            // Anything else (staticmethod, callable object, ...): bind through getattr.
            let bound = obj.getattr(names(py).dlpack.bind(py))?;
            ffi::PyObject_Vectorcall(bound.as_ptr(), args.as_ptr().add(1), 0, kwnames)
        };
        Bound::from_owned_ptr_or_err(py, res)
    }
}

/// Imports any DLPack producer (or a raw DLPack capsule) as an [`ImportedTensor`].
///
/// Calls `type(obj).__dlpack__(obj, max_version=(1, 3)[, dl_device=…, stream=…][, copy=…])`
/// (vectorcall, interned names). On `TypeError` — a producer that predates the keywords — it
/// retries `__dlpack__()` when `device` is `None` and `copy` is not `False`. With
/// `copy=Some(true)` the result never aliases the producer: if the producer did not set
/// IS_COPIED (or is legacy-only), dlbind copies into a fresh, writable host buffer.
/// `device`: the result must be on that device (host-accessible memory counts as CPU);
/// otherwise BufferError. For devices with streams, the consumer's stream is passed
/// (`gpu::consumer_stream_for`: the generated default unless a GPU runtime reports a current
/// stream). No `__dlpack__` → AttributeError.
#[inline]
pub fn from_dlpack(
    obj: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    if device.is_none() && copy.is_none() {
        // The common call: nothing to check afterwards (no move through `finish_import`).
        return import_from_producer(obj, None, None);
    }
    if copy == Some(true) && device.is_none_or(|d| d == Device::CPU) {
        // dlbind copies host memory itself (C-contiguous, aligned, parallel kernels), so the
        // producer is first asked for a zero-copy view; only memory the host cannot read is
        // re-requested with copy=True, so that the producer copies it on its own device.
        let view = import_from_producer(obj, device, None)?;
        if view.device().is_host_accessible() {
            return finish_import(view, device, copy);
        }
        drop(view);
    }
    let tensor = import_from_producer(obj, device, copy)?;
    finish_import(tensor, device, copy)
}

/// Calls the producer's `__dlpack__` (or takes a raw capsule) and consumes the capsule.
#[inline]
fn import_from_producer(
    obj: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    // Exactly `numpy.ndarray`: read numpy's array header (what its `__dlpack__` would export,
    // without the call and the capsule; `bridges::import_ndarray` steps aside for anything numpy
    // itself should judge).
    if copy != Some(true)
        && device.is_none_or(|d| d == Device::CPU)
        && let Some(t) = crate::bridges::import_ndarray(obj)
    {
        return t;
    }
    // The C exchange API first (`type(obj).__dlpack_c_exchange_api__`, cached per type): an
    // owning zero-copy export. Not for copy=True (the producer must copy: `__dlpack__`) nor when
    // its tensor is not on the requested device (`__dlpack__` with dl_device decides then).
    if copy != Some(true)
        && let Some(t) = crate::exchange::import_via_exchange_api(obj)?
        && device.is_none_or(|d| {
            t.device() == d || (d == Device::CPU && t.device().is_host_accessible())
        })
    {
        return Ok(t);
    }
    import_through_dlpack(obj, device, copy)
}

/// [`from_dlpack`] for a caller that already tried the numpy header and the exchange table
/// for this object and call (`device` None, `copy` not True) and found neither: straight to the
/// capsule / `__dlpack__` / bridges, without looking the table up a second time.
#[inline]
fn from_dlpack_after_fast_paths(
    obj: &Bound<'_, PyAny>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    debug_assert_ne!(copy, Some(true));
    let tensor = import_through_dlpack(obj, None, copy)?;
    finish_import(tensor, None, copy)
}

/// The producer's capsule: `obj` itself when it is one, else its `__dlpack__` (keywords as the
/// call asks; a TypeError retried once without them), else the bridges.
fn import_through_dlpack(
    obj: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    let py = obj.py();
    let o = obj.as_ptr();
    // SAFETY: type checks on a live object.
    let tensor = if unsafe { ffi::PyCapsule_CheckExact(o) } != 0 {
        ImportedTensor::from_capsule(obj)?
    } else {
        let n = names(py);
        // SAFETY: `_PyType_Lookup` returns a borrowed reference (or NULL, never raising); we
        // take a strong one before running any Python code.
        let descr = unsafe {
            let d = lookup_dlpack(o, n.dlpack.as_ptr());
            if d.is_null() {
                // No `__dlpack__`: the bridges (CUDA array interface → SYCL USM interface →
                // `__array_interface__` → buffer protocol); none → NoProtocol naming them all.
                return crate::bridges::import_bridges(obj);
            }
            Bound::from_borrowed_ptr(py, d)
        };
        let first = if device.is_none() && copy.is_none() {
            // SAFETY: live objects; kwnames_fast has one name for one value.
            unsafe {
                call_method(
                    obj,
                    descr.as_ptr(),
                    &[n.version.as_ptr()],
                    n.kwnames_fast.as_ptr(),
                )
            }
        } else {
            let mut names_v: Vec<&Py<PyString>> = vec![&n.kw_max_version];
            let mut vals: Vec<Bound<'_, PyAny>> = vec![n.version.bind(py).clone().into_any()];
            if let Some(d) = device {
                names_v.push(&n.kw_dl_device);
                vals.push(d.to_py_tuple(py)?.into_any());
                // The stream the consumer will use on that device (CUDA: the current stream of a
                // present runtime, else 1 — never 0; ROCm 0; stream-less devices: none).
                if let Some(s) = crate::gpu::consumer_stream_for(d) {
                    names_v.push(&n.kw_stream);
                    vals.push(s.into_pyobject(py)?.into_any());
                }
            }
            if let Some(c) = copy {
                names_v.push(&n.kw_copy);
                vals.push(pyo3::types::PyBool::new(py, c).to_owned().into_any());
            }
            let kwnames = PyTuple::new(py, names_v.iter().map(|s| s.bind(py)))?;
            let raw: Vec<*mut ffi::PyObject> = vals.iter().map(|v| v.as_ptr()).collect();
            // SAFETY: live objects; kwnames has one name per value.
            unsafe { call_method(obj, descr.as_ptr(), &raw, kwnames.as_ptr()) }
        };
        let capsule = match first {
            Ok(c) => c,
            Err(e)
                if e.is_instance_of::<PyTypeError>(py)
                    && device.is_none()
                    && copy != Some(false) =>
            {
                // A producer without the DLPack 2023.12 keywords.
                // SAFETY: live objects, no keywords.
                unsafe { call_method(obj, descr.as_ptr(), &[], ptr::null_mut()) }
                    .inspect_err(|e2| e2.set_cause(py, Some(e)))?
            }
            Err(e) => return Err(e),
        };
        ImportedTensor::from_capsule(&capsule)?
    };
    Ok(tensor)
}

/// [`from_dlpack`] with Python-level arguments: `device` (`None`, `"cpu"` or a
/// `(device_type, device_id)` tuple) and `copy` (`None`/`True`/`False`) are validated first
/// (TypeError / ValueError / BufferError per the spec's mapping). What a Python
/// `from_dlpack(x, /, *, device=None, copy=None)` calls.
#[inline]
pub fn from_dlpack_py(
    obj: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> PyResult<ImportedTensor> {
    let device = parse_device_arg(device)?;
    let copy = parse_copy_arg(copy)?;
    from_dlpack(obj, device, copy)
}

/// Applies `device` / `copy` to a freshly imported tensor.
#[inline]
fn finish_import(
    tensor: ImportedTensor,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    if let Some(d) = device {
        let here = tensor.device();
        if here != d && !(d == Device::CPU && here.is_host_accessible()) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!("the producer returned a tensor on device {here}, not the requested {d}"),
            )
            .into());
        }
    }
    if copy == Some(true) && !tensor.is_copied() {
        // Legacy producers cannot say whether they copied; versioned ones that did not set
        // IS_COPIED may alias. Copy ourselves so the result never aliases.
        return Ok(tensor.to_contiguous_copy()?);
    }
    Ok(tensor)
}

/// Parses `from_dlpack`'s `device=` argument: `None`, a `(device_type, device_id)` tuple of
/// ints, or the string `"cpu"`. Anything else → TypeError; unknown strings → ValueError.
#[inline]
pub fn parse_device_arg(device: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Device>> {
    let Some(d) = given(device) else {
        return Ok(None);
    };
    if let Ok(s) = d.cast::<PyString>() {
        let s = s.to_str()?;
        return if s == "cpu" {
            Ok(Some(Device::CPU))
        } else {
            Err(DlpackError::new(
                FailureKind::BadArgumentValue,
                format!("device not understood: {s:?}"),
            )
            .into())
        };
    }
    match int_pair(d) {
        Some((Ok(t), Ok(id))) => match (i32::try_from(t), i32::try_from(id)) {
            (Ok(t), Ok(id)) => Ok(Some(Device::new(DLDeviceType(t), id))),
            _ => Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                "device values out of range",
            )
            .into()),
        },
        Some(_) => Err(DlpackError::new(
            FailureKind::UnsupportedDevice,
            "device values out of range",
        )
        .into()),
        None => {
            Err(type_error("device must be None, 'cpu' or a (device_type, device_id) tuple").into())
        }
    }
}

/// Parses a `copy=` argument: `None`, a bool or a numpy bool scalar (TypeError otherwise).
#[inline]
pub fn parse_copy_arg(copy: Option<&Bound<'_, PyAny>>) -> PyResult<Option<bool>> {
    match given(copy) {
        None => Ok(None),
        Some(c) => Ok(Some(copy_flag(c)?)),
    }
}

/// The value of a `copy=` argument that is not `None`: `True` / `False`, or a numpy bool
/// scalar (`numpy.True_`, what `a.ndim > 0` gives for numpy values; numpy's own
/// `from_dlpack` takes it too). Other objects are a TypeError: the array API types `copy` as
/// `Optional[bool]`, and numpy's acceptance of any truthy object (`copy=0`, `copy=2.0`) would
/// hide mistakes.
#[inline]
fn copy_flag(c: &Bound<'_, PyAny>) -> Result<bool, DlpackError> {
    let p = c.as_ptr();
    // SAFETY: pointer comparisons with the bool singletons.
    if p == unsafe { ffi::Py_True() } {
        return Ok(true);
    }
    // SAFETY: as above.
    if p == unsafe { ffi::Py_False() } {
        return Ok(false);
    }
    numpy_bool(c).ok_or_else(|| type_error("copy must be None, True or False (or a numpy bool)"))
}

/// The truth value of a numpy bool scalar (`numpy.bool`, named `numpy.bool_` before numpy 2);
/// `None` for any other object.
#[cold]
fn numpy_bool(c: &Bound<'_, PyAny>) -> Option<bool> {
    // SAFETY: `c` is live, so its type object is too and `tp_name` is a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr((*ffi::Py_TYPE(c.as_ptr())).tp_name) };
    if name != c"numpy.bool" && name != c"numpy.bool_" {
        return None;
    }
    c.is_truthy().ok()
}

// ---------------------------------------------------------------------------------------------
// Optional fast path: a raw METH_FASTCALL | METH_KEYWORDS `__dlpack__`.
// ---------------------------------------------------------------------------------------------

/// Parses vectorcall keyword arguments for `__dlpack__` into (stream, max_version, dl_device,
/// copy). Names are matched by identity with the interned generated names first (what the
/// interpreter passes for literal keywords), then by value.
///
/// # Safety
/// `args` holds `nargs + len(kwnames)` live objects; `kwnames` is NULL or a tuple of str.
unsafe fn parse_fastcall_kwargs<'a, 'py>(
    py: Python<'py>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; 4]> {
    let mut out: [Option<Borrowed<'a, 'py, PyAny>>; 4] = [None, None, None, None];
    if nargs != 0 {
        return Err(call_error(format!(
            "{}() takes no positional arguments ({nargs} given)",
            protocol::DLPACK_METHOD
        )));
    }
    if kwnames.is_null() {
        return Ok(out);
    }
    let n = names(py);
    let order = [&n.kw_stream, &n.kw_max_version, &n.kw_dl_device, &n.kw_copy];
    // SAFETY: caller contract (kwnames is a tuple; values follow the positional args).
    unsafe {
        let nkw = ffi::PyTuple_GET_SIZE(kwnames);
        for i in 0..nkw {
            let name = ffi::PyTuple_GET_ITEM(kwnames, i);
            let mut slot = order.iter().position(|s| s.as_ptr() == name);
            if slot.is_none() {
                for (j, s) in order.iter().enumerate() {
                    if ffi::PyUnicode_Compare(name, s.as_ptr()) == 0 {
                        slot = Some(j);
                        break;
                    }
                }
                if !ffi::PyErr_Occurred().is_null() {
                    ffi::PyErr_Clear();
                }
            }
            let Some(j) = slot else {
                let name = Borrowed::from_ptr(py, name);
                return Err(call_error(format!(
                    "{}() got an unexpected keyword argument '{}'",
                    protocol::DLPACK_METHOD,
                    name.str().map(|s| s.to_string()).unwrap_or_default()
                )));
            };
            if out[j].is_some() {
                return Err(call_error(format!(
                    "{}() got multiple values for a keyword argument",
                    protocol::DLPACK_METHOD
                )));
            }
            out[j] = Some(Borrowed::from_ptr(py, *args.offset(nargs + i)));
        }
    }
    Ok(out)
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
                        return Err(call_error(format!(
                            "descriptor '{}' requires a '{}' object",
                            protocol::DLPACK_METHOD,
                            <T as PyClass>::NAME
                        )));
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
        let current = ffi::compat::PyThreadState_GetUnchecked();
        !current.is_null() && current == ffi::PyGILState_GetThisThreadState()
    }
}

/// The body of a C entry point CPython (or a C consumer) calls with the GIL held: runs `f`; a
/// `PyErr` is restored and a panic becomes a `SystemError` ("panic in {what}"), and `failed` is
/// returned then. Panics never cross the C boundary.
///
/// # Safety
/// The calling thread holds the GIL.
#[inline(always)]
pub(crate) unsafe fn at_c_boundary<R>(
    what: std::fmt::Arguments<'_>,
    failed: R,
    f: impl FnOnce(Python<'_>) -> PyResult<R>,
) -> R {
    // SAFETY: caller contract (GIL held).
    let py = unsafe { Python::assume_attached() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            e.restore(py);
            failed
        }
        Err(_) => {
            PyErr::from(DlpackError::new(
                FailureKind::InternalError,
                format!("panic in {what}"),
            ))
            .restore(py);
            failed
        }
    }
}

/// A leaked `METH_FASTCALL | METH_KEYWORDS` `PyMethodDef` named `name`, whose docstring is
/// `doc` (starting with the text signature). Callers create one per installed function.
fn leaked_fastcall_def(
    name: &str,
    doc: String,
    meth: ffi::PyCFunctionFastWithKeywords,
) -> PyResult<&'static mut ffi::PyMethodDef> {
    let leak = |s: String| std::ffi::CString::new(s).map(|c| &*Box::leak(c.into_boxed_c_str()));
    let name = leak(name.to_string())?;
    let doc = leak(doc)?;
    Ok(Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionFastWithKeywords: meth,
        },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    })))
}

/// Sets `key` in the type's own dict and invalidates the method cache (`PyType_Modified`):
/// PyO3 types may be immutable to `setattr`.
///
/// # Safety
/// The GIL is held; `tp` is a live, ready type object.
unsafe fn set_type_dict_item(
    py: Python<'_>,
    tp: *mut ffi::PyTypeObject,
    key: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: caller contract.
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
    }
    Ok(())
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

// ---------------------------------------------------------------------------------------------
// Fast consumer entry point: a raw METH_FASTCALL | METH_KEYWORDS `from_dlpack` building `T`.
// ---------------------------------------------------------------------------------------------

/// Imports `x` as a new `T` object (a new reference), trying in order (the order of
/// [`from_dlpack`], with `T` built directly where it can be):
/// 1. [`FromManagedTensor::share_from`] when `x` is exactly a `T` (what `T`'s own exchange table
///    would give, without the managed-tensor round trip);
/// 2. an exact `numpy.ndarray`'s header view ([`FromManagedTensor::from_python_view`]);
/// 3. `type(x)`'s C exchange table when neither `device` nor `copy=True` is asked for
///    ([`crate::exchange::import_via_exchange_api_with`], `T` built in place);
/// 4. [`FromManagedTensor::from_managed`] of the producer's capsule: straight to the
///    capsule / `__dlpack__` path when 2 and 3 were both tried, else [`from_dlpack`].
#[inline(always)]
fn import_as<T>(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> *mut ffi::PyObject
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    // Every step returns the bare pointer (NULL with the exception set): a `PyResult` passed
    // back through memory is copied whole, with wide loads that stall on the narrow stores that
    // just wrote (parts of) it.
    if device.is_none() && copy != Some(true) {
        // SAFETY: reading the type of a live object.
        if unsafe { ffi::Py_TYPE(x.as_ptr()) } == T::type_object_raw(py)
            && crate::exchange::same_type_views_enabled()
        {
            // SAFETY: the exact type was checked just above.
            let src = unsafe { x.cast_unchecked::<T>() };
            if let Some(v) = T::share_from(src) {
                let obj = match v {
                    Ok(v) => new_instance(py, v),
                    Err(e) => restore_error(py, e),
                };
                if !obj.is_null() {
                    crate::exchange::note_same_type_view();
                }
                return obj;
            }
        }
    }
    // A view of memory `x` keeps alive (numpy's header, a lending exchange table), built into
    // `T` by [`instance_from_view`].
    let view = |v: &crate::bridges::PythonView<'_, '_>| Ok(instance_from_view::<T>(py, v));
    if device.is_none_or(|d| d == Device::CPU)
        && copy != Some(true)
        && let Some(r) = crate::bridges::with_ndarray_view(x, view)
    {
        return restored(py, r);
    }
    let build = |t: PyResult<ImportedTensor>| match t.and_then(|t| T::from_managed(py, t)) {
        Ok(v) => new_instance(py, v),
        Err(e) => restore_error(py, e),
    };
    // The producer's C exchange table (the path `from_dlpack` takes first for such objects),
    // with the view or handle moved straight into `T`.
    if device.is_none() && copy != Some(true) {
        if let Some(r) =
            crate::exchange::import_via_exchange_api_with(x, view, |t| Ok(build(Ok(t))))
        {
            return restored(py, r);
        }
        // Both fast paths were tried for this call (the numpy header under a weaker condition).
        return build(from_dlpack_after_fast_paths(x, copy));
    }
    build(from_dlpack(x, device, copy))
}

/// `T::into_instance(value)` as a bare new reference (NULL with the exception set).
#[inline(always)]
fn new_instance<T>(py: Python<'_>, value: T) -> *mut ffi::PyObject
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    match T::into_instance(py, value) {
        Ok(o) => o.into_ptr(),
        Err(e) => restore_error(py, e),
    }
}

/// A new `T` (a new reference) viewing `v`: built directly when `T` can
/// ([`FromManagedTensor::from_python_view`]), else through an `ImportedTensor` holding the
/// view's owner. Returns the bare pointer (NULL with the exception set, see [`restored`]): a
/// `PyResult` returned through memory is copied with wide loads that stall on the narrow
/// stores that just wrote it.
#[inline(always)]
fn instance_from_view<T>(
    py: Python<'_>,
    v: &crate::bridges::PythonView<'_, '_>,
) -> *mut ffi::PyObject
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    let value = match T::from_python_view(v) {
        Some(Ok(value)) => value,
        Some(Err(e)) => return restore_error(py, e),
        // SAFETY: the view describes its owner's memory, which the handle keeps alive.
        None => match T::from_managed(py, unsafe { ImportedTensor::from_python_view(v) }) {
            Ok(value) => value,
            Err(e) => return restore_error(py, e),
        },
    };
    new_instance(py, value)
}

/// Sets `e` as the Python exception; NULL.
#[cold]
#[inline(never)]
fn restore_error(py: Python<'_>, e: PyErr) -> *mut ffi::PyObject {
    e.restore(py);
    ptr::null_mut()
}

/// `r`'s object, or NULL with its error restored as the Python exception (a C entry point's
/// return value; [`at_c_boundary`] passes a NULL it gets as `Ok` through).
#[inline(always)]
fn restored(py: Python<'_>, r: PyResult<*mut ffi::PyObject>) -> *mut ffi::PyObject {
    match r {
        Ok(o) => o,
        Err(e) => restore_error(py, e),
    }
}

/// Parses `(x, /, *, device=None, copy=None)` from vectorcall arguments (keyword names by
/// identity with the interned generated names first, then by value) and validates `device` /
/// `copy` ([`parse_device_arg`], [`parse_copy_arg`]).
///
/// # Safety
/// `args` holds `nargs + len(kwnames)` live objects; `kwnames` is NULL or a tuple of str.
unsafe fn parse_from_dlpack_args<'py>(
    py: Python<'py>,
    fname: &str,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<(Bound<'py, PyAny>, Option<Device>, Option<bool>)> {
    if nargs > 1 {
        return Err(call_error(format!(
            "{fname}() takes 1 positional argument but {nargs} were given"
        )));
    }
    let n = names(py);
    let mut vals: [Option<Borrowed<'_, 'py, PyAny>>; 2] = [None, None];
    // SAFETY: caller contract (kwnames is NULL or a tuple; values follow the positional args).
    unsafe {
        if !kwnames.is_null() {
            let order = [&n.kw_from_device, &n.kw_from_copy];
            for i in 0..ffi::PyTuple_GET_SIZE(kwnames) {
                let name = ffi::PyTuple_GET_ITEM(kwnames, i);
                let mut slot = order.iter().position(|s| s.as_ptr() == name);
                if slot.is_none() {
                    slot = order
                        .iter()
                        .position(|s| ffi::PyUnicode_Compare(name, s.as_ptr()) == 0);
                    if !ffi::PyErr_Occurred().is_null() {
                        ffi::PyErr_Clear();
                    }
                }
                let Some(j) = slot else {
                    let name = Borrowed::from_ptr(py, name)
                        .str()
                        .map(|s| s.to_string())
                        .unwrap_or_default();
                    return Err(call_error(if name == "x" {
                        format!(
                            "{fname}() got some positional-only arguments passed as keyword arguments: 'x'"
                        )
                    } else {
                        format!("{fname}() got an unexpected keyword argument '{name}'")
                    }));
                };
                if vals[j].is_some() {
                    return Err(call_error(format!(
                        "{fname}() got multiple values for argument '{}'",
                        order[j]
                    )));
                }
                vals[j] = Some(Borrowed::from_ptr(py, *args.offset(nargs + i)));
            }
        }
        if nargs == 0 {
            return Err(call_error(format!(
                "{fname}() missing required positional argument: 'x'"
            )));
        }
        let x = Borrowed::from_ptr(py, *args).to_owned();
        let device = parse_device_arg(vals[0].as_deref())?;
        let copy = parse_copy_arg(vals[1].as_deref())?;
        Ok((x, device, copy))
    }
}

/// A raw `METH_FASTCALL | METH_KEYWORDS` implementation of
/// `from_dlpack(x, /, *, device=None, copy=None) -> T` (keyword names from the generated
/// `protocol` module); semantics of [`from_dlpack_py`] followed by
/// [`FromManagedTensor::from_managed`]. The common call — one positional argument, no keywords —
/// skips all argument parsing, and when `x` is exactly a `T` the result is built by
/// [`FromManagedTensor::share_from`] (no DLPack round trip). Installed by
/// [`add_from_dlpack_function`] / [`install_from_dlpack_staticmethod`].
///
/// # Safety
/// Called by CPython through a builtin function object (any `self`, ignored), GIL held.
pub unsafe extern "C" fn from_dlpack_fastcall<T>(
    _slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    // SAFETY: CPython holds the GIL for us and passes `nargs + len(kwnames)` live arguments.
    unsafe {
        at_c_boundary(format_args!("{FROM_DLPACK_NAME}"), ptr::null_mut(), |py| {
            let nargs = ffi::PyVectorcall_NARGS(nargsf as usize);
            if nargs == 1 && (kwnames.is_null() || ffi::PyTuple_GET_SIZE(kwnames) == 0) {
                // `x` is borrowed from the caller's argument array for the whole call.
                let x = Borrowed::from_ptr(py, *args);
                Ok(import_as::<T>(py, &x, None, None))
            } else {
                parse_from_dlpack_args(py, FROM_DLPACK_NAME, args, nargs, kwnames)
                    .map(|(x, device, copy)| import_as::<T>(py, &x, device, copy))
            }
        })
    }
}

/// The Python name of the functions [`add_from_dlpack_function`] and
/// [`install_from_dlpack_staticmethod`] install (the spec's `protocol.from_dlpack.name`).
pub const FROM_DLPACK_NAME: &str = protocol::FROM_DLPACK_FUNCTION;

/// A leaked `PyMethodDef` for [`from_dlpack_fastcall::<T>`] named [`FROM_DLPACK_NAME`], with a
/// text signature (`inspect.signature` works) from the generated keyword names.
fn from_dlpack_method_def<T>(doc: &str) -> PyResult<&'static mut ffi::PyMethodDef>
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    let doc = format!(
        "{FROM_DLPACK_NAME}(x, /, *, {}=None, {}=None)\n--\n\n{doc}",
        protocol::FROM_DLPACK_KW_DEVICE,
        protocol::FROM_DLPACK_KW_COPY
    );
    leaked_fastcall_def(FROM_DLPACK_NAME, doc, from_dlpack_fastcall::<T>)
}

/// Adds `module.from_dlpack(x, /, *, device=None, copy=None) -> T` backed by
/// [`from_dlpack_fastcall::<T>`] (a builtin function with the module as `__module__`).
pub fn add_from_dlpack_function<T>(
    module: &Bound<'_, pyo3::types::PyModule>,
    doc: &str,
) -> PyResult<()>
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    let py = module.py();
    crate::interp::require_gil(py)?;
    let def = from_dlpack_method_def::<T>(doc)?;
    let modname = module.name()?;
    // SAFETY: `def` lives for the rest of the process; module and name are live objects.
    let f = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCMethod_New(def, module.as_ptr(), modname.as_ptr(), ptr::null_mut()),
        )?
    };
    module.add(FROM_DLPACK_NAME, f)
}

/// Sets `T.from_dlpack` to a static method backed by [`from_dlpack_fastcall::<T>`] (replacing,
/// e.g., a PyO3 `#[staticmethod]` of that name). Call it once at module init after the class is
/// added.
pub fn install_from_dlpack_staticmethod<T>(py: Python<'_>, doc: &str) -> PyResult<()>
where
    T: PyClass + FromManagedTensor + Into<pyo3::PyClassInitializer<T>>,
{
    let ty = T::type_object(py);
    let def = from_dlpack_method_def::<T>(doc)?;
    // SAFETY: `def` lives for the rest of the process; the type object is live and ready.
    unsafe {
        let f = Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCMethod_New(def, ptr::null_mut(), ptr::null_mut(), ptr::null_mut()),
        )?;
        let sm = Bound::from_owned_ptr_or_err(py, ffi::PyStaticMethod_New(f.as_ptr()))?;
        set_type_dict_item(
            py,
            ty.as_type_ptr(),
            &PyString::intern(py, FROM_DLPACK_NAME),
            &sm,
        )
    }
}
