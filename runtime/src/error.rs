//! `DlpackError`: a generated [`FailureKind`] plus a message. The Python exception type is
//! chosen by the spec's mapping (`FailureKind::exception()`), never here.

use std::borrow::Cow;

use pyo3::PyErr;
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyMemoryError, PyTypeError, PyValueError};

use crate::alloc::AllocError;
use crate::copy::CopyError;
use crate::failure::{FailureKind, PyExceptionKind};

/// An error from dlbind: what went wrong ([`FailureKind`], from the spec) and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DlpackError {
    kind: FailureKind,
    message: Cow<'static, str>,
}

impl DlpackError {
    /// A new error of `kind`.
    pub fn new(kind: FailureKind, message: impl Into<Cow<'static, str>>) -> Self {
        DlpackError { kind, message: message.into() }
    }

    /// The failure kind (decides the Python exception type).
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The Python exception type the spec assigns to this failure.
    pub fn exception(&self) -> PyExceptionKind {
        self.kind.exception()
    }
}

/// Builds the Python exception chosen by the spec's mapping for `kind`.
pub fn py_exception(kind: PyExceptionKind, message: String) -> PyErr {
    match kind {
        PyExceptionKind::BufferError => PyBufferError::new_err(message),
        PyExceptionKind::TypeError => PyTypeError::new_err(message),
        PyExceptionKind::ValueError => PyValueError::new_err(message),
        PyExceptionKind::AttributeError => PyAttributeError::new_err(message),
        PyExceptionKind::MemoryError => PyMemoryError::new_err(message),
    }
}

impl From<DlpackError> for PyErr {
    fn from(err: DlpackError) -> PyErr {
        py_exception(err.kind.exception(), err.message.into_owned())
    }
}

impl From<AllocError> for DlpackError {
    fn from(err: AllocError) -> Self {
        DlpackError::new(FailureKind::OutOfMemory, err.to_string())
    }
}

impl From<CopyError> for DlpackError {
    fn from(err: CopyError) -> Self {
        DlpackError::new(FailureKind::UnsupportedLayout, err.to_string())
    }
}

/// `Result<T, DlpackError>`.
pub type Result<T, E = DlpackError> = std::result::Result<T, E>;

impl From<crate::stream_rules::StreamRuleViolation> for DlpackError {
    /// A stream value the spec's rules reject for a device (InvalidStream).
    fn from(v: crate::stream_rules::StreamRuleViolation) -> Self {
        let shown = v.stream.map_or_else(|| "None".to_string(), |s| s.to_string());
        let device = v.device_type.name().map_or_else(|| format!("device type {}", v.device_type.0), str::to_string);
        DlpackError::new(FailureKind::InvalidStream, format!("invalid stream={shown} for {device}: {}", v.reason))
    }
}
