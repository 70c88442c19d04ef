//! Import through the bridges: CUDA array interface → SYCL USM interface →
//! `__array_interface__` → buffer protocol (the order after `__dlpack__`).
//!
//! The foreign memory is wrapped in a `DLManagedTensorVersioned` built here (shape/strides
//! owned by the same block) whose manager holds a strong reference to the exporter — or, for
//! the buffer protocol, the `Py_buffer` itself, released by `PyBuffer_Release` — so the view
//! keeps the memory alive; the result is an ordinary [`ImportedTensor`] (through
//! [`ImportedTensor::from_managed_versioned`], which validates it). Read-only propagates from
//! `data[1]` / `Py_buffer.readonly` to the `READ_ONLY` flag. Such a handle reports
//! `version() == Some(1.3)` (the block is a versioned tensor dlbind built) and no `IS_COPIED`.
//!
//! numpy interface: `data` is a `(pointer, readonly)` tuple (the exporter is kept alive), or an
//! object exposing the buffer interface, or `None`/absent (the object's own buffer); in the last
//! two cases the bytes are held as a `Py_buffer`, `offset` (bytes) applies and the described
//! extent is checked against the buffer's length.
//!
//! CUDA array interface: the interface carries no device ordinal, so the CUDA driver is asked
//! which device owns the pointer ([`cuda_pointer_device`]: `cuPointerGetAttribute` memory type,
//! managed flag and device ordinal) — `kDLCUDA` with the owning device's ordinal, `kDLCUDAHost`
//! for page-locked host memory, `kDLCUDAManaged` for managed memory. When no driver can answer
//! (no `cuda` feature, no driver or no GPU in this process, or a pointer the driver does not
//! know) the view is tagged `kDLCUDA` device 0: a process without a driver cannot touch the
//! memory anyway, and the view is never read on the host (the runtime refuses host access to
//! non-host memory). `stream` (v3): absent / `None` → no synchronisation; `0` → ValueError
//! (disallowed by the CAI specification); any other int → the stream is synchronised through
//! [`crate::gpu`] on the resolved device when a GPU runtime is present (without a driver nothing
//! can be pending that this process could see, and the view is never dereferenced on the host).

use std::ffi::{CStr, c_void};
use std::ptr::{self, NonNull};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use super::typestr::{dtype_from_buffer_format, dtype_from_typestr};
use crate::device::Device;
use crate::dtype::{describe, itemsize};
use crate::error::DlpackError;
use crate::ffi::{
    DLDataType, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;
use crate::spec::protocol;

/// Every protocol `from_dlpack` tries, in order (named in the error when none applies).
pub const PROTOCOLS_TRIED: &[&str] = &[
    protocol::DLPACK_METHOD,
    "__cuda_array_interface__",
    "__sycl_usm_array_interface__",
    "__array_interface__",
    "the buffer protocol",
];

/// Which interface dict is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceKind {
    /// `__cuda_array_interface__` (strides in bytes, device memory, `stream` key).
    Cuda,
    /// `__sycl_usm_array_interface__` (strides and offset in elements, USM memory).
    SyclUsm,
    /// numpy `__array_interface__` (strides in bytes, host memory).
    Numpy,
}

impl InterfaceKind {
    /// The attribute name.
    pub const fn attr(self) -> &'static str {
        match self {
            InterfaceKind::Cuda => "__cuda_array_interface__",
            InterfaceKind::SyclUsm => "__sycl_usm_array_interface__",
            InterfaceKind::Numpy => "__array_interface__",
        }
    }

    /// The attribute name as an interned Python string (`cpython::names`).
    fn attr_name(self, py: Python<'_>) -> &Bound<'_, PyString> {
        let n = crate::cpython::names::names(py);
        match self {
            InterfaceKind::Cuda => n.cuda_array_interface.bind(py),
            InterfaceKind::SyclUsm => n.sycl_usm_array_interface.bind(py),
            InterfaceKind::Numpy => n.array_interface.bind(py),
        }
    }
}

/// What keeps the foreign memory alive.
pub(crate) enum Keeper {
    /// A strong reference to the exporting object.
    Object(NonNull<ffi::PyObject>),
    /// A buffer obtained with `PyObject_GetBuffer` (boxed: exporters may point into it), and
    /// whether its `obj` may be reported to the collector
    /// ([`crate::cpython::gc::may_report_buffer_exporter`], decided when the buffer was taken).
    Buffer {
        view: Box<ffi::Py_buffer>,
        report: bool,
    },
}

