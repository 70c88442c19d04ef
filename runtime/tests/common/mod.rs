// Shared helpers for the embedded-Python tests (included with `mod common;`).
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;

static SERIAL: Mutex<()> = Mutex::new(());

/// Tests that look at the process-wide `live_exports()` counter or deleter counters run one at
/// a time, each starting with the cyclic garbage of the tests before it collected: otherwise a
/// collection that happens to run inside a test (any allocation may start one) frees an earlier
/// test's exports there and moves that test's `live_exports()` baseline.
pub fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(not(miri))] // Under Miri (no interpreter there) the lock alone.
    Python::attach(|py| {
        py.import("gc").unwrap().call_method0("collect").unwrap();
    });
    guard
}

/// Makes the test venv's packages (numpy, ...) importable.
///
/// `DLBIND_TEST_SITE` (set by scripts/test.sh and scripts/matrix.sh to the site-packages of the
/// venv made for the embedded interpreter) names it; there numpy must import, and a test that
/// needs it fails rather than skips. Without it, the repository's `.venv` is used when its
/// Python version is the embedded one's, and the numpy tests skip, saying so, when it is not.
pub fn add_venv(py: Python<'_>) {
    let site = match std::env::var("DLBIND_TEST_SITE") {
        Ok(site) => site,
        Err(_) => {
            let v = py.version_info();
            format!(
                "{}/../.venv/lib/python{}.{}/site-packages",
                env!("CARGO_MANIFEST_DIR"),
                v.major,
                v.minor
            )
        }
    };
    if std::path::Path::new(&site).exists() {
        let sys = py.import("sys").unwrap();
        let path = sys.getattr("path").unwrap();
        if !path.contains(&site).unwrap() {
            path.call_method1("append", (&site,)).unwrap();
        }
    }
}

/// numpy, or `None` when it cannot be imported and no test venv was named (see [`add_venv`]).
pub fn numpy(py: Python<'_>) -> Option<Bound<'_, PyModule>> {
    add_venv(py);
    match py.import("numpy") {
        Ok(np) => Some(np),
        Err(e) if std::env::var_os("DLBIND_TEST_SITE").is_some() => {
            panic!("DLBIND_TEST_SITE is set but numpy does not import: {e}")
        }
        Err(_) => None,
    }
}

/// A versioned DLPack capsule as a C producer makes one: its destructor calls the tensor's
/// deleter iff the capsule is still unused (a consumer that renamed it owns the tensor).
pub fn versioned_capsule(
    py: Python<'_>,
    m: std::ptr::NonNull<dlbind::spec::types::DLManagedTensorVersioned>,
) -> Bound<'_, PyAny> {
    use dlbind::spec::types::{DLManagedTensorVersioned, DLPACK_VERSIONED_CAPSULE_NAME};
    use pyo3::ffi as pyffi;

    unsafe extern "C" fn dtor(cap: *mut pyffi::PyObject) {
        // SAFETY: CPython calls this with a live capsule and the GIL.
        unsafe {
            if pyffi::PyCapsule_IsValid(cap, DLPACK_VERSIONED_CAPSULE_NAME.as_ptr()) != 0 {
                let p = pyffi::PyCapsule_GetPointer(cap, DLPACK_VERSIONED_CAPSULE_NAME.as_ptr())
                    .cast::<DLManagedTensorVersioned>();
                ((*p).deleter.unwrap())(p);
            }
        }
    }
    // SAFETY: static name, matching destructor.
    unsafe {
        Bound::from_owned_ptr(
            py,
            pyffi::PyCapsule_New(
                m.as_ptr().cast(),
                DLPACK_VERSIONED_CAPSULE_NAME.as_ptr(),
                Some(dtor),
            ),
        )
    }
}

/// The exchange table's owning export of a derived object `x`
/// (`managed_tensor_from_py_object_no_sync`): `f` sees the live managed tensor, which is deleted
/// right after; the table's error otherwise.
pub fn exchange_export<R>(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    f: impl FnOnce(&dlbind::spec::types::DLManagedTensorVersioned) -> R,
) -> PyResult<R> {
    // SAFETY: GIL held, `x` live; the table (checked non-NULL) is process-lifetime; the out
    // parameter is valid; an owning export that succeeds is read by `f` while live, then
    // deleted once.
    unsafe {
        let t = dlbind::exchange::lookup_exchange_api(py, x.as_ptr());
        assert!(!t.is_null(), "derived types have a table");
        let mut m: *mut dlbind::spec::types::DLManagedTensorVersioned = std::ptr::null_mut();
        if ((*t).managed_tensor_from_py_object_no_sync.unwrap())(
            x.as_ptr().cast::<std::ffi::c_void>(),
            &mut m,
        ) == 0
        {
            let r = f(&*m);
            ((*m).deleter.unwrap())(m);
            Ok(r)
        } else {
            Err(PyErr::fetch(py))
        }
    }
}

/// The outcome of every export path of a derived object `x` that any derived type has, in
/// order: `__dlpack__` legacy and versioned (`max_version=(1, 3)`), memoryview,
/// `__array_interface__`, and the exchange table's owning export (deleted at once on success).
pub fn export_paths(py: Python<'_>, x: &Bound<'_, PyAny>) -> Vec<PyResult<()>> {
    use pyo3::types::IntoPyDict;
    let kw = [("max_version", (1, 3))].into_py_dict(py).unwrap();
    vec![
        x.call_method0("__dlpack__").map(drop),
        x.call_method("__dlpack__", (), Some(&kw)).map(drop),
        py.eval(c"memoryview", None, None)
            .unwrap()
            .call1((x,))
            .map(drop),
        x.getattr("__array_interface__").map(drop),
        exchange_export(py, x, |_| ()),
    ]
}
