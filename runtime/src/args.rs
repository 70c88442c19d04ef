//! Argument parsing for `__dlpack__` and `from_dlpack`: raw C-API type checks (exact types
//! first, bools refused where ints are asked for) and vectorcall keyword matching by identity
//! with the interned generated names. Every refusal is a spec failure kind.

use std::ffi::c_int;

use pyo3::Borrowed;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::device::Device;
use crate::error::DlpackError;
use crate::export::ExportRequest;
use crate::ffi::DLDeviceType;
use crate::spec::errors::FailureKind;
use crate::spec::protocol;

use crate::cpython::names::names;

#[inline]
pub(super) fn given<'a, 'py>(o: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    // SAFETY: pointer comparison with the None singleton.
    o.filter(|o| o.as_ptr() != unsafe { ffi::Py_None() })
}

/// An int that is not a bool, as i64 (`Err(sign)` when it does not fit: +1 / -1).
#[inline]
pub(super) fn as_int(o: *mut ffi::PyObject) -> Option<Result<i64, c_int>> {
    // SAFETY: `o` is a live object; type checks and `PyLong_AsLongLongAndOverflow` on an int
    // cannot fail except by overflow, which is reported through `overflow`.
    unsafe {
        if let Some(v) = crate::cpython::ints::small_int(o) {
            return Some(Ok(v));
        }
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
#[inline]
pub(super) fn int_pair(o: &Bound<'_, PyAny>) -> Option<(Result<i64, c_int>, Result<i64, c_int>)> {
    let p = o.as_ptr();
    // SAFETY: `p` is live; tuple items are borrowed for the duration of the checks.
    unsafe {
        if (ffi::PyTuple_CheckExact(p) == 0 && ffi::PyTuple_Check(p) == 0)
            || crate::cpython::api::tuple_size(p) != 2
        {
            return None;
        }
        Some((
            as_int(crate::cpython::api::tuple_item(p, 0))?,
            as_int(crate::cpython::api::tuple_item(p, 1))?,
        ))
    }
}

/// `(major, minor)` from a tuple of two ints (bools refused); out-of-range values saturate.
#[inline]
fn parse_max_version(o: &Bound<'_, PyAny>) -> Option<(i64, i64)> {
    let p = o.as_ptr();
    // SAFETY: `p` is live; tuple items are borrowed for the duration of the checks.
    unsafe {
        if (ffi::PyTuple_CheckExact(p) == 0 && ffi::PyTuple_Check(p) == 0)
            || crate::cpython::api::tuple_size(p) != 2
        {
            return None;
        }
        let sat =
            |r: Result<i64, c_int>| r.unwrap_or_else(|s| if s > 0 { i64::MAX } else { i64::MIN });
        let major = sat(as_int(crate::cpython::api::tuple_item(p, 0))?);
        let minor = sat(as_int(crate::cpython::api::tuple_item(p, 1))?);
        Some((major, minor))
    }
}

/// The spec's `BadArgumentType`: an argument of the wrong type, or a call-signature error (a
/// positional argument too many or missing, an unknown or repeated keyword, a descriptor bound
/// to the wrong type).
#[cold]
pub(super) fn type_error(msg: impl Into<std::borrow::Cow<'static, str>>) -> DlpackError {
    DlpackError::new(FailureKind::BadArgumentType, msg)
}

/// Parses `__dlpack__`'s keyword arguments (types are checked here; values in
/// `crate::export::plan_export`).
///
/// * `max_version`: `None` or a tuple of two ints → TypeError otherwise;
/// * `dl_device`: `None` or a tuple of two ints (IntEnum ok) → TypeError otherwise;
///   values outside `i32` → BufferError (unsupported device);
/// * `copy`: `None`, `True` or `False` → TypeError otherwise;
/// * `stream`: `None` or an int (not a bool) → TypeError otherwise; outside `i64` → ValueError.
///
/// `#[inline]`: with more than one exported class in a module (each class's `__dlpack__` calls
/// it) LLVM may keep it out of line; `bench/results-inline.md` shows what that costs today.
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
            // A tuple of another length is the right type with the wrong shape: ValueError, as
            // numpy's and dpctl's `from_dlpack(device=…)` raise; anything else is a TypeError.
            // SAFETY: type check of a live object.
            let is_tuple = unsafe { ffi::PyTuple_Check(d.as_ptr()) } != 0;
            match d.len() {
                Ok(n) if is_tuple && n != 2 => Err(DlpackError::new(
                    FailureKind::BadArgumentValue,
                    format!(
                        "device must be a (device_type, device_id) pair, got a tuple of {n}: {}",
                        d.repr().map(|r| r.to_string()).unwrap_or_default()
                    ),
                )
                .into()),
                _ => Err(type_error(
                    "device must be None, 'cpu' or a (device_type, device_id) tuple",
                )
                .into()),
            }
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
    let tp = c.get_type().as_type_ptr();
    // SAFETY: `c` is live, so its type object is too.
    let is_numpy_bool = unsafe {
        crate::cpython::api::type_name_is(c.py(), tp, c"numpy.bool")
            || crate::cpython::api::type_name_is(c.py(), tp, c"numpy.bool_")
    };
    if !is_numpy_bool {
        return None;
    }
    c.is_truthy().ok()
}

/// Parses vectorcall keyword arguments for `__dlpack__` into (stream, max_version, dl_device,
/// copy). Inlined into the method: the calls seen every time (no keywords, `max_version=` alone,
/// a tuple of names resolved before) are decided here; anything else goes to
/// [`parse_kwnames`].
///
/// # Safety
/// `args` holds `nargs + len(kwnames)` live objects; `kwnames` is NULL or a tuple of str.
#[inline]
pub(super) unsafe fn parse_fastcall_kwargs<'a, 'py>(
    py: Python<'py>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; 4]> {
    let mut out: [Option<Borrowed<'a, 'py, PyAny>>; 4] = [None, None, None, None];
    if nargs != 0 {
        return Err(positional_error(nargs));
    }
    if kwnames.is_null() {
        return Ok(out);
    }
    // A tuple of several names seen before (numpy's `from_dlpack` passes the same tuple of
    // three on every call): its slots, resolved and checked once.
    if let Some(slots) = crate::cpython::idcache::cached_kwnames(kwnames) {
        for i in 0..(slots & 7) as isize {
            let j = (slots >> (3 + 2 * i)) & 3;
            // SAFETY: the cached tuple has `slots & 7` names; their values follow the
            // positional args (caller contract).
            out[j as usize] = Some(unsafe { Borrowed::from_ptr(py, *args.offset(nargs + i)) });
        }
        return Ok(out);
    }
    // The common versioned call, `__dlpack__(max_version=…)`, matched by identity.
    // SAFETY: caller contract (kwnames is a tuple; its value follows the positional args).
    unsafe {
        if crate::cpython::api::tuple_size(kwnames) == 1
            && crate::cpython::api::tuple_item(kwnames, 0) == names(py).kw_max_version.as_ptr()
        {
            out[1] = Some(Borrowed::from_ptr(py, *args.offset(nargs)));
            return Ok(out);
        }
        parse_kwnames(py, args, nargs, kwnames)
    }
}

#[cold]
fn positional_error(nargs: ffi::Py_ssize_t) -> PyErr {
    type_error(format!(
        "{}() takes no positional arguments ({nargs} given)",
        protocol::DLPACK_METHOD
    ))
    .into()
}

/// The slot of `max_version` in [`parse_fastcall_kwargs`]'s result (and in the remembered
/// keyword tuple's slots, `cpython::idcache`).
pub(crate) const MAX_VERSION_SLOT: u32 = 1;

/// [`parse_fastcall_kwargs`] for any other tuple of names: each matched by identity with the
/// interned generated names first (what the interpreter passes for literal keywords), then by
/// value; unknown and repeated names refused. A tuple of two or more valid names is remembered.
///
/// # Safety
/// As for [`parse_fastcall_kwargs`]; `kwnames` is not NULL.
#[inline(never)]
unsafe fn parse_kwnames<'a, 'py>(
    py: Python<'py>,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; 4]> {
    let mut out: [Option<Borrowed<'a, 'py, PyAny>>; 4] = [None, None, None, None];
    let n = names(py);
    // The slot order of the result: stream, max_version ([`MAX_VERSION_SLOT`]), dl_device, copy.
    let order = [&n.kw_stream, &n.kw_max_version, &n.kw_dl_device, &n.kw_copy];
    let ptrs = order.map(|s| s.as_ptr());
    let mut slots = 0u32;
    // SAFETY: caller contract (kwnames is a tuple; values follow the positional args).
    unsafe {
        let nkw = crate::cpython::api::tuple_size(kwnames);
        for i in 0..nkw {
            let name = crate::cpython::api::tuple_item(kwnames, i);
            // Interned names match by identity (CPython interns keyword names in code objects,
            // numpy and PyO3 intern theirs); anything else is compared by value.
            let mut slot = if name == ptrs[0] {
                Some(0)
            } else if name == ptrs[1] {
                Some(1)
            } else if name == ptrs[2] {
                Some(2)
            } else if name == ptrs[3] {
                Some(3)
            } else {
                None
            };
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
                return Err(type_error(format!(
                    "{}() got an unexpected keyword argument '{}'",
                    protocol::DLPACK_METHOD,
                    name.str().map(|s| s.to_string()).unwrap_or_default()
                ))
                .into());
            };
            if out[j].is_some() {
                return Err(type_error(format!(
                    "{}() got multiple values for a keyword argument",
                    protocol::DLPACK_METHOD
                ))
                .into());
            }
            out[j] = Some(Borrowed::from_ptr(py, *args.offset(nargs + i)));
            slots |= (j as u32) << (3 + 2 * i);
        }
        if nkw >= 2 {
            crate::cpython::idcache::remember_kwnames(kwnames, slots | nkw as u32);
        }
    }
    Ok(out)
}