impl Keeper {
    /// Visits the object this keeper holds a strong reference to: the exporter itself, or the
    /// buffer's `obj` (the new reference `PyObject_GetBuffer` stored, released by
    /// `PyBuffer_Release`; NULL for a buffer without an owner) when the collector may clear it
    /// while the buffer is held ([`crate::cpython::gc::may_report_buffer_exporter`]).
    pub(crate) fn visit(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        let o = match self {
            Keeper::Object(o) => *o,
            Keeper::Buffer { view, report: true } => match NonNull::new(view.obj) {
                Some(o) => o,
                None => return Ok(()),
            },
            Keeper::Buffer { report: false, .. } => return Ok(()),
        };
        // SAFETY: the keeper's own strong reference to a live object.
        unsafe { crate::cpython::gc::visit_ptr(visit, o) }
    }

    /// The keeper of a tensor [`wrap`] made (its deleter is `foreign_deleter`), `None` for any
    /// other tensor.
    ///
    /// # Safety
    /// `m` is a live managed tensor; the keeper is borrowed for as long as `m` stays alive.
    pub(crate) unsafe fn of_wrapped<'a>(
        m: NonNull<DLManagedTensorVersioned>,
    ) -> Option<&'a Keeper> {
        // SAFETY: caller contract; `deleter` is in the ABI-stable prefix.
        let d = unsafe { (*m.as_ptr()).deleter }?;
        if d as usize != foreign_deleter as unsafe extern "C" fn(_) as usize {
            return None;
        }
        // SAFETY: a tensor with this deleter is the first field of a live `Foreign` block
        // (`wrap`, `repr(C)`).
        Some(unsafe { &(*m.as_ptr().cast::<Foreign>()).keeper })
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // SAFETY: plain C API calls, made only while the interpreter is alive and with the GIL
        // (`PyGILState_Ensure` is re-entrant); after finalization the reference / buffer is
        // leaked on purpose. Each keeper is dropped exactly once.
        unsafe {
            if ffi::Py_IsInitialized() == 0 {
                return;
            }
            // Usually dropped by a thread holding the GIL (a Python object's dealloc): skip the
            // Ensure/Release pair then. Another thread takes it only while the interpreter is
            // not finalising (`interp`); otherwise the reference is leaked.
            let held = crate::cpython::boundary::this_thread_holds_gil();
            if !held && !crate::cpython::interp::may_take_gil() {
                return;
            }
            let gil = (!held).then(|| ffi::PyGILState_Ensure());
            match self {
                Keeper::Object(o) => ffi::Py_DECREF(o.as_ptr()),
                Keeper::Buffer { view, .. } => ffi::PyBuffer_Release(&mut **view),
            }
            if let Some(g) = gil {
                ffi::PyGILState_Release(g);
            }
        }
    }
}

/// The manager block: the managed tensor first (so a pointer to the block is a pointer to it).
#[repr(C)]
struct Foreign {
    managed: DLManagedTensorVersioned,
    /// `[shape.., strides (elements)..]`.
    dims: Box<[i64]>,
    keeper: Keeper,
}

/// # Safety
/// `p` is NULL or a tensor made by [`wrap`] whose deleter has not run.
// Never inlined (nor copied into another crate): its address identifies `wrap`'s tensors.
#[inline(never)]
unsafe extern "C" fn foreign_deleter(p: *mut DLManagedTensorVersioned) {
    if p.is_null() {
        return;
    }
    // A panic must not unwind into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: caller contract: `p` is the first field of a leaked `Box<Foreign>`, freed
        // exactly once here.
        drop(unsafe { Box::from_raw(p.cast::<Foreign>()) });
    }));
}

