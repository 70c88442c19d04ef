//! Issue 50: a derive that means the same in every crate. Each scenario of the issue that can be
//! built is a test here and failed before the change (the ones that no longer compile are
//! trybuild cases: `fail_array_named_dtype`, `fail_array_alias_elem`, `fail_dims_field_impl`,
//! `fail_probe_spoof`, `fail_buffer_imported_safe`); then a property test: derived types over
//! every storage kind, with generated shapes, strides, dtypes and read-only flags, exported
//! through every path in generated orders, never describe a byte outside what the storage
//! vouches for, nor more writable than it allows.

mod common;

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dlbind::prelude::*;
use dlbind::spec::types::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_VERSIONED_CAPSULE_NAME, DLTensor,
};
use dlbind::stats::live_exports;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use pyo3::types::{IntoPyDict, PyDict};

/// The issue's scenario 2: a trait in scope where the derive expands answers `len` for `Dims`
/// (which has no inherent `len`), and the rank it gives can change.
mod spoofed_len {
    use super::*;

    pub static RANK: AtomicUsize = AtomicUsize::new(1);

    #[allow(dead_code)]
    pub trait Len {
        fn len(&self) -> usize {
            RANK.load(Ordering::Relaxed)
        }
    }
    impl Len for Dims {}

    #[pyclass(frozen)]
    #[derive(DLPackExport)]
    #[dlpack(dtype = "float32")]
    pub struct Wide {
        #[dlpack(data)]
        pub buf: Buffer,
        #[dlpack(shape)]
        pub shape: Dims,
    }

    #[dlbind::pymethods]
    impl Wide {}
}

fn memo_of<T: dlbind::__private::DLPackSource>(x: &T) -> String {
    format!("{:?}", x.__dlbind_memo())
}

/// Runs `code` with `ns` as its globals (its functions and lambdas see its imports).
fn run(py: Python<'_>, code: &str, ns: &Bound<'_, PyDict>) -> PyResult<()> {
    let code = std::ffi::CString::new(code).unwrap();
    py.run(&code, Some(ns), None)
}

/// Before: the derive's rank was `self.shape.len()`, the trait's 1, so the first export of
/// `[4, 1 << 20]` over 16 bytes described `[4]` and passed, setting the frozen instance's memo;
/// with the trait then saying 2, every later export described 16 MiB over 16 bytes, writable.
/// Now the rank is `dims_len(&self.shape[..])`: every path refuses, whatever the trait says,
/// and the memo stays unset.
#[test]
fn a_len_in_scope_cannot_change_the_rank_or_turn_on_the_memo() {
    let _s = common::serial();
    Python::attach(|py| {
        if common::numpy(py).is_none() {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        }
        let base = live_exports();
        let w = Bound::new(
            py,
            spoofed_len::Wide {
                buf: Buffer::from_vec(vec![1.0f32; 4]),
                shape: Dims::from(&[4i64, 1 << 20][..]),
            },
        )
        .unwrap();
        for rank in [1, 2, 1, 2] {
            spoofed_len::RANK.store(rank, Ordering::Relaxed);
            for (i, r) in common::export_paths(py, w.as_any()).into_iter().enumerate() {
                let e = r.expect_err(&format!("rank said {rank}: path {i} exported 16 MiB"));
                assert!(
                    e.to_string().contains("addresses memory outside"),
                    "{i}: {e}"
                );
            }
            let locals = [("w", w.as_any())].into_py_dict(py).unwrap();
            run(
                py,
                "import numpy as np\n\
                 for f in (lambda: np.from_dlpack(w), lambda: w.__dlpack__(stream=None), \
                 lambda: w.__dlpack__(max_version=(1, 0))):\n    \
                     try:\n        f()\n    except BufferError:\n        pass\n    \
                     else:\n        raise AssertionError('exported')",
                &locals,
            )
            .unwrap();
            assert_eq!(memo_of(w.get()), "Some(ExportMemo(false))", "rank {rank}");
        }
        // The same instance shape that fits exports (and only then sets the memo).
        let ok = Bound::new(
            py,
            spoofed_len::Wide {
                buf: Buffer::from_vec(vec![1.0f32; 4]),
                shape: Dims::from(&[2i64, 2][..]),
            },
        )
        .unwrap();
        spoofed_len::RANK.store(1, Ordering::Relaxed);
        // `__dlpack__()`: the frozen path that reads and sets the memo (decision 0022).
        let cap = ok.call_method0("__dlpack__").unwrap();
        let t = dlbind::ImportedTensor::from_capsule(&cap).unwrap();
        assert_eq!(
            t.shape(),
            &[2, 2],
            "the rank is the field's, not the trait's"
        );
        drop(t);
        assert_eq!(memo_of(ok.get()), "Some(ExportMemo(true))");
        assert_eq!(live_exports(), base, "refusals leak nothing");
    });
}

