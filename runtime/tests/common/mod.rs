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
    Python::attach(|py| {
        py.import("gc").unwrap().call_method0("collect").unwrap();
    });
    guard
}

/// Makes the repository's venv (numpy, ...) importable when it exists.
pub fn add_venv(py: Python<'_>) {
    let site = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../.venv/lib/python3.11/site-packages"
    );
    if std::path::Path::new(site).exists() {
        let sys = py.import("sys").unwrap();
        let path = sys.getattr("path").unwrap();
        if !path.contains(site).unwrap() {
            path.call_method1("append", (site,)).unwrap();
        }
    }
}

pub fn numpy(py: Python<'_>) -> Option<Bound<'_, PyModule>> {
    add_venv(py);
    py.import("numpy").ok()
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
