//! `__dlpack__` from Python (embedded interpreter): argument validation, exceptions,
//! capsule names, flags, refcounts, live_exports, copies, and round trips through
//! `dlbind::from_dlpack` (and numpy when the repo's venv has it).

mod common;

use std::ffi::c_void;

use dlbind::export::DLPackSource;
use dlbind::prelude::*;
use dlbind::spec::types::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
    DLPACK_VERSIONED_CAPSULE_NAME,
};
use dlbind::stats::live_exports;
use dlbind::{ImportedTensor, from_dlpack};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi as pyffi;
use pyo3::types::{PyDict, PyTuple};

/// A frozen array class with a hand-written DLPackSource (independent of the derive).
#[pyclass(frozen)]
struct Arr {
    data: Vec<f32>,
    shape: Vec<usize>,
    strides: Option<Vec<isize>>,
    readonly: bool,
    device: Device,
}

// SAFETY: `data` is never mutated (frozen class); shape/strides describe elements inside it.
unsafe impl DLPackSource for Arr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr() as *mut c_void
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        dlbind::__private::fill_dims(&self.shape, out)
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        match &self.strides {
            Some(s) => {
                dlbind::__private::fill_dims(s, out);
                true
            }
            None => false,
        }
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
    fn dlpack_readonly(&self) -> bool {
        self.readonly
    }
}

#[pymethods]
impl Arr {
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

/// A non-frozen class with a hand-written DLPackSource: `dlpack_method` serves it through
/// `SourceAccess::with_owner`, so each export holds a shared borrow of the object (a `&mut self`
/// method would fail with PyO3's borrow error while one lives).
#[pyclass]
struct MutArr {
    data: Vec<i32>,
}

// SAFETY: 1-d contiguous over `data`.
unsafe impl DLPackSource for MutArr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr() as *mut c_void
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <i32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        1
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out[0] = self.data.len() as i64;
    }
}

#[pymethods]
impl MutArr {
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

fn arr<'py>(py: Python<'py>, shape: &[usize], readonly: bool) -> Bound<'py, Arr> {
    let n: usize = shape.iter().product();
    Bound::new(
        py,
        Arr {
            data: (0..n).map(|i| i as f32).collect(),
            shape: shape.to_vec(),
            strides: None,
            readonly,
            device: Device::CPU,
        },
    )
    .unwrap()
}

fn kw<'py>(py: Python<'py>, code: &str) -> Bound<'py, PyDict> {
    py.eval(&std::ffi::CString::new(code).unwrap(), None, None)
        .unwrap()
        .cast_into::<PyDict>()
        .unwrap()
}

fn call_dlpack<'py>(a: &Bound<'py, PyAny>, kwargs: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = a.py();
    a.call_method("__dlpack__", (), Some(&kw(py, kwargs)))
}

fn capsule_name(cap: &Bound<'_, PyAny>) -> String {
    // SAFETY: `cap` is a live capsule.
    unsafe {
        std::ffi::CStr::from_ptr(pyffi::PyCapsule_GetName(cap.as_ptr()))
            .to_string_lossy()
            .into_owned()
    }
}

fn versioned_ptr(cap: &Bound<'_, PyAny>) -> *mut DLManagedTensorVersioned {
    // SAFETY: a live versioned capsule.
    unsafe {
        pyffi::PyCapsule_GetPointer(cap.as_ptr(), DLPACK_VERSIONED_CAPSULE_NAME.as_ptr()).cast()
    }
}

fn legacy_ptr(cap: &Bound<'_, PyAny>) -> *mut DLManagedTensor {
    // SAFETY: a live legacy capsule.
    unsafe { pyffi::PyCapsule_GetPointer(cap.as_ptr(), DLPACK_CAPSULE_NAME.as_ptr()).cast() }
}

fn refcnt(o: &Bound<'_, PyAny>) -> isize {
    // SAFETY: live object.
    unsafe { pyffi::Py_REFCNT(o.as_ptr()) }
}

