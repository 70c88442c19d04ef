//! Buffer protocol export (PEP 3118) for host-accessible data.
//!
//! `getbuffer` honours the request flags: `PyBUF_WRITABLE` on read-only data → BufferError;
//! without `PyBUF_ND` / `PyBUF_STRIDES` the data must be C-contiguous (shape / strides NULL);
//! `PyBUF_C_CONTIGUOUS` / `PyBUF_F_CONTIGUOUS` / `PyBUF_ANY_CONTIGUOUS` are checked; the format
//! (from the spec's `buffer_format` column) is filled only with `PyBUF_FORMAT` (NULL means
//! `"B"`; `itemsize` is always the true element size). Shape and strides (in bytes) and the
//! NUL-terminated format live in one heap block stored in `view.internal`, freed by
//! [`releasebuffer`]. `view.obj` holds a strong reference to the exporter, so the data outlives
//! every view (CPython drops it in `PyBuffer_Release`); for a non-frozen class `view.obj` is a
//! borrow guard instead (see [`SourceAccess::with_owner`]), which holds the object and a shared
//! borrow of it until the view is released, and whose `bf_releasebuffer` frees the block.
//! Negative strides are allowed (`buf` points at element 0, as PEP 3118 specifies).

use std::ffi::{CString, c_int, c_void};
use std::ptr;

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use super::typestr::buffer_format_of;
use super::{Snapshot, snapshot};
use crate::copy::is_c_contiguous;
use crate::dtype::{describe, itemsize};
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::export::access::SourceAccess;
use crate::spec::errors::FailureKind;

/// What `view.internal` owns.
struct BufMeta {
    /// `[shape.., strides (bytes)..]`.
    dims: Box<[ffi::Py_ssize_t]>,
    format: CString,
}

fn buffer_error(kind: FailureKind, msg: String) -> PyErr {
    DlpackError::new(kind, msg).into()
}

fn is_f_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    let sh: Vec<i64> = shape.iter().rev().copied().collect();
    let st: Vec<i64> = strides.iter().rev().copied().collect();
    is_c_contiguous(&sh, &st)
}

struct Planned {
    meta: BufMeta,
    itemsize: usize,
    len: usize,
}

/// Checks the request against the snapshot and builds the metadata block.
fn plan(s: &Snapshot, flags: c_int) -> PyResult<Planned> {
    if !s.device.is_host_accessible() {
        return Err(buffer_error(
            FailureKind::UnsupportedDevice,
            format!(
                "the buffer protocol needs host-accessible memory; the data is on device {}",
                s.device
            ),
        ));
    }
    if flags & ffi::PyBUF_WRITABLE != 0 && s.readonly {
        return Err(buffer_error(
            FailureKind::UnsupportedLayout,
            "a writable buffer was requested but the data is read-only".into(),
        ));
    }
    let fmt = buffer_format_of(s.dtype)
        .map_err(|e| buffer_error(e.kind(), format!("buffer protocol: {}", e.message())))?;
    let item = itemsize(s.dtype).ok_or_else(|| {
        buffer_error(
            FailureKind::UnsupportedDtype,
            format!(
                "buffer protocol: dtype {} is not a whole number of bytes",
                describe(s.dtype)
            ),
        )
    })?;
    let c_contig = s.is_c_contiguous();
    let need = |ok: bool, what: &str| -> PyResult<()> {
        if ok {
            Ok(())
        } else {
            Err(buffer_error(
                FailureKind::UnsupportedLayout,
                format!("buffer protocol: the data is not {what}"),
            ))
        }
    };
    if flags & ffi::PyBUF_STRIDES != ffi::PyBUF_STRIDES {
        need(c_contig, "C-contiguous (the request has no PyBUF_STRIDES)")?;
    }
    if flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS {
        need(c_contig, "C-contiguous")?;
    }
    if flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS {
        need(is_f_contiguous(&s.shape, &s.strides), "Fortran-contiguous")?;
    }
    if flags & ffi::PyBUF_ANY_CONTIGUOUS == ffi::PyBUF_ANY_CONTIGUOUS {
        need(
            c_contig || is_f_contiguous(&s.shape, &s.strides),
            "contiguous",
        )?;
    }
    let n = s.shape.len();
    if n > 64 {
        return Err(buffer_error(
            FailureKind::UnsupportedLayout,
            format!("buffer protocol: {n} dimensions (at most 64)"),
        ));
    }
    let mut dims = vec![0 as ffi::Py_ssize_t; 2 * n].into_boxed_slice();
    let overflow = || {
        buffer_error(
            FailureKind::UnsupportedLayout,
            "buffer protocol: shape or strides overflow".into(),
        )
    };
    for i in 0..n {
        dims[i] = isize::try_from(s.shape[i]).map_err(|_| overflow())?;
        dims[n + i] = s.strides[i]
            .checked_mul(item as i64)
            .and_then(|b| isize::try_from(b).ok())
            .ok_or_else(overflow)?;
    }
    let numel = s
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d as usize))
        .ok_or_else(overflow)?;
    let len = numel
        .checked_mul(item)
        .filter(|&l| l <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    let format = CString::new(fmt).map_err(|_| overflow())?;
    Ok(Planned {
        meta: BufMeta { dims, format },
        itemsize: item,
        len,
    })
}

