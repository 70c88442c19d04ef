//! Import checks: `IS_SUBBYTE_TYPE_PADDED` (refused on sub-byte dtypes before ownership is
//! taken, accepted on whole-byte ones), `bool` elements never lent (read as `u8` or copied by
//! `to_vec`, which checks each byte) and the aliasing rules of `as_ndarray_mut`.

mod common;

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use dlbind::spec::errors::{FailureKind, PyExceptionKind};
use dlbind::spec::types::*;
use dlbind::{Device, ImportedTensor};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi as pyffi;
use pyo3::prelude::*;

/// A producer-side allocation: the managed struct first, then what it points to. `manager_ctx`
/// points to the counter the deleter bumps (each test has its own, so tests may run in parallel).
#[repr(C)]
struct Owned {
    m: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    data: Vec<f64>,
}

unsafe extern "C" fn del(p: *mut DLManagedTensorVersioned) {
    // SAFETY: `p` is the first field of a leaked `Box<Owned>` whose `manager_ctx` is a
    // `&'static AtomicUsize`.
    unsafe {
        (*(*p).manager_ctx.cast::<AtomicUsize>()).fetch_add(1, Ordering::SeqCst);
        drop(Box::from_raw(p.cast::<Owned>()));
    }
}

const F32: DLDataType = DLDataType {
    code: DLDataTypeCode::kDLFloat.0,
    bits: 32,
    lanes: 1,
};
const F64: DLDataType = DLDataType {
    code: DLDataTypeCode::kDLFloat.0,
    bits: 64,
    lanes: 1,
};
const FP4: DLDataType = DLDataType {
    code: DLDataTypeCode::kDLFloat4_e2m1fn.0,
    bits: 4,
    lanes: 1,
};
const FP6: DLDataType = DLDataType {
    code: DLDataTypeCode::kDLFloat6_e3m2fn.0,
    bits: 6,
    lanes: 1,
};

/// A versioned tensor over 32 f64 values (`data[i] == i`), deleted through `counter`.
fn versioned(
    shape: &[i64],
    strides: Option<&[i64]>,
    byte_offset: u64,
    dtype: DLDataType,
    flags: u64,
    counter: &'static AtomicUsize,
) -> NonNull<DLManagedTensorVersioned> {
    let mut o = Box::new(Owned {
        // SAFETY: all-zero is a valid DLManagedTensorVersioned (NULL pointers, None deleter).
        m: unsafe { std::mem::zeroed() },
        shape: shape.to_vec(),
        strides: strides.map(|s| s.to_vec()),
        data: (0..32).map(f64::from).collect(),
    });
    let t = DLTensor {
        data: o.data.as_mut_ptr().cast::<c_void>(),
        device: Device::CPU.to_dl(),
        ndim: shape.len() as i32,
        dtype,
        shape: o.shape.as_mut_ptr(),
        strides: o
            .strides
            .as_mut()
            .map_or(ptr::null_mut(), |v| v.as_mut_ptr()),
        byte_offset,
    };
    o.m = DLManagedTensorVersioned {
        version: DLPackVersion {
            major: DLPACK_MAJOR_VERSION,
            minor: 0,
        },
        manager_ctx: ptr::from_ref(counter).cast_mut().cast::<c_void>(),
        deleter: Some(del),
        flags,
        dl_tensor: t,
    };
    NonNull::new(Box::into_raw(o).cast::<DLManagedTensorVersioned>()).unwrap()
}

fn capsule_unused(cap: &Bound<'_, PyAny>) -> bool {
    // SAFETY: a live capsule.
    unsafe { pyffi::PyCapsule_IsValid(cap.as_ptr(), DLPACK_VERSIONED_CAPSULE_NAME.as_ptr()) == 1 }
}

const PADDED: u64 = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;

#[test]
fn padded_subbyte_refused_by_direct_import_and_deleted_once() {
    static N: AtomicUsize = AtomicUsize::new(0);
    let mut expected = 0;
    for (dt, flags) in [
        (FP4, PADDED),
        (FP6, PADDED),
        (FP4, PADDED | DLPACK_FLAG_BITMASK_READ_ONLY),
    ] {
        // SAFETY: a fresh tensor nobody else owns.
        let e = unsafe {
            ImportedTensor::from_managed_versioned(versioned(&[4], None, 0, dt, flags, &N))
        }
        .unwrap_err();
        expected += 1;
        assert_eq!(e.kind(), FailureKind::UnsupportedLayout, "{dt:?}: {e}");
        assert!(
            e.message()
                .contains("DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED"),
            "{e}"
        );
        assert_eq!(
            N.load(Ordering::SeqCst),
            expected,
            "{dt:?}: deleter called exactly once by the refusal"
        );
    }
}

