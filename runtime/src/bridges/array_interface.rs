//! numpy `__array_interface__` (version 3) export for host-accessible data.
//!
//! `{"shape": (..), "typestr": "<f4", "data": (ptr, readonly), "strides": None | (bytes..),
//! "version": 3}`; `strides` is `None` when the data is C-contiguous. The consumer (numpy)
//! keeps the exporting object alive as the array's base.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::typestr::typestr_of;
use super::{Snapshot, not_applicable, snapshot};
use crate::dtype_table::itemsize;
use crate::export::DLPackSource;
use crate::python::SourceAccess;

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
    let s = snapshot(slf)?;
    if !s.device.is_host_accessible() {
        return Err(not_applicable(
            ATTR,
            format_args!("the data is on device {}, not host memory", s.device),
        ));
    }
    Ok(v3_dict(slf.py(), &s, ATTR)?.into_any().unbind())
}

/// The version-3 dict shared by `__array_interface__` and `__cuda_array_interface__`:
/// [`base_dict`] plus `strides` in bytes (`None` when C-contiguous). Dtypes without a numpy
/// typestr in the spec, and sub-byte dtypes, make `attr` not applicable (AttributeError).
pub(crate) fn v3_dict<'py>(
    py: Python<'py>,
    s: &Snapshot,
    attr: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let ts = typestr_of(s.dtype).map_err(|e| not_applicable(attr, e.message()))?;
    let item = itemsize(s.dtype).ok_or_else(|| not_applicable(attr, "sub-byte dtype"))?;
    let d = base_dict(py, s, ts, 3)?;
    match byte_strides(s, item) {
        None => d.set_item("strides", py.None())?,
        Some(st) => d.set_item("strides", PyTuple::new(py, st)?)?,
    }
    Ok(d)
}
