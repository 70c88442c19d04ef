//! Import of hand-built managed tensors: legacy / versioned, NULL strides, byte_offset,
//! negative/zero strides, too-new major, bad dtypes, capsule names, deleter counts and threads.

mod common;

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

use dlbind::spec::errors::{FailureKind, PyExceptionKind};
use dlbind::spec::types::*;
use dlbind::{Device, DlpackError, ImportedTensor};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi as pyffi;
use pyo3::prelude::*;

static LEGACY_DELETES: AtomicUsize = AtomicUsize::new(0);
static VERSIONED_DELETES: AtomicUsize = AtomicUsize::new(0);

/// A producer-side allocation: the managed struct plus its shape/strides/data.
#[repr(C)]
struct Owned<M> {
    m: M,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    data: Vec<f64>,
}

unsafe extern "C" fn del_legacy(p: *mut DLManagedTensor) {
    LEGACY_DELETES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: `p` is the first field of a leaked `Box<Owned<DLManagedTensor>>`.
    drop(unsafe { Box::from_raw(p.cast::<Owned<DLManagedTensor>>()) });
}

unsafe extern "C" fn del_versioned(p: *mut DLManagedTensorVersioned) {
    VERSIONED_DELETES.fetch_add(1, Ordering::SeqCst);
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(p.cast::<Owned<DLManagedTensorVersioned>>()) });
}

struct Spec {
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    dtype: DLDataType,
    data: Vec<f64>,
}

const F64: DLDataType = DLDataType {
    code: 2,
    bits: 64,
    lanes: 1,
};

fn spec(shape: &[i64], strides: Option<&[i64]>, byte_offset: u64) -> Spec {
    Spec {
        shape: shape.to_vec(),
        strides: strides.map(|s| s.to_vec()),
        byte_offset,
        dtype: F64,
        data: (0..32).map(f64::from).collect(),
    }
}

fn tensor(s: &mut Owned<impl Sized>, sp: &Spec) -> DLTensor {
    DLTensor {
        data: s.data.as_mut_ptr().cast::<c_void>(),
        device: Device::CPU.to_dl(),
        ndim: sp.shape.len() as i32,
        dtype: sp.dtype,
        shape: s.shape.as_mut_ptr(),
        strides: s
            .strides
            .as_mut()
            .map_or(ptr::null_mut(), |v| v.as_mut_ptr()),
        byte_offset: sp.byte_offset,
    }
}

#[repr(C)]
struct Dummy;

fn legacy(sp: Spec) -> NonNull<DLManagedTensor> {
    let mut o = Box::new(Owned::<DLManagedTensor> {
        // SAFETY: all-zero is a valid DLManagedTensor (NULL pointers, None deleter).
        m: unsafe { std::mem::zeroed() },
        shape: sp.shape.clone(),
        strides: sp.strides.clone(),
        data: sp.data.clone(),
    });
    let t = tensor(&mut o, &sp);
    o.m = DLManagedTensor {
        dl_tensor: t,
        manager_ctx: ptr::null_mut(),
        deleter: Some(del_legacy),
    };
    NonNull::new(Box::into_raw(o).cast::<DLManagedTensor>()).unwrap()
}

fn versioned(sp: Spec, major: u32, flags: u64) -> NonNull<DLManagedTensorVersioned> {
    let mut o = Box::new(Owned::<DLManagedTensorVersioned> {
        // SAFETY: all-zero is a valid DLManagedTensorVersioned.
        m: unsafe { std::mem::zeroed() },
        shape: sp.shape.clone(),
        strides: sp.strides.clone(),
        data: sp.data.clone(),
    });
    let t = tensor(&mut o, &sp);
    o.m = DLManagedTensorVersioned {
        version: DLPackVersion { major, minor: 0 },
        manager_ctx: ptr::null_mut(),
        deleter: Some(del_versioned),
        flags,
        dl_tensor: t,
    };
    NonNull::new(Box::into_raw(o).cast::<DLManagedTensorVersioned>()).unwrap()
}

