//! The C exchange API from Rust with an embedded interpreter: the derived table, every entry
//! (success and error paths), types with and without `FromDLPack`, NULL
//! `dltensor_from_py_object_no_sync` for non-`i64` dims, panics kept inside, and the consumer's
//! lookup (`prev_api` walk, foreign capsules ignored).

mod common;

use std::ffi::{CStr, c_char, c_void};
use std::ptr::{self, NonNull};

use dlbind::FromDLPack;
use dlbind::error::py_exception;
use dlbind::exchange::{ExchangeSource, exchange_api, lookup_exchange_api};
use dlbind::export::DLPackSource;
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;
use dlbind::spec::types::{
    DLDataType, DLDevice, DLDeviceType, DLManagedTensorVersioned, DLPACK_EXCHANGE_API_CAPSULE_NAME,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion, DLTensor,
};
use dlbind::stats::live_exports;
use dlbind::stats::{exchange_imports, same_type_views};
use dlbind::{ImportedTensor, from_dlpack};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi as pyffi;
use pyo3::types::IntoPyDict;
use pyo3::types::PyCapsule;

/// Whether `err` is the exception the spec maps `kind` to.
fn is_failure(py: Python<'_>, err: &PyErr, kind: FailureKind) -> bool {
    let want = py_exception(kind.exception(), String::new());
    err.get_type(py).is(want.get_type(py))
}

/// Derived, without a constructor; i64 dims (non-owning fill available). Writable storage
/// (a `Vec` field would be exported read-only, and a bare DLTensor cannot lend read-only data).
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Plain {
    #[dlpack(data)]
    data: Buffer,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
}

#[dlbind::pymethods]
impl Plain {}

/// Derived, usize dims: no non-owning fill.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "uint8")]
struct UsizeDims {
    #[dlpack(data)]
    data: Buffer,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[dlbind::pymethods]
impl UsizeDims {}

/// Derived, with a constructor (owns an imported tensor).
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Owned {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: [i64; 2],
    #[dlpack(strides)]
    strides: [i64; 2],
}

#[dlbind::pymethods]
impl Owned {}

impl FromDLPack for Owned {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        let (s, st) = (t.shape(), t.strides());
        if s.len() != 2 {
            return Err(PyTypeError::new_err("Owned is 2-d"));
        }
        let (shape, strides) = ([s[0], s[1]], [st[0], st[1]]);
        Ok(Owned {
            dtype: t.dtype(),
            buf: Buffer::from(t),
            shape,
            strides,
        })
    }
}

/// Hand-written source whose shape fill panics.
#[pyclass(frozen)]
struct Panics;

// SAFETY: never describes memory successfully (the fill panics).
unsafe impl DLPackSource for Panics {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        ptr::null_mut()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        1
    }
    fn dlpack_fill_shape(&self, _out: &mut [i64]) {
        panic!("boom");
    }
}

// SAFETY: no borrowed dims.
unsafe impl ExchangeSource for Panics {
    fn exchange_constructor() -> Option<dlbind::exchange::Constructor> {
        None
    }
    fn exchange_dims_supported() -> bool {
        false
    }
    fn exchange_dims(&self) -> Option<(&[i64], &[i64])> {
        None
    }
}

/// Hand-written source whose borrowed dims and constructor panic (the other entries' panics).
#[pyclass(frozen)]
struct PanicsEverywhere {
    data: Vec<f32>,
}

// SAFETY: `data` (one dimension of `data.len()` elements) is owned by `self`.
unsafe impl DLPackSource for PanicsEverywhere {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr().cast_mut().cast()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        1
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out[0] = self.data.len() as i64;
    }
}

fn panicking_constructor(_py: Python<'_>, t: ImportedTensor) -> PyResult<Bound<'_, PyAny>> {
    let _owned = t; // dropped while unwinding: the producer's deleter runs
    panic!("constructor boom");
}

// SAFETY: `exchange_dims` never returns (it panics).
unsafe impl ExchangeSource for PanicsEverywhere {
    fn exchange_constructor() -> Option<dlbind::exchange::Constructor> {
        Some(panicking_constructor)
    }
    fn exchange_dims_supported() -> bool {
        true
    }
    fn exchange_dims(&self) -> Option<(&[i64], &[i64])> {
        panic!("dims boom");
    }
}

fn table_of(obj: &Bound<'_, PyAny>) -> &'static DLPackExchangeAPI {
    let cap = obj
        .get_type()
        .getattr(dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR)
        .unwrap();
    let cap = cap.cast::<PyCapsule>().unwrap();
    assert_eq!(
        // SAFETY: the capsule (and so its name) is alive for this statement.
        cap.name().unwrap().map(|n| unsafe { n.as_cstr() }),
        Some(DLPACK_EXCHANGE_API_CAPSULE_NAME)
    );
    // SAFETY: the capsule points at a process-lifetime table.
    unsafe {
        &*(cap
            .pointer_checked(Some(DLPACK_EXCHANGE_API_CAPSULE_NAME))
            .unwrap()
            .as_ptr() as *const DLPackExchangeAPI)
    }
}

fn take_err(py: Python<'_>) -> PyErr {
    PyErr::take(py).expect("an exception is set")
}

#[test]
fn derived_table_entries() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let p = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                shape: vec![2, 3],
                strides: vec![3, 1],
            },
        )
        .unwrap()
        .into_any();
        let api = table_of(&p);
        assert!(ptr::eq(api, exchange_api::<Plain>()));
        assert_eq!(api.header.version, DLPackVersion { major: 1, minor: 3 });
        assert!(api.header.prev_api.is_null());
        assert!(
            api.managed_tensor_allocator.is_some()
                && api.managed_tensor_to_py_object_no_sync.is_some()
        );
        assert!(api.current_work_stream.is_some());

        // Owning export + import.
        let from_py = api.managed_tensor_from_py_object_no_sync.unwrap();
        let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
        // SAFETY: GIL held, live object, valid out pointer.
        assert_eq!(unsafe { from_py(p.as_ptr().cast(), &mut out) }, 0);
        assert_eq!(live_exports(), base + 1);
        // SAFETY: we own `out`.
        let t =
            unsafe { ImportedTensor::from_managed_versioned(NonNull::new(out).unwrap()) }.unwrap();
        assert_eq!((t.shape(), t.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
        assert_eq!(
            t.as_slice::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        drop(t);
        assert_eq!(live_exports(), base);

        // Non-owning fill: pointers into the object.
        let fill = api
            .dltensor_from_py_object_no_sync
            .expect("i64 dims: fill present");
        let mut dl = std::mem::MaybeUninit::<DLTensor>::zeroed();
        // SAFETY: as above.
        assert_eq!(unsafe { fill(p.as_ptr().cast(), dl.as_mut_ptr()) }, 0);
        // SAFETY: filled.
        let dl = unsafe { dl.assume_init() };
        let inner = p.cast::<Plain>().unwrap().get();
        assert_eq!(dl.shape.cast_const(), inner.shape.as_ptr());
        assert_eq!(dl.strides.cast_const(), inner.strides.as_ptr());
        assert_eq!(dl.data, inner.data.data_ptr());
        assert_eq!(live_exports(), base);

        // Wrong type → TypeError, -1.
        let other = Bound::new(
            py,
            UsizeDims {
                data: Buffer::from_vec::<u8>(vec![1]),
                shape: vec![1],
            },
        )
        .unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { from_py(other.as_ptr().cast(), &mut out) }, -1);
        assert!(is_failure(py, &take_err(py), FailureKind::BadArgumentType));

        // No constructor: to_py_object deletes the tensor and raises TypeError.
        let to_py = api.managed_tensor_to_py_object_no_sync.unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { from_py(p.as_ptr().cast(), &mut out) }, 0);
        let mut obj: *mut c_void = ptr::null_mut();
        // SAFETY: ownership of `out` goes to the callee.
        assert_eq!(unsafe { to_py(out, &mut obj) }, -1);
        let e = take_err(py);
        assert!(
            is_failure(py, &e, FailureKind::BadArgumentType)
                && e.to_string().contains("FromDLPack"),
            "{e}"
        );
        assert_eq!(live_exports(), base);

        // Current stream for CPU: NULL.
        let mut s: *mut c_void = NonNull::<c_void>::dangling().as_ptr();
        assert_eq!(
            // SAFETY: valid out pointer.
            unsafe { api.current_work_stream.unwrap()(DLDeviceType::kDLCPU, 0, &mut s) },
            0
        );
        assert!(s.is_null());
    });
}

