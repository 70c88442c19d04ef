//! Whether a thread that does not hold the GIL may take it: the interpreter is initialised and
//! not finalising. Deleters and keepers dropped on foreign threads ask this before
//! `PyGILState_Ensure`, which during finalisation exits or hangs the calling thread (an exit
//! unwinding through an `extern "C"` deleter aborts the process).

use std::ffi::{CStr, c_int};
use std::sync::OnceLock;

use pyo3::ffi;

type IsFinalizing = unsafe extern "C" fn() -> c_int;

/// `Py_IsFinalizing` (3.13+) or `_Py_IsFinalizing` (3.11, 3.12), looked up once in the loaded
/// interpreter (`dlsym`), so one build works with either name; `None` when neither exists.
fn is_finalizing_fn() -> Option<IsFinalizing> {
    static FN: OnceLock<Option<IsFinalizing>> = OnceLock::new();
    *FN.get_or_init(|| {
        [c"Py_IsFinalizing", c"_Py_IsFinalizing"].into_iter().find_map(|name: &CStr| {
            // SAFETY: `dlsym` with the default handle only searches the loaded objects' symbol
            // tables; a found symbol of either name has the C signature `int (void)`.
            unsafe {
                let p = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
                (!p.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, IsFinalizing>(p))
            }
        })
    })
}

/// The interpreter is initialised and not finalising, so a thread may take the GIL. Without
/// either finalisation query, only initialisation is checked (as PyO3 does before 3.13).
pub(crate) fn may_take_gil() -> bool {
    // SAFETY: both calls are plain queries CPython allows without the GIL.
    unsafe { ffi::Py_IsInitialized() != 0 && is_finalizing_fn().is_none_or(|f| f() == 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_interpreter_is_usable_and_has_a_finalizing_query() {
        pyo3::Python::attach(|_| {
            assert!(is_finalizing_fn().is_some(), "libpython exports Py_IsFinalizing or _Py_IsFinalizing");
            assert!(may_take_gil());
        });
    }
}
