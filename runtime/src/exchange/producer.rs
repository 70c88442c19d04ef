//! The five `extern "C"` functions of a type's exchange table (monomorphised per type).
//!
//! Every function catches panics (none cross the C boundary) and reports failures as the DLPack
//! header says: a Python exception and `-1` (the allocator: through `SetError`, so it needs no
//! Python error state of its own).

use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr::{self, NonNull};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{Borrowed, PyClass};

use super::ExchangeSource;
use crate::alloc::AlignedBuffer;
use crate::copy::contiguous_nbytes;
use crate::device::Device;
use crate::dtype::validate_dtype;
use crate::error::DlpackError;
use crate::export::ExportRequest;
use crate::export::access::SourceAccess;
use crate::export::access::with_held;
use crate::export::request::EXPORT_VERSION;
use crate::export::{export_versioned_managed, export_versioned_managed_kept};
use crate::ffi::{DLDeviceType, DLManagedTensorVersioned, DLTensor};
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;
use crate::spec::streams::consumer_default_stream;

/// What the owning export asks for: a versioned tensor of our version, on the source's own
/// device, no copy, no stream (the "NoSync" functions never synchronise).
const OWNING_REQUEST: ExportRequest = ExportRequest {
    max_version: Some((EXPORT_VERSION.major as i64, EXPORT_VERSION.minor as i64)),
    copy: None,
    dl_device: None,
    stream: None,
};

/// Runs `f` with the GIL held by the caller; a `PyErr` is restored and a panic becomes a
/// `SystemError`; returns 0 / -1.
///
/// # Safety
/// The calling thread holds the GIL.
#[inline]
unsafe fn with_gil_held(what: &'static str, f: impl FnOnce(Python<'_>) -> PyResult<()>) -> c_int {
    // SAFETY: caller contract (GIL held).
    unsafe {
        crate::cpython::boundary::at_c_boundary(|| ExchangeEntry(what), -1, |py| f(py).map(|()| 0))
    }
}

/// "the DLPack exchange API (`entry`)": the name a caught panic's SystemError gives, formatted
/// only then.
struct ExchangeEntry(&'static str);

impl std::fmt::Display for ExchangeEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the DLPack exchange API ({})", self.0)
    }
}

/// `obj` as a `T` (exact type, or a subclass: same Rust layout), else TypeError.
///
/// # Safety
/// GIL held; `obj` is NULL or a live object.
#[inline]
unsafe fn as_source<'a, 'py, T: PyClass>(
    py: Python<'py>,
    obj: *mut c_void,
    what: &str,
) -> PyResult<Borrowed<'a, 'py, T>> {
    let o = obj.cast::<ffi::PyObject>();
    if o.is_null() {
        return Err(bad_value(format!("{what}: py_object is NULL")));
    }
    // SAFETY: `o` is live (caller contract); type checks only read the type.
    unsafe {
        let tp = T::type_object_raw(py);
        if ffi::Py_TYPE(o) != tp && ffi::PyObject_TypeCheck(o, tp) == 0 {
            let got = crate::error::type_name_of(&Borrowed::from_ptr(py, o));
            return Err(DlpackError::new(
                FailureKind::BadArgumentType,
                format!(
                    "{what}: expected a '{}' object (the type this DLPack exchange table belongs to), got '{got}'",
                    <T as PyClass>::NAME
                ),
            )
            .into());
        }
        Ok(Borrowed::from_ptr(py, o).cast_unchecked::<T>())
    }
}

/// `managed_tensor_from_py_object_no_sync`: owning export of `py_object` (a new
/// `DLManagedTensorVersioned` holding a strong reference to it, or for a non-frozen class a
/// shared borrow of it, kept in the tensor's manager block until its deleter runs; no copy, no
/// sync).
/// Read-only sources get `READ_ONLY`. BufferError (the spec's mapping) when it cannot be
/// described.
///
/// # Safety
/// DLPack contract: GIL held; `py_object` is a live object; `out` is writable.
pub unsafe extern "C" fn managed_tensor_from_py_object_no_sync<T>(
    py_object: *mut c_void,
    out: *mut *mut DLManagedTensorVersioned,
) -> c_int
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    const WHAT: &str = "managed_tensor_from_py_object_no_sync";
    // SAFETY: DLPack contract (GIL held).
    unsafe {
        with_gil_held(WHAT, |py| {
            if out.is_null() {
                return Err(bad_value(format!("{WHAT}: out is NULL")));
            }
            let slf = as_source::<T>(py, py_object, WHAT)?;
            // A frozen object is its own owner (the code as it was before non-frozen classes
            // were supported, for this hot path); a non-frozen one is kept borrowed by the
            // tensor's manager block until the deleter runs (no guard object).
            let m = if <T::Frozen as SourceAccess<T>>::FROZEN {
                <T::Frozen as SourceAccess<T>>::with(&slf, |src| {
                    export_versioned_managed(slf.as_any(), src, &OWNING_REQUEST)
                })??
            } else {
                // (Inside this function's `unsafe` block: attached, and `held` keeps `src`'s
                // object alive and borrowed, as `export_versioned_managed_kept` requires.)
                with_held(&slf, |held, src| {
                    export_versioned_managed_kept(held, src, &OWNING_REQUEST)
                })??
            };
            *out = m.as_ptr();
            Ok(())
        })
    }
}

