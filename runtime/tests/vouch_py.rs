//! Issue 41: the storage vouches for what an export describes. Each scenario here exported more
//! memory, or more writable memory, than Rust lends before the storage's extent, writability and
//! device were applied (decision 0016): a derived type's own fields may narrow them, never
//! widen them, on every export path.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use dlbind::prelude::*;
use dlbind::spec::types::DLPACK_FLAG_BITMASK_READ_ONLY;
use dlbind::stats::live_exports;
use pyo3::types::{IntoPyDict, PyDict};

/// The README's `Frame`, verbatim.
#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
struct Frame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Dims,
    #[dlpack(strides)]
    strides: Dims,
    #[dlpack(device)]
    device: Device,
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl Frame {}

/// A plain class whose shape Python may set (`#[pyo3(get, set)]`), over a `Vec`.
#[pyclass]
#[derive(DLPackExport)]
struct Settable {
    #[dlpack(data)]
    values: Vec<f32>,
    #[pyo3(get, set)]
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl Settable {}

/// The same over writable storage: the span check is what stops Python.
#[pyclass]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct SettableBuf {
    #[dlpack(data)]
    values: Buffer,
    #[pyo3(get, set)]
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlbind::pymethods]
impl SettableBuf {}

/// A frozen class over a shared `Arc<[f32]>`.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Shared {
    #[dlpack(data)]
    values: Arc<[f32]>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[dlbind::pymethods]
impl Shared {}

/// Any storage, no device and no readonly field.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Bare {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[dlbind::pymethods]
impl Bare {}

/// An ndarray field: lent through `&`, so read-only.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Nd {
    #[dlpack(array)]
    a: ndarray::Array2<f64>,
}

#[dlbind::pymethods]
impl Nd {}

fn run(py: Python<'_>, code: &str, locals: &Bound<'_, PyDict>) -> PyResult<()> {
    let code = std::ffi::CString::new(code).unwrap();
    py.run(&code, None, Some(locals))
}

fn is_malformed(e: &PyErr) -> bool {
    e.to_string().contains("BufferError") && e.to_string().contains("addresses memory outside")
}

/// The outcome of every export path of `x` (`common::export_paths`), and the READ_ONLY flag of
/// a versioned capsule when one is exported.
fn export_all(py: Python<'_>, x: &Bound<'_, PyAny>) -> (Vec<PyResult<()>>, Option<bool>) {
    let kw = [("max_version", (1, 3))].into_py_dict(py).unwrap();
    let ro = x.call_method("__dlpack__", (), Some(&kw)).ok().map(|cap| {
        let t = dlbind::ImportedTensor::from_capsule(&cap).unwrap();
        t.flags() & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    });
    (common::export_paths(py, x), ro)
}

/// A legacy request (no READ_ONLY flag) of `x`'s read-only memory at `storage`: a private copy
/// under `copy=None` (decision 0024), the spec's ReadOnlyLegacy under `copy=False`.
fn legacy_is_a_copy(py: Python<'_>, x: &Bound<'_, PyAny>, storage: *const std::ffi::c_void) {
    let cap = x.call_method0("__dlpack__").unwrap();
    let t = dlbind::ImportedTensor::from_capsule(&cap).unwrap();
    assert_ne!(
        t.data_ptr().cast_const(),
        storage,
        "a legacy capsule of read-only memory is a copy"
    );
    drop(t);
    let kw = [("copy", false)].into_py_dict(py).unwrap();
    let e = x.call_method("__dlpack__", (), Some(&kw)).unwrap_err();
    assert!(e.to_string().contains("copy=False"), "{e}");
}