/// A capsule like a C producer makes: the destructor calls the deleter iff still unused.
unsafe extern "C" fn cap_dtor_legacy(cap: *mut pyffi::PyObject) {
    // SAFETY: CPython calls this with a live capsule and the GIL.
    unsafe {
        if pyffi::PyCapsule_IsValid(cap, DLPACK_CAPSULE_NAME.as_ptr()) != 0 {
            let p = pyffi::PyCapsule_GetPointer(cap, DLPACK_CAPSULE_NAME.as_ptr())
                .cast::<DLManagedTensor>();
            ((*p).deleter.unwrap())(p);
        }
    }
}
fn cap_legacy(py: Python<'_>, m: NonNull<DLManagedTensor>) -> Bound<'_, PyAny> {
    // SAFETY: static name, matching destructor.
    unsafe {
        Bound::from_owned_ptr(
            py,
            pyffi::PyCapsule_New(
                m.as_ptr().cast(),
                DLPACK_CAPSULE_NAME.as_ptr(),
                Some(cap_dtor_legacy),
            ),
        )
    }
}
fn cap_versioned(py: Python<'_>, m: NonNull<DLManagedTensorVersioned>) -> Bound<'_, PyAny> {
    common::versioned_capsule(py, m)
}

fn counts() -> (usize, usize) {
    (
        LEGACY_DELETES.load(Ordering::SeqCst),
        VERSIONED_DELETES.load(Ordering::SeqCst),
    )
}

#[test]
fn legacy_null_strides_are_c_contiguous_and_readonly() {
    let _g = common::serial();
    let before = counts();
    // SAFETY: a fresh tensor nobody else owns.
    let t =
        unsafe { ImportedTensor::from_managed_legacy(legacy(spec(&[2, 3, 4], None, 0))) }.unwrap();
    assert_eq!(t.shape(), &[2, 3, 4]);
    assert_eq!(t.strides(), &[12, 4, 1]);
    assert!(t.readonly(), "legacy imports are read-only");
    assert!(t.is_c_contiguous());
    assert_eq!(t.as_slice::<f64>().unwrap()[..4], [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(counts(), before);
    drop(t);
    assert_eq!(
        counts(),
        (before.0 + 1, before.1),
        "deleter called exactly once"
    );
    // Many dims (heap metadata) too.
    // SAFETY: as above.
    let t =
        unsafe { ImportedTensor::from_managed_legacy(legacy(spec(&[1; 12], None, 0))) }.unwrap();
    assert_eq!(t.strides(), &[1; 12]);
}

#[test]
fn versioned_flags_offset_and_negative_strides() {
    let _g = common::serial();
    let before = counts();
    // byte_offset 16 = element 2; shape (3,), stride -1 → elements 2, 1, 0.
    // SAFETY: fresh tensor.
    let t = unsafe {
        ImportedTensor::from_managed_versioned(versioned(spec(&[3], Some(&[-1]), 16), 1, 0))
    }
    .unwrap();
    assert!(!t.readonly());
    assert_eq!(t.byte_offset(), 16);
    assert_eq!(t.data_ptr() as usize, t.raw_data() as usize + 16);
    // SAFETY: element 0 is valid.
    assert_eq!(unsafe { *(t.data_ptr() as *const f64) }, 2.0);
    assert!(t.as_slice::<f64>().is_err(), "not contiguous");
    #[cfg(feature = "ndarray")]
    assert_eq!(
        t.as_ndarray::<f64>()
            .unwrap()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![2.0, 1.0, 0.0]
    );
    let c = t.to_contiguous_copy().unwrap();
    assert_eq!(c.as_slice::<f64>().unwrap(), &[2.0, 1.0, 0.0]);
    assert!(!c.readonly() && c.is_copied());
    drop(t);
    assert_eq!(counts(), (before.0, before.1 + 1));
    drop(c);
    assert_eq!(counts(), (before.0, before.1 + 1));

    // 2-d with a negative middle stride, zero (broadcast) stride and a size-1 dim with an odd stride.
    // data[base + i*(-4) + j*0 + k*1], base offset = 8 elements.
    // SAFETY: fresh tensor.
    let mut t = unsafe {
        ImportedTensor::from_managed_versioned(versioned(
            spec(&[2, 2, 1, 3], Some(&[-4, 0, 99, 1]), 64),
            1,
            DLPACK_FLAG_BITMASK_READ_ONLY,
        ))
    }
    .unwrap();
    assert!(t.readonly());
    // SAFETY: the test's only handle of this memory while the result lives.
    assert!(unsafe { t.as_mut_slice::<f64>() }.is_err());
    let c = t.to_contiguous_copy().unwrap();
    assert_eq!(
        c.as_slice::<f64>().unwrap(),
        &[8.0, 9.0, 10.0, 8.0, 9.0, 10.0, 4.0, 5.0, 6.0, 4.0, 5.0, 6.0]
    );
    #[cfg(feature = "ndarray")]
    {
        let v = t.as_ndarray::<f64>().unwrap();
        assert_eq!(
            v.iter().copied().collect::<Vec<_>>(),
            c.as_slice::<f64>().unwrap()
        );
        // SAFETY: the test's only handle of this memory while the result lives.
        assert!(unsafe { t.as_ndarray_mut::<f64>() }.is_err(), "read-only");
    }
    // Writable view with negative strides through ndarray.
    // SAFETY: fresh tensor.
    let mut w = unsafe {
        ImportedTensor::from_managed_versioned(versioned(
            spec(&[2, 3], Some(&[-3, 1]), 3 * 8),
            1,
            0,
        ))
    }
    .unwrap();
    #[cfg(feature = "ndarray")]
    {
        // SAFETY: the test's only handle of this memory while the result lives.
        let mut v = unsafe { w.as_ndarray_mut::<f64>() }.unwrap();
        v[[0, 0]] = 100.0;
        assert_eq!(v[[1, 2]], 2.0);
    }
    let _ = &mut w;
    let _ = &mut t;
}

#[test]
fn refusals_leave_capsules_unconsumed() {
    let _g = common::serial();
    Python::attach(|py| {
        let before = counts();
        // Major too new → BufferError, capsule keeps its name and frees once when dropped.
        let cap = cap_versioned(
            py,
            versioned(spec(&[2], None, 0), DLPACK_MAJOR_VERSION + 1, 0),
        );
        let e = ImportedTensor::from_capsule(&cap).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert_eq!(
            // SAFETY: live capsule.
            unsafe {
                pyffi::PyCapsule_IsValid(cap.as_ptr(), DLPACK_VERSIONED_CAPSULE_NAME.as_ptr())
            },
            1
        );
        assert_eq!(counts(), before);
        drop(cap);
        assert_eq!(counts(), (before.0, before.1 + 1));

        // Bad dtypes: opaque, odd bits, lanes, FP4 with bits 8, unknown code.
        for dt in [
            DLDataType {
                code: 3,
                bits: 64,
                lanes: 1,
            },
            DLDataType {
                code: 0,
                bits: 12,
                lanes: 1,
            },
            DLDataType {
                code: 2,
                bits: 32,
                lanes: 2,
            },
            DLDataType {
                code: DLDataTypeCode::kDLFloat4_e2m1fn.0,
                bits: 8,
                lanes: 1,
            },
            DLDataType {
                code: 200,
                bits: 8,
                lanes: 1,
            },
        ] {
            let before = counts();
            let mut sp = spec(&[2], None, 0);
            sp.dtype = dt;
            let cap = cap_legacy(py, legacy(sp));
            let e = ImportedTensor::from_capsule(&cap).unwrap_err();
            assert!(e.is_instance_of::<PyBufferError>(py), "{dt:?}: {e}");
            assert_eq!(
                // SAFETY: live capsule.
                unsafe { pyffi::PyCapsule_IsValid(cap.as_ptr(), DLPACK_CAPSULE_NAME.as_ptr()) },
                1
            );
            drop(cap);
            assert_eq!(counts(), (before.0 + 1, before.1), "{dt:?}");
        }
        // Accepted sub-byte/fp8 dtypes.
        for dt in [
            DLDataType {
                code: DLDataTypeCode::kDLFloat4_e2m1fn.0,
                bits: 4,
                lanes: 1,
            },
            DLDataType {
                code: DLDataTypeCode::kDLFloat8_e4m3fn.0,
                bits: 8,
                lanes: 1,
            },
            DLDataType {
                code: DLDataTypeCode::kDLBool.0,
                bits: 8,
                lanes: 1,
            },
            DLDataType {
                code: DLDataTypeCode::kDLBfloat.0,
                bits: 16,
                lanes: 1,
            },
        ] {
            let mut sp = spec(&[4], None, 0);
            sp.dtype = dt;
            let cap = cap_versioned(py, versioned(sp, 1, 0));
            let t = ImportedTensor::from_capsule(&cap).unwrap();
            assert_eq!(t.dtype(), dt);
        }

        // Consumed twice → ValueError; wrong name → ValueError; not a capsule → TypeError.
        let before = counts();
        let cap = cap_versioned(py, versioned(spec(&[2], None, 0), 1, 0));
        let t = ImportedTensor::from_capsule(&cap).unwrap();
        let e = ImportedTensor::from_capsule(&cap).unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py), "{e}");
        assert!(e.to_string().contains("consumed"), "{e}");
        drop(cap);
        assert_eq!(counts(), before, "renamed capsule frees nothing");
        drop(t);
        assert_eq!(counts(), (before.0, before.1 + 1));
        // SAFETY: a capsule with some other name and no destructor.
        let other = unsafe {
            Bound::from_owned_ptr(
                py,
                pyffi::PyCapsule_New(8 as *mut c_void, c"something_else".as_ptr(), None),
            )
        };
        let e = ImportedTensor::from_capsule(&other).unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py), "{e}");
    });
}