/// An allocator prototype: a CPU tensor of `shape` (borrowed) and `dtype`, no data.
fn cpu_prototype(shape: &mut [i64], dtype: DLDataType) -> DLTensor {
    DLTensor {
        data: ptr::null_mut(),
        device: DLDevice {
            device_type: DLDeviceType::kDLCPU,
            device_id: 0,
        },
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: ptr::null_mut(),
        byte_offset: 0,
    }
}

unsafe extern "C" fn record_error(ctx: *mut c_void, kind: *const c_char, msg: *const c_char) {
    // SAFETY: ctx is the `Vec<String>` passed below; the strings are valid C strings.
    unsafe {
        let v = &mut *ctx.cast::<Vec<String>>();
        v.push(format!(
            "{}: {}",
            CStr::from_ptr(kind).to_string_lossy(),
            CStr::from_ptr(msg).to_string_lossy()
        ));
    }
}

#[test]
fn allocator_and_to_py_object_with_constructor() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let api = exchange_api::<Owned>();
        assert!(
            api.dltensor_from_py_object_no_sync.is_some(),
            "[i64; 2] dims borrow"
        );
        let mut shape = [3i64, 4];
        let mut proto = cpu_prototype(&mut shape, <f64 as DLPackElement>::DTYPE);
        let mut errors: Vec<String> = Vec::new();
        let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
        let alloc = api.managed_tensor_allocator.unwrap();
        let ctx = (&raw mut errors).cast::<c_void>();
        assert_eq!(
            // SAFETY: valid prototype/out/ctx.
            unsafe { alloc(&mut proto, &mut out, ctx, Some(record_error)) },
            0,
            "{errors:?}"
        );
        assert_eq!(live_exports(), base + 1);
        let mut obj: *mut c_void = ptr::null_mut();
        assert_eq!(
            // SAFETY: ownership of `out` goes to to_py_object.
            unsafe { api.managed_tensor_to_py_object_no_sync.unwrap()(out, &mut obj) },
            0
        );
        // SAFETY: a new reference.
        let obj = unsafe { Bound::from_owned_ptr(py, obj.cast::<pyffi::PyObject>()) };
        let o = obj.cast::<Owned>().unwrap().get();
        assert_eq!((o.shape, o.strides), ([3, 4], [4, 1]));
        let t = from_dlpack(&obj, None, None).unwrap();
        assert_eq!(t.as_slice::<f64>().unwrap(), &[0.0; 12]);
        drop(t);
        drop(obj);
        assert_eq!(live_exports(), base);

        // A type without a constructor reports through SetError.
        let alloc = exchange_api::<Plain>().managed_tensor_allocator.unwrap();
        assert_eq!(
            // SAFETY: as above.
            unsafe { alloc(&mut proto, &mut out, ctx, Some(record_error)) },
            -1
        );
        assert!(
            errors.last().unwrap().starts_with("TypeError: "),
            "{errors:?}"
        );
        // No SetError: still -1, nothing raised.
        assert_eq!(
            // SAFETY: as above.
            unsafe { alloc(&mut proto, &mut out, ptr::null_mut(), None) },
            -1
        );
        assert!(PyErr::take(py).is_none());
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn usize_dims_have_no_fill_and_panics_stay_inside() {
    let _g = common::serial();
    Python::attach(|py| {
        assert!(
            exchange_api::<UsizeDims>()
                .dltensor_from_py_object_no_sync
                .is_none()
        );
        let api = exchange_api::<Panics>();
        let p = Bound::new(py, Panics).unwrap();
        let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
        // SAFETY: GIL held, live object.
        let rc = unsafe {
            api.managed_tensor_from_py_object_no_sync.unwrap()(p.as_ptr().cast(), &mut out)
        };
        assert_eq!(rc, -1);
        assert!(is_failure(py, &take_err(py), FailureKind::InternalError));
    });
}

#[test]
fn panics_in_the_other_entries_stay_inside_and_free_once() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let api = exchange_api::<PanicsEverywhere>();
        let p = Bound::new(py, PanicsEverywhere { data: vec![1.0; 4] }).unwrap();

        // Non-owning fill: the borrowed dims panic.
        let mut dl = std::mem::MaybeUninit::<DLTensor>::zeroed();
        // SAFETY: GIL held, live object, writable out.
        let rc = unsafe {
            api.dltensor_from_py_object_no_sync.unwrap()(p.as_ptr().cast(), dl.as_mut_ptr())
        };
        assert_eq!(rc, -1);
        let e = take_err(py);
        assert!(is_failure(py, &e, FailureKind::InternalError), "{e}");
        assert!(e.to_string().contains("panic"), "{e}");

        // to_py_object: the constructor panics after taking the tensor; its deleter runs once.
        let plain = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![1.0; 3]),
                shape: vec![3],
                strides: vec![1],
            },
        )
        .unwrap();
        let mut m: *mut DLManagedTensorVersioned = ptr::null_mut();
        assert_eq!(
            // SAFETY: GIL held, live object, writable out.
            unsafe {
                exchange_api::<Plain>()
                    .managed_tensor_from_py_object_no_sync
                    .unwrap()(plain.as_ptr().cast(), &mut m)
            },
            0
        );
        assert_eq!(live_exports(), base + 1);
        let mut obj: *mut c_void = ptr::null_mut();
        assert_eq!(
            // SAFETY: ownership of `m` goes to to_py_object.
            unsafe { api.managed_tensor_to_py_object_no_sync.unwrap()(m, &mut obj) },
            -1
        );
        assert!(is_failure(py, &take_err(py), FailureKind::InternalError));
        assert!(obj.is_null());
        assert_eq!(live_exports(), base, "the tensor was freed exactly once");

        // Allocator: the constructor panics; SetError hears about it, nothing stays alive.
        let mut shape = [2i64];
        let mut proto = cpu_prototype(&mut shape, <f32 as DLPackElement>::DTYPE);
        let mut errors: Vec<String> = Vec::new();
        let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
        let ctx = (&raw mut errors).cast::<c_void>();
        // SAFETY: valid prototype/out/ctx.
        let rc = unsafe {
            api.managed_tensor_allocator.unwrap()(&mut proto, &mut out, ctx, Some(record_error))
        };
        assert_eq!(rc, -1);
        assert!(
            errors.last().is_some_and(|e| e.starts_with(&format!(
                "{}: ",
                FailureKind::InternalError.exception().name()
            )) && e.contains("panic")),
            "{errors:?}"
        );
        assert!(
            PyErr::take(py).is_none(),
            "the allocator reports through SetError only"
        );
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn consumer_uses_the_table_and_walks_prev_api() {
    let _g = common::serial();
    Python::attach(|py| {
        let p = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![7.0; 4]),
                shape: vec![4],
                strides: vec![1],
            },
        )
        .unwrap()
        .into_any();
        let n = exchange_imports();
        let t = from_dlpack(&p, None, None).unwrap();
        assert_eq!(exchange_imports(), n + 1);
        assert_eq!(
            t.data_ptr().cast_const(),
            p.cast::<Plain>()
                .unwrap()
                .get()
                .data
                .data_ptr()
                .cast_const()
        );
        drop(t);

        // A newer-major table whose prev_api is ours: the walk finds ours.
        let ours = exchange_api::<Plain>();
        let newer: &'static mut DLPackExchangeAPIHeader =
            Box::leak(Box::new(DLPackExchangeAPIHeader {
                version: DLPackVersion { major: 2, minor: 0 },
                prev_api: (&raw const ours.header).cast_mut(),
            }));
        let lone: &'static mut DLPackExchangeAPIHeader =
            Box::leak(Box::new(DLPackExchangeAPIHeader {
                version: DLPackVersion { major: 2, minor: 0 },
                prev_api: ptr::null_mut(),
            }));
        let mk = |h: *mut DLPackExchangeAPIHeader| -> Bound<'_, PyAny> {
            // SAFETY: a leaked header; 'static name; no destructor.
            let cap = unsafe {
                Bound::from_owned_ptr(
                    py,
                    pyffi::PyCapsule_New(h.cast(), DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr(), None),
                )
            };
            let ns = pyo3::types::PyDict::new(py);
            ns.set_item(dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR, cap)
                .unwrap();
            let ty = py
                .import("builtins")
                .unwrap()
                .getattr("type")
                .unwrap()
                .call1(("X", (), ns))
                .unwrap();
            ty.call0().unwrap()
        };
        let x = mk(newer);
        assert!(ptr::eq(
            // SAFETY: GIL held; live object.
            unsafe { lookup_exchange_api(py, x.as_ptr()) },
            ours
        ));
        let y = mk(lone);
        // SAFETY: as above.
        assert!(unsafe { lookup_exchange_api(py, y.as_ptr()) }.is_null());
        // A capsule with another name is ignored.
        let ns = pyo3::types::PyDict::new(py);
        let foreign = p.call_method("__dlpack__", (), None).unwrap();
        ns.set_item(dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR, foreign)
            .unwrap();
        let ty = py
            .import("builtins")
            .unwrap()
            .getattr("type")
            .unwrap()
            .call1(("Y", (), ns))
            .unwrap();
        let z = ty.call0().unwrap();
        // SAFETY: as above.
        assert!(unsafe { lookup_exchange_api(py, z.as_ptr()) }.is_null());
        assert!(PyErr::take(py).is_none());
    });
}

