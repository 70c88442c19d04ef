//! Whether a thread that does not hold the GIL may take it: the interpreter is initialised and
//! not finalising. Deleters and keepers dropped on foreign threads ask this before
//! `PyGILState_Ensure`, which during finalisation exits or hangs the calling thread (an exit
//! unwinding through an `extern "C"` deleter aborts the process).

use std::ffi::c_int;
use std::sync::OnceLock;

use pyo3::ffi;

type IsFinalizing = unsafe extern "C" fn() -> c_int;

/// `Py_IsFinalizing` (3.13+) or `_Py_IsFinalizing` (3.11, 3.12), looked up once in the loaded
/// interpreter (`dlsym`), so one build works with either name; `None` when neither exists.
fn is_finalizing_fn() -> Option<IsFinalizing> {
    static FN: OnceLock<Option<IsFinalizing>> = OnceLock::new();
    // SAFETY: a found symbol of either name has the C signature `int (void)`.
    *FN.get_or_init(|| unsafe {
        super::api::interpreter_symbol::<IsFinalizing>(&[c"Py_IsFinalizing", c"_Py_IsFinalizing"])
    })
}

/// The interpreter is initialised and not finalising, so a thread may take the GIL. Without
/// either finalisation query, only initialisation is checked (as PyO3 does before 3.13).
pub(crate) fn may_take_gil() -> bool {
    // SAFETY: both calls are plain queries CPython allows without the GIL.
    unsafe { ffi::Py_IsInitialized() != 0 && is_finalizing_fn().is_none_or(|f| f() == 0) }
}

/// Refuses to set dlbind types up in an interpreter running without the GIL (free-threaded
/// CPython with the GIL off): dlbind's hot paths (spare manager blocks, the export counter,
/// per-type caches, free lists) are ordered by the GIL. Called when a derived type's object is
/// created (its exchange-table class attribute) and by the module helpers, so the import fails
/// with this message instead of racing later. Before 3.13 (`sys._is_gil_enabled` absent) there
/// is always a GIL.
pub(crate) fn require_gil(py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    let Ok(is_enabled) = py.import("sys")?.getattr("_is_gil_enabled") else {
        return Ok(());
    };
    if is_enabled.call0()?.is_truthy()? {
        return Ok(());
    }
    Err(pyo3::exceptions::PyImportError::new_err(
        "dlbind needs the GIL, which is disabled in this interpreter: declare the extension \
         module with #[pymodule(gil_used = true)] (PyO3 declares modules GIL-free by default) and \
         do not force PYTHON_GIL=0",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_interpreter_is_usable_and_has_a_finalizing_query() {
        pyo3::Python::attach(|_| {
            assert!(
                is_finalizing_fn().is_some(),
                "libpython exports Py_IsFinalizing or _Py_IsFinalizing"
            );
            assert!(may_take_gil());
        });
    }

    /// With a GIL (3.11 here, or `sys._is_gil_enabled()` true) setup proceeds; an interpreter
    /// reporting the GIL off (simulated by replacing `sys._is_gil_enabled`) gets the ImportError.
    #[test]
    fn require_gil_refuses_an_interpreter_without_one() {
        use pyo3::prelude::*;
        pyo3::Python::attach(|py| {
            let sys = py.import("sys").unwrap();
            let saved = sys.getattr("_is_gil_enabled").ok();
            // C callables (`object()` is truthy, `bool()` false): no bytecode runs while the
            // attribute is replaced, so the eval loop never hands the GIL to another test thread
            // that could see it.
            let builtins = py.import("builtins").unwrap();
            let (yes, no) = (
                builtins.getattr("object").unwrap(),
                builtins.getattr("bool").unwrap(),
            );
            let set = |v: bool| {
                sys.setattr("_is_gil_enabled", if v { &yes } else { &no })
                    .unwrap()
            };
            set(true);
            assert!(require_gil(py).is_ok());
            set(false);
            let e = require_gil(py).unwrap_err();
            assert!(
                e.is_instance_of::<pyo3::exceptions::PyImportError>(py)
                    && e.to_string().contains("gil_used = true"),
                "{e}"
            );
            match saved {
                Some(f) => sys.setattr("_is_gil_enabled", f).unwrap(),
                None => sys.delattr("_is_gil_enabled").unwrap(),
            }
            assert!(require_gil(py).is_ok(), "restored");
        });
    }
}