/// `#[dlpack(unchecked_extent)]` trusts the layout, not the dtype: a dtype field with
/// `lanes = 0` (or a code the spec does not know) is refused on every path. Before, a trusted
/// layout returned before the dtype check and exported it.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(unchecked_extent)]
struct Trusted {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: [i64; 1],
}

#[dlbind::pymethods]
impl Trusted {}

// SAFETY: the test builds a 16-byte buffer with shape [4] (float32 and the refused dtypes below
// are at most 4 bytes wide): the span is inside the data. (The dtypes are what the runtime must
// refuse, not what this impl vouches for.)
unsafe impl dlbind::UncheckedExtent for Trusted {}

#[test]
fn a_trusted_layout_still_validates_its_dtype() {
    let _s = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let bad = [
            DLDataType {
                code: 2,
                bits: 32,
                lanes: 0,
            },
            DLDataType {
                code: 2,
                bits: 32,
                lanes: 2,
            },
            DLDataType {
                code: 99,
                bits: 8,
                lanes: 1,
            },
            DLDataType {
                code: 2,
                bits: 12,
                lanes: 1,
            },
        ];
        for dtype in bad {
            let t = Bound::new(
                py,
                Trusted {
                    buf: Buffer::from_vec(vec![0u8; 16]),
                    dtype,
                    shape: [4],
                },
            )
            .unwrap();
            for round in 0..2 {
                for (i, r) in common::export_paths(py, t.as_any()).into_iter().enumerate() {
                    let e = r.expect_err(&format!("{dtype:?}: path {i} round {round} exported"));
                    assert!(e.to_string().contains("dtype"), "{dtype:?} path {i}: {e}");
                }
            }
        }
        let good = Bound::new(
            py,
            Trusted {
                buf: Buffer::from_vec(vec![0u8; 16]),
                dtype: <f32 as DLPackElement>::DTYPE,
                shape: [4],
            },
        )
        .unwrap();
        for (i, r) in common::export_paths(py, good.as_any())
            .into_iter()
            .enumerate()
        {
            r.unwrap_or_else(|e| panic!("path {i}: {e}"));
        }
        assert_eq!(live_exports(), base);
    });
}