// --- the legacy attribute name ------------------------------------------------------------------

/// An instance of a fresh Python class whose namespace is `items`.
fn instance_of<'py>(py: Python<'py>, items: &[(&str, Bound<'py, PyAny>)]) -> Bound<'py, PyAny> {
    let ns = pyo3::types::PyDict::new(py);
    for (k, v) in items {
        ns.set_item(*k, v).unwrap();
    }
    let ty = py
        .import("builtins")
        .unwrap()
        .getattr("type")
        .unwrap()
        .call1(("L", (), ns))
        .unwrap();
    ty.call0().unwrap()
}

const LEGACY: &str = dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR_LEGACY;

#[test]
fn legacy_attribute_name_is_looked_up_after_the_standard_one() {
    let _g = common::serial();
    Python::attach(|py| {
        let p = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![1.0; 3]),
                shape: vec![3],
                strides: vec![1],
            },
        )
        .unwrap()
        .into_any();
        let ours = exchange_api::<Plain>();
        let cap = p
            .get_type()
            .getattr(dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR)
            .unwrap();
        let addr = (ours as *const DLPackExchangeAPI as usize)
            .into_pyobject(py)
            .unwrap()
            .into_any();
        let foreign = p.call_method("__dlpack__", (), None).unwrap(); // a capsule with another name
        let look = |x: &Bound<'_, PyAny>| {
            // SAFETY: GIL held; live object.
            unsafe { lookup_exchange_api(py, x.as_ptr()) }
        };

        // Only the legacy name: a capsule, or the table's address as an int.
        assert!(ptr::eq(
            look(&instance_of(py, &[(LEGACY, cap.clone())])),
            ours
        ));
        assert!(ptr::eq(
            look(&instance_of(py, &[(LEGACY, addr.clone())])),
            ours
        ));
        // The standard name holds no usable table: the legacy one is used.
        let both = instance_of(
            py,
            &[
                (
                    dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR,
                    foreign.clone(),
                ),
                (LEGACY, cap.clone()),
            ],
        );
        assert!(ptr::eq(look(&both), ours));
        // The standard name wins when usable (the legacy value is never read).
        let std_first = instance_of(
            py,
            &[
                (dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR, cap.clone()),
                (LEGACY, foreign.clone()),
            ],
        );
        assert!(ptr::eq(look(&std_first), ours));
        // Unusable legacy values: a capsule with another name, a non-int object, a bool, 0, a
        // negative int, a misaligned address, an int beyond 64 bits.
        let int = |v: i128| v.into_pyobject(py).unwrap().into_any();
        let misaligned = ours as *const DLPackExchangeAPI as i128 + 1;
        for v in [
            foreign.clone(),
            "x".into_pyobject(py).unwrap().into_any(),
            true.into_pyobject(py).unwrap().to_owned().into_any(),
            int(0),
            int(-8),
            int(misaligned),
            int(1 << 70),
        ] {
            assert!(look(&instance_of(py, &[(LEGACY, v)])).is_null());
        }
        assert!(PyErr::take(py).is_none());

        // `from_dlpack` goes through a legacy-named table: the table's own type check answers.
        let x = instance_of(py, &[(LEGACY, cap)]);
        let err = from_dlpack(&x, None, None).unwrap_err();
        assert!(is_failure(py, &err, FailureKind::BadArgumentType), "{err}");
        assert!(
            err.to_string().contains("expected a 'Plain' object"),
            "{err}"
        );
    });
}

// --- the raw fastcall `from_dlpack` ---------------------------------------------------------------

/// Derived, with a constructor and `share_from` (same-type imports are direct views).
#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Viewed {
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
impl Viewed {}

impl FromDLPack for Viewed {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        let (shape, strides, dtype, readonly) = (
            t.shape().to_vec(),
            t.strides().to_vec(),
            t.dtype(),
            t.readonly(),
        );
        Ok(Viewed {
            buf: Buffer::from(t),
            dtype,
            shape,
            strides,
            readonly,
        })
    }

    fn share_from(source: &Bound<'_, Self>) -> Option<PyResult<Self>> {
        let s = source.get();
        // SAFETY: element 0 of `s` with its own layout; `source` owns `s.buf`.
        let buf = unsafe {
            s.buf.share_view(
                source.py(),
                source.as_any(),
                s.buf.data_ptr(),
                s.buf.device(),
                s.readonly,
            )
        };
        Some(Ok(Viewed {
            buf,
            dtype: s.dtype,
            shape: s.shape.clone(),
            strides: s.strides.clone(),
            readonly: s.readonly,
        }))
    }
}

fn viewed(py: Python<'_>, n: usize, readonly: bool) -> Bound<'_, Viewed> {
    let t = ImportedTensor::from_buffer(
        dlbind::alloc::AlignedBuffer::zeroed(4 * n).unwrap(),
        &[n as i64],
        <f32 as DLPackElement>::DTYPE,
    )
    .unwrap();
    let v = Viewed::from_imported(py, t).unwrap();
    Bound::new(py, Viewed { readonly, ..v }).unwrap()
}

fn refcnt(o: &Bound<'_, Viewed>) -> isize {
    // SAFETY: a live object.
    unsafe { pyffi::Py_REFCNT(o.as_ptr()) }
}

fn fast_module<'py>(py: Python<'py>) -> Bound<'py, PyModule> {
    let m = PyModule::new(py, "fastmod").unwrap();
    let sub = PyModule::new(py, "owned").unwrap();
    dlbind::add_from_dlpack::<Viewed>(&m).unwrap();
    dlbind::add_from_dlpack::<Owned>(&sub).unwrap();
    m.add("owned", sub).unwrap();
    m
}