/// Parses `(x, /, *, device=None, copy=None)` from vectorcall arguments (keyword names by
/// identity with the interned generated names first, then by value) and validates `device` /
/// `copy` ([`parse_device_arg`], [`parse_copy_arg`]).
///
/// # Safety
/// `args` holds `nargs + len(kwnames)` live objects; `kwnames` is NULL or a tuple of str.
pub(super) unsafe fn parse_from_dlpack_args<'py>(
    py: Python<'py>,
    fname: &str,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<(Bound<'py, PyAny>, Option<Device>, Option<bool>)> {
    if nargs > 1 {
        return Err(type_error(format!(
            "{fname}() takes 1 positional argument but {nargs} were given"
        ))
        .into());
    }
    let n = names(py);
    let mut vals: [Option<Borrowed<'_, 'py, PyAny>>; 2] = [None, None];
    // SAFETY: caller contract (kwnames is NULL or a tuple; values follow the positional args).
    unsafe {
        if !kwnames.is_null() {
            let order = [&n.kw_from_device, &n.kw_from_copy];
            for i in 0..crate::cpython::api::tuple_size(kwnames) {
                let name = crate::cpython::api::tuple_item(kwnames, i);
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
                    return Err(type_error(if name == "x" {
                        format!(
                            "{fname}() got some positional-only arguments passed as keyword arguments: 'x'"
                        )
                    } else {
                        format!("{fname}() got an unexpected keyword argument '{name}'")
                    }).into());
                };
                if vals[j].is_some() {
                    return Err(type_error(format!(
                        "{fname}() got multiple values for argument '{}'",
                        order[j]
                    ))
                    .into());
                }
                vals[j] = Some(Borrowed::from_ptr(py, *args.offset(nargs + i)));
            }
        }
        if nargs == 0 {
            return Err(type_error(format!(
                "{fname}() missing required positional argument: 'x'"
            ))
            .into());
        }
        let x = Borrowed::from_ptr(py, *args).to_owned();
        let device = parse_device_arg(vals[0].as_deref())?;
        let copy = parse_copy_arg(vals[1].as_deref())?;
        Ok((x, device, copy))
    }
}
