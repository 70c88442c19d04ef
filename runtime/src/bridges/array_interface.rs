//! numpy `__array_interface__` (version 3) export for host-accessible data.
//!
//! `{"shape": (..), "typestr": "<f4", "data": (ptr, readonly), "strides": None | (bytes..),
//! "version": 3}`; `strides` is `None` when the data is C-contiguous. The consumer (numpy)
//! keeps the exporting object alive as the array's base.
//!
//! A non-frozen class's export must hold a shared borrow of the object for as long as the array
//! lives, and numpy keeps only the object for a pointer tuple. So for such a class `data` is the
//! other form the interface allows, an object exposing the buffer protocol: a borrow guard (see
//! [`SourceAccess::with_owner`]) whose `PyBUF_SIMPLE` buffer covers the bytes the array reaches,
//! from the lowest address on, with `offset` the byte offset of element 0 in it (negative
//! strides reach below element 0). numpy keeps that guard as the array's base, so the borrow
//! lasts as long as the array; dlbind's own consumer reads that form too.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::typestr::typestr_of;
use super::{Snapshot, not_applicable, snapshot};
use crate::dtype::itemsize;
use crate::export::DLPackSource;
use crate::export::access::SourceAccess;
use crate::export::borrow::Window;

const ATTR: &str = "__array_interface__";

/// Strides in bytes, or `None` (the interfaces' way of saying C-contiguous).
pub(crate) fn byte_strides(s: &Snapshot, item: usize) -> Option<Vec<i64>> {
    if s.is_c_contiguous() {
        None
    } else {
        Some(
            s.strides
                .iter()
                .map(|&st| st.wrapping_mul(item as i64))
                .collect(),
        )
    }
}

/// The common part of the three interface dicts: `shape`, `typestr`, `data`, `version`.
pub(crate) fn base_dict<'py>(
    py: Python<'py>,
    s: &Snapshot,
    typestr: &str,
    version: i32,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", PyTuple::new(py, &s.shape)?)?;
    d.set_item("typestr", typestr)?;
    d.set_item("data", (s.data as usize, s.readonly))?;
    d.set_item("version", version)?;
    Ok(d)
}

/// The body of the `__array_interface__` getter (AttributeError where it does not apply:
/// memory the host cannot read, dtypes without a numpy typestr in the spec).
pub fn array_interface<T>(slf: &Bound<'_, T>) -> PyResult<Py<PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    Ok(interface_dict(slf, None)?.into_any().unbind())
}

/// The `__array_interface__` dict of `slf` (with `typestr` in place of the dtype's own when
/// given): a pointer tuple for a frozen class, a borrow guard for any other.
fn interface_dict<'py, T>(slf: &Bound<'py, T>, typestr: Option<&str>) -> PyResult<Bound<'py, PyDict>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    if !<T::Frozen as SourceAccess<T>>::FROZEN {
        return borrowing_array_interface(slf, typestr);
    }
    let s = snapshot(slf)?;
    host_only(&s)?;
    v3_dict_as(slf.py(), &s, ATTR, typestr)
}

/// A numpy array viewing `slf`'s host memory (zero-copy; the array keeps `slf` alive, and for a
/// non-frozen class a shared borrow of it), typed as numpy or `ml_dtypes` names the dtype:
/// for a dtype with a numpy typestr in the spec, what `numpy.asarray(slf)` gives; for
/// `bfloat16` and the `float8_*` types (no numpy typestr), an array of `ml_dtypes.<name>`
/// (`ml_dtypes` is imported on first use: ImportError without it). `np.from_dlpack` of such a
/// tensor stays numpy's decision (numpy refuses them); this is the way to get the typed view.
/// BufferError for sub-byte dtypes, AttributeError for memory the host cannot read.
pub fn numpy_view<'py, T>(slf: &Bound<'py, T>) -> PyResult<Bound<'py, PyAny>>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    let py = slf.py();
    let dtype = <T::Frozen as SourceAccess<T>>::with(slf, |src| src.dlpack_dtype())?;
    let np = py.import("numpy")?;
    let row = crate::spec::dtypes::dtype_by_dl(dtype);
    if row.is_some_and(|r| r.numpy_typestr.is_some()) {
        return np.call_method1("asarray", (slf,));
    }
    let unsupported = || {
        crate::error::DlpackError::new(
            crate::spec::errors::FailureKind::UnsupportedDtype,
            format!("no numpy view of dtype {}: only whole-byte dtypes", crate::dtype::describe(dtype)),
        )
    };
    let row = row.ok_or_else(unsupported)?;
    let same_width = match (dtype.lanes, dtype.bits) {
        (1, 8) => "|u1",
        (1, 16) => "<u2",
        (1, 32) => "<u4",
        (1, 64) => "<u8",
        _ => return Err(unsupported().into()),
    };
    let scalar = py.import("ml_dtypes")?.getattr(row.name)?;
    let d = interface_dict(slf, Some(same_width))?;
    // numpy keeps the object it read the interface from as the array's base: a namespace
    // holding `slf` (the pointer tuple's owner) as well as the dict.
    let kw = PyDict::new(py);
    kw.set_item("__array_interface__", d)?;
    kw.set_item("owner", slf)?;
    let holder = py.import("types")?.getattr("SimpleNamespace")?.call((), Some(&kw))?;
    np.call_method1("asarray", (holder,))?.call_method1("view", (scalar,))
}