#[test]
fn fastcall_from_dlpack_same_type_is_a_view() {
    let _g = common::serial();
    Python::attach(|py| {
        let m = fast_module(py);
        let f = m.getattr("from_dlpack").unwrap();
        let base = live_exports();
        for readonly in [false, true] {
            let src = viewed(py, 5, readonly);
            let refs = refcnt(&src);
            let (n, v) = (exchange_imports(), same_type_views());
            let out = f.call1((&src,)).unwrap();
            assert_eq!(
                (exchange_imports(), same_type_views()),
                (n, v + 1),
                "the same-type shortcut, not the table"
            );
            let out = out.cast::<Viewed>().unwrap();
            assert!(!out.is(&src));
            let (a, b) = (src.get(), out.get());
            assert_eq!(a.buf.data_ptr(), b.buf.data_ptr());
            assert_eq!(
                (&a.shape, &a.strides, a.dtype, a.readonly),
                (&b.shape, &b.strides, b.dtype, b.readonly)
            );
            assert!(b.buf.storage_kind() == "view" && b.buf.readonly() == readonly);
            assert_eq!(refcnt(&src), refs + 1, "the view holds its source");
            // A view of the view holds the original owner, not the intermediate view.
            let out2 = f.call1((out,)).unwrap();
            assert_eq!(refcnt(&src), refs + 2);
            let owner = out2
                .cast::<Viewed>()
                .unwrap()
                .get()
                .buf
                .view_owner()
                .map(|o| o.clone_ref(py));
            assert!(owner.expect("not a view").bind(py).is(&src));
            drop(out2);
            assert_eq!(refcnt(&src), refs + 1);
        }
        assert_eq!(live_exports(), base, "no managed tensor on the direct path");
    });
}

/// How many times `GrowView::share_from` ran (never: the shortcut is for frozen types).
static GROW_SHARES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Derived, NOT frozen, with a constructor and a (careless) `share_from` that would view the
/// source's storage without holding its borrow: `from_dlpack_fastcall` must not use it.
#[pyclass]
#[derive(DLPackExport)]
struct GrowView {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
}

#[dlbind::pymethods]
impl GrowView {}

impl FromDLPack for GrowView {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        let (shape, strides, dtype) = (t.shape().to_vec(), t.strides().to_vec(), t.dtype());
        Ok(GrowView {
            buf: Buffer::from(t),
            dtype,
            shape,
            strides,
        })
    }

    fn share_from(source: &Bound<'_, Self>) -> Option<PyResult<Self>> {
        GROW_SHARES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let s = source.borrow();
        // SAFETY: (for this test) element 0 of `s`; `source` owns `s.buf`.
        let buf = unsafe {
            s.buf.share_view(
                source.py(),
                source.as_any(),
                s.buf.data_ptr(),
                s.buf.device(),
                false,
            )
        };
        Some(Ok(GrowView {
            buf,
            dtype: s.dtype,
            shape: s.shape.clone(),
            strides: s.strides.clone(),
        }))
    }
}

/// `from_dlpack_fastcall::<T>` of a `T` that is not frozen skips `share_from` and imports through
/// `T`'s table's owning export, which holds a borrow of the source until the result goes.
#[test]
fn fastcall_from_dlpack_of_a_non_frozen_type_holds_a_borrow() {
    let _g = common::serial();
    Python::attach(|py| {
        let m = PyModule::new(py, "growmod").unwrap();
        dlbind::add_from_dlpack::<GrowView>(&m).unwrap();
        let f = m.getattr("from_dlpack").unwrap();
        let base = (live_exports(), dlbind::stats::live_export_borrows());
        let t = ImportedTensor::from_buffer(
            dlbind::alloc::AlignedBuffer::zeroed(16).unwrap(),
            &[4],
            <f32 as DLPackElement>::DTYPE,
        )
        .unwrap();
        let src = Bound::new(py, GrowView::from_imported(py, t).unwrap()).unwrap();
        assert!(
            exchange_api::<GrowView>()
                .dltensor_from_py_object_no_sync
                .is_none()
        );
        let (n, v) = (exchange_imports(), same_type_views());
        let out = f.call1((&src,)).unwrap();
        assert_eq!(GROW_SHARES.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(
            (exchange_imports(), same_type_views()),
            (n + 1, v),
            "the table's owning export, not the same-type shortcut"
        );
        assert_eq!(
            out.cast::<GrowView>().unwrap().borrow().buf.data_ptr(),
            src.borrow().buf.data_ptr()
        );
        assert_eq!(
            (live_exports(), dlbind::stats::live_export_borrows()),
            (base.0 + 1, base.1 + 1)
        );
        assert!(src.try_borrow_mut().is_err(), "the import holds a borrow");
        drop(out);
        assert!(src.try_borrow_mut().is_ok(), "released with the import");
        assert_eq!((live_exports(), dlbind::stats::live_export_borrows()), base);
    });
}

/// The derived `__traverse__` of a non-frozen class still runs while exports hold shared borrows
/// of the object (PyO3 takes one more, without blocking): a cycle through a view's owner and a
/// memoryview export of the object is collected, and its borrow released.
#[test]
fn non_frozen_traverse_runs_under_export_borrows() {
    let _g = common::serial();
    Python::attach(|py| {
        let borrows = dlbind::stats::live_export_borrows();
        let ns = pyo3::types::PyDict::new(py);
        py.run(
            c"import gc, weakref\nclass H:\n    pass\nh = H()\nh.mem = bytearray(16)\nalive = weakref.ref(h)\n",
            Some(&ns),
            None,
        )
        .unwrap();
        let h = ns.get_item("h").unwrap().unwrap();
        let mem = h.getattr("mem").unwrap();
        // SAFETY: reading the address of a live bytearray's buffer.
        let data = unsafe { pyffi::PyByteArray_AsString(mem.as_ptr()) }.cast::<c_void>();
        // SAFETY: `data` is 16 bytes `h` keeps alive (its `mem` attribute is never replaced);
        // the view keeps `h` alive.
        let buf = unsafe {
            Buffer::view(
                h.clone().unbind(),
                data,
                dlbind::Extent::from_start(16),
                Device::CPU,
                false,
            )
        };
        let g = Bound::new(
            py,
            GrowView {
                buf,
                dtype: <f32 as DLPackElement>::DTYPE,
                shape: vec![4],
                strides: vec![1],
            },
        )
        .unwrap();
        // h -> g -> (view owner) h, and h -> memoryview -> guard -> g: every edge visible to
        // the collector, the last through the derived `__traverse__` under the export's borrow.
        h.setattr("g", &g).unwrap();
        h.setattr(
            "mv",
            py.eval(c"memoryview", None, None)
                .unwrap()
                .call1((&g,))
                .unwrap(),
        )
        .unwrap();
        assert!(g.try_borrow_mut().is_err(), "the memoryview holds a borrow");
        assert_eq!(dlbind::stats::live_export_borrows(), borrows + 1);
        drop((h, g, mem));
        ns.del_item("h").unwrap();
        py.run(c"gc.collect()", Some(&ns), None).unwrap();
        assert!(
            py.eval(c"alive() is None", Some(&ns), None)
                .unwrap()
                .extract::<bool>()
                .unwrap(),
            "the cycle was collected"
        );
        assert_eq!(dlbind::stats::live_export_borrows(), borrows);
    });
}

#[test]
fn fastcall_from_dlpack_other_paths_and_arguments() {
    let _g = common::serial();
    Python::attach(|py| {
        let m = fast_module(py);
        let f = m.getattr("from_dlpack").unwrap();
        assert_eq!(
            f.getattr("__module__")
                .unwrap()
                .extract::<String>()
                .unwrap(),
            "fastmod"
        );
        let sig = py
            .import("inspect")
            .unwrap()
            .call_method1("signature", (&f,))
            .unwrap()
            .str()
            .unwrap()
            .to_string();
        assert_eq!(sig, "(x, /, *, device=None, copy=None)");

        // A type without `share_from`: its own table (counted), then `from_imported`.
        let g = m.getattr("owned").unwrap().getattr("from_dlpack").unwrap();
        let o = Bound::new(
            py,
            Owned::from_imported(
                py,
                ImportedTensor::from_buffer(
                    dlbind::alloc::AlignedBuffer::zeroed(24).unwrap(),
                    &[2, 3],
                    <f32 as DLPackElement>::DTYPE,
                )
                .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        let n = exchange_imports();
        let r = g.call1((&o,)).unwrap();
        assert_eq!(exchange_imports(), n + 1);
        assert_eq!(
            r.cast::<Owned>().unwrap().get().buf.data_ptr(),
            o.get().buf.data_ptr()
        );
        assert_eq!(
            r.cast::<Owned>().unwrap().get().buf.storage_kind(),
            "imported"
        );
        drop(r);

        // Keywords take the full path; copy=True copies.
        let src = viewed(py, 3, false);
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("copy", true).unwrap();
        let c = f.call((&src,), Some(&kw)).unwrap();
        assert_ne!(
            c.cast::<Viewed>().unwrap().get().buf.data_ptr(),
            src.get().buf.data_ptr()
        );
        kw.set_item("copy", false).unwrap();
        kw.set_item("device", "cpu").unwrap();
        let v = f.call((&src,), Some(&kw)).unwrap();
        assert_eq!(
            v.cast::<Viewed>().unwrap().get().buf.data_ptr(),
            src.get().buf.data_ptr()
        );

        // Argument errors (TypeError) and value errors, as a Python `(x, /, *, device, copy)`.
        let call = |args: Bound<'_, pyo3::types::PyTuple>,
                    kw: Option<&Bound<'_, pyo3::types::PyDict>>| {
            f.call(args, kw).unwrap_err()
        };
        let empty = pyo3::types::PyTuple::empty(py);
        let e = call(empty.clone(), None);
        assert!(
            e.is_instance_of::<PyTypeError>(py)
                && e.to_string()
                    .contains("missing required positional argument"),
            "{e}"
        );
        let e = call((&src, py.None()).into_pyobject(py).unwrap(), None);
        assert!(
            e.is_instance_of::<PyTypeError>(py)
                && e.to_string().contains("takes 1 positional argument"),
            "{e}"
        );
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("x", &src).unwrap();
        let e = call(empty.clone(), Some(&kw));
        assert!(
            e.is_instance_of::<PyTypeError>(py) && e.to_string().contains("positional-only"),
            "{e}"
        );
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("bogus", 1).unwrap();
        let e = call((&src,).into_pyobject(py).unwrap(), Some(&kw));
        assert!(
            e.is_instance_of::<PyTypeError>(py) && e.to_string().contains("'bogus'"),
            "{e}"
        );
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("copy", 1).unwrap();
        let e = call((&src,).into_pyobject(py).unwrap(), Some(&kw));
        assert!(e.is_instance_of::<PyTypeError>(py), "{e}");
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("device", "tpu").unwrap();
        let e = call((&src,).into_pyobject(py).unwrap(), Some(&kw));
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyValueError>(py),
            "{e}"
        );
        // Nothing importable: the spec's NoProtocol (AttributeError).
        let e = f.call1((py.None(),)).unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py),
            "{e}"
        );
        assert!(PyErr::take(py).is_none());
    });
}