#[test]
fn deleter_runs_on_the_dropping_thread_once() {
    let _g = common::serial();
    let before = counts();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let t = if i % 2 == 0 {
                // SAFETY: a fresh legacy tensor, owned by the import from here on.
                unsafe { ImportedTensor::from_managed_legacy(legacy(spec(&[4], Some(&[1]), 0))) }
                    .unwrap()
            } else {
                // SAFETY: a fresh versioned tensor, owned by the import from here on.
                unsafe {
                    ImportedTensor::from_managed_versioned(versioned(
                        spec(&[4], Some(&[1]), 0),
                        1,
                        0,
                    ))
                }
                .unwrap()
            };
            std::thread::spawn(move || drop(t))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(counts(), (before.0 + 4, before.1 + 4));
    // A too-new tensor handed over directly is deleted by the refusal.
    // SAFETY: fresh tensor.
    let e = unsafe { ImportedTensor::from_managed_versioned(versioned(spec(&[1], None, 0), 9, 0)) }
        .unwrap_err();
    assert_eq!(e.kind(), FailureKind::VersionTooNew);
    assert_eq!(counts(), (before.0 + 4, before.1 + 5));
}

/// Whether `kind` raises exactly `E`.
fn err_is<E: pyo3::PyTypeInfo>(py: Python<'_>, kind: FailureKind) -> bool {
    let err: PyErr = DlpackError::new(kind, "msg").into();
    err.get_type(py).is(py.get_type::<E>())
}

