//! Whether a thread that does not hold the GIL may take it: the interpreter is initialised and
//! not finalising. Deleters and keepers dropped on foreign threads ask this before
//! `PyGILState_Ensure`, which during finalisation exits or hangs the calling thread (an exit
//! unwinding through an `extern "C"` deleter aborts the process).

use std::ffi::c_int;

use pyo3::ffi;

type IsFinalizing = unsafe extern "C" fn() -> c_int;

/// The interpreter's finalisation query: `Py_IsFinalizing` (3.13+) or `_Py_IsFinalizing` (3.11,
/// 3.12), linked by a full-API build; an abi3 build with `abi3-layouts`, on a version in its
/// table, finds either name at run time. `None`: an abi3 build without it (the limited API of
/// 3.11 has no such query), which watches for finalisation with an `atexit` callback instead
/// ([`watch_finalization`]).
fn is_finalizing_fn() -> Option<IsFinalizing> {
    #[cfg(not(Py_LIMITED_API))]
    {
        Some(super::_Py_IsFinalizing)
    }
    #[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
    {
        static FN: std::sync::OnceLock<Option<IsFinalizing>> = std::sync::OnceLock::new();
        // SAFETY: a found symbol of either name has the C signature `int (void)`.
        *FN.get_or_init(|| unsafe {
            super::abi3_layouts::running()?;
            super::api::interpreter_symbol::<IsFinalizing>(&[
                c"Py_IsFinalizing",
                c"_Py_IsFinalizing",
            ])
        })
    }
    #[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
    {
        None
    }
}

/// Set by the `atexit` callback [`watch_finalization`] registers: Python's `atexit` callbacks
/// run at the start of `Py_FinalizeEx`, before the runtime is marked finalising. One process-wide
/// flag (there is one interpreter finalisation to watch), written once. abi3 builds without
/// `abi3-layouts` only: the others ask the interpreter.
#[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers the `atexit` callback that sets `EXITING` (once per process): what an abi3 build
/// without a finalisation query asks in [`may_take_gil`]; the other builds do not need it.
fn watch_finalization(py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
    #[cfg(not(all(Py_LIMITED_API, not(feature = "abi3-layouts"))))]
    {
        let _ = py;
        Ok(())
    }
    #[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
    {
        watch_atexit(py)
    }
}

#[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
fn watch_atexit(py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    static WATCHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WATCHING.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let on_exit = pyo3::types::PyCFunction::new_closure(py, None, None, |_args, _kwargs| {
        EXITING.store(true, std::sync::atomic::Ordering::Release);
    })?;
    py.import("atexit")?.call_method1("register", (on_exit,))?;
    WATCHING.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// The interpreter is initialised and not finalising (nor running its `atexit` callbacks), so
/// a thread may take the GIL.
pub(crate) fn may_take_gil() -> bool {
    // SAFETY: both calls are plain queries CPython allows without the GIL.
    unsafe {
        #[cfg(all(Py_LIMITED_API, not(feature = "abi3-layouts")))]
        if EXITING.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        ffi::Py_IsInitialized() != 0 && is_finalizing_fn().is_none_or(|f| f() == 0)
    }
}

/// Refuses to set dlbind types up in an interpreter running without the GIL (free-threaded
/// CPython with the GIL off): dlbind's hot paths (spare manager blocks, the export counter,
/// per-type caches, free lists) are ordered by the GIL. Called when a derived type's object is
/// created (its exchange-table class attribute) and by the module helpers, so the import fails
/// with this message instead of racing later. Before 3.13 (`sys._is_gil_enabled` absent) there
/// is always a GIL.
pub(crate) fn require_gil(py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    watch_finalization(py)?;
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
            assert_eq!(
                is_finalizing_fn().is_some(),
                cfg!(not(Py_LIMITED_API)) || cfg!(feature = "abi3-layouts"),
                "a full-API build links the finalisation query"
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