/// Builds the managed tensor for foreign memory and imports it.
fn wrap(
    keeper: Keeper,
    data: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    device: Device,
    readonly: bool,
) -> PyResult<ImportedTensor> {
    let n = shape.len();
    let ndim = i32::try_from(n)
        .map_err(|_| DlpackError::new(FailureKind::UnsupportedLayout, "too many dimensions"))?;
    let mut dims: Box<[i64]> = shape.iter().chain(strides).copied().collect();
    let shape_ptr = dims.as_mut_ptr();
    // SAFETY: `dims` holds 2 * n values, so `n` is in bounds (one past the shape).
    let strides_ptr = unsafe { shape_ptr.add(n) };
    let block = Box::new(Foreign {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: ptr::null_mut(),
            deleter: Some(foreign_deleter),
            flags: if readonly {
                DLPACK_FLAG_BITMASK_READ_ONLY
            } else {
                0
            },
            dl_tensor: DLTensor {
                data,
                device: device.to_dl(),
                ndim,
                dtype,
                // The boxed slice's heap storage does not move with the box.
                shape: shape_ptr,
                strides: strides_ptr,
                byte_offset: 0,
            },
        },
        dims,
        keeper,
    });
    let raw = Box::into_raw(block);
    // SAFETY: `raw` is a live, leaked block; `managed` is its first field (`repr(C)`).
    unsafe { (*raw).managed.manager_ctx = raw.cast::<c_void>() };
    let m =
        NonNull::new(raw.cast::<DLManagedTensorVersioned>()).expect("Box::into_raw is non-null");
    // SAFETY: `m` is a live tensor nobody else uses; ownership moves to the handle (on error
    // its deleter has already run, releasing the keeper).
    Ok(unsafe { ImportedTensor::from_managed_versioned(m) }?)
}

/// Byte strides → element strides (a stride of a dimension of size ≤ 1 is irrelevant).
fn element_strides(shape: &[i64], byte_strides: &[i64], item: usize) -> PyResult<Vec<i64>> {
    if byte_strides.len() != shape.len() {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!("strides {byte_strides:?} do not match shape {shape:?}"),
        )
        .into());
    }
    let item = item as i64;
    shape
        .iter()
        .zip(byte_strides)
        .map(|(&d, &s)| {
            if s % item == 0 || d <= 1 {
                Ok(s / item)
            } else {
                Err(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    format!("byte stride {s} is not a multiple of the element size {item}"),
                )
                .into())
            }
        })
        .collect()
}

fn c_strides(shape: &[i64]) -> Vec<i64> {
    let mut st = vec![0; shape.len()];
    crate::layout::c_strides_into(shape, &mut st);
    st
}

fn bad_field(kind: InterfaceKind, msg: impl std::fmt::Display) -> PyErr {
    DlpackError::new(
        FailureKind::BadArgumentValue,
        format!("{}: {msg}", kind.attr()),
    )
    .into()
}

/// `d[key]`, `None` when absent or `None`.
fn opt_field<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)?.filter(|v| !v.is_none()))
}