#[test]
fn fastcall_table_import_frees_the_export_when_the_target_refuses_it() {
    let _g = common::serial();
    Python::attach(|py| {
        let m = fast_module(py);
        let g = m.getattr("owned").unwrap().getattr("from_dlpack").unwrap();
        let base = live_exports();
        // A 1-d `UsizeDims` (no non-owning fill: the table's owning export) into `Owned` (2-d
        // only): the export succeeds, then `Owned::from_imported` refuses it; the producer's
        // deleter must run exactly once.
        let p = Bound::new(
            py,
            UsizeDims {
                data: Buffer::from_vec::<u8>(vec![1, 2, 3]),
                shape: vec![3],
            },
        )
        .unwrap()
        .into_any();
        // SAFETY: a live object.
        let rc = unsafe { pyffi::Py_REFCNT(p.as_ptr()) };
        let n = exchange_imports();
        let e = g.call1((&p,)).unwrap_err();
        assert!(
            e.is_instance_of::<PyTypeError>(py) && e.to_string().contains("Owned is 2-d"),
            "{e}"
        );
        assert_eq!(
            exchange_imports(),
            n + 1,
            "the table's owning export was called"
        );
        assert_eq!(live_exports(), base, "its deleter ran");
        assert_eq!(
            // SAFETY: a live object.
            unsafe { pyffi::Py_REFCNT(p.as_ptr()) },
            rc,
            "the export's reference to the source was dropped"
        );
        // A 2-d one goes through: the view holds the export until it is dropped.
        let p2 = Bound::new(
            py,
            UsizeDims {
                data: Buffer::from_vec::<u8>(vec![0; 6]),
                shape: vec![2, 3],
            },
        )
        .unwrap()
        .into_any();
        let r = g.call1((&p2,)).unwrap();
        assert_eq!(live_exports(), base + 1);
        drop(r);
        assert_eq!(live_exports(), base);

        // The same through a lending table (`Plain`: frozen, i64 dims): the refused view's
        // reference to the source is dropped; an accepted one holds the source, no export.
        let p = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![1.0, 2.0, 3.0]),
                shape: vec![3],
                strides: vec![1],
            },
        )
        .unwrap()
        .into_any();
        // SAFETY: a live object.
        let rc = unsafe { pyffi::Py_REFCNT(p.as_ptr()) };
        let e = g.call1((&p,)).unwrap_err();
        assert!(e.to_string().contains("Owned is 2-d"), "{e}");
        assert_eq!(exchange_imports(), n + 3);
        assert_eq!(
            // SAFETY: a live object.
            unsafe { pyffi::Py_REFCNT(p.as_ptr()) },
            rc,
            "the refused view released the source"
        );
        let p2 = Bound::new(
            py,
            Plain {
                data: Buffer::from_vec::<f32>(vec![0.0; 6]),
                shape: vec![2, 3],
                strides: vec![3, 1],
            },
        )
        .unwrap()
        .into_any();
        // SAFETY: a live object.
        let rc2 = unsafe { pyffi::Py_REFCNT(p2.as_ptr()) };
        let r = g.call1((&p2,)).unwrap();
        assert_eq!(
            // SAFETY: a live object.
            (live_exports(), unsafe { pyffi::Py_REFCNT(p2.as_ptr()) }),
            (base, rc2 + 1),
            "lent: the view holds the source"
        );
        drop(r);
        // SAFETY: a live object.
        assert_eq!(unsafe { pyffi::Py_REFCNT(p2.as_ptr()) }, rc2);
    });
}

/// Hand-written, not frozen, i64 dims: its dims could be borrowed, but its table has no
/// non-owning fill (a bare DLTensor cannot hold the borrow a non-frozen export needs) and does
/// not lend.
#[pyclass]
struct Unfrozen {
    data: Vec<f32>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

#[pymethods]
impl Unfrozen {
    #[classattr]
    #[pyo3(name = "__dlpack_c_exchange_api__")]
    fn exchange_table(py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlbind::exchange::exchange_api_capsule::<Unfrozen>(py)
    }
}

// SAFETY: `data` with `shape`/`strides` (C-contiguous, set at construction) is owned by `self`.
unsafe impl DLPackSource for Unfrozen {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr().cast_mut().cast()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <f32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out.copy_from_slice(&self.shape);
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        out.copy_from_slice(&self.strides);
        true
    }
}