#[test]
fn legacy_and_versioned_capsules() {
    let _g = common::serial();
    Python::attach(|py| {
        let a = arr(py, &[2, 3], false).into_any();
        let base = live_exports();
        for kwargs in [
            "{}",
            "{'max_version': None}",
            "{'max_version': (0, 8)}",
            "{'max_version': (0, 0)}",
        ] {
            let cap = call_dlpack(&a, kwargs).unwrap();
            assert_eq!(capsule_name(&cap), "dltensor", "{kwargs}");
            // SAFETY: live capsule of ours.
            let t = unsafe { &(*legacy_ptr(&cap)).dl_tensor };
            assert_eq!(t.ndim, 2);
            assert_eq!(t.byte_offset, 0);
            // SAFETY: ndim 2, filled.
            unsafe {
                assert_eq!(std::slice::from_raw_parts(t.shape, 2), &[2, 3]);
                assert_eq!(std::slice::from_raw_parts(t.strides, 2), &[3, 1]);
            }
            assert_eq!(live_exports(), base + 1);
        }
        assert_eq!(live_exports(), base);
        for kwargs in [
            "{'max_version': (1, 0)}",
            "{'max_version': (1, 3)}",
            "{'max_version': (2, 0)}",
            "{'max_version': (100, 3)}",
            "{'max_version': (10**30, 0)}",
        ] {
            let cap = call_dlpack(&a, kwargs).unwrap();
            assert_eq!(capsule_name(&cap), "dltensor_versioned", "{kwargs}");
            // SAFETY: live capsule of ours.
            let m = unsafe { &*versioned_ptr(&cap) };
            assert_eq!(
                (m.version.major, m.version.minor),
                (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
            );
            assert_eq!(m.flags, 0);
            assert_eq!(
                m.dl_tensor.data as *const f32,
                a.cast::<Arr>().unwrap().get().data.as_ptr()
            );
        }
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn bad_argument_types_raise_type_error() {
    Python::attach(|py| {
        let a = arr(py, &[4], false).into_any();
        for kwargs in [
            "{'max_version': 1}",
            "{'max_version': [1, 0]}",
            "{'max_version': (1,)}",
            "{'max_version': (1, 0, 0)}",
            "{'max_version': ('1', 0)}",
            "{'max_version': (1.0, 0)}",
            "{'dl_device': [1, 0]}",
            "{'dl_device': (3,)}",
            "{'dl_device': 'cpu'}",
            "{'copy': 1}",
            "{'copy': 'yes'}",
            "{'stream': 'x'}",
            "{'stream': 1.5}",
            "{'stream': True}",
            "{'stream': object()}",
            "{'foo': 1}",
        ] {
            let e = call_dlpack(&a, kwargs).unwrap_err();
            assert!(e.is_instance_of::<PyTypeError>(py), "{kwargs}: {e}");
        }
        // Positional arguments are refused (keyword-only).
        let e = a.call_method1("__dlpack__", (py.None(),)).unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py));
    });
}

#[test]
fn devices_streams_and_readonly() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let a = arr(py, &[4], false).into_any();
        assert_eq!(
            a.call_method0("__dlpack_device__")
                .unwrap()
                .extract::<(i32, i32)>()
                .unwrap(),
            (1, 0)
        );
        for kwargs in [
            "{'dl_device': (1, 0)}",
            "{'dl_device': None}",
            "{'stream': None}",
            "{'copy': False}",
            "{'copy': None}",
        ] {
            call_dlpack(&a, kwargs).unwrap();
        }
        for kwargs in [
            "{'dl_device': (2, 0)}",
            "{'dl_device': (9, 0)}",
            "{'dl_device': (1, 2**30)}",
            "{'dl_device': (1, 2**40)}",
            "{'dl_device': (2, 0), 'copy': False}",
        ] {
            let e = call_dlpack(&a, kwargs).unwrap_err();
            assert!(e.is_instance_of::<PyBufferError>(py), "{kwargs}: {e}");
        }
        for kwargs in [
            "{'stream': 0}",
            "{'stream': 1}",
            "{'stream': -1}",
            "{'stream': 2**70}",
        ] {
            let e = call_dlpack(&a, kwargs).unwrap_err();
            assert!(e.is_instance_of::<PyValueError>(py), "{kwargs}: {e}");
        }
        // Read-only: legacy with copy=False refused (BufferError), legacy with copy=None a
        // copy (decision 0024), versioned flagged.
        let ro = arr(py, &[4], true).into_any();
        let e = call_dlpack(&ro, "{'copy': False}").unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(e.to_string().contains("max_version"), "{e}");
        let legacy = call_dlpack(&ro, "{}").unwrap();
        assert_eq!(capsule_name(&legacy), "dltensor");
        drop(legacy);
        let cap = call_dlpack(&ro, "{'max_version': (1, 0)}").unwrap();
        assert_eq!(
            // SAFETY: live capsule.
            unsafe { (*versioned_ptr(&cap)).flags },
            DLPACK_FLAG_BITMASK_READ_ONLY
        );
        let t = ImportedTensor::from_capsule(&cap).unwrap();
        assert!(t.readonly());
        drop(t);
        // Pinned host memory goes to CPU without a copy, and reports CPU.
        let pinned = Bound::new(
            py,
            Arr {
                data: vec![1.0; 3],
                shape: vec![3],
                strides: None,
                readonly: false,
                device: Device::CUDA_HOST,
            },
        )
        .unwrap()
        .into_any();
        assert_eq!(
            pinned
                .call_method0("__dlpack_device__")
                .unwrap()
                .extract::<(i32, i32)>()
                .unwrap(),
            Device::CUDA_HOST.to_tuple()
        );
        let cap = call_dlpack(
            &pinned,
            "{'max_version': (1, 0), 'dl_device': (1, 0), 'copy': False}",
        )
        .unwrap();
        // SAFETY: live capsule.
        let m = unsafe { &*versioned_ptr(&cap) };
        assert_eq!(Device::from(m.dl_tensor.device), Device::CPU);
        assert_eq!(m.flags, 0);
        drop(cap);
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn copy_true_makes_a_real_copy() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        // A transposed (non-contiguous) read-only source.
        let a = Bound::new(
            py,
            Arr {
                data: (0..6).map(|i| i as f32).collect(),
                shape: vec![3, 2],
                strides: Some(vec![1, 3]),
                readonly: true,
                device: Device::CPU,
            },
        )
        .unwrap()
        .into_any();
        let r0 = refcnt(&a);
        let cap = call_dlpack(&a, "{'max_version': (1, 0), 'copy': True}").unwrap();
        assert_eq!(refcnt(&a), r0, "a copy does not keep the owner alive");
        // SAFETY: live capsule.
        let m = unsafe { &*versioned_ptr(&cap) };
        assert_eq!(
            m.flags, DLPACK_FLAG_BITMASK_IS_COPIED,
            "copied and writable"
        );
        let src_ptr = a.cast::<Arr>().unwrap().get().data.as_ptr();
        assert_ne!(m.dl_tensor.data as *const f32, src_ptr);
        // SAFETY: 6 contiguous floats.
        let vals = unsafe { std::slice::from_raw_parts(m.dl_tensor.data as *const f32, 6) };
        assert_eq!(vals, &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(
            // SAFETY: ndim 2.
            unsafe { std::slice::from_raw_parts(m.dl_tensor.strides, 2) },
            &[2, 1]
        );
        assert_eq!(m.dl_tensor.data as usize % 64, 0, "64-byte aligned");
        // Legacy copy: allowed even for read-only data, no flags to set.
        let cap2 = call_dlpack(&a, "{'copy': True}").unwrap();
        assert_eq!(capsule_name(&cap2), "dltensor");
        drop((cap, cap2));
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn refcounts_and_unconsumed_capsules() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let a = arr(py, &[5], false).into_any();
        let r0 = refcnt(&a);
        for kwargs in [
            "{'max_version': (0, 0)}",
            "{}",
            "{'max_version': (1, 0)}",
            "{'max_version': (100, 3)}",
        ] {
            let cap = call_dlpack(&a, kwargs).unwrap();
            assert_eq!(refcnt(&a), r0 + 1, "{kwargs}");
            assert_eq!(live_exports(), base + 1);
            drop(cap); // unconsumed: the capsule destructor runs the deleter once
            assert_eq!(refcnt(&a), r0, "{kwargs}");
            assert_eq!(live_exports(), base);
        }
        // Consumed: renamed, and the capsule no longer frees anything.
        let cap = call_dlpack(&a, "{'max_version': (1, 0)}").unwrap();
        let t = ImportedTensor::from_capsule(&cap).unwrap();
        assert_eq!(capsule_name(&cap), "used_dltensor_versioned");
        drop(cap);
        assert_eq!(live_exports(), base + 1);
        assert_eq!(refcnt(&a), r0 + 1);
        // The producer object may die while the view lives.
        let view_ptr = t.data_ptr();
        drop(a);
        assert_eq!(
            // SAFETY: the view keeps the producer alive: 5 floats.
            unsafe { std::slice::from_raw_parts(view_ptr as *const f32, 5) },
            &[0.0, 1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(t.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0, 4.0]);
        drop(t);
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn imported_view_dropped_on_another_thread() {
    let _g = common::serial();
    let base = live_exports();
    let t = Python::attach(|py| {
        let a = arr(py, &[2, 2], false).into_any();
        from_dlpack(&a, None, None).unwrap()
    });
    assert_eq!(live_exports(), base + 1);
    // The deleter takes the GIL itself, from a thread that never held it.
    std::thread::spawn(move || drop(t)).join().unwrap();
    assert_eq!(live_exports(), base);
}

#[test]
fn from_dlpack_round_trip_and_errors() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let a = arr(py, &[2, 3], false).into_any();
        let t = from_dlpack(&a, None, None).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.strides(), &[3, 1]);
        assert_eq!(t.dtype(), <f32 as DLPackElement>::DTYPE);
        assert_eq!(t.device(), Device::CPU);
        assert_eq!(
            t.version().map(|v| v.major),
            Some(DLPACK_MAJOR_VERSION),
            "versioned requested"
        );
        assert!(!t.readonly());
        assert_eq!(
            t.data_ptr() as *const f32,
            a.cast::<Arr>().unwrap().get().data.as_ptr()
        );
        assert_eq!(t.dtype_info().map(|i| i.name), Some("float32"));
        drop(t);
        // copy=True never aliases.
        let t = from_dlpack(&a, Some(Device::CPU), Some(true)).unwrap();
        assert_ne!(
            t.data_ptr() as *const f32,
            a.cast::<Arr>().unwrap().get().data.as_ptr()
        );
        assert!(t.is_copied() && !t.readonly());
        assert_eq!(
            t.as_slice::<f32>().unwrap(),
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        drop(t);
        // Unsupported device request.
        let e = from_dlpack(&a, Some(Device::cuda(0)), None).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        // No protocol.
        let e = from_dlpack(&py.eval(c"object()", None, None).unwrap(), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyAttributeError>(py), "{e}");
        let e = from_dlpack(&py.eval(c"[1, 2]", None, None).unwrap(), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyAttributeError>(py), "{e}");
        // Raw capsule, then a second consumption.
        let cap = call_dlpack(&a, "{}").unwrap();
        let t = from_dlpack(&cap, None, None).unwrap();
        assert!(t.readonly(), "legacy imports are read-only");
        let e = from_dlpack(&cap, None, None).unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py), "{e}");
        drop(t);
        // Non-frozen class.
        let m = Bound::new(
            py,
            MutArr {
                data: vec![7, 8, 9],
            },
        )
        .unwrap()
        .into_any();
        let t = from_dlpack(&m, None, None).unwrap();
        assert_eq!(t.as_slice::<i32>().unwrap(), &[7, 8, 9]);
        assert!(t.as_slice::<f32>().is_err());
        // The import holds a shared borrow (through the export's guard): no `&mut` access.
        let mc = m.cast::<MutArr>().unwrap();
        assert!(mc.try_borrow().is_ok(), "shared borrows stay possible");
        assert!(
            mc.try_borrow_mut().is_err(),
            "borrowed while the import lives"
        );
        drop(t);
        assert!(mc.try_borrow_mut().is_ok(), "released with the import");
        // An unconsumed capsule holds it too, until it is dropped; a host copy holds none.
        for (kwargs, holds) in [
            ("{}", true),
            ("{'max_version': (1, 3)}", true),
            ("{'max_version': (1, 3), 'copy': True}", false),
        ] {
            let borrows = dlbind::stats::live_export_borrows();
            let cap = call_dlpack(&m, kwargs).unwrap();
            assert_eq!(mc.try_borrow_mut().is_err(), holds, "{kwargs}");
            assert_eq!(
                dlbind::stats::live_export_borrows(),
                borrows + usize::from(holds),
                "{kwargs}"
            );
            drop(cap);
            assert!(mc.try_borrow_mut().is_ok(), "{kwargs}: released");
            assert_eq!(dlbind::stats::live_export_borrows(), borrows, "{kwargs}");
        }
        // While mutably borrowed (a `&mut self` call in progress), exports fail with PyO3's
        // borrow error instead of reading the data.
        let guard = mc.try_borrow_mut().unwrap();
        let e = call_dlpack(&m, "{}").unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py),
            "{e}"
        );
        drop(guard);
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn python_producers_fallback_and_kwargs() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let a = arr(py, &[3], false).into_any();
        let g = PyDict::new(py);
        g.set_item("inner", &a).unwrap();
        py.run(
            cr#"
calls = []
class Spy:
    def __init__(self, inner): self.inner = inner
    def __dlpack__(self, **kw):
        calls.append(kw)
        return self.inner.__dlpack__(**kw)
    def __dlpack_device__(self): return (1, 0)
class Old:
    def __init__(self, inner): self.inner = inner
    def __dlpack__(self, stream=None):
        calls.append(('old', stream))
        return self.inner.__dlpack__()
class Broken:
    def __dlpack__(self, **kw): raise ValueError("producer says no")
class NotCapsule:
    def __dlpack__(self, **kw): return 42
spy = Spy(inner); old = Old(inner); broken = Broken(); notcap = NotCapsule()
"#,
            Some(&g),
            None,
        )
        .unwrap();
        let spy = g.get_item("spy").unwrap().unwrap();
        let t = from_dlpack(&spy, None, None).unwrap();
        drop(t);
        let calls = g.get_item("calls").unwrap().unwrap();
        let first = calls.get_item(0).unwrap();
        assert_eq!(
            first.str().unwrap().to_string(),
            format!("{{'max_version': ({DLPACK_MAJOR_VERSION}, {DLPACK_MINOR_VERSION})}}")
        );
        let t = from_dlpack(&spy, Some(Device::CPU), Some(false)).unwrap();
        drop(t);
        let last = calls.get_item(1).unwrap();
        assert_eq!(
            last.get_item("dl_device")
                .unwrap()
                .extract::<(i32, i32)>()
                .unwrap(),
            (1, 0)
        );
        assert!(!last.get_item("copy").unwrap().extract::<bool>().unwrap());
        // Legacy-only producer: TypeError → retry without keywords.
        let old = g.get_item("old").unwrap().unwrap();
        let t = from_dlpack(&old, None, None).unwrap();
        assert!(t.readonly());
        drop(t);
        // ... with copy=True: import then copy ourselves (writable, no alias).
        let t = from_dlpack(&old, None, Some(true)).unwrap();
        assert!(!t.readonly() && t.is_copied());
        assert_ne!(
            t.data_ptr() as *const f32,
            a.cast::<Arr>().unwrap().get().data.as_ptr()
        );
        drop(t);
        // ... and with copy=False: retried too, and a legacy capsule is a view (issue 25),
        // of unknown writability.
        let t = from_dlpack(&old, None, Some(false)).unwrap();
        assert!(t.readonly() && !t.is_copied());
        assert_eq!(t.writability(), dlbind::Writability::Unknown);
        assert_eq!(
            t.data_ptr() as *const f32,
            a.cast::<Arr>().unwrap().get().data.as_ptr()
        );
        drop(t);
        // Other producer errors propagate unchanged (no retry).
        let e = from_dlpack(&g.get_item("broken").unwrap().unwrap(), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py) && e.to_string().contains("producer says no"));
        let e = from_dlpack(&g.get_item("notcap").unwrap().unwrap(), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py), "{e}");
        assert_eq!(live_exports(), base);
        let _ = PyTuple::empty(py);
    });
}