/// Imports the memory an interface dict describes, keeping `owner` alive. `Ok(None)` for a
/// numpy interface without a `(ptr, readonly)` data tuple (the caller then tries the buffer
/// protocol on the object itself, as numpy does).
pub fn import_interface_dict(
    owner: &Bound<'_, PyAny>,
    iface: &Bound<'_, PyAny>,
    kind: InterfaceKind,
) -> PyResult<Option<ImportedTensor>> {
    let d = iface.cast::<PyDict>().map_err(|_| {
        DlpackError::new(
            FailureKind::BadArgumentType,
            format!("{} must be a dict", kind.attr()),
        )
    })?;
    // `data`: a `(pointer, readonly)` tuple; for the numpy interface also an object exposing
    // the buffer interface, or None/absent (the object itself exposes it), plus `offset` bytes.
    let data = opt_field(d, "data")?;
    let tuple = match &data {
        Some(t) => t.extract::<(usize, Bound<'_, PyAny>)>().ok(),
        None => None,
    };
    if tuple.is_none() && kind != InterfaceKind::Numpy {
        return Err(bad_field(
            kind,
            "'data' must be a (pointer, readonly) tuple",
        ));
    }
    let typestr: String = opt_field(d, "typestr")?
        .ok_or_else(|| bad_field(kind, "missing 'typestr'"))?
        .extract()
        .map_err(|_| bad_field(kind, "'typestr' must be a str"))?;
    let dtype = dtype_from_typestr(&typestr)?;
    let shape: Vec<i64> = opt_field(d, "shape")?
        .ok_or_else(|| bad_field(kind, "missing 'shape'"))?
        .extract()
        .map_err(|_| bad_field(kind, "'shape' must be a tuple of ints"))?;
    let item = itemsize(dtype).ok_or_else(|| {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("sub-byte dtype {}", describe(dtype)),
        )
    })?;
    if kind != InterfaceKind::SyclUsm && opt_field(d, "mask")?.is_some() {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!("{}: masked arrays are not supported", kind.attr()),
        )
        .into());
    }
    let given: Option<Vec<i64>> = match opt_field(d, "strides")? {
        None => None,
        Some(s) => Some(
            s.extract()
                .map_err(|_| bad_field(kind, "'strides' must be None or a tuple of ints"))?,
        ),
    };
    let strides = match (kind, given) {
        (_, None) => c_strides(&shape),
        (InterfaceKind::SyclUsm, Some(s)) => {
            if s.len() != shape.len() {
                return Err(bad_field(kind, "'strides' does not match 'shape'"));
            }
            s
        }
        (_, Some(s)) => element_strides(&shape, &s, item)?,
    };
    let (mut data_ptr, readonly, keeper) = match tuple {
        Some((ptr, ro)) => {
            let keeper =
                Keeper::Object(NonNull::new(owner.clone().into_ptr()).expect("live object"));
            (ptr as *mut c_void, ro.is_truthy()?, keeper)
        }
        None => {
            // numpy interface without a pointer: the bytes of `data` (or of the object itself).
            let src = data.unwrap_or_else(|| owner.clone());
            // SAFETY: type-slot check on a live object.
            if unsafe { ffi::PyObject_CheckBuffer(src.as_ptr()) } == 0 {
                return Ok(None);
            }
            let offset: i64 = opt_field(d, "offset")?
                .map(|v| v.extract())
                .transpose()?
                .unwrap_or(0);
            let (keeper, base, len, ro) = hold_bytes(&src)?;
            check_extent(&shape, &strides, item, offset, len)?;
            // `check_extent` put `offset` within the buffer's `len` bytes.
            (
                base.cast::<u8>()
                    .wrapping_add(offset as usize)
                    .cast::<c_void>(),
                ro,
                keeper,
            )
        }
    };
    let device = match kind {
        InterfaceKind::Numpy => Device::CPU,
        InterfaceKind::Cuda => {
            let device =
                cuda_pointer_device(data_ptr as usize).unwrap_or(CAI_DEVICE_WITHOUT_DRIVER);
            honour_cai_stream(d, device)?;
            device
        }
        InterfaceKind::SyclUsm => {
            let version: i64 = opt_field(d, "version")?
                .map(|v| v.extract())
                .transpose()?
                .unwrap_or(1);
            if version != 1 {
                return Err(bad_field(
                    kind,
                    format_args!("unsupported version {version} (only 1 is defined)"),
                ));
            }
            let offset: i64 = opt_field(d, "offset")?
                .map(|v| v.extract())
                .transpose()?
                .unwrap_or(0);
            data_ptr = offset_pointer(kind, data_ptr, offset, item)?;
            Device::oneapi(0)
        }
    };
    wrap(keeper, data_ptr, &shape, &strides, dtype, device, readonly).map(Some)
}

/// The keeper of a buffer `PyObject_GetBuffer` filled.
fn buffer_keeper(py: Python<'_>, view: Box<ffi::Py_buffer>) -> Keeper {
    // SAFETY: a filled buffer's `obj` is NULL or a live object it holds a reference to.
    let report = unsafe { crate::cpython::gc::may_report_buffer_exporter(py, view.obj) };
    Keeper::Buffer { view, report }
}

/// Holds a contiguous byte buffer of `src` (`PyBUF_SIMPLE`, any writability): the keeper,
/// the base address, the length in bytes and whether it is read-only.
fn hold_bytes(src: &Bound<'_, PyAny>) -> PyResult<(Keeper, *mut c_void, usize, bool)> {
    let mut view = Box::new(ffi::Py_buffer::new());
    // SAFETY: `src` is live, `view` is a writable Py_buffer that does not move (boxed).
    if unsafe { ffi::PyObject_GetBuffer(src.as_ptr(), &mut *view, ffi::PyBUF_SIMPLE) } != 0 {
        return Err(PyErr::fetch(src.py()));
    }
    let (buf, len, ro) = (view.buf, view.len.max(0) as usize, view.readonly != 0);
    Ok((buffer_keeper(src.py(), view), buf, len, ro))
}