#[test]
fn padded_subbyte_capsule_left_unconsumed() {
    static N: AtomicUsize = AtomicUsize::new(0);
    assert_eq!(
        FailureKind::UnsupportedLayout.exception(),
        PyExceptionKind::BufferError
    );
    Python::attach(|py| {
        let cap = common::versioned_capsule(py, versioned(&[4], None, 0, FP4, PADDED, &N));
        let e = ImportedTensor::from_capsule(&cap).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(
            e.to_string()
                .contains("DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED"),
            "{e}"
        );
        assert!(
            capsule_unused(&cap),
            "a refused capsule keeps its unused name"
        );
        assert_eq!(
            N.load(Ordering::SeqCst),
            0,
            "nothing deleted while the capsule lives"
        );
        drop(cap);
        assert_eq!(
            N.load(Ordering::SeqCst),
            1,
            "the capsule's destructor deletes it once"
        );
    });
}

#[test]
fn padded_flag_on_whole_byte_dtype_and_packed_subbyte_accepted() {
    static N: AtomicUsize = AtomicUsize::new(0);
    // Direct import: the flag means nothing for float32; packed fp4 is dlbind's format.
    for (dt, flags) in [
        (F32, PADDED),
        (F64, PADDED | DLPACK_FLAG_BITMASK_READ_ONLY),
        (FP4, 0),
        (FP6, DLPACK_FLAG_BITMASK_READ_ONLY),
    ] {
        let before = N.load(Ordering::SeqCst);
        // SAFETY: a fresh tensor nobody else owns.
        let t = unsafe {
            ImportedTensor::from_managed_versioned(versioned(&[4], None, 0, dt, flags, &N))
        }
        .unwrap();
        assert_eq!(t.dtype(), dt);
        assert_eq!(t.flags(), flags);
        assert_eq!(t.readonly(), flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0);
        assert_eq!(N.load(Ordering::SeqCst), before);
        drop(t);
        assert_eq!(
            N.load(Ordering::SeqCst),
            before + 1,
            "{dt:?}: deleted once on drop"
        );
    }
    // SAFETY: a fresh tensor nobody else owns.
    let t = unsafe {
        ImportedTensor::from_managed_versioned(versioned(&[4], None, 0, F32, PADDED, &N))
    }
    .unwrap();
    let c = t.to_contiguous_copy().unwrap();
    assert_eq!(c.shape(), &[4]);
    drop((t, c));
    // Capsules: consumed (renamed) and owned by the handle.
    Python::attach(|py| {
        for (dt, flags) in [(F32, PADDED), (FP4, 0)] {
            let before = N.load(Ordering::SeqCst);
            let cap = common::versioned_capsule(py, versioned(&[4], None, 0, dt, flags, &N));
            let t = ImportedTensor::from_capsule(&cap).unwrap();
            assert_eq!(t.dtype(), dt);
            assert!(!capsule_unused(&cap), "consumed capsule renamed");
            drop(cap);
            assert_eq!(N.load(Ordering::SeqCst), before);
            drop(t);
            assert_eq!(N.load(Ordering::SeqCst), before + 1);
        }
    });
}

const BOOL: DLDataType = DLDataType {
    code: DLDataTypeCode::kDLBool.0,
    bits: 8,
    lanes: 1,
};

/// A versioned `bool` tensor whose first bytes are `bytes` (the producer's memory, which the
/// test may write later, as Python code would), with the address of its byte 0.
fn bool_tensor(
    bytes: &[u8],
    shape: &[i64],
    strides: Option<&[i64]>,
    counter: &'static AtomicUsize,
) -> (ImportedTensor, *mut u8) {
    let m = versioned(shape, strides, 0, BOOL, 0, counter);
    // SAFETY: the fresh tensor's data is 32 f64s (256 bytes) nobody else reads yet.
    let data = unsafe {
        let data = (*m.as_ptr()).dl_tensor.data.cast::<u8>();
        ptr::write_bytes(data, 0, 256);
        ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
        data
    };
    // SAFETY: a fresh tensor nobody else owns.
    let t = unsafe { ImportedTensor::from_managed_versioned(m) }.unwrap();
    (t, data)
}