#[test]
fn zero_size_and_zero_dim() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        for shape in [vec![], vec![0], vec![0, 4], vec![3, 0], vec![1; 32]] {
            let a = arr(py, &shape, false).into_any();
            for kwargs in [
                "{}",
                "{'max_version': (1, 0)}",
                "{'max_version': (1, 0), 'copy': True}",
            ] {
                let cap = call_dlpack(&a, kwargs).unwrap();
                let t = ImportedTensor::from_capsule(&cap).unwrap();
                let want: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                assert_eq!(t.shape(), &want[..], "{shape:?} {kwargs}");
                assert_eq!(t.strides().len(), shape.len());
                assert_eq!(t.numel(), shape.iter().product::<usize>());
                assert_eq!(t.as_slice::<f32>().unwrap().len(), t.numel());
            }
        }
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn numpy_interop() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("numpy not importable: skipping numpy_interop");
            return;
        };
        let base = live_exports();
        let a = arr(py, &[2, 3], false).into_any();
        // numpy consumes our versioned and legacy capsules.
        let x = np.call_method1("from_dlpack", (&a,)).unwrap();
        assert_eq!(
            x.getattr("shape")
                .unwrap()
                .extract::<(usize, usize)>()
                .unwrap(),
            (2, 3)
        );
        let ptr: usize = x
            .getattr("ctypes")
            .unwrap()
            .getattr("data")
            .unwrap()
            .extract()
            .unwrap();
        assert_eq!(ptr, a.cast::<Arr>().unwrap().get().data.as_ptr() as usize);
        assert!(
            x.getattr("flags")
                .unwrap()
                .getattr("writeable")
                .unwrap()
                .extract::<bool>()
                .unwrap()
        );
        assert_eq!(
            x.call_method0("sum").unwrap().extract::<f64>().unwrap(),
            15.0
        );
        drop(x);
        // Read-only → numpy read-only.
        let ro = arr(py, &[3], true).into_any();
        let x = np.call_method1("from_dlpack", (&ro,)).unwrap();
        assert!(
            !x.getattr("flags")
                .unwrap()
                .getattr("writeable")
                .unwrap()
                .extract::<bool>()
                .unwrap()
        );
        drop(x);
        // We consume numpy arrays: transposed, negative strides, broadcast, sliced (offset).
        let g = PyDict::new(py);
        g.set_item("np", &np).unwrap();
        let cases = [
            (
                "np.arange(12, dtype=np.float32).reshape(3, 4)",
                vec![3i64, 4],
                vec![4i64, 1],
            ),
            (
                "np.arange(12, dtype=np.float32).reshape(3, 4).T",
                vec![4, 3],
                vec![1, 4],
            ),
            ("np.arange(6, dtype=np.float32)[::-1]", vec![6], vec![-1]),
            (
                "np.broadcast_to(np.arange(3, dtype=np.float32), (4, 3))",
                vec![4, 3],
                vec![0, 1],
            ),
            ("np.arange(10, dtype=np.float32)[3:7]", vec![4], vec![1]),
        ];
        for (expr, shape, strides) in cases {
            let x = py
                .eval(&std::ffi::CString::new(expr).unwrap(), Some(&g), None)
                .unwrap();
            let t = from_dlpack(&x, None, None).unwrap();
            assert_eq!(t.shape(), &shape[..], "{expr}");
            assert_eq!(t.strides(), &strides[..], "{expr}");
            let ptr: usize = x
                .getattr("ctypes")
                .unwrap()
                .getattr("data")
                .unwrap()
                .extract()
                .unwrap();
            assert_eq!(t.data_ptr() as usize, ptr, "{expr}: element 0");
            let want: Vec<f32> = x
                .call_method0("ravel")
                .unwrap()
                .call_method0("tolist")
                .unwrap()
                .extract()
                .unwrap();
            #[cfg(feature = "ndarray")]
            {
                let v = t.as_ndarray::<f32>().unwrap();
                assert_eq!(
                    v.shape(),
                    shape
                        .iter()
                        .map(|&d| d as usize)
                        .collect::<Vec<_>>()
                        .as_slice()
                );
                let got: Vec<f32> = v.iter().copied().collect();
                assert_eq!(got, want, "{expr}");
            }
            let c = t.to_contiguous_copy().unwrap();
            assert_eq!(c.as_slice::<f32>().unwrap(), &want[..], "{expr}");
            // Round trip back through numpy: our re-export of an imported view is not needed
            // here; the copy is compared above.
            let xr = x
                .getattr("flags")
                .unwrap()
                .getattr("writeable")
                .unwrap()
                .extract::<bool>()
                .unwrap();
            assert_eq!(t.readonly(), !xr, "{expr}: read-only follows numpy's flag");
        }
        // copy=True from numpy: IS_COPIED from numpy, no alias.
        let x = py
            .eval(c"np.arange(4, dtype=np.int64)", Some(&g), None)
            .unwrap();
        let t = from_dlpack(&x, None, Some(true)).unwrap();
        let ptr: usize = x
            .getattr("ctypes")
            .unwrap()
            .getattr("data")
            .unwrap()
            .extract()
            .unwrap();
        assert_ne!(t.data_ptr() as usize, ptr);
        assert_eq!(t.as_slice::<i64>().unwrap(), &[0, 1, 2, 3]);
        drop(t);
        assert_eq!(live_exports(), base);
    });
}

