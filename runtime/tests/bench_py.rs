//! Rough timings in the embedded interpreter (release: `cargo test --release --test bench_py
//! -- --ignored --nocapture`). Not a timed test: it prints ratios against numpy in one run.

mod common;

use std::ffi::c_void;

use dlbind::export::DLPackSource;
use dlbind::prelude::*;
use pyo3::types::PyDict;
use pyo3::wrap_pyfunction;

#[pyclass(frozen)]
struct T {
    data: Vec<f32>,
    shape: [usize; 1],
}

// SAFETY: 1-d contiguous over immutable `data`.
unsafe impl DLPackSource for T {
    #[inline]
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr() as *mut c_void
    }
    #[inline]
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    #[inline]
    fn dlpack_ndim(&self) -> usize {
        1
    }
    #[inline]
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out[0] = self.shape[0] as i64;
    }
}

#[pymethods]
impl T {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        dlbind::__private::dlpack_method(slf, stream, max_version, dl_device, copy)
    }
    fn __dlpack_device__(slf: &Bound<'_, Self>) -> PyResult<(i32, i32)> {
        dlbind::__private::dlpack_device_method(slf)
    }
}

/// What the demo does: wrap the import in a new pyclass object.
#[pyclass(frozen)]
struct View {
    #[allow(dead_code)]
    buf: Buffer,
}

#[pyfunction]
#[pyo3(signature = (x, /, *, device=None, copy=None))]
fn from_dlpack(
    x: &Bound<'_, PyAny>,
    device: Option<&Bound<'_, PyAny>>,
    copy: Option<&Bound<'_, PyAny>>,
) -> PyResult<View> {
    let device = dlbind::args::parse_device_arg(device)?;
    let copy = dlbind::args::parse_copy_arg(copy)?;
    Ok(View {
        buf: Buffer::from(dlbind::from_dlpack(x, device, copy)?),
    })
}

#[test]
#[ignore]
fn bench() {
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("numpy not importable: skipping");
            return;
        };
        let g = PyDict::new(py);
        g.set_item("np", &np).unwrap();
        g.set_item(
            "t",
            Bound::new(
                py,
                T {
                    data: vec![0.0; 1000],
                    shape: [1000],
                },
            )
            .unwrap(),
        )
        .unwrap();
        g.set_item("from_dlpack", wrap_pyfunction!(from_dlpack, py).unwrap())
            .unwrap();
        py.run(
            cr#"
import timeit
a = np.zeros(1000, dtype=np.float32)
def pair(a_stmt, b_stmt, n=20000, rounds=60):
    ta = timeit.Timer(a_stmt, globals=globals()); tb = timeit.Timer(b_stmt, globals=globals())
    ra = []; rb = []
    for _ in range(rounds):  # interleaved, min of many: robust on a loaded machine
        ra.append(ta.timeit(n)); rb.append(tb.timeit(n))
    return min(ra) / n * 1e9, min(rb) / n * 1e9
rows = []
for label, ours, theirs in [
    ("__dlpack__() legacy", "t.__dlpack__()", "a.__dlpack__()"),
    ("__dlpack__(max_version=(1,3))", "t.__dlpack__(max_version=(1, 3))", "a.__dlpack__(max_version=(1, 3))"),
    ("np.from_dlpack(x)", "np.from_dlpack(t)", "np.from_dlpack(a)"),
    ("from_dlpack(a) vs np.from_dlpack(a)", "from_dlpack(a)", "np.from_dlpack(a)"),
    ("from_dlpack(t) vs np.from_dlpack(a)", "from_dlpack(t)", "np.from_dlpack(a)"),
]:
    o, r = pair(ours, theirs)
    rows.append(f"{label:40s} ours {o:7.1f} ns  ref {r:7.1f} ns  ratio {o/r:5.2f}")
print("\n".join(rows))
"#,
            Some(&g),
            None,
        )
        .unwrap();
        dlbind::__private::install_fast_dlpack::<T>(py).unwrap();
        py.run(
            cr#"
rows = []
for label, ours, theirs in [
    ("[fast] __dlpack__() legacy", "t.__dlpack__()", "a.__dlpack__()"),
    ("[fast] __dlpack__(max_version=(1,3))", "t.__dlpack__(max_version=(1, 3))", "a.__dlpack__(max_version=(1, 3))"),
    ("[fast] np.from_dlpack(x)", "np.from_dlpack(t)", "np.from_dlpack(a)"),
]:
    o, r = pair(ours, theirs)
    rows.append(f"{label:40s} ours {o:7.1f} ns  ref {r:7.1f} ns  ratio {o/r:5.2f}")
print("\n".join(rows))
"#,
            Some(&g),
            None,
        )
        .unwrap();
    });
}

/// `perf record` target: `DLBIND_PROFILE_STMT='t.__dlpack__()' cargo test --release --test bench_py profile -- --ignored`.
#[test]
#[ignore]
fn profile() {
    let stmt = std::env::var("DLBIND_PROFILE_STMT").unwrap_or_else(|_| "t.__dlpack__()".into());
    Python::attach(|py| {
        let np = common::numpy(py);
        let g = PyDict::new(py);
        if let Some(np) = &np {
            g.set_item("np", np).unwrap();
            g.set_item("a", np.call_method1("zeros", (1000,)).unwrap())
                .unwrap();
        }
        g.set_item(
            "t",
            Bound::new(
                py,
                T {
                    data: vec![0.0; 1000],
                    shape: [1000],
                },
            )
            .unwrap(),
        )
        .unwrap();
        g.set_item("from_dlpack", wrap_pyfunction!(from_dlpack, py).unwrap())
            .unwrap();
        if std::env::var_os("DLBIND_PROFILE_FAST").is_some() {
            dlbind::__private::install_fast_dlpack::<T>(py).unwrap();
        }
        let n: usize = std::env::var("DLBIND_PROFILE_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3_000_000);
        // Warm up (type caches, interned names), then the measured loop.
        let code = format!("for _ in range(1000): {stmt}\nfor _ in range({n}): {stmt}\n");
        py.run(&std::ffi::CString::new(code).unwrap(), Some(&g), None)
            .unwrap();
    });
}
