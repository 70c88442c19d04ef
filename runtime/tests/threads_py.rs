//! Issue 6: deleters of imported tensors run from threads that do not hold the GIL.
//!
//! numpy's capsule deleter needs the GIL (it decrefs the array); a Rust thread that never held
//! it drops the `ImportedTensor`, possibly while another thread holds the GIL and runs Python.

mod common;

use dlbind::{ImportedTensor, from_dlpack};
use pyo3::prelude::*;

fn refcount(obj: &Bound<'_, PyAny>) -> isize {
    // SAFETY: `obj` is a live object and the caller is attached (it holds a `Bound`).
    unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) }
}

#[test]
fn numpy_imports_dropped_on_rust_threads_release_the_array() {
    let _g = common::serial();
    let (arr, base) = Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return (None, 0);
        };
        let a = np.call_method1("arange", (1000.0f64,)).unwrap();
        let base = refcount(&a);
        (Some(a.unbind()), base)
    });
    let Some(arr) = arr else { return };
    const N: usize = 16;
    let handles: Vec<ImportedTensor> = Python::attach(|py| {
        (0..N)
            .map(|_| from_dlpack(arr.bind(py), None, None).unwrap())
            .collect()
    });
    Python::attach(|py| {
        assert_eq!(
            refcount(arr.bind(py)),
            base + N as isize,
            "each view holds the array"
        )
    });
    // Half the drops race with a thread that holds the GIL and runs Python code.
    let busy = std::thread::spawn(|| {
        Python::attach(|py| {
            py.run(c"s = 0\nfor i in range(200000): s += i", None, None)
                .unwrap();
        })
    });
    let droppers: Vec<_> = handles
        .into_iter()
        .map(|t| {
            std::thread::spawn(move || {
                assert_eq!(t.shape(), &[1000]);
                drop(t)
            })
        })
        .collect();
    for d in droppers {
        d.join().expect("a dropping thread panicked");
    }
    busy.join().unwrap();
    Python::attach(|py| {
        assert_eq!(
            refcount(arr.bind(py)),
            base,
            "every deleter ran exactly once"
        )
    });
}