#[test]
fn every_failure_kind_maps_to_its_generated_exception() {
    Python::attach(|py| {
        for &k in FailureKind::ALL {
            let err: PyErr = DlpackError::new(k, "msg").into();
            // Exactly the built-in class the spec names (whatever exceptions the spec lists).
            let want = py
                .import("builtins")
                .unwrap()
                .getattr(k.exception().name())
                .unwrap();
            assert!(
                err.get_type(py).is(&want),
                "{k:?}: {} is not {want}",
                err.get_type(py)
            );
            assert_eq!(err.value(py).str().unwrap().to_string(), "msg");
        }
        // The table, checked against the generated mapping.
        assert_eq!(
            FailureKind::ReadOnlyLegacy.exception(),
            PyExceptionKind::BufferError
        );
        assert_eq!(
            FailureKind::CopyRequired.exception(),
            PyExceptionKind::BufferError
        );
        assert_eq!(
            FailureKind::UnsupportedDevice.exception(),
            PyExceptionKind::BufferError
        );
        assert_eq!(
            FailureKind::BadArgumentType.exception(),
            PyExceptionKind::TypeError
        );
        assert_eq!(
            FailureKind::CapsuleConsumed.exception(),
            PyExceptionKind::ValueError
        );
        assert_eq!(
            FailureKind::NoProtocol.exception(),
            PyExceptionKind::AttributeError
        );
        assert_eq!(
            FailureKind::OutOfMemory.exception(),
            PyExceptionKind::MemoryError
        );
        assert!(err_is::<pyo3::exceptions::PySystemError>(
            py,
            FailureKind::InternalError
        ));
        assert!(err_is::<pyo3::exceptions::PyRuntimeError>(
            py,
            FailureKind::InterpreterNotRunning
        ));
        assert!(err_is::<PyBufferError>(py, FailureKind::UnsupportedDtype));
        assert!(err_is::<PyValueError>(py, FailureKind::InvalidStream));
        let _ = Dummy;
    });
}