/// The same class shape, with `__dlpack__` replaced by the raw fastcall implementation.
#[pyclass(frozen)]
struct FastArr {
    inner: Arr,
}

// SAFETY: delegates to `Arr`'s (sound) description.
unsafe impl DLPackSource for FastArr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.inner.dlpack_data_ptr()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        self.inner.dlpack_dtype()
    }
    fn dlpack_ndim(&self) -> usize {
        self.inner.dlpack_ndim()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        self.inner.dlpack_fill_shape(out)
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        self.inner.dlpack_fill_strides(out)
    }
    fn dlpack_readonly(&self) -> bool {
        self.inner.readonly
    }
}

#[pymethods]
impl FastArr {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (slf, stream, max_version, dl_device, copy);
        Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the PyO3 method must have been replaced",
        ))
    }
}

#[test]
fn fast_dlpack_path() {
    let _g = common::serial();
    Python::attach(|py| {
        dlbind::__private::install_fast_dlpack::<FastArr>(py).unwrap();
        dlbind::__private::install_fast_dlpack::<FastArr>(py).unwrap();
        let base = live_exports();
        let mk = |ro: bool| {
            Bound::new(
                py,
                FastArr {
                    inner: Arr {
                        data: vec![1.0, 2.0, 3.0],
                        shape: vec![3],
                        strides: None,
                        readonly: ro,
                        device: Device::CPU,
                    },
                },
            )
            .unwrap()
            .into_any()
        };
        let a = mk(false);
        assert_eq!(capsule_name(&call_dlpack(&a, "{}").unwrap()), "dltensor");
        assert_eq!(
            capsule_name(&call_dlpack(&a, "{'max_version': (1, 3)}").unwrap()),
            "dltensor_versioned"
        );
        // Keyword names built at run time (not interned by the compiler) still match.
        let k = py
            .eval(
                c"{''.join(['max_', 'version']): (1, 0), ''.join(['co', 'py']): True}",
                None,
                None,
            )
            .unwrap();
        let cap = a
            .call_method("__dlpack__", (), Some(&k.cast_into::<PyDict>().unwrap()))
            .unwrap();
        assert_eq!(
            // SAFETY: live capsule.
            unsafe { (*versioned_ptr(&cap)).flags },
            DLPACK_FLAG_BITMASK_IS_COPIED
        );
        drop(cap);
        for kwargs in [
            "{'max_version': 1}",
            "{'copy': 1}",
            "{'stream': 'x'}",
            "{'foo': 1}",
            "{'dl_device': [1, 0]}",
        ] {
            let e = call_dlpack(&a, kwargs).unwrap_err();
            assert!(e.is_instance_of::<PyTypeError>(py), "{kwargs}: {e}");
        }
        let e = a.call_method1("__dlpack__", (py.None(),)).unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py), "{e}");
        let e = call_dlpack(&a, "{'stream': 1}").unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py), "{e}");
        let e = call_dlpack(&a, "{'dl_device': (2, 0)}").unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        // Read-only, legacy: a copy under copy=None, refused under copy=False.
        let ro = mk(true);
        assert_eq!(capsule_name(&call_dlpack(&ro, "{}").unwrap()), "dltensor");
        let e = call_dlpack(&ro, "{'copy': False}").unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        let t = from_dlpack(&a, None, None).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
        drop(t);
        if let Some(np) = common::numpy(py) {
            let x = np.call_method1("from_dlpack", (&a,)).unwrap();
            assert_eq!(
                x.call_method0("sum").unwrap().extract::<f64>().unwrap(),
                6.0
            );
        }
        assert_eq!(live_exports(), base);
    });
}