/// `Buffer::from(Arc<ImportedTensor>)`: another clone of the `Arc` can lend `&[T]` safely, so
/// a shared tensor is exported read-only; the only `Arc` keeps the tensor's own writability.
/// Before, both were writable.
#[test]
fn a_shared_tensor_is_exported_read_only() {
    let _s = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let import = || {
            let a = np.call_method1("ones", (4,)).unwrap();
            let t = dlbind::from_dlpack(&a, None, None).unwrap();
            assert!(!t.readonly());
            t
        };
        let shared = Arc::new(import());
        let other = Arc::clone(&shared);
        let b = Buffer::from(shared);
        assert!(
            b.readonly(),
            "another clone can read the memory through `&`"
        );
        let s: &[f64] = other.as_slice().unwrap();
        assert_eq!(s, &[1.0; 4]);
        let only = Buffer::from(Arc::new(import()));
        assert!(
            !only.readonly(),
            "the only `Arc`: writable, as the tensor is"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// The property test.

/// A `Buffer` of any storage kind, with every field generated.
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct BufFrame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Dims,
    #[dlpack(strides)]
    strides: Dims,
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl BufFrame {}

/// The same on a plain class, dims in `Vec`s (checked every time: no memo).
#[pyclass]
#[derive(DLPackExport)]
struct PlainFrame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl PlainFrame {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct VecFrame {
    #[dlpack(data)]
    v: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Box<[i64]>,
}

#[dlbind::pymethods]
impl VecFrame {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct BoxFrame {
    #[dlpack(data)]
    v: Box<[f32]>,
    #[dlpack(shape)]
    shape: Dims,
    #[dlpack(strides)]
    strides: Dims,
}

#[dlbind::pymethods]
impl BoxFrame {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct ArcFrame {
    #[dlpack(data)]
    v: Arc<[f32]>,
    #[dlpack(shape)]
    shape: Arc<[i64]>,
    #[dlpack(strides)]
    strides: [i64; 2],
}

#[dlbind::pymethods]
impl ArcFrame {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct NdOwned {
    #[dlpack(array)]
    a: ndarray::ArrayD<f32>,
}

#[dlbind::pymethods]
impl NdOwned {}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct NdShared {
    #[dlpack(array)]
    a: ndarray::ArcArray<f32, ndarray::IxDyn>,
}

#[dlbind::pymethods]
impl NdShared {}

/// What the storage vouches for: bytes `[lo, hi)` and whether consumers may write them.
#[derive(Clone, Copy, Debug)]
struct Vouched {
    lo: i128,
    hi: i128,
    writable: bool,
    /// Whether a legacy capsule (no READ_ONLY flag) may reuse the memory: not known read-only
    /// (writable, or of unknown writability: an import of a legacy capsule loses nothing).
    legacy_reuse: bool,
}

impl Vouched {
    fn of_buffer(b: &Buffer) -> Vouched {
        let p = b.data_ptr() as usize as i128;
        let e = b.extent();
        Vouched {
            lo: p - e.below as i128,
            hi: p + e.above as i128,
            writable: !b.readonly(),
            legacy_reuse: dlbind::DataSource::writability(b) != Writability::ReadOnly,
        }
    }
    fn of_slice<T>(s: &[T], writable: bool) -> Vouched {
        let p = s.as_ptr() as usize as i128;
        Vouched {
            lo: p,
            hi: p + std::mem::size_of_val(s) as i128,
            writable,
            legacy_reuse: writable,
        }
    }
}

/// The bytes an export describes, `None` when it addresses nothing (an empty tensor).
fn described(addr: i128, shape: &[i64], strides: &[i64], bits: i128) -> Option<(i128, i128)> {
    if shape.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (0i128, 0i128);
    for (&d, &s) in shape.iter().zip(strides) {
        assert!(d > 0, "a negative dimension was exported: {shape:?}");
        let r = i128::from(d - 1) * i128::from(s);
        if r < 0 {
            lo += r;
        } else {
            hi += r;
        }
    }
    Some((
        addr + (lo * bits).div_euclid(8),
        addr + ((hi + 1) * bits + 7).div_euclid(8),
    ))
}

fn c_strides(shape: &[i64]) -> Vec<i64> {
    let mut out = vec![0; shape.len()];
    let mut acc = 1i64;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    out
}

/// A tensor's shape, strides (C-contiguous when NULL) and the bytes they address ([`described`]).
///
/// # Safety
/// `t` is a live tensor's description (its shape and strides arrays valid for `ndim`).
unsafe fn tensor_span(t: &DLTensor) -> (Vec<i64>, Vec<i64>, Option<(i128, i128)>) {
    let n = t.ndim as usize;
    // SAFETY: caller contract.
    let shape = unsafe { std::slice::from_raw_parts(t.shape, n) }.to_vec();
    let strides = if t.strides.is_null() {
        c_strides(&shape)
    } else {
        // SAFETY: caller contract.
        unsafe { std::slice::from_raw_parts(t.strides, n) }.to_vec()
    };
    let bits = i128::from(t.dtype.bits) * i128::from(t.dtype.lanes);
    let addr = t.data as usize as i128 + i128::from(t.byte_offset);
    let span = described(addr, &shape, &strides, bits);
    (shape, strides, span)
}

/// Checks one `DLTensor` an export handed out against what the storage vouches for.
///
/// # Safety
/// `t` is a live tensor's description (its shape and strides arrays valid for `ndim`).
unsafe fn check_tensor(t: &DLTensor, read_only: bool, v: Vouched, what: &str) {
    assert!(
        dlbind::layout::validate_dtype(t.dtype).is_ok(),
        "{what}: exported dtype {:?}",
        t.dtype
    );
    // SAFETY: caller contract.
    let (shape, strides, span) = unsafe { tensor_span(t) };
    if let Some((lo, hi)) = span {
        assert!(
            v.lo <= lo && hi <= v.hi,
            "{what}: shape {shape:?} strides {strides:?} describe [{lo:#x}, {hi:#x}) outside \
             [{:#x}, {:#x})",
            v.lo,
            v.hi
        );
    }
    assert!(
        v.writable || read_only,
        "{what}: writable over read-only storage"
    );
}

/// The Python half of the checks: what `memoryview(x)` and `x.__array_interface__` describe.
const PY_VIEWS: &str = r#"
import numpy as np
def views(x):
    out = []
    try:
        m = memoryview(x)
    except BufferError:
        out.append(None)
    else:
        item = m.itemsize
        try:
            ptr = np.frombuffer(m, dtype=np.uint8).ctypes.data if m.c_contiguous and m.nbytes else None
            if ptr is None and m.nbytes:
                ptr = np.asarray(m).ctypes.data
        except (ValueError, OverflowError):
            # numpy cannot view it (e.g. more elements than it can count, over zero strides):
            # its pointer is not to be had from Python; the DLPack paths check the same export.
            ptr = -1
        strides = [s // item for s in m.strides]
        rem = [s % item for s in m.strides]
        out.append(None if ptr == -1 else (ptr or 0, list(m.shape), strides, 8 * item, m.readonly, rem, None))
        m.release()
    try:
        ai = x.__array_interface__
    except (AttributeError, BufferError):
        out.append(None)
    else:
        # The dict as numpy reads it: `data` a pointer tuple, or a plain class's borrow guard
        # (a byte window whose element 0 is `offset` bytes in).
        item = np.dtype(ai["typestr"]).itemsize
        data = ai["data"]
        window = None
        if isinstance(data, tuple):
            ptr, ro = data
        else:
            w = memoryview(data)
            base = np.frombuffer(w.cast("B"), dtype=np.uint8).ctypes.data if w.nbytes else 0
            ptr, ro = base + ai.get("offset", 0), w.readonly
            if w.nbytes:
                window = (base, w.nbytes)
            w.release()
        st = ai["strides"]
        strides = None if st is None else [s // item for s in st]
        rem = [0] * len(ai["shape"]) if st is None else [s % item for s in st]
        out.append((ptr, list(ai["shape"]), strides, 8 * item, ro, rem, window))
    return out
"#;

/// One export path of `x` by number, checked if it exported: 0 the legacy capsule, 1 the
/// versioned one, 2 the exchange table's owning export, 3 the buffer protocol, 4 the array
/// interface.
/// Returns whether it exported.
fn export_and_check(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    path: u8,
    v: Vouched,
    views: &Bound<'_, PyAny>,
) -> bool {
    match path {
        0 => {
            let r = x.call_method0("__dlpack__");
            if let Ok(cap) = &r {
                // SAFETY: an unused legacy capsule of a live export.
                unsafe {
                    let m =
                        pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), DLPACK_CAPSULE_NAME.as_ptr())
                            .cast::<DLManagedTensor>();
                    assert!(!m.is_null());
                    // A legacy capsule has no flag: it carries the storage only where a
                    // consumer may write it (or nobody said: unknown writability), and known
                    // read-only storage as a private copy, which addresses none of it.
                    let t = &(*m).dl_tensor;
                    let overlaps = tensor_span(t)
                        .2
                        .is_some_and(|(lo, hi)| lo < v.hi && v.lo < hi);
                    if overlaps {
                        assert!(
                            v.legacy_reuse,
                            "legacy capsule over known read-only storage"
                        );
                        check_tensor(
                            t,
                            false,
                            Vouched {
                                writable: true,
                                ..v
                            },
                            "legacy capsule",
                        );
                    }
                }
            }
            r.is_ok()
        }
        1 => {
            let kw = [("max_version", (1, 3))].into_py_dict(py).unwrap();
            let r = x.call_method("__dlpack__", (), Some(&kw));
            if let Ok(cap) = &r {
                // SAFETY: an unused versioned capsule of a live export.
                unsafe {
                    let m = pyo3::ffi::PyCapsule_GetPointer(
                        cap.as_ptr(),
                        DLPACK_VERSIONED_CAPSULE_NAME.as_ptr(),
                    )
                    .cast::<DLManagedTensorVersioned>();
                    assert!(!m.is_null());
                    let ro = (*m).flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
                    check_tensor(&(*m).dl_tensor, ro, v, "versioned capsule");
                }
            }
            r.is_ok()
        }
        2 => common::exchange_export(py, x, |m| {
            let ro = m.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
            // SAFETY: the live tensor the table just exported.
            unsafe { check_tensor(&m.dl_tensor, ro, v, "exchange table") }
        })
        .is_ok(),
        _ => {
            let out = views.call1((x,)).unwrap();
            let item = out.get_item(usize::from(path - 3)).unwrap();
            if item.is_none() {
                return false;
            }
            type View = (
                usize,
                Vec<i64>,
                Option<Vec<i64>>,
                i64,
                bool,
                Vec<i64>,
                Option<(usize, usize)>,
            );
            let (data, shape, strides, bits, ro, rem, window): View = item.extract().unwrap();
            if let Some((base, len)) = window {
                let (lo, hi) = (base as i128, base as i128 + len as i128);
                assert!(
                    v.lo <= lo && hi <= v.hi,
                    "array interface: its byte window [{lo:#x}, {hi:#x}) is outside [{:#x}, {:#x})",
                    v.lo,
                    v.hi
                );
            }
            assert!(rem.iter().all(|&r| r == 0), "strides not whole elements");
            let strides = strides.unwrap_or_else(|| c_strides(&shape));
            let what = if path == 3 {
                "memoryview"
            } else {
                "array interface"
            };
            if let Some((lo, hi)) = described(data as i128, &shape, &strides, i128::from(bits)) {
                assert!(
                    v.lo <= lo && hi <= v.hi,
                    "{what}: {shape:?} {strides:?} describe [{lo:#x}, {hi:#x}) outside [{:#x}, {:#x})",
                    v.lo,
                    v.hi
                );
            }
            assert!(v.writable || ro, "{what}: writable over read-only storage");
            true
        }
    }
}

/// One generated case.
#[derive(Debug, Clone)]
struct Case {
    kind: u8,
    elems: usize,
    shape: Vec<i64>,
    strides: Vec<i64>,
    dtype: usize,
    readonly: bool,
    paths: Vec<u8>,
}

const DTYPES: [DLDataType; 9] = [
    DLDataType {
        code: 2,
        bits: 32,
        lanes: 1,
    },
    DLDataType {
        code: 2,
        bits: 64,
        lanes: 1,
    },
    DLDataType {
        code: 1,
        bits: 8,
        lanes: 1,
    },
    DLDataType {
        code: 6,
        bits: 8,
        lanes: 1,
    },
    DLDataType {
        code: 2,
        bits: 16,
        lanes: 1,
    },
    DLDataType {
        code: 2,
        bits: 32,
        lanes: 0,
    },
    DLDataType {
        code: 2,
        bits: 32,
        lanes: 4,
    },
    DLDataType {
        code: 2,
        bits: 12,
        lanes: 1,
    },
    DLDataType {
        code: 77,
        bits: 8,
        lanes: 1,
    },
];

fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![8 => 0i64..5, 1 => Just(-1i64), 1 => Just(1i64 << 40), 1 => 5i64..40]
}

fn stride() -> impl Strategy<Value = i64> {
    prop_oneof![8 => -6i64..7, 1 => Just(i64::MAX), 1 => Just(i64::MIN + 1), 1 => 7i64..64]
}

fn case() -> impl Strategy<Value = Case> {
    (
        0u8..11,
        0usize..24,
        prop::collection::vec((dim(), stride()), 0..4),
        0usize..DTYPES.len(),
        any::<bool>(),
        prop::collection::vec(0u8..5, 1..9),
    )
        .prop_map(|(kind, elems, dims, dtype, readonly, paths)| Case {
            kind,
            elems,
            shape: dims.iter().map(|d| d.0).collect(),
            strides: dims.iter().map(|d| d.1).collect(),
            dtype,
            readonly,
            paths,
        })
}

/// The object of `c` and what its storage vouches for.
fn build<'py>(
    py: Python<'py>,
    np: &Bound<'py, PyModule>,
    c: &Case,
    keep: &std::cell::RefCell<Vec<Arc<dlbind::ImportedTensor>>>,
) -> (Bound<'py, PyAny>, Vouched) {
    let values: Vec<f32> = (0..c.elems).map(|i| i as f32).collect();
    let dtype = DTYPES[c.dtype];
    let frame = |buf: Buffer| {
        let v = Vouched::of_buffer(&buf);
        let f = BufFrame {
            buf,
            dtype,
            shape: Dims::from(&c.shape[..]),
            strides: Dims::from(&c.strides[..]),
            readonly: c.readonly,
        };
        (Bound::new(py, f).unwrap().into_any(), v)
    };
    let numpy = |writeable: bool| {
        let a = np
            .call_method1("arange", (c.elems,))
            .unwrap()
            .call_method1("astype", ("float32",))
            .unwrap();
        a.getattr("flags")
            .unwrap()
            .setattr("writeable", writeable)
            .unwrap();
        a
    };
    let rank2 = |s: &[i64]| -> [i64; 2] {
        [
            s.first().copied().unwrap_or(1),
            s.get(1).copied().unwrap_or(1),
        ]
    };
    match c.kind {
        0 => frame(Buffer::from_vec(values)),
        1 | 2 => {
            let a = numpy(c.kind == 1);
            frame(Buffer::from(dlbind::from_dlpack(&a, None, None).unwrap()))
        }
        3 => {
            // A view of a numpy array's memory, kept alive by the array.
            let a = numpy(true);
            let ptr: usize = a
                .getattr("ctypes")
                .unwrap()
                .getattr("data")
                .unwrap()
                .extract()
                .unwrap();
            let ptr = if c.elems == 0 {
                std::ptr::NonNull::<f32>::dangling().as_ptr() as usize
            } else {
                ptr
            };
            // SAFETY: the array owns `4 * elems` bytes at `ptr`, writable, kept alive by the
            // buffer's reference to it; nothing in Rust reads them through a reference.
            let buf = unsafe {
                Buffer::view(
                    a.unbind(),
                    ptr as *mut c_void,
                    dlbind::Extent::from_start(4 * c.elems),
                    Device::CPU,
                    c.readonly,
                )
            };
            frame(buf)
        }
        4 => {
            // Another clone of the `Arc` lives on (until the end of the test).
            let t = Arc::new(dlbind::from_dlpack(&numpy(true), None, None).unwrap());
            keep.borrow_mut().push(Arc::clone(&t));
            frame(Buffer::from(t))
        }
        5 => {
            let buf = Buffer::from_vec(values);
            let v = Vouched::of_buffer(&buf);
            let f = PlainFrame {
                buf,
                dtype,
                shape: c.shape.clone(),
                strides: c.strides.clone(),
                readonly: c.readonly,
            };
            (Bound::new(py, f).unwrap().into_any(), v)
        }
        6 => {
            let v = Vouched::of_slice(&values, false);
            let f = VecFrame {
                v: values,
                shape: c.shape.clone(),
                strides: c.strides.clone().into_boxed_slice(),
            };
            (Bound::new(py, f).unwrap().into_any(), v)
        }
        7 => {
            let b: Box<[f32]> = values.into_boxed_slice();
            let v = Vouched::of_slice(&b, false);
            let f = BoxFrame {
                v: b,
                shape: Dims::from(&c.shape[..]),
                strides: Dims::from(&c.strides[..]),
            };
            (Bound::new(py, f).unwrap().into_any(), v)
        }
        8 => {
            let a: Arc<[f32]> = Arc::from(values);
            let v = Vouched::of_slice(&a, false);
            let f = ArcFrame {
                v: a,
                shape: Arc::from(rank2(&c.shape).to_vec()),
                strides: rank2(&c.strides),
            };
            (Bound::new(py, f).unwrap().into_any(), v)
        }
        _ => {
            // ndarray: its own layout over the values, reversed on an axis when asked.
            let dims: Vec<usize> = c.shape.iter().map(|&d| d.clamp(0, 4) as usize).collect();
            let n: usize = dims.iter().product();
            let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let v = Vouched::of_slice(&data, false);
            let mut a = ndarray::ArrayD::from_shape_vec(dims, data).unwrap();
            if c.readonly && a.ndim() > 0 {
                a.invert_axis(ndarray::Axis(0));
            }
            if c.kind == 9 {
                (Bound::new(py, NdOwned { a }).unwrap().into_any(), v)
            } else {
                let a = a.into_shared();
                let _second = a.clone();
                (Bound::new(py, NdShared { a }).unwrap().into_any(), v)
            }
        }
    }
}

#[test]
fn no_export_describes_more_than_its_storage_vouches_for() {
    let _s = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let base = live_exports();
        let ns = PyDict::new(py);
        run(py, PY_VIEWS, &ns).unwrap();
        let views = ns.get_item("views").unwrap().unwrap();
        let cases: u32 = std::env::var("DLBIND_PROP_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(384);
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let counts = std::cell::Cell::new((0usize, 0usize));
        let keep = std::cell::RefCell::new(Vec::new());
        runner
            .run(&case(), |c| {
                let (x, v) = build(py, &np, &c, &keep);
                for &p in &c.paths {
                    let (e, r) = counts.get();
                    counts.set(if export_and_check(py, &x, p, v, &views) {
                        (e + 1, r)
                    } else {
                        (e, r + 1)
                    });
                }
                Ok(())
            })
            .unwrap();
        let (exported, refused) = counts.get();
        eprintln!("{cases} cases: {exported} exports checked, {refused} refused");
        drop(keep);
        py.import("gc").unwrap().call_method0("collect").unwrap();
        assert_eq!(live_exports(), base, "every export released once");
        // Both outcomes must occur, or the property says nothing.
        assert!(
            exported > 0 && refused > 0,
            "exported {exported}, refused {refused}"
        );
    });
}