/// A 16-byte read-only numpy array imported into a `Buffer` (`Buffer::from(t)`, as the adapters
/// manual recommends).
fn readonly_import(py: Python<'_>) -> Option<Buffer> {
    let np = common::numpy(py)?;
    let a = np
        .call_method1("arange", (4,))
        .unwrap()
        .call_method1("astype", ("float32",))
        .unwrap();
    a.getattr("flags")
        .unwrap()
        .setattr("writeable", false)
        .unwrap();
    let t = dlbind::from_dlpack(&a, None, None).unwrap();
    assert!(t.readonly());
    assert_eq!(t.extent(), dlbind::Extent::from_start(16));
    Some(Buffer::from(t))
}

#[test]
fn frame_over_a_small_readonly_import_exports_neither_more_nor_writable() {
    let _s = common::serial();
    Python::attach(|py| {
        let Some(buf) = readonly_import(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let base = live_exports();
        let f32_ = <f32 as DLPackElement>::DTYPE;
        // The issue's case: 2^20 elements claimed over 16 bytes, claimed writable.
        let wide = Bound::new(
            py,
            Frame {
                buf,
                dtype: f32_,
                shape: Dims::from(&[1i64 << 20][..]),
                strides: Dims::from(&[1i64][..]),
                device: Device::CPU,
                readonly: false,
            },
        )
        .unwrap();
        let (res, _) = export_all(py, wide.as_any());
        for (i, r) in res.into_iter().enumerate() {
            let e = r.expect_err(&format!("path {i} exported 4 MiB over 16 bytes"));
            // The legacy path too: its copy checks the shape against the storage first.
            assert!(is_malformed(&e), "path {i}: {e}");
        }
        // The same storage with a shape that fits: exported, but read-only whatever the field.
        let buf = readonly_import(py).unwrap();
        let fits = Bound::new(
            py,
            Frame {
                buf,
                dtype: f32_,
                shape: Dims::from(&[4i64][..]),
                strides: Dims::from(&[1i64][..]),
                device: Device::CPU,
                readonly: false,
            },
        )
        .unwrap();
        let (res, ro) = export_all(py, fits.as_any());
        assert_eq!(ro, Some(true), "the versioned capsule says READ_ONLY");
        for (i, r) in res.iter().enumerate() {
            r.as_ref().unwrap_or_else(|e| panic!("path {i}: {e}"));
        }
        let storage = fits.get().buf.data_ptr().cast_const();
        legacy_is_a_copy(py, fits.as_any(), storage);
        let locals = [("f", fits.as_any())].into_py_dict(py).unwrap();
        run(
            py,
            "assert memoryview(f).readonly\nimport numpy as np\na = np.from_dlpack(f)\nassert not a.flags.writeable\nassert a.tolist() == [0.0, 1.0, 2.0, 3.0]\ndel a",
            &locals,
        )
        .unwrap();
        // A negative stride that reaches before the import's element 0 is refused too.
        let buf = readonly_import(py).unwrap();
        let back = Frame {
            buf,
            dtype: f32_,
            shape: Dims::from(&[2i64][..]),
            strides: Dims::from(&[-1i64][..]),
            device: Device::CPU,
            readonly: true,
        };
        let (res, _) = export_all(py, Bound::new(py, back).unwrap().as_any());
        assert!(res[1].as_ref().is_err_and(is_malformed));
        assert_eq!(live_exports(), base, "refusals leak nothing");
    });
}

#[test]
fn python_setting_a_shape_cannot_widen_the_export() {
    let _s = common::serial();
    Python::attach(|py| {
        if common::numpy(py).is_none() {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        }
        let base = live_exports();
        let a = Bound::new(
            py,
            Settable {
                values: vec![1.0; 4],
                shape: vec![4],
            },
        )
        .unwrap();
        let b = Bound::new(
            py,
            SettableBuf {
                values: Buffer::from_vec(vec![1.0f32; 4]),
                shape: vec![4],
            },
        )
        .unwrap();
        let locals = [("a", a.as_any()), ("b", b.as_any())]
            .into_py_dict(py)
            .unwrap();
        run(
            py,
            r#"
import numpy as np
for x in (a, b):
    assert np.from_dlpack(x).sum() == 4.0
    x.shape = [1 << 30]
    try:
        np.from_dlpack(x).sum()
    except BufferError as e:
        assert "addresses memory outside" in str(e), e
    else:
        raise AssertionError("read 4 GiB over 16 bytes")
    x.shape = [4]
# A Vec field is lent through `&`: read-only; writable storage stays writable.
assert not np.from_dlpack(a).flags.writeable
w = np.from_dlpack(b)
assert w.flags.writeable
w[0] = 7.0
del w
assert np.from_dlpack(b)[0] == 7.0
"#,
            &locals,
        )
        .unwrap();
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn memory_lent_through_a_shared_reference_is_never_exported_writable() {
    let _s = common::serial();
    Python::attach(|py| {
        let values: Arc<[f32]> = Arc::from(vec![1.0f32, 2.0, 3.0]);
        let second_owner = Arc::clone(&values);
        assert_eq!(Arc::strong_count(&values), 2);
        let s = Bound::new(py, Shared { values, shape: [3] }).unwrap();
        let (res, ro) = export_all(py, s.as_any());
        assert_eq!(ro, Some(true), "Arc<[T]>: READ_ONLY");
        assert!(res[0].is_ok(), "a legacy capsule of a copy");
        legacy_is_a_copy(py, s.as_any(), second_owner.as_ptr().cast());
        let locals = [("s", s.as_any())].into_py_dict(py).unwrap();
        run(py, "assert memoryview(s).readonly", &locals).unwrap();
        assert_eq!(&second_owner[..], &[1.0, 2.0, 3.0]);

        let n = Bound::new(
            py,
            Nd {
                a: ndarray::Array2::zeros((2, 3)),
            },
        )
        .unwrap();
        let (res, ro) = export_all(py, n.as_any());
        assert_eq!(ro, Some(true), "ndarray field: READ_ONLY");
        for (i, r) in res.iter().enumerate() {
            r.as_ref()
                .unwrap_or_else(|e| panic!("ndarray path {i}: {e}"));
        }
        legacy_is_a_copy(py, n.as_any(), n.get().a.as_ptr().cast());
    });
}

/// A shape container whose values the derive cannot know to stay fixed (any `Index` type may
/// answer differently each time): its exports are checked every time. `[..]` is all the derive
/// asks of it (the rank too: `dims_len(&shape[..])`, issue 50), so it needs no `len`.
struct OddDims(Vec<i64>);

impl std::ops::Index<std::ops::RangeFull> for OddDims {
    type Output = [i64];
    fn index(&self, _: std::ops::RangeFull) -> &[i64] {
        &self.0
    }
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct OddFrame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: OddDims,
}

#[dlbind::pymethods]
impl OddFrame {}

/// What a source's export memo says (decision 0022), as its `Debug` shows it.
fn memo_of<T: dlbind::__private::DLPackSource>(x: &T) -> String {
    format!("{:?}", x.__dlbind_memo())
}

#[test]
fn a_frozen_instance_remembers_a_passed_check_and_nothing_else() {
    let _s = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let f32_ = <f32 as DLPackElement>::DTYPE;
        let frame = |n: i64| Frame {
            buf: Buffer::from_vec(vec![1.0f32; 4]),
            dtype: f32_,
            shape: Dims::from(&[n][..]),
            strides: Dims::from(&[1i64][..]),
            device: Device::CPU,
            readonly: false,
        };
        // A failed check is never remembered: every export of a wide frame fails, every time.
        let wide = Bound::new(py, frame(1 << 20)).unwrap();
        for round in 0..3 {
            for (i, r) in common::export_paths(py, wide.as_any())
                .into_iter()
                .enumerate()
            {
                let e = r.expect_err(&format!("round {round}, path {i}: 4 MiB over 16 bytes"));
                assert!(is_malformed(&e), "round {round}, path {i}: {e}");
            }
        }
        assert_eq!(memo_of(wide.get()), "Some(ExportMemo(false))");
        // A passed one is, by `__dlpack__` of the instance.
        let fits = Bound::new(py, frame(4)).unwrap();
        assert_eq!(memo_of(fits.get()), "Some(ExportMemo(false))");
        for round in 0..3 {
            for (i, r) in common::export_paths(py, fits.as_any())
                .into_iter()
                .enumerate()
            {
                r.unwrap_or_else(|e| panic!("round {round}, path {i}: {e}"));
            }
        }
        assert_eq!(memo_of(fits.get()), "Some(ExportMemo(true))");
        // A Rust-side export of a value that is in no Python object never sets it: the value
        // may still change through `&mut` before it becomes an instance.
        let mut local = frame(4);
        let owner = py.None().into_bound(py);
        let req = dlbind::export::ExportRequest {
            max_version: Some((1, 0)),
            ..dlbind::export::ExportRequest::DEFAULT
        };
        let m = dlbind::export::export_versioned_managed(&owner, &local, &req).unwrap();
        // SAFETY: the export just made, deleted once.
        unsafe { (m.as_ref().deleter.unwrap())(m.as_ptr()) };
        assert_eq!(memo_of(&local), "Some(ExportMemo(false))");
        local.shape = Dims::from(&[1i64 << 20][..]);
        let moved = Bound::new(py, local).unwrap();
        for (i, r) in common::export_paths(py, moved.as_any())
            .into_iter()
            .enumerate()
        {
            assert!(r.is_err_and(|e| is_malformed(&e)), "path {i}");
        }
        // A plain class's fields may change between exports (`&mut self`, setters): its
        // buffer's memo is never set.
        let plain = Bound::new(
            py,
            SettableBuf {
                values: Buffer::from_vec(vec![1.0f32; 4]),
                shape: vec![4],
            },
        )
        .unwrap();
        for (i, r) in common::export_paths(py, plain.as_any())
            .into_iter()
            .enumerate()
        {
            r.unwrap_or_else(|e| panic!("path {i}: {e}"));
        }
        assert_eq!(memo_of(&*plain.borrow()), "Some(ExportMemo(false))");
        // Only a `Buffer` has a memo, and only beside shape and strides fields known to stay
        // fixed.
        let shared = Shared {
            values: Arc::from(vec![0.0f32; 2]),
            shape: [2],
        };
        assert_eq!(memo_of(&shared), "None", "an Arc'd slice may be shared");
        let bare = Bare {
            buf: Buffer::from_vec(vec![0.0f32; 2]),
            shape: [2],
        };
        assert_eq!(
            memo_of(&bare),
            "Some(ExportMemo(false))",
            "[usize; 1] stays fixed"
        );
        let odd = Bound::new(
            py,
            OddFrame {
                buf: Buffer::from_vec(vec![0.0f32; 2]),
                shape: OddDims(vec![2]),
            },
        )
        .unwrap();
        assert_eq!(memo_of(odd.get()), "None", "an unknown container");
        for (i, r) in common::export_paths(py, odd.as_any())
            .into_iter()
            .enumerate()
        {
            r.unwrap_or_else(|e| panic!("path {i}: {e}"));
        }
        assert_eq!(live_exports(), base, "nothing leaks");
    });
}

#[test]
fn a_device_field_may_not_differ_from_the_storage() {
    let _s = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let f32_ = <f32 as DLPackElement>::DTYPE;
        // Host memory described as CUDA memory.
        let lie = Frame {
            buf: Buffer::from_vec(vec![0.0f32; 4]),
            dtype: f32_,
            shape: Dims::from(&[4i64][..]),
            strides: Dims::from(&[1i64][..]),
            device: Device::cuda(0),
            readonly: false,
        };
        let lie = Bound::new(py, lie).unwrap();
        let kw = [("max_version", (1, 3))].into_py_dict(py).unwrap();
        let e = lie
            .call_method("__dlpack__", (), Some(&kw))
            .expect_err("host memory exported as cuda:0");
        assert!(e.to_string().contains("storage holds memory on"), "{e}");
        // "Device" memory (as a GPU allocation would be kept) in a type without a device
        // field, which says CPU: refused, never read as host memory.
        let mut fake = vec![0u8; 16];
        let ptr = fake.as_mut_ptr().cast::<c_void>();
        // SAFETY: `fake` is kept alive by the buffer (moved in as its owner).
        let gpu = unsafe {
            Buffer::from_owner(
                fake,
                ptr,
                dlbind::Extent::from_start(16),
                Device::cuda(0),
                false,
            )
        };
        let b = Bound::new(
            py,
            Bare {
                buf: gpu,
                shape: [4],
            },
        )
        .unwrap();
        let (res, _) = export_all(py, b.as_any());
        for (i, r) in res.into_iter().enumerate() {
            let e = r.expect_err(&format!("path {i}: cuda memory exported as host memory"));
            assert!(
                e.to_string().contains("storage holds memory on"),
                "path {i}: {e}"
            );
        }
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn imports_and_views_know_their_extent() {
    let _s = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        // A reversed view: element 0 is the last of 6 float64s, all 40 bytes before it.
        let a = np.call_method1("arange", (6.0,)).unwrap();
        let rev = a.get_item(pyo3::types::PySlice::full(py)).unwrap();
        let locals = [("a", &a)].into_py_dict(py).unwrap();
        run(py, "r = a[::-1]", &locals).unwrap();
        let r = locals.get_item("r").unwrap().unwrap();
        let t = dlbind::from_dlpack(&r, None, None).unwrap();
        assert_eq!(t.extent(), dlbind::Extent::new(40, 8));
        let t = dlbind::from_dlpack(&rev, None, None).unwrap();
        assert_eq!(t.extent(), dlbind::Extent::from_start(48));
        // A view of the same type keeps the extent seen from its own element 0.
        let f = Bound::new(
            py,
            Frame {
                buf: Buffer::from(dlbind::from_dlpack(&r, None, None).unwrap()),
                dtype: <f64 as DLPackElement>::DTYPE,
                shape: Dims::from(&[6i64][..]),
                strides: Dims::from(&[-1i64][..]),
                device: Device::CPU,
                readonly: false,
            },
        )
        .unwrap();
        assert_eq!(
            f.get().buf.extent(),
            dlbind::Extent::new(40, 8),
            "the Buffer reports its import's extent"
        );
        let locals = [("f", f.as_any())].into_py_dict(py).unwrap();
        run(
            py,
            "import numpy as np\nassert np.from_dlpack(f).tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]",
            &locals,
        )
        .unwrap();
    });
}

#[test]
fn from_buffer_checks_its_length() {
    let f32_ = <f32 as DLPackElement>::DTYPE;
    let buf = || dlbind::alloc::AlignedBuffer::zeroed(16).unwrap();
    let t = dlbind::ImportedTensor::from_buffer(buf(), &[4], f32_).unwrap();
    assert_eq!(t.as_slice::<f32>().unwrap().len(), 4);
    assert_eq!(t.extent(), dlbind::Extent::from_start(16));
    for shape in [&[5i64][..], &[1 << 40], &[-1], &[2, 3]] {
        let e = dlbind::ImportedTensor::from_buffer(buf(), shape, f32_)
            .expect_err(&format!("{shape:?} over 16 bytes"));
        assert!(e.message().contains("given 16 bytes"), "{e}");
    }
    let bad = DLDataType { lanes: 0, ..f32_ };
    assert!(dlbind::ImportedTensor::from_buffer(buf(), &[4], bad).is_err());
    let empty = dlbind::ImportedTensor::from_buffer(buf(), &[0, 7], f32_).unwrap();
    assert!(empty.as_slice::<f32>().unwrap().is_empty());
}