/// `__dlpack__` as a class attribute holding dlbind's fastcall descriptor (what a derive can
/// emit instead of a `#[pymethods]` function).
#[pyclass(frozen)]
struct DescArr {
    inner: Arr,
}

// SAFETY: delegates to `Arr`'s description.
unsafe impl DLPackSource for DescArr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.inner.dlpack_data_ptr()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        self.inner.dlpack_dtype()
    }
    fn dlpack_ndim(&self) -> usize {
        self.inner.dlpack_ndim()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        self.inner.dlpack_fill_shape(out)
    }
}

#[pymethods]
impl DescArr {
    #[classattr]
    #[pyo3(name = "__dlpack__")]
    fn dlpack_attr(py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlbind::__private::dlpack_descriptor::<Self>(py)
    }
}

#[test]
fn dlpack_descriptor_classattr() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let a = Bound::new(
            py,
            DescArr {
                inner: Arr {
                    data: vec![4.0, 5.0],
                    shape: vec![2],
                    strides: None,
                    readonly: false,
                    device: Device::CPU,
                },
            },
        )
        .unwrap()
        .into_any();
        assert_eq!(capsule_name(&call_dlpack(&a, "{}").unwrap()), "dltensor");
        assert_eq!(
            capsule_name(&call_dlpack(&a, "{'max_version': (1, 0)}").unwrap()),
            "dltensor_versioned"
        );
        let e = call_dlpack(&a, "{'max_version': [1, 0]}").unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py), "{e}");
        // Unbound call with a foreign `self` is refused.
        let e = a
            .get_type()
            .getattr("__dlpack__")
            .unwrap()
            .call1((py.None(),))
            .unwrap_err();
        assert!(e.is_instance_of::<PyTypeError>(py), "{e}");
        let t = from_dlpack(&a, None, None).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[4.0, 5.0]);
        drop(t);
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn dlpack_lookup_follows_class_changes() {
    let _g = common::serial();
    Python::attach(|py| {
        let a = arr(py, &[2], false).into_any();
        let g = PyDict::new(py);
        g.set_item("inner", &a).unwrap();
        py.run(
            cr#"
class P:
    def __dlpack__(self, **kw): return inner.__dlpack__(**kw)
p = P()
"#,
            Some(&g),
            None,
        )
        .unwrap();
        let p = g.get_item("p").unwrap().unwrap();
        drop(from_dlpack(&p, None, None).unwrap());
        drop(from_dlpack(&p, None, None).unwrap());
        py.run(
            c"def gone(self, **kw): raise ValueError('replaced')\nP.__dlpack__ = gone",
            Some(&g),
            None,
        )
        .unwrap();
        let e = from_dlpack(&p, None, None).unwrap_err();
        assert!(e.to_string().contains("replaced"), "{e}");
        py.run(c"del P.__dlpack__", Some(&g), None).unwrap();
        let e = from_dlpack(&p, None, None).unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py),
            "{e}"
        );
    });
}

