//! A derived type whose shape and strides do not fit its data field (safe Rust can build one)
//! is refused by every export path with the spec's `MalformedTensor` exception, instead of
//! handing consumers memory that is not there; consistent instances of the same type export.

mod common;

use std::ffi::c_void;

use dlbind::error::py_exception;
use dlbind::exchange::lookup_exchange_api;
use dlbind::export::DLPackSource;
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;
use dlbind::spec::types::{DLDataType, DLTensor};
use dlbind::stats::live_exports;

/// Writable storage (`Buffer::from_vec`): a `Vec` field is exported read-only, which the legacy
/// capsule and the bare-DLTensor fill refuse before any span is looked at.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Grid {
    #[dlpack(data)]
    data: dlbind::Buffer,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
}

#[dlbind::pymethods]
impl Grid {}

/// Derived over untyped owned storage (`Buffer`, as the demo's `Tensor`), fixed dtype.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Raw {
    #[dlpack(data)]
    buf: dlbind::Buffer,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Raw {}

/// As `Raw`, with the extent vouched for (`UncheckedExtent`): no span check.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32", unchecked_extent)]
struct Trusted {
    #[dlpack(data)]
    buf: dlbind::Buffer,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Trusted {}

// SAFETY: the test builds `Trusted` only with a shape that fits its buffer.
unsafe impl dlbind::UncheckedExtent for Trusted {}

/// Derived with a runtime dtype over a boxed slice.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Dyn {
    #[dlpack(data)]
    data: Box<[u8]>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Dyn {}

fn grid<'py>(py: Python<'py>, len: usize, shape: &[i64], strides: &[i64]) -> Bound<'py, PyAny> {
    Bound::new(
        py,
        Grid {
            data: dlbind::Buffer::from_vec(vec![0.0f32; len]),
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        },
    )
    .unwrap()
    .into_any()
}

fn is_malformed(py: Python<'_>, e: &PyErr) -> bool {
    let want = py_exception(FailureKind::MalformedTensor.exception(), String::new());
    e.get_type(py).is(want.get_type(py)) && e.to_string().contains("addresses memory outside")
}

/// The outcome of every export path of `x`, in order: `__dlpack__` (legacy and versioned),
/// memoryview, the array interface, the table's owning export and (where the type has it) its
/// non-owning fill.
fn export_all(py: Python<'_>, x: &Bound<'_, PyAny>) -> Vec<PyResult<()>> {
    let mut out = common::export_paths(py, x);
    // The non-owning fill exists only for types that store i64 shape and strides.
    // SAFETY: GIL held, `x` live; the table is process-lifetime; `dl` is a valid out parameter.
    unsafe {
        let t = lookup_exchange_api(py, x.as_ptr());
        if let Some(fill) = (*t).dltensor_from_py_object_no_sync {
            let mut dl: DLTensor = std::mem::zeroed();
            out.push(if fill(x.as_ptr().cast::<c_void>(), &mut dl) == 0 {
                Ok(())
            } else {
                Err(PyErr::fetch(py))
            });
        }
    }
    out
}

#[test]
fn inconsistent_arrays_are_refused_by_every_export() {
    Python::attach(|py| {
        let base = live_exports();
        let bad = [
            (5, vec![2, 3], vec![3, 1]), // 6 elements described, 5 held
            (0, vec![1], vec![1]),       // empty data, one element described
            (6, vec![2, 3], vec![1, 3]), // strides reach element 1 + 2*3 = 7
            (6, vec![3], vec![-1]),      // a negative stride from element 0 reaches before the data
            (4, vec![], vec![]),         // fine: 0-d needs one element (control below)
        ];
        for (len, shape, strides) in &bad[..4] {
            let x = grid(py, *len, shape, strides);
            for (i, r) in export_all(py, &x).into_iter().enumerate() {
                let e = r.expect_err(&format!(
                    "path {i} exported {shape:?}/{strides:?} over {len} elements"
                ));
                assert!(is_malformed(py, &e), "path {i}: {e}");
            }
        }
        let (len, shape, strides) = &bad[4];
        for (i, r) in export_all(py, &grid(py, *len, shape, strides))
            .into_iter()
            .enumerate()
        {
            r.unwrap_or_else(|e| panic!("0-d path {i}: {e}"));
        }
        // Consistent arrays, including a transposed one and an empty one with no data.
        for (len, shape, strides) in [
            (6, vec![2, 3], vec![3, 1]),
            (6, vec![3, 2], vec![1, 3]),
            (0, vec![0, 4], vec![4, 1]),
        ] {
            for (i, r) in export_all(py, &grid(py, len, &shape, &strides))
                .into_iter()
                .enumerate()
            {
                r.unwrap_or_else(|e| panic!("{shape:?}/{strides:?} path {i}: {e}"));
            }
        }
        assert_eq!(live_exports(), base, "refusals leak nothing");
    });
}