// SAFETY: the dims are the stored `shape` / `strides`, as filled above.
unsafe impl ExchangeSource for Unfrozen {
    fn exchange_constructor() -> Option<dlbind::exchange::Constructor> {
        None
    }
    fn exchange_dims_supported() -> bool {
        true
    }
    fn exchange_dims(&self) -> Option<(&[i64], &[i64])> {
        Some((&self.shape, &self.strides))
    }
}

/// How many times `Odd::exchange_dims` ran: the lending probe and the non-owning fill each ask
/// for the dims once; the owning export fills its own copies through `dlpack_fill_shape` /
/// `dlpack_fill_strides`.
static ODD_FILLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Hand-written, frozen, `i64` dims, with any dtype and shape: its table lends, and its fill or
/// the consumer's checks can refuse what it describes.
#[pyclass(frozen)]
struct Odd {
    data: Vec<f32>,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

#[pymethods]
impl Odd {
    #[classattr]
    #[pyo3(name = "__dlpack_c_exchange_api__")]
    fn exchange_table(py: Python<'_>) -> PyResult<Py<PyAny>> {
        dlbind::exchange::exchange_api_capsule::<Odd>(py)
    }
}

// SAFETY: a test type: the tests below give it layouts inside `data` or ones that every path
// refuses before any element is addressed (a negative dimension, a dtype outside the spec).
unsafe impl DLPackSource for Odd {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr().cast_mut().cast()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        self.dtype
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out.copy_from_slice(&self.shape);
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        out.copy_from_slice(&self.strides);
        true
    }
}

// SAFETY: the dims are the stored `shape` / `strides`, as filled above.
unsafe impl ExchangeSource for Odd {
    fn exchange_constructor() -> Option<dlbind::exchange::Constructor> {
        None
    }
    fn exchange_dims_supported() -> bool {
        true
    }
    fn exchange_dims(&self) -> Option<(&[i64], &[i64])> {
        ODD_FILLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some((&self.shape, &self.strides))
    }
}

/// A lending table whose fill refuses an object, or whose fill result the consumer's checks
/// refuse: the fill was called (its exception, if any, dropped), then the owning export was
/// used, and its own refusal is what the caller sees; nothing stays alive.
#[test]
fn a_lending_table_falls_back_to_the_owning_export_when_the_fill_or_the_checks_refuse() {
    let _g = common::serial();
    Python::attach(|py| {
        let f32_ = <f32 as DLPackElement>::DTYPE;
        let odd = |dtype: DLDataType, shape: Vec<i64>| {
            let strides = vec![1; shape.len()];
            Bound::new(
                py,
                Odd {
                    data: vec![0.0; 4],
                    dtype,
                    shape,
                    strides,
                },
            )
            .unwrap()
            .into_any()
        };
        let fills = || ODD_FILLS.load(std::sync::atomic::Ordering::Relaxed);
        let base = live_exports();
        let cases = [
            // The fill validates the dtype (two lanes: not in the spec) and refuses.
            (
                odd(DLDataType { lanes: 2, ..f32_ }, vec![2]),
                FailureKind::UnsupportedDtype,
            ),
            // The fill accepts a negative dimension (no data size to check it against); the
            // consumer's `validate_dltensor` refuses it, as it refuses the owning export's.
            (odd(f32_, vec![-1]), FailureKind::MalformedTensor),
        ];
        for (src, kind) in &cases {
            let n = fills();
            let e = from_dlpack(src, None, None).unwrap_err();
            assert!(is_failure(py, &e, *kind), "{kind:?}: {e}");
            assert_eq!(
                fills(),
                n + 2,
                "{kind:?}: the probe, then the non-owning fill, were asked first"
            );
            assert!(
                PyErr::take(py).is_none(),
                "{kind:?}: no exception left behind"
            );
            assert_eq!(
                live_exports(),
                base,
                "{kind:?}: the owning export's tensor was freed"
            );
        }
        // A layout both accept is lent: the fill, and no managed tensor.
        let ok = odd(f32_, vec![4]);
        let n = fills();
        let t = from_dlpack(&ok, None, None).unwrap();
        assert_eq!((fills(), live_exports()), (n + 2, base));
        assert_eq!(
            (t.shape(), t.data_ptr().cast_const()),
            (
                &[4i64][..],
                ok.cast::<Odd>().unwrap().get().data.as_ptr().cast()
            )
        );
    });
}

/// A non-frozen type's table: NULL non-owning fill (a direct call is refused), and an owning
/// export that holds a shared borrow of the object until its deleter runs.
#[test]
fn non_frozen_table_has_no_fill_and_its_exports_hold_a_borrow() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let borrows = dlbind::stats::live_export_borrows();
        let api = exchange_api::<Unfrozen>();
        assert!(
            api.dltensor_from_py_object_no_sync.is_none(),
            "non-frozen: no non-owning fill"
        );
        let src = Bound::new(
            py,
            Unfrozen {
                data: vec![1.0, 2.0, 3.0, 4.0],
                shape: vec![2, 2],
                strides: vec![2, 1],
            },
        )
        .unwrap();
        // The fill itself refuses a non-frozen type (for callers that reach it directly).
        let mut dl = std::mem::MaybeUninit::<DLTensor>::zeroed();
        assert_eq!(
            // SAFETY: GIL held, a live object, a writable DLTensor.
            unsafe {
                dlbind::exchange::producer::dltensor_from_py_object_no_sync::<Unfrozen>(
                    src.as_ptr().cast(),
                    dl.as_mut_ptr(),
                )
            },
            -1
        );
        let e = take_err(py);
        assert!(is_failure(py, &e, FailureKind::UnsupportedLayout), "{e}");
        assert!(e.to_string().contains("not a frozen class"), "{e}");

        // The owning export: the borrow lasts until the deleter runs.
        let from_py = api.managed_tensor_from_py_object_no_sync.unwrap();
        let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
        // SAFETY: GIL held, live object, valid out pointer.
        assert_eq!(unsafe { from_py(src.as_ptr().cast(), &mut out) }, 0);
        assert!(src.try_borrow_mut().is_err(), "borrowed by the export");
        assert!(src.try_borrow().is_ok(), "shared borrows stay possible");
        assert_eq!(dlbind::stats::live_export_borrows(), borrows + 1);
        // SAFETY: we own `out`.
        let t =
            unsafe { ImportedTensor::from_managed_versioned(NonNull::new(out).unwrap()) }.unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.data_ptr().cast_const(), src.borrow().data.as_ptr().cast());
        drop(t);
        assert!(src.try_borrow_mut().is_ok(), "released by the deleter");
        assert_eq!(
            (live_exports(), dlbind::stats::live_export_borrows()),
            (base, borrows)
        );

        // A mutably borrowed object (a `&mut self` call in progress) is not exported.
        let guard = src.try_borrow_mut().unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { from_py(src.as_ptr().cast(), &mut out) }, -1);
        let e = take_err(py);
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py),
            "{e}"
        );
        drop(guard);
        assert_eq!(live_exports(), base);
    });
}

