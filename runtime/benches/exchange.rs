//! Criterion benchmarks of one DLPack exchange at the C level, in an embedded interpreter: what
//! a consumer pays to get a tensor out of a producer object and release it, without the Python
//! call around it (`bench/bench_dlpack.py` times the calls users make).
//!
//! For a 3×4 f32 tensor of a derived type (`#[derive(DLPackExport)]`), in one run:
//! * `table_owning`: `type(x).__dlpack_c_exchange_api__` looked up (per-type cache), its owning
//!   export, the import (validation) and the deleter — what `dlbind_demo.from_dlpack(t)` does
//!   through the table, minus building the result object;
//! * `table_non_owning`: the lookup and the non-owning `dltensor_from_py_object_no_sync` fill
//!   (what a kernel-launch consumer such as tvm-ffi's function calls uses);
//! * `capsule_ours`: `x.__dlpack__(max_version=(1, 3))`, the capsule import and the deleter;
//! * `capsule_numpy`: the same for a numpy array of the same shape (the baseline: numpy's
//!   exchange, skipped when numpy is not importable).
//!
//! Run: `cargo bench -p dlbind --bench exchange`. The upstream DLPack pages quote 30–80 ns per
//! table exchange against 0.2–1 µs through capsules.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dlbind::exchange::{import_via_exchange_api_with, lookup_exchange_api};
use dlbind::prelude::*;
use dlbind::spec::types::{DLDataType, DLTensor};
use dlbind::{Device, ImportedTensor};
use pyo3::types::{PyDict, PyTuple};

/// A derived array type (exchange table included) over immutable host memory.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Arr {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(device)]
    device: Device,
}

#[dlbind::pymethods]
impl Arr {}

/// Makes the repository's venv (numpy) importable when it exists, for the interpreter's version.
fn add_venv(py: Python<'_>) {
    let v = py.version_info();
    let site = format!(
        "{}/../.venv/lib/python{}.{}/site-packages",
        env!("CARGO_MANIFEST_DIR"),
        v.major,
        v.minor
    );
    if std::path::Path::new(&site).exists() {
        let path = py
            .import("sys")
            .and_then(|s| s.getattr("path"))
            .expect("sys.path");
        path.call_method1("append", (site,))
            .expect("append site-packages");
    }
}

fn exchange(c: &mut Criterion) {
    Python::attach(|py| {
        add_venv(py);
        let arr = Arr {
            data: vec![1.0; 12],
            dtype: <f32 as DLPackElement>::DTYPE,
            shape: vec![3, 4],
            strides: vec![4, 1],
            device: Device::CPU,
        };
        let x = Bound::new(py, arr).expect("instance").into_any();
        let kw = PyDict::new(py);
        kw.set_item("max_version", PyTuple::new(py, [1, 3]).expect("tuple"))
            .expect("kw");
        let mut g = c.benchmark_group("exchange_3x4_f32");

        g.bench_function("table_owning", |b| {
            b.iter(|| {
                let t = import_via_exchange_api_with(
                    black_box(&x),
                    // SAFETY: a lending table's view describes memory its owner keeps as it
                    // is while alive; the handle keeps a strong reference to the owner.
                    |v| Ok(unsafe { ImportedTensor::from_python_view(v) }),
                    Ok,
                )
                .expect("a table")
                .expect("export");
                black_box(t.data_ptr());
            })
        });
        g.bench_function("table_non_owning", |b| {
            b.iter(|| {
                // SAFETY: GIL held, `x` is live; the table (checked non-NULL) is
                // process-lifetime and has the entry (i64 dims); `out` is a valid DLTensor.
                unsafe {
                    let table = lookup_exchange_api(py, black_box(x.as_ptr()));
                    assert!(!table.is_null(), "Arr has a table");
                    let fill = (*table)
                        .dltensor_from_py_object_no_sync
                        .expect("fill entry");
                    let mut out: DLTensor = std::mem::zeroed();
                    assert_eq!(fill(x.as_ptr().cast(), &mut out), 0);
                    black_box(&out);
                }
            })
        });
        g.bench_function("capsule_ours", |b| {
            b.iter(|| {
                let cap = x.call_method("__dlpack__", (), Some(&kw)).expect("capsule");
                let t = ImportedTensor::from_capsule(&cap).expect("import");
                black_box(t.data_ptr());
            })
        });
        if let Ok(np) = py.import("numpy") {
            let a = np
                .call_method1("ones", ((3, 4), "float32"))
                .expect("numpy array");
            g.bench_function("capsule_numpy", |b| {
                b.iter(|| {
                    let cap = a.call_method("__dlpack__", (), Some(&kw)).expect("capsule");
                    let t = ImportedTensor::from_capsule(&cap).expect("import");
                    black_box(t.data_ptr());
                })
            });
        } else {
            eprintln!("numpy is not importable: capsule_numpy skipped");
        }
        g.finish();
    });
}

criterion_group!(benches, exchange);
criterion_main!(benches);
