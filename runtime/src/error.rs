//! `DlpackError`: a generated [`FailureKind`] plus a message. The Python exception type is
//! chosen by the spec's mapping (`FailureKind::exception()`), never here.

use std::borrow::Cow;

use pyo3::exceptions::{
    PyAttributeError, PyBaseException, PyBufferError, PyMemoryError, PyRuntimeError, PySystemError,
    PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::alloc::AllocError;
use crate::copy::CopyError;
use crate::spec::errors::{FailureKind, PyExceptionKind};

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
        DlpackError {
            kind,
            message: message.into(),
        }
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

/// Builds the Python exception chosen by the spec's mapping for `kind`: the built-in exception
/// type named [`PyExceptionKind::name`]. The usual ones are matched by name (no lookup); any
/// other name the spec lists is looked up in `builtins` when the error is raised, so adding an
/// exception to the spec needs no edit here.
pub fn py_exception(kind: PyExceptionKind, message: String) -> PyErr {
    match kind.name() {
        "BufferError" => PyBufferError::new_err(message),
        "TypeError" => PyTypeError::new_err(message),
        "ValueError" => PyValueError::new_err(message),
        "AttributeError" => PyAttributeError::new_err(message),
        "MemoryError" => PyMemoryError::new_err(message),
        "RuntimeError" => PyRuntimeError::new_err(message),
        "SystemError" => PySystemError::new_err(message),
        other => builtin_exception(other, message),
    }
}

/// `builtins.<name>(message)`; a `SystemError` naming the problem when `builtins` has no such
/// exception type (a spec naming a non-built-in exception).
#[cold]
fn builtin_exception(name: &'static str, message: String) -> PyErr {
    Python::attach(|py| {
        let found = py
            .import("builtins")
            .and_then(|b| b.getattr(name))
            .ok()
            .and_then(|t| t.cast_into::<PyType>().ok())
            .filter(|t| t.is_subclass_of::<PyBaseException>().unwrap_or(false));
        match found {
            Some(t) => PyErr::from_type(t, message),
            None => PySystemError::new_err(format!(
                "the spec maps this failure to `{name}`, which is not a built-in exception type: {message}"
            )),
        }
    })
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

impl From<crate::spec::streams::StreamRuleViolation> for DlpackError {
    /// A stream value the spec's rules reject for a device (InvalidStream).
    fn from(v: crate::spec::streams::StreamRuleViolation) -> Self {
        let shown = v
            .stream
            .map_or_else(|| "None".to_string(), |s| s.to_string());
        let device = v.device_type.name().map_or_else(
            || format!("device type {}", v.device_type.0),
            str::to_string,
        );
        DlpackError::new(
            FailureKind::InvalidStream,
            format!("invalid stream={shown} for {device}: {}", v.reason),
        )
    }
}

/// The name of `obj`'s type, for error messages (empty if it cannot be read).
pub(crate) fn type_name_of(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every exception the spec lists is a built-in Python exception type, and `py_exception`
    /// raises exactly that type for it.
    #[test]
    fn each_spec_exception_is_the_builtin_of_that_name() {
        Python::attach(|py| {
            let builtins = py.import("builtins").expect("builtins");
            for &kind in FailureKind::ALL {
                let exc = kind.exception();
                let err = py_exception(exc, "m".into());
                let want = builtins
                    .getattr(exc.name())
                    .expect("a builtin of that name");
                assert!(err.get_type(py).is(&want), "{kind:?} → {}", exc.name());
            }
        });
    }

    /// Names outside the matched set are looked up in `builtins`; a name that is not a built-in
    /// exception type becomes a SystemError that says so (never a panic).
    #[test]
    fn other_names_are_looked_up_in_builtins() {
        Python::attach(|py| {
            let err = builtin_exception("KeyError", "k".into());
            assert!(
                err.get_type(py)
                    .is(py.get_type::<pyo3::exceptions::PyKeyError>())
            );
            assert_eq!(err.value(py).to_string(), "'k'");
            for bad in ["NotAnException", "len"] {
                let err = builtin_exception(bad, "x".into());
                assert!(err.is_instance_of::<PySystemError>(py), "{bad}");
                assert!(err.value(py).to_string().contains(bad));
            }
        });
    }
}