#[test]
fn peers_jax_and_pyarrow() {
    let _g = common::serial();
    Python::attach(|py| {
        common::add_venv(py);
        let base = live_exports();
        if let Ok(pa) = py.import("pyarrow") {
            let arr = pa
                .call_method1("array", (vec![1i64, 2, 3],))
                .unwrap()
                .call_method1("slice", (1,))
                .unwrap();
            let t = from_dlpack(&arr, None, None).unwrap();
            assert_eq!(t.as_slice::<i64>().unwrap(), &[2, 3]);
            assert!(t.readonly(), "pyarrow exports read-only");
            drop(t);
            // copy=True → pyarrow copies (IS_COPIED) → writable.
            let t = from_dlpack(&arr, None, Some(true)).unwrap();
            assert!(!t.readonly());
            assert_eq!(t.as_slice::<i64>().unwrap(), &[2, 3]);
        } else {
            eprintln!("pyarrow not importable: skipped");
        }
        if let Ok(jnp) = py.import("jax.numpy") {
            let x = jnp
                .call_method1("arange", (6,))
                .unwrap()
                .call_method1("reshape", ((2, 3),))
                .unwrap();
            let t = from_dlpack(&x, None, None).unwrap();
            assert_eq!(t.shape(), &[2, 3]);
            assert!(t.readonly(), "JAX answers with a legacy capsule");
            drop(t);
            // JAX consumes our legacy capsules.
            let a = arr(py, &[2, 2], false).into_any();
            let y = jnp.call_method1("from_dlpack", (&a,)).unwrap();
            assert_eq!(
                y.call_method0("sum").unwrap().extract::<f64>().unwrap(),
                6.0
            );
            drop(y);
            py.run(c"import gc; gc.collect()", None, None).unwrap();
        } else {
            eprintln!("jax not importable: skipped");
        }
        assert_eq!(live_exports(), base);
    });
}