/// The body of `__getbuffer__` for a `#[derive(DLPackExport)]` type (see the module docs).
///
/// For a non-frozen class the view's `obj` is a borrow guard, not `slf`: CPython then releases
/// the view through the guard's type, whose `bf_releasebuffer` is [`releasebuffer`], and never
/// calls the class's own `__releasebuffer__` for it.
///
/// # Safety
/// `view` is NULL or points to a `Py_buffer` CPython passed to `bf_getbuffer` (the GIL is held).
pub unsafe fn getbuffer<T>(
    slf: &Bound<'_, T>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()>
where
    T: PyClass + DLPackSource,
    T::Frozen: SourceAccess<T>,
{
    if view.is_null() {
        return Err(pyo3::exceptions::PyBufferError::new_err(
            "getbuffer: view is NULL",
        ));
    }
    if <T::Frozen as SourceAccess<T>>::FROZEN {
        let s = snapshot(slf)?;
        // SAFETY: caller contract (`view` from bf_getbuffer, non-NULL).
        unsafe { fill_view(view, flags, &s, || slf.clone().into_any().into_ptr()) }
    } else {
        // The view's `obj` is a borrow guard (whose type's `bf_releasebuffer` frees
        // `view.internal` like [`releasebuffer`]), so that the view holds a shared borrow of the
        // object until it is released; on a refusal below the guard (and the borrow) goes.
        let (s, guard) = <T::Frozen as SourceAccess<T>>::with_owner(slf, |owner, src| {
            Snapshot::of(src).map(|s| (s, owner.clone()))
        })??;
        // SAFETY: as above.
        unsafe { fill_view(view, flags, &s, || guard.into_ptr()) }
    }
}

/// Checks `flags` against `s` ([`plan`]) and fills `view`; `obj` gives the new reference
/// `view.obj` takes (called only on success).
///
/// # Safety
/// `view` is non-NULL and writable (a `Py_buffer` CPython passed to `bf_getbuffer`).
#[inline]
unsafe fn fill_view(
    view: *mut ffi::Py_buffer,
    flags: c_int,
    s: &Snapshot,
    obj: impl FnOnce() -> *mut ffi::PyObject,
) -> PyResult<()> {
    let Planned {
        meta,
        itemsize,
        len,
    } = plan(s, flags)?;
    let n = s.shape.len();
    let meta = Box::into_raw(Box::new(meta));
    // SAFETY: `view` is valid for writes (caller contract); `meta` is a live heap block that
    // `releasebuffer` frees exactly once (CPython calls `bf_releasebuffer` once per successful
    // `bf_getbuffer`). The shape / strides / format pointers point into that block.
    unsafe {
        let v = &mut *view;
        let m = &mut *meta;
        v.buf = s.data;
        v.obj = obj();
        v.len = len as ffi::Py_ssize_t;
        v.itemsize = itemsize as ffi::Py_ssize_t;
        v.readonly = c_int::from(s.readonly);
        v.ndim = n as c_int;
        v.format = if flags & ffi::PyBUF_FORMAT != 0 {
            m.format.as_ptr().cast_mut()
        } else {
            ptr::null_mut()
        };
        let nd = flags & ffi::PyBUF_ND == ffi::PyBUF_ND && n > 0;
        let strided = flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES && n > 0;
        v.shape = if nd {
            m.dims.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        v.strides = if strided {
            m.dims.as_mut_ptr().add(n)
        } else {
            ptr::null_mut()
        };
        if flags & ffi::PyBUF_ND != ffi::PyBUF_ND {
            // A 1-d byte-ish view of contiguous memory: ndim is 1 (PEP 3118: shape NULL).
            v.ndim = 1;
        }
        v.suboffsets = ptr::null_mut();
        v.internal = meta.cast::<c_void>();
    }
    Ok(())
}

/// The body of `__releasebuffer__`: frees the metadata block [`getbuffer`] stored in
/// `view.internal` (CPython drops `view.obj` itself). Never fails.
///
/// # Safety
/// `view` is NULL or a view filled by [`getbuffer`] whose release has not run yet.
pub unsafe fn releasebuffer(view: *mut ffi::Py_buffer) {
    if view.is_null() {
        return;
    }
    // SAFETY: caller contract: `internal` is NULL or the block `getbuffer` leaked; it is
    // taken exactly once (and the field cleared).
    unsafe {
        let meta = std::mem::replace(&mut (*view).internal, ptr::null_mut()).cast::<BufMeta>();
        if !meta.is_null() {
            drop(Box::from_raw(meta));
        }
    }
}