/// Which imports lend (`dlbind::exchange::import_via_exchange_api_with`): writable host objects
/// of this module's tables for frozen types with a non-owning fill. Their imports hold the source,
/// not a managed tensor; everything else is imported through the owning export.
#[test]
fn only_writable_host_objects_of_frozen_types_with_a_fill_lend() {
    let _g = common::serial();
    // `#[pyo3(name = ...)]` needs a literal: it must be the spec's attribute name.
    assert_eq!(
        "__dlpack_c_exchange_api__",
        dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR
    );
    Python::attach(|py| {
        // SAFETY: live objects.
        let refcnt = |o: &Bound<'_, PyAny>| unsafe { pyffi::Py_REFCNT(o.as_ptr()) };
        let base = live_exports();
        let n = exchange_imports();
        let sources = [
            (
                Bound::new(
                    py,
                    Plain {
                        data: Buffer::from_vec::<f32>(vec![1.0; 6]),
                        shape: vec![3, 2],
                        strides: vec![1, 3],
                    },
                )
                .unwrap()
                .into_any(),
                true,
            ),
            (
                Bound::new(
                    py,
                    Unfrozen {
                        data: vec![1.0; 6],
                        shape: vec![2, 3],
                        strides: vec![3, 1],
                    },
                )
                .unwrap()
                .into_any(),
                false,
            ),
            (
                Bound::new(
                    py,
                    UsizeDims {
                        data: Buffer::from_vec::<u8>(vec![1; 6]),
                        shape: vec![6],
                    },
                )
                .unwrap()
                .into_any(),
                false,
            ),
            // Frozen, i64 dims, but read-only: the probe sends it to the owning export.
            (viewed(py, 6, true).into_any(), false),
            (viewed(py, 6, false).into_any(), true),
        ];
        for (i, (src, lends)) in sources.iter().enumerate() {
            let rc = refcnt(src);
            let t = from_dlpack(src, None, None).unwrap();
            assert_eq!(
                exchange_imports(),
                n + i as u64 + 1,
                "source {i}: the table was used"
            );
            assert_eq!(
                live_exports(),
                base + usize::from(!lends),
                "source {i}: lends = {lends}"
            );
            // Lent: the view holds the source; owning: the managed tensor does.
            assert_eq!(refcnt(src), rc + 1, "source {i}: the source is kept alive");
            // What the table's owning export gives.
            // SAFETY: GIL held; a live object.
            let table = unsafe { lookup_exchange_api(py, src.as_ptr()) };
            assert!(!table.is_null());
            let mut m: *mut DLManagedTensorVersioned = ptr::null_mut();
            assert_eq!(
                // SAFETY: the entry of `type(src)`'s table, a live object, a writable out pointer.
                unsafe {
                    (*table).managed_tensor_from_py_object_no_sync.unwrap()(
                        src.as_ptr().cast(),
                        &mut m,
                    )
                },
                0
            );
            // SAFETY: a managed tensor we own.
            let want = unsafe { ImportedTensor::from_managed_versioned(NonNull::new(m).unwrap()) }
                .unwrap();
            assert_eq!(
                (t.shape(), t.strides(), t.dtype(), t.device(), t.readonly()),
                (
                    want.shape(),
                    want.strides(),
                    want.dtype(),
                    want.device(),
                    want.readonly()
                )
            );
            assert_eq!(t.data_ptr(), want.data_ptr());
            drop((t, want));
            assert_eq!(
                (live_exports(), refcnt(src)),
                (base, rc),
                "source {i}: released"
            );
        }
        // Another class carrying `Plain`'s table: the probe's type check refuses it, and the
        // owning export refuses it with the spec's error (never a lent view of a foreign object).
        let ns = pyo3::types::PyDict::new(py);
        ns.set_item(
            dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR,
            sources[0]
                .0
                .get_type()
                .getattr(dlbind::spec::types::DLPACK_EXCHANGE_API_ATTR)
                .unwrap(),
        )
        .unwrap();
        let ty = py
            .import("builtins")
            .unwrap()
            .getattr("type")
            .unwrap()
            .call1(("Impostor", (), ns))
            .unwrap();
        let e = from_dlpack(&ty.call0().unwrap(), None, None).unwrap_err();
        assert!(
            is_failure(py, &e, FailureKind::BadArgumentType)
                && e.to_string().contains("expected a 'Plain' object"),
            "{e}"
        );
        assert!(PyErr::take(py).is_none());
        assert_eq!(live_exports(), base);
    });
}

/// What `from_dlpack(x)` costs beside CPython's own floors, in this embedded interpreter
/// (prints only; timings are never asserted): `cargo test --release -p dlbind --test exchange_py
/// -- --ignored --nocapture floors`.
#[test]
#[ignore]
fn floors() {
    Python::attach(|py| {
        let m = fast_module(py);
        let g = pyo3::types::PyDict::new(py);
        g.set_item("f", m.getattr("from_dlpack").unwrap()).unwrap();
        g.set_item("v", viewed(py, 16, false)).unwrap();
        g.set_item("timeit", py.import("timeit").unwrap()).unwrap();
        py.run(
            c"def noop(x=None): pass\n\
def best(stmt):\n    t = timeit.Timer(stmt, globals=globals())\n    return min(t.timeit(200000) / 200000 for _ in range(15)) * 1e9\n\
for s in ('pass', 'len(())', 'noop(v)', 'object()', 'slice(v)', 'f(v)'):\n    print(f'{best(s):7.1f} ns  {s}')\n",
            Some(&g),
            None,
        )
        .unwrap();
    });
}

/// How many times `Placed::share_into` wrote, declined, and `Placed::share_from` ran.
static PLACED_WROTE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PLACED_DECLINED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static PLACED_SHARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Frozen, with a free list and `share_into`: writes in place for `mode` 0, declines for 1,
/// panics for 2 (`share_from` serves the declined ones).
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Placed {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: [i64; 1],
    mode: u8,
}

#[dlbind::pymethods]
impl Placed {}

impl Placed {
    fn share(source: &Bound<'_, Self>) -> Placed {
        let s = source.get();
        // SAFETY: element 0 of `s` with its own layout; `source` owns `s.buf`.
        let buf = unsafe {
            s.buf.share_view(
                source.py(),
                source.as_any(),
                s.buf.data_ptr(),
                s.buf.device(),
                false,
            )
        };
        Placed {
            buf,
            shape: s.shape,
            mode: s.mode,
        }
    }
}

impl FromDLPack for Placed {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        let shape = [t.shape()[0]];
        Ok(Placed {
            buf: Buffer::from(t),
            shape,
            mode: 0,
        })
    }

    fn share_from(source: &Bound<'_, Self>) -> Option<PyResult<Self>> {
        PLACED_SHARED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(Ok(Placed::share(source)))
    }

    fn share_into<'a>(
        source: &Bound<'_, Self>,
        out: dlbind::Slot<'a, Self>,
    ) -> Option<dlbind::Written<'a, Self>> {
        match source.get().mode {
            0 => {
                let written = out.write(Placed::share(source));
                PLACED_WROTE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Some(written)
            }
            1 => {
                PLACED_DECLINED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                None
            }
            _ => panic!("share_into refused by panicking"),
        }
    }

    fn into_instance(py: Python<'_>, value: Self) -> PyResult<Bound<'_, Self>> {
        dlbind::cpython::freelist::new_instance(py, value)
    }
}