#[test]
fn bool_elements_are_never_lent() {
    static N: AtomicUsize = AtomicUsize::new(0);
    let (mut t, _) = bool_tensor(&[1, 0, 1, 1], &[4], None, &N);
    // Valid bytes now, but the producer's memory may change while a borrow lives: refused,
    // naming both ways out.
    let e = t.as_slice::<bool>().unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{e}");
    assert!(e.message().starts_with("as_slice: bool elements"), "{e}");
    assert!(
        e.message().contains("as u8") && e.message().contains("to_vec::<bool>()"),
        "{e}"
    );
    // SAFETY: the test's only handle of this memory (refused anyway).
    let e = unsafe { t.as_mut_slice::<bool>() }.unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{e}");
    // The bytes read as u8 (any byte is a valid u8), and a checked copy as bool.
    assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 0, 1, 1]);
    assert_eq!(t.to_vec::<bool>().unwrap(), vec![true, false, true, true]);
    assert_eq!(t.to_vec::<u8>().unwrap(), vec![1, 0, 1, 1]);
    // Other element types still read only their own dtype.
    let e = t.as_slice::<i8>().unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(
        e.message().contains("bool") && e.message().contains("int8"),
        "{e}"
    );
    assert_eq!(
        t.to_vec::<i8>().unwrap_err().kind(),
        FailureKind::UnsupportedDtype
    );
    #[cfg(feature = "ndarray")]
    {
        let e = t.as_ndarray::<bool>().unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{e}");
        assert!(e.message().starts_with("as_ndarray: bool elements"), "{e}");
        assert_eq!(
            t.as_ndarray::<u8>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![1, 0, 1, 1]
        );
        // SAFETY: the test's only handle of this memory (refused anyway).
        let e = unsafe { t.as_ndarray_mut::<bool>() }.unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{e}");
    }
    drop(t);
    assert_eq!(N.load(Ordering::SeqCst), 1);
}

#[test]
fn bool_bytes_written_after_import_are_caught_by_the_checked_copy() {
    static N: AtomicUsize = AtomicUsize::new(0);
    // Reversed: element i is byte 5 - i (to_vec walks any layout, in C order).
    let m = versioned(&[6], Some(&[-1]), 5, BOOL, 0, &N);
    // SAFETY: the fresh tensor's data is 256 bytes nobody else reads yet.
    let data = unsafe {
        let data = (*m.as_ptr()).dl_tensor.data.cast::<u8>();
        ptr::write_bytes(data, 0, 256);
        ptr::copy_nonoverlapping([1u8, 1, 0, 0, 0, 1].as_ptr(), data, 6);
        data
    };
    // SAFETY: a fresh tensor nobody else owns.
    let t = unsafe { ImportedTensor::from_managed_versioned(m) }.unwrap();
    assert_eq!(
        t.to_vec::<bool>().unwrap(),
        vec![true, false, false, false, true, true]
    );
    // The producer (Python code, in real life) stores a 7 while the handle lives; no borrow of
    // the bytes is alive here.
    // SAFETY: byte 2 of the producer's 256 bytes; nothing reads it meanwhile.
    unsafe { data.add(2).write(7) };
    let e = t.to_vec::<bool>().unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
    assert_eq!(
        e.message(),
        "to_vec: bool element 3 (C order) holds the byte 7, wanted 0 or 1"
    );
    // As bytes it reads fine.
    assert_eq!(t.to_vec::<u8>().unwrap(), vec![1, 0, 0, 7, 1, 1]);
    // Empty and 0-d bool tensors copy too (an empty one's strides are never used).
    let (e0, _) = bool_tensor(&[], &[0, 3], Some(&[i64::MIN, 1]), &N);
    assert_eq!(e0.to_vec::<bool>().unwrap(), Vec::<bool>::new());
    let (s0, _) = bool_tensor(&[1], &[], None, &N);
    assert_eq!(s0.to_vec::<bool>().unwrap(), vec![true]);
    let (s7, _) = bool_tensor(&[2], &[], None, &N);
    assert_eq!(
        s7.to_vec::<bool>().unwrap_err().kind(),
        FailureKind::MalformedTensor
    );
}

#[test]
fn numpy_writes_through_python_after_import_never_reach_a_bool_borrow() {
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy not importable (no test venv)");
            return;
        };
        let a = np
            .call_method1("array", (vec![true, false, true],))
            .unwrap();
        let t = dlbind::from_dlpack(&a, None, None).unwrap();
        assert_eq!(t.dtype(), BOOL);
        assert!(t.as_slice::<bool>().is_err(), "never lent");
        assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 0, 1]);
        // Python code run while the import lives (any callback could) stores a 7.
        let locals = pyo3::types::PyDict::new(py);
        locals.set_item("a", &a).unwrap();
        locals.set_item("np", &np).unwrap();
        py.run(c"a.view(np.uint8)[1] = 7", None, Some(&locals))
            .unwrap();
        assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 7, 1], "the same memory");
        let e = t.to_vec::<bool>().unwrap_err();
        assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
        assert!(e.message().contains("element 1"), "{e}");
    });
}

#[cfg(feature = "ndarray")]
mod nd {
    use super::*;

    fn import(
        shape: &[i64],
        strides: Option<&[i64]>,
        byte_offset: u64,
        counter: &'static AtomicUsize,
    ) -> ImportedTensor {
        // SAFETY: a fresh tensor nobody else owns.
        unsafe {
            ImportedTensor::from_managed_versioned(versioned(
                shape,
                strides,
                byte_offset,
                F64,
                0,
                counter,
            ))
        }
        .unwrap()
    }