/// `ptr` moved by `offset` elements of `item` bytes (the SYCL USM interface's `offset`),
/// computed exactly: a result outside the address space is a malformed tensor (BufferError),
/// never a pointer that wrapped around.
fn offset_pointer(
    kind: InterfaceKind,
    ptr: *mut c_void,
    offset: i64,
    item: usize,
) -> PyResult<*mut c_void> {
    let addr = ptr as usize as i128 + offset as i128 * item as i128;
    if !(0..=usize::MAX as i128).contains(&addr) {
        return Err(DlpackError::new(
            FailureKind::MalformedTensor,
            format!(
                "{}: offset {offset} elements of {item} bytes from {:#x} leaves the address space",
                kind.attr(),
                ptr as usize
            ),
        )
        .into());
    }
    // `addr` is in range, so adding the difference modulo 2^64 lands exactly on it.
    Ok(ptr
        .cast::<u8>()
        .wrapping_add((addr - ptr as usize as i128) as usize)
        .cast::<c_void>())
}

/// Every element addressed by `shape` / `strides` (elements) from byte `offset` lies within
/// `len` bytes.
fn check_extent(
    shape: &[i64],
    strides: &[i64],
    item: usize,
    offset: i64,
    len: usize,
) -> PyResult<()> {
    // Even an empty array's pointer (`offset` bytes in) must lie within the buffer.
    if offset < 0 || offset as u128 > len as u128 {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!("__array_interface__: offset {offset} is outside the {len}-byte data buffer"),
        )
        .into());
    }
    // The buffer vouches for `offset` bytes below element 0 and `len - offset` from it on.
    let extent = crate::Extent::new(offset as usize, len - offset as usize);
    let fits = crate::extent::reach(shape, Some(strides), crate::copy::ElemSize::Bytes(item))
        .is_ok_and(|r| extent.covers(r));
    if !fits {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!("__array_interface__: shape {shape:?} at offset {offset} reaches outside the {len}-byte data buffer"),
        )
        .into());
    }
    Ok(())
}

/// The device a CUDA-array-interface view reports when no CUDA driver can say which device owns
/// the pointer (see the module docs): `kDLCUDA`, device 0.
pub const CAI_DEVICE_WITHOUT_DRIVER: Device = Device::cuda(0);

/// Which device owns `ptr`, according to the process-wide GPU runtime
/// ([`crate::gpu::default_runtime`], i.e. the CUDA driver): see [`cuda_pointer_device_with`].
/// `None` when no runtime can answer: dlbind built without the `cuda` feature, no driver or no
/// GPU in this process, or a pointer the driver does not know (e.g. ordinary host memory).
/// Never panics and never raises.
pub fn cuda_pointer_device(ptr: usize) -> Option<Device> {
    if ptr == 0 {
        return None;
    }
    let rt = crate::gpu::default_runtime().ok()?;
    cuda_pointer_device_with(rt.as_ref(), ptr)
}

/// [`cuda_pointer_device`] with an explicit runtime ([`crate::gpu::DeviceRuntime::pointer_device`]):
/// `kDLCUDA` with the owning device's ordinal, `kDLCUDAHost` (page-locked host memory, e.g.
/// `cudaMallocHost`) or `kDLCUDAManaged` (`cudaMallocManaged`), the last two with ordinal 0 as
/// dlbind's own allocations report them. Errors count as "unknown".
pub fn cuda_pointer_device_with(
    runtime: &dyn crate::gpu::DeviceRuntime,
    ptr: usize,
) -> Option<Device> {
    runtime.pointer_device(ptr as u64).ok().flatten()
}

