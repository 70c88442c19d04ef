//! Imports through a producer's table: the owning export, or for a table that lends (see the
//! module docs of [`crate::exchange`]) the non-owning fill plus a strong reference.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::bridges::PythonView;
use crate::ffi::{DLManagedTensorVersioned, DLPackExchangeAPI};
use crate::import::ImportedTensor;
use crate::spec::streams::has_stream_rules;

use super::counters::note_exchange_import;
use super::lookup::{TableKind, lookup_table};

/// Refuses a torch tensor whose negative bit (any dtype) or, when `complex`, conjugate bit is
/// set (`x.is_neg()`, `x.is_conj()`; torch sets the conjugate bit on complex tensors only, and a
/// torch without those methods has no such bits): its stored values are not its values. Each
/// question is a torch method call, so the conjugate one is asked only when it can be
/// yes.
fn refuse_torch_lazy_bits(obj: &Bound<'_, PyAny>, complex: bool) -> PyResult<()> {
    let py = obj.py();
    let n = crate::cpython::names::names(py);
    let checks = [
        (n.is_neg.bind(py), "negative", "resolve_neg", true),
        (n.is_conj.bind(py), "conjugate", "resolve_conj", complex),
    ];
    for (method, bit, fix, ask) in checks {
        if !ask {
            continue;
        }
        match obj.call_method0(method) {
            Ok(v) if v.is_truthy()? => {
                return Err(crate::error::DlpackError::new(
                    crate::spec::errors::FailureKind::UnsupportedLayout,
                    format!(
                        "a torch tensor with the {bit} bit set cannot be imported zero-copy (its stored \
                         values are not its values); call x.{fix}() first"
                    ),
                )
                .into());
            }
            Ok(_) => {}
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Imports `obj` through its type's C exchange table, handing the tensor to `f` (`None`: no usable table).
/// Inlined with `f` into the caller, so that the tensor handle is built where `f` uses it
/// (e.g. moved into the caller's array type) instead of being returned through a chain of
/// `Result<Option<…>>` values: those copies of a freshly written handle cost more than the
/// rest of the import (each wide copy of narrow fresh stores stalls the CPU).
///
/// A table of this module that *lends* (see the module docs) is asked for its non-owning
/// `dltensor_from_py_object_no_sync` fill when the object's data is writable (the fill refuses
/// read-only data, as a bare DLTensor has no read-only flag), and `lend` gets the filled tensor as a [`PythonView`] whose owner is `obj`: `lend` copies
/// shape and strides and keeps a strong reference to `obj`, which is what the table's owning
/// export would hold, without the managed tensor (allocation, deleter). Such a view has no
/// DLPack version ([`ImportedTensor::version`] is `None`, as for other views of Python
/// objects). If the fill fails anyway, its exception is dropped and the owning export is used
/// (which reports the failure, if it is one).
#[inline(always)]
pub fn import_via_exchange_api_with<R>(
    obj: &Bound<'_, PyAny>,
    lend: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
    f: impl FnOnce(ImportedTensor) -> PyResult<R>,
) -> Option<PyResult<R>> {
    let py = obj.py();
    // SAFETY: GIL held (bound object), `obj` is live.
    let (table, kind) = unsafe { lookup_table(py, obj.as_ptr()) };
    if table.is_null() {
        return None;
    }
    let torch = matches!(kind, TableKind::Torch);
    if let TableKind::Lends(probe) = kind
        // SAFETY: (the probe) GIL held, a live object.
        && unsafe { probe(obj.as_ptr()) }
    {
        // SAFETY: a table of ours (checked when cached), process-lifetime; `obj` has the type
        // the table was looked up on.
        if let Some(r) = unsafe { lend_through(obj, table, lend) } {
            note_exchange_import();
            return Some(r);
        }
    }
    // SAFETY: a table of our major version (checked), process-lifetime.
    let f_export = unsafe { (*table).managed_tensor_from_py_object_no_sync }?;
    // SAFETY: `f_export` is the table entry of `type(obj)` (looked up just above).
    let m = match unsafe { export_through(obj, f_export) } {
        Ok(m) => m,
        Err(e) => return Some(Err(e)),
    };
    // Checked before the handle is built, so that the handle is built once, where `f` takes it.
    // SAFETY: on success we own `m` (the producer transferred it); on failure its deleter ran.
    let extent = match unsafe { ImportedTensor::check_versioned_or_delete(m) } {
        Ok(extent) => extent,
        Err(e) => return Some(Err(e.into())),
    };
    // SAFETY: a live tensor of ours, checked above.
    let device = crate::device::Device::from(unsafe { (*m.as_ptr()).dl_tensor.device });
    if has_stream_rules(device.device_type) {
        // SAFETY: a table of our major version (checked), process-lifetime.
        match unsafe { wait_for_table_producer(py, table, device) } {
            Ok(true) => {}
            Ok(false) => {
                // SAFETY: ours (above), deleted exactly once here; `__dlpack__` orders instead.
                unsafe { ImportedTensor::delete_versioned(m) };
                return None;
            }
            Err(e) => {
                // SAFETY: as above.
                unsafe { ImportedTensor::delete_versioned(m) };
                return Some(Err(e));
            }
        }
    }
    if torch {
        // SAFETY: a live tensor of ours, checked above.
        let complex = unsafe { (*m.as_ptr()).dl_tensor.dtype.code }
            == crate::ffi::DLDataTypeCode::kDLComplex.0;
        if let Err(e) = refuse_torch_lazy_bits(obj, complex) {
            // SAFETY: ours, deleted exactly once here (the producer's deleter runs once).
            unsafe { ImportedTensor::delete_versioned(m) };
            return Some(Err(e));
        }
    }
    note_exchange_import();
    // SAFETY: ours, checked (above); the handle takes it over.
    Some(f(unsafe {
        ImportedTensor::take_versioned_unchecked(m, extent)
    }))
}

/// A table's exports do not synchronise (`…_no_sync`): for memory on a device with streams,
/// makes the stream `__dlpack__(stream=None)` stands for wait for the producer's current work
/// stream ([`crate::gpu::wait_for_producer_stream`]), so the view is ordered as a
/// `__dlpack__` import would be. `Ok(false)` when that cannot be done here (the table has no
/// `current_work_stream`, or this process has no GPU runtime for the device): the caller
/// drops the export and falls back to `__dlpack__`, whose producer orders its own streams.
///
/// # Safety
/// `table` is a table of our major version, process-lifetime; the GIL is held (`py`).
#[cold]
#[inline(never)]
unsafe fn wait_for_table_producer(
    py: Python<'_>,
    table: *const DLPackExchangeAPI,
    device: crate::device::Device,
) -> PyResult<bool> {
    // SAFETY: caller contract.
    let Some(current) = (unsafe { (*table).current_work_stream }) else {
        return Ok(false);
    };
    let Ok(runtime) = crate::gpu::default_runtime() else {
        return Ok(false);
    };
    let mut stream: *mut c_void = ptr::null_mut();
    // SAFETY: the entry's contract: a writable out pointer, the GIL held.
    if unsafe { current(device.device_type, device.device_id, &mut stream) } != 0 {
        return Err(entry_failed(py, "current_work_stream"));
    }
    let producer = crate::gpu::StreamHandle(stream as usize as u64);
    crate::gpu::wait_for_producer_stream(runtime.as_ref(), device, producer)?;
    Ok(true)
}

/// Calls a lending table's non-owning fill on `obj` and hands the result to `lend` (`None`:
/// the fill refused, its exception dropped).
///
/// # Safety
/// `table` is a table [`lends`](super::lends) accepted, looked up on `type(obj)`.
#[inline(always)]
unsafe fn lend_through<R>(
    obj: &Bound<'_, PyAny>,
    table: *const DLPackExchangeAPI,
    lend: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
) -> Option<PyResult<R>> {
    // SAFETY: caller contract (a lending table has the entry).
    let fill = unsafe { (*table).dltensor_from_py_object_no_sync }?;
    let mut dl = std::mem::MaybeUninit::<crate::ffi::DLTensor>::uninit();
    // SAFETY: the entry's contract: a live object of the table's type, a writable DLTensor, the
    // GIL held (bound object).
    if unsafe { fill(obj.as_ptr().cast::<c_void>(), dl.as_mut_ptr()) } != 0 {
        // SAFETY: GIL held; the producer set an exception, dropped here (the owning export
        // follows and raises its own if the object cannot be exported).
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // SAFETY: filled on success.
    let dl = unsafe { dl.assume_init_ref() };
    // Memory on a device with streams takes the owning export, which orders the producer's
    // stream (see `wait_for_table_producer`); a lent view has nothing to order it with.
    if has_stream_rules(dl.device.device_type) {
        return None;
    }
    // The checks every import runs (`ImportedTensor::from_managed_versioned` runs them on the
    // owning export's tensor): on failure the owning export is used, and raises.
    // SAFETY: a filled DLTensor whose shape and strides (ndim values each) live in `obj`.
    let extent = unsafe { crate::import::validate_dltensor(dl) }.ok()?;
    let ndim = usize::try_from(dl.ndim).ok()?;
    let (shape, strides): (&[i64], &[i64]) = if ndim == 0 {
        (&[], &[])
    } else if dl.shape.is_null() || dl.strides.is_null() {
        return None;
    } else {
        // SAFETY: the fill points shape and strides at `ndim` values stored in `obj`, which is
        // alive and frozen for the whole call (see [`lends`]).
        unsafe {
            (
                std::slice::from_raw_parts(dl.shape, ndim),
                std::slice::from_raw_parts(dl.strides, ndim),
            )
        }
    };
    let view = PythonView {
        owner: obj,
        data: dl
            .data
            .cast::<u8>()
            .wrapping_add(dl.byte_offset as usize)
            .cast(),
        shape,
        strides,
        dtype: dl.dtype,
        device: dl.device.into(),
        readonly: false,
        extent,
    };
    Some(lend(&view))
}

/// Calls the table's owning export on `obj`: the producer's managed tensor, or its exception.
///
/// # Safety
/// `export` is the `managed_tensor_from_py_object_no_sync` entry of the table of `type(obj)`.
#[inline(always)]
unsafe fn export_through(
    obj: &Bound<'_, PyAny>,
    export: unsafe extern "C" fn(
        *mut c_void,
        *mut *mut DLManagedTensorVersioned,
    ) -> std::ffi::c_int,
) -> PyResult<NonNull<DLManagedTensorVersioned>> {
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's contract: a live object of the table's type (caller contract) and
    // a valid out pointer; the GIL is held (bound object).
    let rc = unsafe { export(obj.as_ptr().cast::<c_void>(), &mut out) };
    if rc != 0 {
        return Err(entry_failed(
            obj.py(),
            "managed_tensor_from_py_object_no_sync",
        ));
    }
    NonNull::new(out).ok_or_else(|| {
        crate::error::DlpackError::new(
            crate::spec::errors::FailureKind::InternalError,
            "managed_tensor_from_py_object_no_sync returned NULL",
        )
        .into()
    })
}

#[cold]
#[inline(never)]
fn entry_failed(py: Python<'_>, entry: &str) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| {
        crate::error::DlpackError::new(
            crate::spec::errors::FailureKind::InternalError,
            format!("{entry} failed without an exception"),
        )
        .into()
    })
}