    #[test]
    fn overlapping_strides_refuse_the_mut_view_only() {
        static N: AtomicUsize = AtomicUsize::new(0);
        for (shape, strides) in [
            (&[2i64, 2][..], &[1i64, 1][..]),
            (&[3, 2], &[1, 2]),        // element 2 = (2,0) = (0,1)
            (&[2, 3], &[-1, 1]),       // negative stride overlapping
            (&[2, 1, 4], &[3, 99, 1]), // size-1 dim ignored; 3 < 4 overlaps
            (&[4, 4], &[4, 3]),        // extent of the stride-3 dim is 9 >= 4
        ] {
            let mut t = import(shape, Some(strides), 8 * 8, &N);
            // SAFETY: the test's only handle of this memory while the result lives.
            let e = unsafe { t.as_ndarray_mut::<f64>() }.unwrap_err();
            assert_eq!(
                e.kind(),
                FailureKind::UnsupportedLayout,
                "{shape:?} {strides:?}: {e}"
            );
            assert!(e.message().contains("overlap"), "{e}");
            // The read-only view stays available and reads the aliased layout.
            let v = t.as_ndarray::<f64>().unwrap();
            assert_eq!(
                v.shape(),
                shape.iter().map(|&d| d as usize).collect::<Vec<_>>()
            );
            let mut idx = vec![0usize; shape.len()];
            idx[0] = 1;
            assert_eq!(v[&idx[..]], 8.0 + strides[0] as f64);
        }
        // Zero strides keep their own message.
        let mut t = import(&[2, 2], Some(&[0, 1]), 0, &N);
        // SAFETY: the test's only handle of this memory while the result lives.
        let e = unsafe { t.as_ndarray_mut::<f64>() }.unwrap_err();
        assert!(e.message().contains("zero"), "{e}");
        assert_eq!(
            t.as_ndarray::<f64>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![0.0, 1.0, 0.0, 1.0]
        );
    }

    #[test]
    fn transposed_and_negative_strides_give_a_mut_view() {
        static N: AtomicUsize = AtomicUsize::new(0);
        // Transposed 3x4 (Fortran order), with a size-1 dim of a huge stride in the middle.
        let mut t = import(&[3, 1, 4], Some(&[1, i64::MIN, 3]), 0, &N);
        {
            // SAFETY: the test's only handle of this memory while the result lives.
            let mut v = unsafe { t.as_ndarray_mut::<f64>() }.unwrap();
            assert_eq!(v[[2, 0, 1]], 5.0);
            v[[2, 0, 3]] = -1.0;
        }
        assert_eq!(t.as_ndarray::<f64>().unwrap()[[2, 0, 3]], -1.0);
        // Negative strides on both axes: element (i, j) at 11 - 4i - j.
        let mut t = import(&[3, 4], Some(&[-4, -1]), 11 * 8, &N);
        {
            // SAFETY: the test's only handle of this memory while the result lives.
            let mut v = unsafe { t.as_ndarray_mut::<f64>() }.unwrap();
            assert_eq!(v[[0, 0]], 11.0);
            assert_eq!(v[[2, 3]], 0.0);
            assert_eq!(v[[1, 2]], 5.0);
            v.fill(7.0);
        }
        let c = t.to_contiguous_copy().unwrap();
        assert_eq!(c.as_slice::<f64>().unwrap(), &[7.0; 12]);
        // Gapped (non-contiguous) but non-overlapping: stride 5 over an extent of 4.
        let mut t = import(&[2, 3], Some(&[5, 2]), 0, &N);
        // SAFETY: the test's only handle of this memory while the result lives.
        let v = unsafe { t.as_ndarray_mut::<f64>() }.unwrap();
        assert_eq!(
            v.iter().copied().collect::<Vec<_>>(),
            vec![0.0, 2.0, 4.0, 5.0, 7.0, 9.0]
        );
    }

    #[test]
    fn zero_size_views_ignore_strides() {
        static N: AtomicUsize = AtomicUsize::new(0);
        for (shape, strides) in [
            (&[0i64, 3][..], &[i64::MIN, i64::MAX][..]),
            (&[2, 0, 5], &[1, 1, 1]),
            (&[4, 0], &[-7, 0]),
            (&[0], &[i64::MIN]),
        ] {
            let mut t = import(shape, Some(strides), 0, &N);
            let want: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let v = t.as_ndarray::<f64>().unwrap();
            assert_eq!(v.shape(), want);
            assert_eq!(v.len(), 0);
            // SAFETY: the test's only handle of this memory while the result lives.
            let mut m = unsafe { t.as_ndarray_mut::<f64>() }.unwrap();
            assert_eq!(m.shape(), want);
            m.fill(1.0);
            assert_eq!(m.iter().count(), 0);
        }
    }
}