#[test]
fn owned_buffers_and_boxed_slices_are_checked_too() {
    Python::attach(|py| {
        let base = live_exports();
        let raw = |bytes: usize, shape: Vec<i64>| {
            let buf = dlbind::Buffer::from(dlbind::alloc::AlignedBuffer::zeroed(bytes).unwrap());
            Bound::new(py, Raw { buf, shape }).unwrap().into_any()
        };
        for (i, r) in export_all(py, &raw(16, vec![1 << 20]))
            .into_iter()
            .enumerate()
        {
            let e = r.expect_err(&format!("path {i}: 2^20 floats over 16 bytes"));
            assert!(is_malformed(py, &e), "path {i}: {e}");
        }
        for (i, r) in export_all(py, &raw(16, vec![4])).into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("4 floats in 16 bytes, path {i}: {e}"));
        }
        // A runtime dtype that describes nothing (zero lanes) or is unknown is refused before
        // any span arithmetic (a zero width would make every span fit).
        let f32_ = <f32 as DLPackElement>::DTYPE;
        for dtype in [
            DLDataType { lanes: 0, ..f32_ },
            DLDataType { bits: 0, ..f32_ },
            DLDataType { code: 200, ..f32_ },
        ] {
            let x = Bound::new(
                py,
                Dyn {
                    data: vec![0u8; 0].into_boxed_slice(),
                    dtype,
                    shape: vec![1 << 20],
                },
            )
            .unwrap()
            .into_any();
            let want = py_exception(FailureKind::UnsupportedDtype.exception(), String::new());
            for (i, r) in export_all(py, &x).into_iter().enumerate() {
                // Path 0 too: a boxed slice is lent through `&`, read-only, so a legacy
                // request is a copy, whose export checks the dtype first.
                let e = r.expect_err(&format!("path {i}: dtype {dtype:?}"));
                assert!(
                    e.get_type(py).is(want.get_type(py)) && e.to_string().contains("cannot export"),
                    "path {i}: {e}"
                );
            }
        }
        // The derive reports the storage's extent and device; only a type that vouches for its
        // layout skips the span check.
        let buf = || dlbind::Buffer::from(dlbind::alloc::AlignedBuffer::zeroed(16).unwrap());
        let raw = Raw {
            buf: buf(),
            shape: vec![4],
        };
        assert_eq!(
            raw.__dlbind_storage(),
            Some((dlbind::Extent::from_start(16), Device::CPU))
        );
        assert!(!raw.dlpack_layout_trusted());
        let trusted = Trusted {
            buf: buf(),
            shape: vec![4],
        };
        assert!(trusted.dlpack_layout_trusted());
        for (i, r) in export_all(py, &Bound::new(py, trusted).unwrap().into_any())
            .into_iter()
            .enumerate()
        {
            r.unwrap_or_else(|e| panic!("trusted, path {i}: {e}"));
        }
        let ok = Bound::new(
            py,
            Dyn {
                data: vec![0u8; 8].into_boxed_slice(),
                dtype: f32_,
                shape: vec![2],
            },
        )
        .unwrap()
        .into_any();
        for (i, r) in export_all(py, &ok).into_iter().enumerate().skip(1) {
            r.unwrap_or_else(|e| panic!("Box<[u8]> of 8 bytes as 2 floats, path {i}: {e}"));
        }
        assert_eq!(live_exports(), base, "refusals leak nothing");
    });
}