/// `dltensor_from_py_object_no_sync`: non-owning fill of the caller's `DLTensor`. Shape and
/// strides point into the object (borrowed `&[i64]` fields), so nothing is allocated; valid
/// while the object is alive and unmodified (the caller uses it before control returns).
/// Frozen classes only: a non-frozen class's table has NULL here ([`super::exchange_api`]), and
/// a direct call for one is refused (BufferError), since the fill cannot hold the borrow that
/// keeps a `&mut self` method from reallocating the data under the caller.
///
/// # Safety
/// DLPack contract: GIL held; `py_object` is a live object; `out` is writable.
pub unsafe extern "C" fn dltensor_from_py_object_no_sync<T>(
    py_object: *mut c_void,
    out: *mut DLTensor,
) -> c_int
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    const WHAT: &str = "dltensor_from_py_object_no_sync";
    // SAFETY: DLPack contract (GIL held).
    unsafe {
        with_gil_held(WHAT, |py| {
            if out.is_null() {
                return Err(bad_value(format!("{WHAT}: out is NULL")));
            }
            if !<T::Frozen as SourceAccess<T>>::FROZEN {
                return Err(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    format!(
                        "{WHAT}: '{}' is not a frozen class, so its data cannot be lent without a borrow; use managed_tensor_from_py_object_no_sync",
                        <T as PyClass>::NAME
                    ),
                )
                .into());
            }
            let slf = as_source::<T>(py, py_object, WHAT)?;
            // The fields are written straight into `out`: a `DLTensor` returned through the
            // nested results was re-read from the stack with loads that straddle the stores
            // that had just written it (a CPU stall longer than the rest of the fill).
            <T::Frozen as SourceAccess<T>>::with(&slf, |src| {
                // A bare DLTensor has no flags: read-only data would reach the consumer as
                // writable. Refused, as a legacy capsule refuses it; the owning export sets
                // READ_ONLY instead.
                if src.dlpack_readonly() {
                    return Err(DlpackError::new(
                        FailureKind::ReadOnlyLegacy,
                        // A literal: dlbind's consumer takes this refusal on every read-only import
                        // through a lending table (see `exchange::lends`) and drops it.
                        "dltensor_from_py_object_no_sync: read-only data cannot be lent as a bare DLTensor (it has no READ_ONLY flag); use managed_tensor_from_py_object_no_sync",
                    ));
                }
                let ndim = src.dlpack_ndim();
                let Some((shape, strides)) = src.exchange_dims() else {
                    return Err(DlpackError::new(
                        FailureKind::UnsupportedLayout,
                        format!(
                            "{WHAT}: this object's shape/strides cannot be described without allocating"
                        ),
                    ));
                };
                if shape.len() != ndim || strides.len() != ndim || ndim > i32::MAX as usize {
                    return Err(DlpackError::new(
                        FailureKind::UnsupportedLayout,
                        format!("{WHAT}: inconsistent dims"),
                    ));
                }
                crate::export::check_source(src, shape, strides, src.dlpack_dtype())?;
                let (sp, st) = if ndim == 0 {
                    (ptr::null_mut(), ptr::null_mut())
                } else {
                    (shape.as_ptr().cast_mut(), strides.as_ptr().cast_mut())
                };
                // SAFETY: `out` is non-NULL and writable (DLPack contract, checked above).
                out.write(DLTensor {
                    data: src.dlpack_data_ptr(),
                    device: src.dlpack_device().to_dl(),
                    ndim: ndim as i32,
                    dtype: src.dlpack_dtype(),
                    shape: sp,
                    strides: st,
                    byte_offset: 0,
                });
                Ok(())
            })??;
            Ok(())
        })
    }
}