/// A freed small manager block is kept and reused by the next export of the same kind; a
/// large one (more dimensions) is not. Only Rust runs between the calls, so the GIL is never
/// released and no other thread can take the spare block in between.
#[test]
fn freed_small_blocks_are_reused() {
    use dlbind::export::{ExportRequest, export_to_capsule};
    Python::attach(|py| {
        let a = arr(py, &[2, 3], false);
        let legacy = ExportRequest::DEFAULT;
        let versioned = ExportRequest {
            max_version: Some((1, 3)),
            ..ExportRequest::DEFAULT
        };
        let c1 = export_to_capsule(a.as_any(), a.get(), &legacy)
            .unwrap()
            .into_bound(py);
        let p1 = legacy_ptr(&c1) as usize;
        drop(c1); // unconsumed: the destructor frees the tensor, keeping its block
        let v = export_to_capsule(a.as_any(), a.get(), &versioned)
            .unwrap()
            .into_bound(py);
        assert_ne!(
            versioned_ptr(&v) as usize,
            p1,
            "the versioned kind has its own spare"
        );
        let c2 = export_to_capsule(a.as_any(), a.get(), &legacy)
            .unwrap()
            .into_bound(py);
        assert_eq!(legacy_ptr(&c2) as usize, p1, "the spare block is reused");
        // SAFETY: `c2` is live; its tensor is dlbind's, with 2 dimensions.
        unsafe {
            let t = &(*legacy_ptr(&c2)).dl_tensor;
            assert_eq!(std::slice::from_raw_parts(t.shape, 2), &[2, 3]);
            assert_eq!(std::slice::from_raw_parts(t.strides, 2), &[3, 1]);
        }
        drop(c2);
        let big = arr(py, &[1, 1, 1, 1, 2], false);
        let c3 = export_to_capsule(big.as_any(), big.get(), &legacy)
            .unwrap()
            .into_bound(py);
        assert_ne!(
            legacy_ptr(&c3) as usize,
            p1,
            "a 5-d tensor needs a larger block"
        );
        // SAFETY: as above, 5 dimensions.
        unsafe {
            let t = &(*legacy_ptr(&c3)).dl_tensor;
            assert_eq!(std::slice::from_raw_parts(t.shape, 5), &[1, 1, 1, 1, 2]);
        }
    });
}