/// AttributeError unless the host can read the data.
fn host_only(s: &Snapshot) -> PyResult<()> {
    if !s.device.is_host_accessible() {
        return Err(not_applicable(
            ATTR,
            format_args!("the data is on device {}, not host memory", s.device),
        ));
    }
    Ok(())
}

/// [`array_interface`](fn@array_interface) of a non-frozen class: `data` is a borrow guard
/// exposing the bytes the array reaches, plus `offset` (see the module docs).
#[inline(never)]
fn borrowing_array_interface<'py, T>(slf: &Bound<'py, T>, typestr: Option<&str>) -> PyResult<Bound<'py, PyDict>>
where
    T: PyClass + DLPackSource,
{
    let r = slf.try_borrow()?;
    let s = Snapshot::of(&*r)?;
    host_only(&s)?;
    let py = slf.py();
    let d = v3_dict_as(py, &s, ATTR, typestr)?;
    // `v3_dict_as` refused sub-byte dtypes.
    let item = itemsize(s.dtype).ok_or_else(|| not_applicable(ATTR, "sub-byte dtype"))?;
    let (below, len) = reach(&s.shape, &s.strides, item)
        .ok_or_else(|| not_applicable(ATTR, "the shape and strides overflow"))?;
    let window = Window {
        base: (s.data as usize).wrapping_sub(below),
        len,
        readonly: s.readonly,
    };
    let guard = crate::export::borrow::hold(r, Some(window))?;
    d.set_item("data", guard)?;
    d.set_item("offset", below)?;
    Ok(d)
}

/// The bytes an array reaches: how far below element 0 it starts and how many bytes it spans
/// from there (`(0, 0)` when empty), from [`crate::extent::reach`]. `None` on overflow.
fn reach(shape: &[i64], strides: &[i64], item: usize) -> Option<(usize, usize)> {
    let r = crate::extent::reach(shape, Some(strides), crate::copy::ElemSize::Bytes(item)).ok()?;
    Some((usize::try_from(r.below).ok()?, usize::try_from(r.span()?).ok()?))
}

/// The version-3 dict shared by `__array_interface__` and `__cuda_array_interface__`:
/// [`base_dict`] plus `strides` in bytes (`None` when C-contiguous). Dtypes without a numpy
/// typestr in the spec, and sub-byte dtypes, make `attr` not applicable (AttributeError).
pub(crate) fn v3_dict<'py>(
    py: Python<'py>,
    s: &Snapshot,
    attr: &str,
) -> PyResult<Bound<'py, PyDict>> {
    v3_dict_as(py, s, attr, None)
}

/// [`v3_dict`] with `typestr` in place of the dtype's own (`numpy_view`'s same-width unsigned
/// integers for the `ml_dtypes` types).
fn v3_dict_as<'py>(
    py: Python<'py>,
    s: &Snapshot,
    attr: &str,
    typestr: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let ts = match typestr {
        Some(ts) => ts,
        None => typestr_of(s.dtype).map_err(|e| not_applicable(attr, e.message()))?,
    };
    let item = itemsize(s.dtype).ok_or_else(|| not_applicable(attr, "sub-byte dtype"))?;
    let d = base_dict(py, s, ts, 3)?;
    match byte_strides(s, item) {
        None => d.set_item("strides", py.None())?,
        Some(st) => d.set_item("strides", PyTuple::new(py, st)?)?,
    }
    Ok(d)
}