/// `managed_tensor_to_py_object_no_sync`: takes ownership of `tensor` and wraps it as a `T`
/// through [`crate::import::FromDLPack`] (zero-copy). Without a constructor: TypeError (the
/// tensor is deleted, since ownership was transferred).
///
/// # Safety
/// DLPack contract: GIL held; `tensor` is NULL or a live tensor the caller gives up; `out_py_object`
/// is writable.
pub unsafe extern "C" fn managed_tensor_to_py_object_no_sync<T>(
    tensor: *mut DLManagedTensorVersioned,
    out_py_object: *mut *mut c_void,
) -> c_int
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    const WHAT: &str = "managed_tensor_to_py_object_no_sync";
    // SAFETY: DLPack contract (GIL held).
    unsafe {
        with_gil_held(WHAT, |py| {
            let Some(m) = NonNull::new(tensor) else {
                return Err(bad_value(format!("{WHAT}: tensor is NULL")));
            };
            // Ownership is ours from here: `ImportedTensor` deletes it on every path.
            let imported = ImportedTensor::from_managed_versioned(m)?;
            if out_py_object.is_null() {
                return Err(bad_value(format!("{WHAT}: out_py_object is NULL")));
            }
            let Some(ctor) = T::exchange_constructor() else {
                drop(imported);
                return Err(no_constructor::<T>(WHAT).into());
            };
            let obj = ctor(py, imported)?;
            *out_py_object = obj.into_ptr().cast::<c_void>();
            Ok(())
        })
    }
}

fn no_constructor<T: PyClass>(what: &str) -> DlpackError {
    DlpackError::new(
        FailureKind::BadArgumentType,
        format!(
            "{what}: '{}' cannot be built from a DLPack tensor (implement dlbind::FromDLPack for it)",
            <T as PyClass>::NAME
        ),
    )
}

/// A NULL or otherwise invalid argument (the spec's `BadArgumentValue`).
#[cold]
fn bad_value(message: String) -> PyErr {
    DlpackError::new(FailureKind::BadArgumentValue, message).into()
}

type SetError = Option<
    unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const c_char, message: *const c_char),
>;