#[test]
fn alloc_and_copy_errors_map() {
    let e: DlpackError = dlbind::alloc::AllocError { bytes: 1 }.into();
    assert_eq!(e.kind(), FailureKind::OutOfMemory);
    let e: DlpackError = dlbind::copy::CopyError::Overflow.into();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
}

#[test]
fn bool_views_check_their_bytes() {
    let _g = common::serial();
    let mk = |bytes: [u8; 4]| {
        let mut sp = spec(&[4], None, 0);
        sp.dtype = <bool as dlbind::spec::elements::DLPackElement>::DTYPE;
        let mut words = [0f64; 32];
        // SAFETY: f64 storage reinterpreted as bytes for the first 4 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), 4)
        };
        sp.data = words.to_vec();
        // SAFETY: fresh tensor.
        unsafe { ImportedTensor::from_managed_versioned(versioned(sp, 1, 0)) }.unwrap()
    };
    let ok = mk([0, 1, 1, 0]);
    // bool is never lent (issue 41): copied with a per-byte check, or read as bytes.
    assert_eq!(ok.to_vec::<bool>().unwrap(), vec![false, true, true, false]);
    assert_eq!(
        ok.as_slice::<bool>().unwrap_err().kind(),
        FailureKind::UnsupportedDtype
    );
    let bad = mk([0, 2, 1, 0]);
    assert_eq!(
        bad.to_vec::<bool>().unwrap_err().kind(),
        FailureKind::MalformedTensor
    );
    #[cfg(feature = "ndarray")]
    assert!(bad.as_ndarray::<bool>().is_err());
    assert_eq!(bad.as_slice::<u8>().unwrap(), &[0, 2, 1, 0]);
}

#[test]
fn shared_buffers_delete_once_when_the_last_drops() {
    let _g = common::serial();
    let before = counts();
    // SAFETY: a fresh versioned tensor, owned by the import from here on.
    let t = unsafe {
        ImportedTensor::from_managed_versioned(versioned(spec(&[4], Some(&[1]), 8), 1, 0))
    }
    .unwrap();
    let expected = t.data_ptr();
    let t = std::sync::Arc::new(t);
    let (a, b) = (
        dlbind::Buffer::from(t.clone()),
        dlbind::Buffer::from(t.clone()),
    );
    drop(t);
    assert_eq!(a.storage_kind(), "shared");
    assert_eq!((a.data_ptr(), b.data_ptr()), (expected, expected));
    // SAFETY: only `is_some` is asked; nothing borrowed from the tensor outlives the call.
    assert!(unsafe { a.imported() }.is_some());
    assert_eq!(a.device(), Device::CPU);
    // Shared by two buffers (and any other clone of the `Arc`, which can lend `&[T]`): each
    // exports read-only, whatever the tensor allows (issue 50).
    assert!(
        a.readonly() && b.readonly(),
        "a shared tensor is exported read-only"
    );
    drop(a);
    assert_eq!(counts(), before, "the other buffer still holds the tensor");
    let reader = std::thread::spawn(move || drop(b));
    reader.join().unwrap();
    assert_eq!(
        counts(),
        (before.0, before.1 + 1),
        "deleted once, by the last drop"
    );
}