/// `share_into` writes the same-type view in place into a free-list instance; when it declines
/// (or panics) the instance goes back to the list untouched and `share_from` (or the error)
/// takes over; the type's reference count and the list's length come back each time.
#[test]
fn fastcall_from_dlpack_same_type_in_place() {
    use dlbind::cpython::freelist::{builds_directly, freelist_len};
    use std::sync::atomic::Ordering::SeqCst;
    let _g = common::serial();
    Python::attach(|py| {
        dlbind::tuning::enable_freelist::<Placed>(py, 8).unwrap();
        let m = PyModule::new(py, "placedmod").unwrap();
        dlbind::add_from_dlpack::<Placed>(&m).unwrap();
        let f = m.getattr("from_dlpack").unwrap();
        let make = |mode: u8| {
            let t = ImportedTensor::from_buffer(
                dlbind::alloc::AlignedBuffer::zeroed(12).unwrap(),
                &[3],
                <f32 as DLPackElement>::DTYPE,
            )
            .unwrap();
            let p = Placed::from_imported(py, t).unwrap();
            dlbind::cpython::freelist::new_instance(py, Placed { mode, ..p }).unwrap()
        };
        // Probe, then fill the list.
        drop(make(0));
        assert!(builds_directly::<Placed>(py));
        let held: Vec<_> = (0..4).map(|_| make(0)).collect();
        drop(held);
        let ty = py.get_type::<Placed>();
        // SAFETY: reading the reference count of a live type object.
        let type_refs = || unsafe { pyffi::Py_REFCNT(ty.as_ptr()) };
        for mode in [0u8, 1, 2, 0, 1] {
            let src = make(mode);
            let (listed, trefs) = (freelist_len::<Placed>(py).unwrap(), type_refs());
            let (w, d, s) = (
                PLACED_WROTE.load(SeqCst),
                PLACED_DECLINED.load(SeqCst),
                PLACED_SHARED.load(SeqCst),
            );
            let out = f.call1((&src,));
            match mode {
                0 => assert_eq!(
                    (PLACED_WROTE.load(SeqCst), PLACED_SHARED.load(SeqCst)),
                    (w + 1, s)
                ),
                1 => assert_eq!(
                    (PLACED_DECLINED.load(SeqCst), PLACED_SHARED.load(SeqCst)),
                    (d + 1, s + 1)
                ),
                _ => assert!(
                    out.as_ref().unwrap_err().to_string().contains("panic"),
                    "{out:?}"
                ),
            }
            if mode != 2 {
                let out = out.unwrap();
                let o = out.cast::<Placed>().unwrap().get();
                assert_eq!(o.buf.data_ptr(), src.get().buf.data_ptr());
                assert_eq!((o.shape, o.mode), ([3], mode));
                // In place: one instance taken from the list; declined: taken by `new_instance`
                // after the first went back.
                assert_eq!(freelist_len::<Placed>(py).unwrap(), listed - 1);
                // The instance took over its list entry's reference to the type (decision 0013).
                assert_eq!(type_refs(), trefs);
                drop(out);
            }
            assert_eq!(freelist_len::<Placed>(py).unwrap(), listed, "mode {mode}");
            assert_eq!(type_refs(), trefs, "mode {mode}: the type's references");
        }
    });
}

static IMPORT_MODE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
static IMPORT_WROTE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static IMPORT_DECLINED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static IMPORT_GENERAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Frozen, with a free list, `from_imported_into` (writes in place for `IMPORT_MODE` 0, gives
/// the handle back for 1, panics for 2) and direct release (its buffer's managed tensor is given
/// back in `release_python_refs`).
#[pyclass(frozen)]
struct PlacedImport {
    buf: Buffer,
    len: i64,
}

impl FromDLPack for PlacedImport {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        IMPORT_GENERAL.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let len = t.shape()[0];
        Ok(PlacedImport {
            buf: Buffer::from(t),
            len,
        })
    }

    fn from_imported_into<'a>(
        _py: Python<'_>,
        t: ImportedTensor,
        out: dlbind::Slot<'a, Self>,
    ) -> Result<dlbind::Written<'a, Self>, ImportedTensor> {
        use std::sync::atomic::Ordering::SeqCst;
        match IMPORT_MODE.load(SeqCst) {
            0 => {
                let len = t.shape()[0];
                let written = out.write(PlacedImport {
                    buf: Buffer::from(t),
                    len,
                });
                IMPORT_WROTE.fetch_add(1, SeqCst);
                Ok(written)
            }
            1 => {
                IMPORT_DECLINED.fetch_add(1, SeqCst);
                Err(t)
            }
            // `t` drops while unwinding: its deleter runs once.
            _ => panic!("from_imported_into refused by panicking"),
        }
    }

    fn into_instance(py: Python<'_>, value: Self) -> PyResult<Bound<'_, Self>> {
        dlbind::cpython::freelist::new_instance(py, value)
    }
}

impl dlbind::cpython::freelist::ReleasePython for PlacedImport {
    fn release_python_refs(&mut self, py: Python<'_>) -> dlbind::cpython::freelist::Released {
        if !self.buf.release_python_refs(py) {
            dlbind::cpython::freelist::Released::No
        } else if self.buf.owns_nothing() {
            dlbind::cpython::freelist::Released::Nothing
        } else {
            dlbind::cpython::freelist::Released::Drop
        }
    }
}

/// `from_imported_into` writes an imported handle in place into a free-list instance (from a
/// capsule, as from a table's owning export); declined, the instance goes back and
/// `from_imported` gets the handle; panicking, the error is raised and the producer's deleter
/// runs once. With direct release, the instance's release gives the managed tensor back
/// (deleter once) and skips the drop. List length, the type's references and the live exports
/// come back every time.
#[test]
fn fastcall_from_dlpack_imported_in_place() {
    use dlbind::cpython::freelist::freelist_len;
    use std::sync::atomic::Ordering::SeqCst;
    let _g = common::serial();
    Python::attach(|py| {
        dlbind::tuning::enable_freelist::<PlacedImport>(py, 8).unwrap();
        dlbind::cpython::freelist::enable_direct_release::<PlacedImport>(py).unwrap();
        let m = PyModule::new(py, "placedimportmod").unwrap();
        dlbind::add_from_dlpack::<PlacedImport>(&m).unwrap();
        let f = m.getattr("from_dlpack").unwrap();
        let src = {
            let t = ImportedTensor::from_buffer(
                dlbind::alloc::AlignedBuffer::zeroed(20).unwrap(),
                &[5],
                <f32 as DLPackElement>::DTYPE,
            )
            .unwrap();
            let p = Placed::from_imported(py, t).unwrap();
            dlbind::cpython::freelist::new_instance(py, p).unwrap()
        };
        let kwargs = [("max_version", (1, 0))].into_py_dict(py).unwrap();
        let capsule = || src.call_method("__dlpack__", (), Some(&kwargs)).unwrap();
        // Fill the list (the first instances are built by PyO3 and probed).
        IMPORT_MODE.store(1, SeqCst);
        let held: Vec<_> = (0..4).map(|_| f.call1((capsule(),)).unwrap()).collect();
        drop(held);
        let ty = py.get_type::<PlacedImport>();
        // SAFETY: reading the reference count of a live type object.
        let type_refs = || unsafe { pyffi::Py_REFCNT(ty.as_ptr()) };
        for mode in [0u8, 1, 2, 0, 1, 2] {
            IMPORT_MODE.store(mode, SeqCst);
            let cap = capsule();
            let (listed, trefs, live) = (
                freelist_len::<PlacedImport>(py).unwrap(),
                type_refs(),
                live_exports(),
            );
            let (w, d, g) = (
                IMPORT_WROTE.load(SeqCst),
                IMPORT_DECLINED.load(SeqCst),
                IMPORT_GENERAL.load(SeqCst),
            );
            let out = f.call1((&cap,));
            drop(cap);
            match mode {
                0 => assert_eq!(
                    (IMPORT_WROTE.load(SeqCst), IMPORT_GENERAL.load(SeqCst)),
                    (w + 1, g)
                ),
                1 => assert_eq!(
                    (IMPORT_DECLINED.load(SeqCst), IMPORT_GENERAL.load(SeqCst)),
                    (d + 1, g + 1)
                ),
                _ => {
                    let e = out.as_ref().unwrap_err().to_string();
                    assert!(e.contains("panic"), "{e}");
                    assert_eq!(
                        live_exports(),
                        live - 1,
                        "deleter ran once, while unwinding"
                    );
                }
            }
            if mode != 2 {
                let out = out.unwrap();
                let o = out.cast::<PlacedImport>().unwrap().get();
                assert_eq!(o.buf.data_ptr(), src.get().buf.data_ptr());
                assert_eq!(o.len, 5);
                assert_eq!(freelist_len::<PlacedImport>(py).unwrap(), listed - 1);
                // The instance took over its list entry's reference to the type (decision 0013).
                assert_eq!(type_refs(), trefs);
                assert_eq!(live_exports(), live, "the instance holds the export");
                drop(out);
                assert_eq!(live_exports(), live - 1, "released: deleter ran once");
            }
            assert_eq!(
                freelist_len::<PlacedImport>(py).unwrap(),
                listed,
                "mode {mode}"
            );
            assert_eq!(type_refs(), trefs, "mode {mode}: the type's references");
        }
    });
}
