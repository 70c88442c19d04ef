//! Import checks: `IS_SUBBYTE_TYPE_PADDED` (refused on sub-byte dtypes before ownership is
//! taken, accepted on whole-byte ones) and the aliasing rules of `as_ndarray_mut`.

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