/// `managed_tensor_allocator`: a new, zeroed, C-contiguous, writable host tensor with the
/// prototype's dtype/ndim/shape (device must be CPU), built as a `T` through
/// [`crate::import::FromDLPack`] and exported owning. Errors go through `SetError` (kind = the
/// Python exception name); the GIL is taken here if needed.
///
/// # Safety
/// DLPack contract: `prototype` is NULL or a live DLTensor whose `shape` holds `ndim` values;
/// `out` is writable; `set_error` is NULL or callable with `error_ctx`.
pub unsafe extern "C" fn managed_tensor_allocator<T>(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: SetError,
) -> c_int
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    const WHAT: &str = "managed_tensor_allocator";
    let report = |kind: &str, msg: &str| {
        if let Some(f) = set_error {
            let k = CString::new(kind).unwrap_or_default();
            let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
            // SAFETY: DLPack contract for `set_error`; both strings outlive the call.
            unsafe { f(error_ctx, k.as_ptr(), m.as_ptr()) };
        }
        -1
    };
    // SAFETY: plain C API query.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        return report(
            FailureKind::InterpreterNotRunning.exception().name(),
            "managed_tensor_allocator: the Python interpreter is not running",
        );
    }
    // A failure as `SetError` takes it: the spec's exception name and the message.
    let dl = |e: DlpackError| {
        (
            e.exception().name().to_owned(),
            format!("{WHAT}: {}", e.message()),
        )
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || -> Result<(), (String, String)> {
            if prototype.is_null() || out.is_null() {
                let e = DlpackError::new(FailureKind::BadArgumentValue, "prototype or out is NULL");
                return Err(dl(e));
            }
            // SAFETY: DLPack contract: a live prototype; only dtype/ndim/shape/device are read.
            let (dtype, ndim, shape_ptr, device) = unsafe {
                (
                    (*prototype).dtype,
                    (*prototype).ndim,
                    (*prototype).shape,
                    (*prototype).device,
                )
            };
            let device = Device::from(device);
            if device != Device::CPU {
                return Err(dl(DlpackError::new(
                    FailureKind::UnsupportedDevice,
                    format!("only CPU tensors can be allocated, not device {device}"),
                )));
            }
            if ndim < 0 || (ndim > 0 && shape_ptr.is_null()) {
                return Err(dl(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    "bad ndim or NULL shape",
                )));
            }
            let shape: Vec<i64> = if ndim == 0 {
                Vec::new()
            } else {
                // SAFETY: DLPack contract: `shape` holds `ndim` values.
                unsafe { std::slice::from_raw_parts(shape_ptr, ndim as usize) }.to_vec()
            };
            if shape.iter().any(|&d| d < 0) {
                return Err(dl(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    format!("negative dimension in {shape:?}"),
                )));
            }
            let elem = validate_dtype(dtype).map_err(dl)?;
            let nbytes = contiguous_nbytes(&shape, elem).map_err(|e| dl(e.into()))?;
            let buf = AlignedBuffer::zeroed(nbytes).map_err(|e| dl(e.into()))?;
            let imported = ImportedTensor::from_buffer(buf, &shape, dtype).map_err(dl)?;
            let Some(ctor) = T::exchange_constructor() else {
                let e = no_constructor::<T>(WHAT); // its message names WHAT already
                return Err((e.exception().name().to_owned(), e.message().to_owned()));
            };
            Python::attach(|py| {
                let res = (|| -> PyResult<NonNull<DLManagedTensorVersioned>> {
                    let obj = ctor(py, imported)?;
                    let slf = obj.cast::<T>().map_err(PyErr::from)?;
                    let m = if <T::Frozen as SourceAccess<T>>::FROZEN {
                        <T::Frozen as SourceAccess<T>>::with(slf, |src| {
                            export_versioned_managed(slf.as_any(), src, &OWNING_REQUEST)
                        })??
                    } else {
                        with_held(slf, |held, src| {
                            // SAFETY: attached; `held` keeps `src`'s object alive and borrowed.
                            unsafe { export_versioned_managed_kept(held, src, &OWNING_REQUEST) }
                        })??
                    };
                    Ok(m)
                })();
                match res {
                    Ok(m) => {
                        // SAFETY: checked non-NULL above.
                        unsafe { *out = m.as_ptr() };
                        Ok(())
                    }
                    Err(e) => {
                        let kind =
                            e.get_type(py)
                                .name()
                                .map(|n| n.to_string())
                                .unwrap_or_else(|_| {
                                    FailureKind::InternalError.exception().name().into()
                                });
                        Err((kind, e.value(py).to_string()))
                    }
                }
            })
        },
    ));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((kind, msg))) => report(&kind, &msg),
        Err(_) => report(
            FailureKind::InternalError.exception().name(),
            "panic in the DLPack exchange API (managed_tensor_allocator)",
        ),
    }
}

/// `current_work_stream`: NULL for stream-less devices (CPU, …); for CUDA/ROCm the current
/// stream reported by dlbind's GPU runtime when one is present, else NULL (the default stream).
///
/// # Safety
/// DLPack contract: `out_current_stream` is writable (NULL → ValueError, GIL taken to report).
pub unsafe extern "C" fn current_work_stream(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> c_int {
    let r = std::panic::catch_unwind(|| -> Result<*mut c_void, DlpackError> {
        if out_current_stream.is_null() {
            return Err(DlpackError::new(
                FailureKind::BadArgumentValue,
                "current_work_stream: out_current_stream is NULL",
            ));
        }
        if consumer_default_stream(device_type).is_none() {
            return Ok(ptr::null_mut());
        }
        let device = Device::new(device_type, device_id);
        match crate::gpu::default_runtime() {
            Ok(rt) => match rt.current_stream(device) {
                Ok(Some(h)) => Ok(h.0 as usize as *mut c_void),
                Ok(None) => Ok(ptr::null_mut()),
                Err(e) => Err(DlpackError::new(
                    FailureKind::DeviceUnavailable,
                    format!("current_work_stream: {e}"),
                )),
            },
            // No GPU runtime in this process: nothing set a current stream.
            Err(_) => Ok(ptr::null_mut()),
        }
    });
    match r {
        Ok(Ok(s)) => {
            // SAFETY: checked non-NULL.
            unsafe { *out_current_stream = s };
            0
        }
        Ok(Err(e)) => {
            set_python_error(|| e.into());
            -1
        }
        Err(_) => {
            set_python_error(|| {
                DlpackError::new(
                    FailureKind::InternalError,
                    "panic in the DLPack exchange API (current_work_stream)",
                )
                .into()
            });
            -1
        }
    }
}

fn set_python_error(e: impl FnOnce() -> PyErr) {
    // `try_attach`: never panics (an unwind out of this `extern "C"` caller would abort); it
    // declines while the interpreter is not initialised or is finalising.
    let _ = Python::try_attach(|py| e().restore(py));
}
