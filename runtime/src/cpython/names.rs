//! The interned Python names (`__dlpack__`, its keywords, `from_dlpack`'s keywords, all from the
//! generated `protocol` module) and the cached `max_version` tuple, built once per process.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};

use crate::export::request::EXPORT_VERSION;
use crate::spec::protocol;

pub(crate) struct Names {
    pub(crate) dlpack: Py<PyString>,
    /// `from_dlpack`'s keywords (`device`, `copy`), from the generated protocol names.
    pub(crate) kw_from_device: Py<PyString>,
    pub(crate) kw_from_copy: Py<PyString>,
    pub(crate) kw_stream: Py<PyString>,
    pub(crate) kw_max_version: Py<PyString>,
    pub(crate) kw_dl_device: Py<PyString>,
    pub(crate) kw_copy: Py<PyString>,
    /// `("max_version",)`
    pub(crate) kwnames_fast: Py<PyTuple>,
    /// `(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)`
    pub(crate) version: Py<PyTuple>,
}

pub(crate) static NAMES: PyOnceLock<Names> = PyOnceLock::new();

pub(crate) fn names(py: Python<'_>) -> &Names {
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