/// The CAI v3 `stream` key (see the module docs), synchronised on `device`.
fn honour_cai_stream(d: &Bound<'_, PyDict>, device: Device) -> PyResult<()> {
    let Some(s) = opt_field(d, "stream")? else {
        return Ok(());
    };
    let v: i64 = s.extract().map_err(|_| {
        DlpackError::new(
            FailureKind::InvalidStream,
            "__cuda_array_interface__: 'stream' must be None or an int",
        )
    })?;
    if v < 0 {
        return Err(DlpackError::new(
            FailureKind::InvalidStream,
            format!("__cuda_array_interface__: invalid stream {v}"),
        )
        .into());
    }
    if v == 0 {
        return Err(DlpackError::new(
            FailureKind::InvalidStream,
            "__cuda_array_interface__: stream 0 is disallowed (ambiguous between the legacy and per-thread default streams)",
        )
        .into());
    }
    if let Ok(rt) = crate::gpu::default_runtime() {
        rt.synchronize_stream(device, crate::gpu::StreamHandle(v as u64))?;
    }
    Ok(())
}

/// Imports an object through the buffer protocol (`PyBUF_RECORDS_RO`: strides and format, any
/// writability), holding the `Py_buffer` for the view's lifetime.
pub fn import_buffer(obj: &Bound<'_, PyAny>) -> PyResult<ImportedTensor> {
    let py = obj.py();
    let mut view = Box::new(ffi::Py_buffer::new());
    // SAFETY: `obj` is live, `view` is a writable Py_buffer that does not move (boxed).
    if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_RECORDS_RO) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let v: *const ffi::Py_buffer = &*view;
    // From here on the buffer is released when `keeper` drops (on any error too).
    let keeper = buffer_keeper(py, view);
    // SAFETY: a successfully filled view: `shape` / `strides` / `suboffsets` are NULL or hold
    // `ndim` values, `format` is NULL or a C string, all valid until the buffer is released.
    let (data, shape, byte_strides, fmt, item, readonly) = unsafe {
        let v = &*v;
        let n = usize::try_from(v.ndim)
            .map_err(|_| DlpackError::new(FailureKind::UnsupportedLayout, "negative ndim"))?;
        let item = usize::try_from(v.itemsize).unwrap_or(0);
        if !v.suboffsets.is_null()
            && std::slice::from_raw_parts(v.suboffsets, n)
                .iter()
                .any(|&o| o >= 0)
        {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "buffer with suboffsets (PIL-style) is not supported",
            )
            .into());
        }
        let shape: Vec<i64> = if v.shape.is_null() {
            vec![(v.len as usize).checked_div(item).unwrap_or(0) as i64]
        } else {
            std::slice::from_raw_parts(v.shape, n)
                .iter()
                .map(|&d| d as i64)
                .collect()
        };
        let byte_strides: Option<Vec<i64>> = if v.strides.is_null() {
            None
        } else {
            Some(
                std::slice::from_raw_parts(v.strides, n)
                    .iter()
                    .map(|&s| s as i64)
                    .collect(),
            )
        };
        let fmt = if v.format.is_null() {
            String::new()
        } else {
            CStr::from_ptr(v.format).to_string_lossy().into_owned()
        };
        (v.buf, shape, byte_strides, fmt, item, v.readonly != 0)
    };
    let dtype = dtype_from_buffer_format(&fmt, item)?;
    let strides = match byte_strides {
        None => c_strides(&shape),
        Some(s) => element_strides(&shape, &s, item)?,
    };
    wrap(keeper, data, &shape, &strides, dtype, Device::CPU, readonly)
}

/// The bridges, in order, for an object without `__dlpack__` (see the module docs); an object
/// with none → the generated `NoProtocol` failure (AttributeError) naming every protocol tried.
pub fn import_bridges(obj: &Bound<'_, PyAny>) -> PyResult<ImportedTensor> {
    for kind in [
        InterfaceKind::Cuda,
        InterfaceKind::SyclUsm,
        InterfaceKind::Numpy,
    ] {
        if let Some(iface) = crate::cpython::getattr_optional(obj, kind.attr_name(obj.py()))?
            && let Some(t) = import_interface_dict(obj, &iface, kind)?
        {
            return Ok(t);
        }
    }
    // SAFETY: type-slot check on a live object.
    if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0 {
        return import_buffer(obj);
    }
    let tn = crate::error::type_name_of(obj);
    Err(DlpackError::new(
        FailureKind::NoProtocol,
        format!(
            "object of type '{tn}' supports none of the import protocols tried: {}",
            PROTOCOLS_TRIED.join(", ")
        ),
    )
    .into())
}