/// A frozen source whose `dlpack_device` panics for device ids above 9 (and answers otherwise),
/// with `__dlpack_device__` from the runtime's descriptor.
#[pyclass(frozen)]
struct DevicePanics {
    device: Device,
}

// SAFETY: describes no memory (no export is made from it in the test).
unsafe impl DLPackSource for DevicePanics {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        0
    }
    fn dlpack_fill_shape(&self, _out: &mut [i64]) {}
    fn dlpack_device(&self) -> Device {
        assert!(self.device.device_id < 10, "device id out of range");
        self.device
    }
}

#[pymethods]
impl DevicePanics {
    #[classattr]
    #[pyo3(name = "__dlpack_device__")]
    fn dlpack_device_attr(py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlbind::__private::dlpack_device_descriptor::<Self>(py)
    }
}

/// `__dlpack_device__`'s fast path (a frozen type's device 0 from the cached tuples) and its
/// general path agree, and a panic in the type's `dlpack_device` becomes the spec's internal
/// error on both the first call (which binds the method to the class) and later ones (the
/// bound fast path), never an abort.
#[test]
fn dlpack_device_fast_and_general_paths() {
    let _g = common::serial();
    Python::attach(|py| {
        let make = |t: i32, id: i32| {
            Bound::new(
                py,
                DevicePanics {
                    device: Device::from_tuple((t, id)),
                },
            )
            .unwrap()
            .into_any()
        };
        fn call<'py>(o: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
            o.call_method0("__dlpack_device__")
        }
        for _ in 0..2 {
            for (t, id) in [(1, 0), (2, 0), (2, 7), (13, 0), (31, 0), (40, 0), (40, 2)] {
                let d = call(&make(t, id)).unwrap();
                assert_eq!(d.extract::<(i32, i32)>().unwrap(), (t, id));
            }
            let e = call(&make(2, 12)).unwrap_err();
            let want = dlbind::error::py_exception(
                dlbind::spec::errors::FailureKind::InternalError.exception(),
                String::new(),
            );
            assert!(e.get_type(py).is(want.get_type(py)), "{e}");
            assert!(e.to_string().contains("panic in __dlpack_device__"), "{e}");
        }
        // Device 0 of a cached type is one tuple for the process.
        let (a, b) = (call(&make(2, 0)).unwrap(), call(&make(2, 0)).unwrap());
        assert!(a.is(&b));
    });
}
